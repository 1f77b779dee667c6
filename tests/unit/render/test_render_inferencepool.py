"""Routing mode InferencePool: the InferencePool, the picker's Service, the router Deployment as
endpoint picker, and what the API refuses (what the operator applies and deletes:
tests/unit/reconcile/test_objects_inferencepool.py)."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpumix.api import LLMService, LLMServiceSpec, Routing, RoutingMode
from gpumix.render import Owner, render_router
from gpumix.render.deployment import PORT, PORT_NAME
from gpumix.render.inferencepool import (
    EXT_PROC_PORT,
    is_picker,
    render_inference_pool,
    render_picker_service,
)
from gpumix.render.names import labels_for, router_selector

OPERATOR_NS = "gpumix-system"

ROOT = Path(__file__).resolve().parents[3]
VENDORED = (
    ROOT
    / "hack/vendor/gateway-api-inference-extension/inference.networking.k8s.io_inferencepools.yaml"
)
IMAGE = "registry.example/gpumix:dev"
OWNER = Owner(name="chat", namespace="default", uid="uid-chat")


def _spec(chat: LLMService, mode: RoutingMode) -> LLMServiceSpec:
    return chat.spec.model_copy(update={"routing": Routing(mode=mode)})


def _unknown_fields(obj: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Fields of ``obj`` the structural schema does not declare, and required ones missing."""
    if not isinstance(obj, dict) or "properties" not in schema:
        items = schema.get("items")
        return [e for o in obj for e in _unknown_fields(o, items, where)] if items else []
    props = schema["properties"]
    out = [f"{where}.{k}" for k in obj if k not in props]
    out += [f"{where}.{k} (required)" for k in schema.get("required", []) if k not in obj]
    return out + [
        e
        for k, v in obj.items()
        if k in props
        for e in _unknown_fields(v, props[k], f"{where}.{k}")
    ]


def test_the_inference_pool_fits_the_vendored_v1_crd_and_selects_the_vllm_pods() -> None:
    pool = render_inference_pool(OWNER)
    crd = yaml.safe_load(VENDORED.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert pool["apiVersion"] == f"{crd['spec']['group']}/v1"
    assert pool["kind"] == crd["spec"]["names"]["kind"]
    spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _unknown_fields(pool["spec"], spec_schema) == []
    # Every vLLM pod of every pool, and nothing else (not the pickers).
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels_for("chat", "l4").items()
    assert not selector.items() <= router_selector("chat").items()
    assert pool["spec"]["targetPorts"] == [{"number": PORT}]
    ref = pool["spec"]["endpointPickerRef"]
    assert ref == {"failureMode": "FailClose", "kind": "Service", "name": "chat--picker",
                   "port": {"number": EXT_PROC_PORT}}  # fmt: skip
    assert pool["metadata"]["ownerReferences"][0]["uid"] == "uid-chat"


def test_the_picker_service_reaches_the_pickers_grpc_port(chat: LLMService) -> None:
    service = render_picker_service(OWNER)
    (deployment,) = render_router(OWNER, _spec(chat, "InferencePool"), IMAGE, OPERATOR_NS)[-1:]
    template = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    (container,) = template["spec"]["containers"]
    names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert names[port["targetPort"]] == port["port"] == EXT_PROC_PORT
    assert port["appProtocol"] == "kubernetes.io/h2c"
    assert names[PORT_NAME] == PORT  # probes and /metrics, as the router's


def test_the_router_deployment_becomes_the_picker_under_the_same_selector(
    chat: LLMService,
) -> None:
    router = render_router(OWNER, _spec(chat, "Router"), IMAGE, OPERATOR_NS)[-1]
    picker = render_router(OWNER, _spec(chat, "InferencePool"), IMAGE, OPERATOR_NS)[-1]
    assert router["metadata"]["name"] == picker["metadata"]["name"] == "chat--router"
    assert router["spec"]["selector"] == picker["spec"]["selector"]  # immutable: a switch rolls
    command = picker["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["gpumix", "route"]
    assert command[-2:] == ["--ext-proc-port", str(EXT_PROC_PORT)]
    assert "--ext-proc-port" not in router["spec"]["template"]["spec"]["containers"][0]["command"]
    assert is_picker(picker) and not is_picker(router) and not is_picker(None)


def test_the_api_refuses_an_unknown_mode_and_migration_through_a_picker(
    chat: LLMService,
) -> None:
    body = chat.model_dump(by_alias=True, exclude_none=True)
    body["spec"]["routing"] = {"mode": "Gateway"}
    with pytest.raises(ValidationError, match=r"routing\.mode"):
        LLMService.model_validate(body)
    body["spec"]["routing"] = {"mode": "InferencePool"}
    body["spec"]["kvMigration"] = {"enabled": True}
    with pytest.raises(
        ValidationError, match=r"kvMigration\.via Router needs routing\.mode Router"
    ):
        LLMService.model_validate(body)
    crd = yaml.safe_load((ROOT / "crds/llmservices.gpumix.io.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["routing"]["properties"]["mode"]["enum"] == [
        "Router",
        "Service",
        "InferencePool",
    ]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("self.routing.mode == 'Router'" in r for r in rules)
