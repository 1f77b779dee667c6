"""Routing mode InferencePool against the real apiserver: the operator says when the cluster lacks
the Gateway API Inference Extension's CRD (and keeps serving), creates the InferencePool once the
CRD is installed (the vendored v1.6.0 CRD in hack/vendor), and removes it when the mode changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_harness import Env, Operator, running_operator, wait

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

CRD = (
    Path(__file__).resolve().parents[2]
    / "hack/vendor/gateway-api-inference-extension/inference.networking.k8s.io_inferencepools.yaml"
)
CRD_NAME = "inferencepools.inference.networking.k8s.io"
GROUP, VERSION, PLURAL = "inference.networking.k8s.io", "v1", "inferencepools"


@pytest.fixture(scope="module")
def operator(kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    kube.kubectl("delete", "--ignore-not-found", "--wait=true", f"crd/{CRD_NAME}")
    with running_operator(kube, tmp_path_factory.mktemp("operator")) as op:
        yield op
    kube.kubectl("delete", "--ignore-not-found", "--wait=true", f"crd/{CRD_NAME}")


def _pool(env: Env, name: str) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = env.custom.get_namespaced_custom_object(
            GROUP, VERSION, env.ns, PLURAL, name
        )
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return body


def _service_names(env: Env) -> set[str]:
    return {s.metadata.name for s in env.core.list_namespaced_service(env.ns).items}


def test_inference_pool_waits_for_its_crd_serving_meanwhile_then_follows_the_mode(
    env: Env, kube: KubeTarget
) -> None:
    env.apply(env.service("chat", 5.5, routing={"mode": "InferencePool"}))
    missing = env.wait_condition("chat", "InferencePool", "False", "CRDNotInstalled")
    assert missing["message"].startswith("spec.routing.mode InferencePool:")
    assert "inference.networking.k8s.io/v1" in missing["message"]
    # Serving goes on without the CRD: the vLLM pods, the picker and its Service are there.
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    picker_deployment = env.apps.read_namespaced_deployment("chat--router", env.ns)
    assert "--ext-proc-port" in picker_deployment.spec.template.spec.containers[0].command
    assert {"chat", "chat--engines", "chat--picker"} <= _service_names(env)
    warnings = [e for e in env.events("chat") if e.reason == "CRDNotInstalled"]
    assert [e.type for e in warnings] == ["Warning"], "one event on the transition, not per pass"

    kube.kubectl("apply", "--server-side", "-f", str(CRD))
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    applied = env.wait_condition("chat", "InferencePool", "True", "Applied")
    assert "'chat--picker'" in applied["message"]
    pool = wait("InferencePool chat", lambda: _pool(env, "chat"))
    spec = pool["spec"]
    picker = env.core.read_namespaced_service("chat--picker", env.ns)
    assert spec["endpointPickerRef"]["name"] == "chat--picker"
    assert spec["endpointPickerRef"]["port"]["number"] == picker.spec.ports[0].port
    # The pool selects exactly the service's vLLM pods (not the picker's).
    selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
    selected = env.core.list_namespaced_pod(env.ns, label_selector=selector).items
    engines = env.core.list_namespaced_pod(env.ns, label_selector="gpumix.io/pool").items
    assert {p.metadata.name for p in selected} == {p.metadata.name for p in engines} != set()
    assert pool["metadata"]["ownerReferences"][0]["kind"] == "LLMService"

    body = env.get("chat")
    body["spec"]["routing"]["mode"] = "Router"
    env.custom.replace_namespaced_custom_object(
        "gpumix.io", "v1alpha1", env.ns, "llmservices", "chat", body
    )
    wait("InferencePool chat deleted", lambda: _pool(env, "chat") is None)
    wait("Service chat--picker deleted", lambda: "chat--picker" not in _service_names(env))
    wait("no InferencePool condition", lambda: env.condition("chat", "InferencePool") is None)
