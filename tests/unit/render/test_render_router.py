"""Invariants of the router's objects and the two Services, for any input."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient
from render_helpers import NAMES, ROUTER_IMAGE, Inputs

from gpumix.api import KvMigration, LLMServiceSpec, Routing
from gpumix.cli import build_parser
from gpumix.install import RULES
from gpumix.render import (
    ROUTER_KINDS,
    deployment_name,
    engines_service_name,
    is_dns1035_label,
    is_dns1123_label,
    labels_for,
    render_engines_service,
    render_router,
    render_service,
    router_labels,
    router_name,
    router_selector,
    selector_for,
    service_name,
)
from proptest import budget

OPERATOR_NS = "gpumix-system"
REPO = Path(__file__).resolve().parents[3]

QUICK = budget(200)


def _spec(inputs: Inputs, **routing: Any) -> LLMServiceSpec:
    return inputs.spec.model_copy(update={"routing": Routing(**routing)})


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    return spec


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


# Names -----------------------------------------------------------------------------------------


def test_router_names_stay_clear_of_pools_named_router_or_engines() -> None:
    assert router_name("chat") == "chat--router"
    assert engines_service_name("chat") == "chat--engines"
    assert deployment_name("chat", "router") == "chat-router"
    assert deployment_name("chat", "engines") == "chat-engines"


@QUICK
@given(service=NAMES, pool=NAMES, gpus=st.integers(1, 8))
def test_no_pool_deployment_is_named_like_the_router(service: str, pool: str, gpus: int) -> None:
    assert deployment_name(service, pool, gpus) != router_name(service)
    assert is_dns1123_label(router_name(service))
    assert is_dns1035_label(engines_service_name(service))
    assert engines_service_name(service) != service_name(service)


def test_long_router_names_are_shortened_apart_from_the_pools() -> None:
    service = "s" * 100
    # Pinned: a different hash would rename every long-named router on an operator upgrade.
    assert router_name(service) == "s" * 54 + "-dcdb494b"
    assert deployment_name(service, "router") == "s" * 54 + "-a6a8e93b"


# Selectors -------------------------------------------------------------------------------------


@QUICK
@given(service=NAMES, other=NAMES, pool=NAMES, gpus=st.integers(1, 8))
def test_engine_and_router_selectors_never_cross(
    service: str, other: str, pool: str, gpus: int
) -> None:
    """The Deployments', the headless Service's and the KV loop's selectors of vLLM pods never
    take a router pod (of this service or another), nor the router's selector a vLLM pod."""
    for name in (service, other):
        assert not _matches(selector_for(name), router_labels(service))
        assert not _matches(selector_for(name, pool, gpus), router_labels(service))
        assert not _matches(router_selector(name), labels_for(service, pool, gpus))
    assert _matches(router_selector(service), router_labels(service))
    if other != service:
        assert not _matches(router_selector(other), router_labels(service))


def test_selectors_of_the_router_objects(inputs: Inputs) -> None:
    objects = _by_kind(render_router(inputs.owner, inputs.spec, ROUTER_IMAGE, OPERATOR_NS))
    deployment = objects["Deployment"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    template = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector == {"gpumix.io/router": "chat"}
    assert _matches(selector, template)
    assert "gpumix.io/service" not in template
    assert objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == selector
    (spread,) = _pod(list(objects.values()))["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"] == selector
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # soft: one node still runs them all
    assert (
        render_service(inputs.owner, inputs.spec, router_ready=True)["spec"]["selector"] == selector
    )
    # Until a router is available, clients keep reaching the vLLM pods directly.
    waiting = render_service(inputs.owner, inputs.spec, router_ready=False)
    assert waiting["spec"]["selector"] == selector_for("chat")


def test_routing_mode_service_selects_the_vllm_pods(inputs: Inputs) -> None:
    service = render_service(inputs.owner, _spec(inputs, mode="Service"), router_ready=True)
    assert service["spec"]["selector"] == selector_for("chat")
    engines = render_engines_service(inputs.owner)
    assert engines["spec"]["selector"] == selector_for("chat")
    assert engines["spec"]["clusterIP"] == "None"
    assert engines["metadata"]["name"] == "chat--engines"


# The router ------------------------------------------------------------------------------------


def test_router_objects_share_one_name_in_router_kinds_order(inputs: Inputs) -> None:
    objects = render_router(inputs.owner, inputs.spec, ROUTER_IMAGE, OPERATOR_NS)
    assert [(o["apiVersion"], o["kind"]) for o in objects] == list(ROUTER_KINDS)
    assert ROUTER_KINDS[-1] == ("apps/v1", "Deployment")  # deleted last (reconcile/objects.py)
    assert {o["metadata"]["name"] for o in objects} == {"chat--router"}
    for obj in objects:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["uid"], owner["controller"]) == (inputs.owner.uid, True)
        assert obj["metadata"]["labels"] == router_labels("chat")


def test_router_pod_is_restricted(inputs: Inputs) -> None:
    pod = _pod(render_router(inputs.owner, inputs.spec, ROUTER_IMAGE, OPERATOR_NS))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == "chat--router"
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert [set(v) for v in pod["volumes"]] == [{"name", "emptyDir"}]  # for /tmp


