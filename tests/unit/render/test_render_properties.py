"""Invariants of the rendered objects that must hold for any input, not just the golden one."""

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient
from render_helpers import NAMES, Inputs, make_pool

from gpumix.api import Routing
from gpumix.render import (
    ROUTING_KEY,
    deployment_name,
    is_dns1035_label,
    is_dns1123_label,
    is_label_value,
    labels_for,
    render_deployment,
    render_engines_service,
    render_routing_configmap,
    render_service,
    routing_configmap_name,
    service_name,
    toleration_dict,
)
from proptest import budget

QUICK = budget(200)


def _all(i: Inputs) -> list[dict[str, Any]]:
    return [
        render_deployment(i.owner, i.tp2_spec, i.a100, i.choices["a100-80gb"], 2),
        render_service(i.owner, i.spec, router_ready=True),
        render_routing_configmap(i.owner, i.spec, i.shares, i.replicas, i.choices),
    ]


@pytest.fixture
def rendered(inputs: Inputs) -> list[dict[str, Any]]:
    return _all(inputs)


# Names -----------------------------------------------------------------------------------------


def test_ordinary_names_pass_through() -> None:
    assert deployment_name("chat", "a100-80gb") == "chat-a100-80gb"
    assert service_name("chat") == "chat"
    assert routing_configmap_name("chat") == "chat-routing"
    assert labels_for("chat", "l4")["gpumix.io/pool"] == "l4"


@QUICK
@given(service=NAMES, pool=NAMES)
def test_names_are_labels_and_stable(service: str, pool: str) -> None:
    name = deployment_name(service, pool)
    assert is_dns1123_label(name), name
    assert name == deployment_name(service, pool)
    assert is_dns1123_label(service_name(service))
    assert is_dns1123_label(routing_configmap_name(service))
    assert all(is_label_value(v) for v in labels_for(service, pool).values())


@QUICK
@given(service=NAMES)
def test_service_names_start_with_a_letter(service: str) -> None:
    assert is_dns1035_label(service_name(service))


def test_service_name_of_a_digit_first_service() -> None:
    assert service_name("7b-chat") == "x7b-chat-e14c5e17"
    assert deployment_name("7b-chat", "l4") == "7b-chat-l4"  # a DNS-1123 label is enough here


@QUICK
@given(service=NAMES, pools=st.lists(NAMES, min_size=2, max_size=2, unique=True))
def test_distinct_pools_give_distinct_deployments(service: str, pools: list[str]) -> None:
    first, second = (deployment_name(service, p) for p in pools)
    assert first != second
    assert labels_for(service, pools[0]) != labels_for(service, pools[1])


@QUICK
@given(services=st.lists(NAMES, min_size=2, max_size=2, unique=True), pool=NAMES)
def test_distinct_services_give_distinct_names(services: list[str], pool: str) -> None:
    first, second = services
    assert deployment_name(first, pool) != deployment_name(second, pool)
    assert service_name(first) != service_name(second)
    assert routing_configmap_name(first) != routing_configmap_name(second)
    assert labels_for(first)["gpumix.io/service"] != labels_for(second)["gpumix.io/service"]


def test_long_names_are_truncated_with_a_hash() -> None:
    service, pool = "s" * 100, "p" * 100
    name = deployment_name(service, pool)
    # Pinned: a different hash would rename every long-named Deployment on an operator upgrade.
    assert name == "s" * 54 + "-a3c1bbca"
    assert name != deployment_name(service, "p" * 99)
    # Where the dash splits the two names matters once a hash is involved.
    assert deployment_name("a" * 40, "b-" + "c" * 40) != deployment_name("a" * 40 + "-b", "c" * 40)


def test_dotted_pool_name_is_folded_not_merged() -> None:
    dotted, dashed = deployment_name("chat", "a100.80gb"), deployment_name("chat", "a100-80gb")
    assert is_dns1123_label(dotted)
    assert dotted != dashed
    assert dotted == "chat-a100-80gb-ac693378"
    assert labels_for("chat", "a100.80gb")["gpumix.io/pool"] == "a100.80gb"  # a valid value


# Objects ---------------------------------------------------------------------------------------


def test_selector_is_a_subset_of_the_template_labels(
    inputs: Inputs, rendered: list[dict[str, Any]]
) -> None:
    deployment, service, _ = rendered
    selector = deployment["spec"]["selector"]["matchLabels"]
    template = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector == {  # k-GPU replicas (here k=2) get their own Deployment and selector
        "gpumix.io/gpus-per-replica": "2",
        "gpumix.io/pool": "a100-80gb",
        "gpumix.io/service": "chat",
    }
    assert selector.items() <= template.items()
    assert "gpumix.io/pool" not in service["metadata"]["labels"]
    # The vLLM pods are selected by the Service in routing mode Service, and the headless one.
    spec = inputs.spec.model_copy(update={"routing": Routing(mode="Service")})
    for engines in (
        render_service(inputs.owner, spec, router_ready=True),
        render_engines_service(inputs.owner),
    ):
        assert engines["spec"]["selector"].items() <= template.items()