def test_router_runs_gpumix_route_as_its_parser_expects(inputs: Inputs) -> None:
    spec = _spec(inputs, replicas=3, max_inflight_per_pod=64)
    objects = _by_kind(render_router(inputs.owner, spec, ROUTER_IMAGE, OPERATOR_NS))
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == ROUTER_IMAGE
    command = container["command"]
    assert command[0] == "gpumix"
    args = build_parser().parse_args(command[1:])
    assert (args.service, args.namespace) == ("chat", "serving")
    assert (args.port, args.max_inflight_per_pod, args.log_format) == (8000, 64, "json")
    assert container["ports"] == [
        {"containerPort": 8000, "name": "http", "protocol": "TCP"},
        {"containerPort": args.admin_port, "name": "admin", "protocol": "TCP"},
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


@pytest.mark.parametrize(
    ("kv", "migratable"),
    [
        (None, False),
        (KvMigration(enabled=False), False),
        (KvMigration(enabled=True), True),  # via Router, the default
        (KvMigration(enabled=True, via="Router", interval_seconds=5), True),
        (KvMigration(enabled=True, via="Engine"), False),
    ],
)
def test_the_router_relays_streams_movably_only_when_the_kv_loop_moves_them_through_it(
    inputs: Inputs, kv: KvMigration | None, migratable: bool
) -> None:
    spec = inputs.spec if kv is None else inputs.spec.model_copy(update={"kv_migration": kv})
    (container,) = _pod(render_router(inputs.owner, spec, ROUTER_IMAGE, OPERATOR_NS))["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert args.migratable is migratable
    assert args.admin_port == 8001  # the KV loop reads the ledger either way


@pytest.mark.parametrize("replicas", [1, 2, 5])
def test_pdb_lets_a_drain_through_and_keeps_all_but_one(inputs: Inputs, replicas: int) -> None:
    spec = _spec(inputs, replicas=replicas)
    objects = _by_kind(render_router(inputs.owner, spec, "i", OPERATOR_NS))
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in objects["PodDisruptionBudget"]["spec"]


def test_operator_holds_every_permission_of_the_router_role(inputs: Inputs) -> None:
    """RBAC refuses a Role that grants what its creator lacks (no `escalate` verb here)."""
    held = {(r.api_group, res, v) for r in RULES for res in r.resources for v in r.verbs}
    role = _by_kind(render_router(inputs.owner, inputs.spec, ROUTER_IMAGE, OPERATOR_NS))["Role"]
    granted = {
        (group, res, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("", res, verb) for res in ("pods", "configmaps") for verb in ("get", "list", "watch")
    }
    assert granted <= held
    objects = [  # the router's objects, which the operator applies and deletes
        ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("policy", "poddisruptionbudgets"),
        ("networking.k8s.io", "networkpolicies"),
        ("apps", "deployments"),
    ]
    assert len(objects) == len(ROUTER_KINDS)
    for group, resource in objects:
        assert {(group, resource, v) for v in ("create", "patch", "delete")} <= held, resource


@pytest.mark.parametrize("index", range(len(ROUTER_KINDS) + 1))
def test_objects_round_trip_through_the_kubernetes_models(inputs: Inputs, index: int) -> None:
    """Unknown or misspelt fields would be dropped on the way, required ones fail to build."""
    obj = [
        *render_router(inputs.owner, inputs.spec, ROUTER_IMAGE, OPERATOR_NS),
        render_engines_service(inputs.owner),
    ][index]
    with ApiClient() as client:
        typed = client.deserialize(json.dumps(obj), f"V1{obj['kind']}", "application/json")
        assert client.sanitize_for_serialization(typed) == obj


@pytest.mark.parametrize("mode", ["Router", "InferencePool"])
def test_network_policy_admits_the_admin_api_from_the_operator_only(
    inputs: Inputs, mode: str
) -> None:
    """Issue #19 item 5: the served ports open, `/admin/*` only from the operator's pods (the
    chart's and kustomize's, whose labels the policy must match), in the operator's namespace."""
    spec = inputs.spec.model_copy(update={"routing": Routing(mode=mode)})
    objects = _by_kind(render_router(inputs.owner, spec, ROUTER_IMAGE, "ops"))
    policy, deployment = objects["NetworkPolicy"], objects["Deployment"]
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    open_rule, admin_rule = policy["spec"]["ingress"]
    (container,) = pod["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    served = {p["port"] for p in open_rule["ports"]}
    assert "from" not in open_rule
    assert served == ({"http", "grpc"} if mode == "InferencePool" else {"http"})
    assert served <= named.keys()
    [admin] = admin_rule["ports"]
    # The router serves its admin API on the port the policy names; the picker declares none,
    # so the policy admits nobody to it.
    command = build_parser().parse_args(container["command"][1:])
    assert (named.get(admin["port"]) == command.admin_port) == (mode == "Router")
    [peer] = admin_rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ops"}
    chart = yaml.safe_load((REPO / "manifests" / "base" / "deployment.yaml").read_text())
    operator_pod = chart["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= operator_pod.items()
    helpers = (REPO / "charts" / "gpumix" / "templates" / "_helpers.tpl").read_text()
    for key, value in peer["podSelector"]["matchLabels"].items():
        assert f"{key}: {value}" in helpers  # the chart's pods carry it under any nameOverride
    router_labels = pod["metadata"]["labels"]
    assert not peer["podSelector"]["matchLabels"].items() <= router_labels.items()