@pytest.mark.parametrize("k", [1, 2, 8])
def test_gpu_request_equals_limit_equals_k(inputs: Inputs, k: int) -> None:
    choice = inputs.choices["a100-80gb"].model_copy(update={"gpus_per_replica": k})
    deployment = render_deployment(inputs.owner, inputs.spec, inputs.a100, choice, 1)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": str(k)}
    args = container["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == str(k)


def test_one_controller_owner_reference(inputs: Inputs, rendered: list[dict[str, Any]]) -> None:
    owner = inputs.owner
    for obj in rendered:
        refs = obj["metadata"]["ownerReferences"]
        controllers = [r for r in refs if r.get("controller")]
        assert len(controllers) == 1
        assert controllers[0]["uid"] == owner.uid
        assert controllers[0]["kind"] == "LLMService"
        assert controllers[0]["apiVersion"] == "gpumix.io/v1alpha1"
        assert obj["metadata"]["namespace"] == owner.namespace
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpumix"


def test_rendering_is_deterministic(inputs: Inputs) -> None:
    first, second = _all(inputs), _all(inputs)
    assert first == second
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    # Neither does dict insertion order leak into the output.
    reordered = replace(
        inputs,
        shares=dict(reversed(inputs.shares.items())),
        replicas=dict(reversed(inputs.replicas.items())),
        choices=dict(reversed(inputs.choices.items())),
    )
    assert json.dumps(_all(reordered)) == json.dumps(first)


def test_tolerations_leave_out_unset_fields() -> None:
    pool = make_pool("x", "l4", tolerations=[{"operator": "Exists"}, {"key": "k", "value": "v"}])
    assert [toleration_dict(t) for t in pool.spec.tolerations] == [
        {"operator": "Exists"},
        {"key": "k", "operator": "Exists", "value": "v"},
    ]


def test_served_name_defaults_to_model_name(inputs: Inputs) -> None:
    i = inputs
    deployment = render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], 1)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--served-model-name") + 1] == i.spec.model.name


def test_deployment_rejects_a_choice_for_another_pool(inputs: Inputs) -> None:
    i = inputs
    with pytest.raises(ValueError, match="not 'l4'"):
        render_deployment(i.owner, i.spec, i.l4, i.choices["h100"], 1)
    with pytest.raises(ValueError, match="replicas"):
        render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], -1)


# Routing ---------------------------------------------------------------------------------------


def test_routing_omits_pools_without_replicas(inputs: Inputs) -> None:
    i = inputs
    cm = render_routing_configmap(i.owner, i.spec, i.shares, i.replicas, i.choices)
    document = json.loads(cm["data"][ROUTING_KEY])
    assert document["inputEdges"] == [1, 256, 1024]
    assert document["outputEdges"] == [1, 128, 512]
    assert set(document["pools"]) == {"l4", "a100-80gb"}
    assert document["pools"]["a100-80gb"] == {
        "deployment": "chat-a100-80gb-tp2",
        "gpuType": "a100-80gb",
        "replicas": 1,
        "share": [[0.375, 0.0], [0.7, 0.0]],
    }
    # Every bucket with traffic is fully routed.
    pools = document["pools"].values()
    totals = [[sum(p["share"][i][j] for p in pools) for j in range(2)] for i in range(2)]
    assert totals == [[1.0, 1.0], [1.0, 0.0]]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"replicas": {"l4": 0, "a100-80gb": 1}}, "no replicas"),
        ({"shares": {"a100-80gb": [[1.0, 1.0], [1.0, 0.0]]}}, "'l4' has 3 replicas but no shares"),
        ({"choices": {}}, "no PoolChoice"),
        ({"shares": {"l4": [[1.0, 1.0]], "a100-80gb": [[0.0, 0.0]]}}, "not 2x2"),
        (
            {"shares": {"l4": [[1.0, float("nan")], [1.0, 0.0]], "a100-80gb": [[0.0] * 2] * 2}},
            "finite",
        ),
        ({"replicas": {"a100-80gb": 1, "l4": -1}}, r"replicas\['l4'\] must be >= 0"),
    ],
)
def test_routing_rejects_an_inconsistent_plan(
    inputs: Inputs, change: dict[str, Any], message: str
) -> None:
    i = replace(inputs, **change)
    with pytest.raises(ValueError, match=message):
        render_routing_configmap(i.owner, i.spec, i.shares, i.replicas, i.choices)


# The kubernetes client's models ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "model"), [(0, "V1Deployment"), (1, "V1Service"), (2, "V1ConfigMap")]
)
def test_objects_round_trip_through_the_kubernetes_models(
    rendered: list[dict[str, Any]], index: int, model: str
) -> None:
    """Unknown or misspelt fields would be dropped on the way, required ones fail to build."""
    with ApiClient() as client:
        typed = client.deserialize(json.dumps(rendered[index]), model, "application/json")
        back = client.sanitize_for_serialization(typed)
    assert back == rendered[index]
