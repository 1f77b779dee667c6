"""spec.template's merge rules, as the rendered Deployment shows them, and the rules a user can
break (refused by gpumix's model here; by the apiserver in tests/e2e/test_crd_rules.py)."""

import copy
from typing import Any

import pytest
from pydantic import ValidationError
from render_helpers import TEMPLATE, Inputs

from gpumix.api import LLMService, PodTemplate
from gpumix.reconcile.pods import pod_mismatches
from gpumix.render import render_deployment, template_conflicts


def _pod(i: Inputs) -> dict[str, Any]:
    rendered = render_deployment(i.owner, i.templated_spec, i.a100, i.choices["a100-80gb"], 1)
    return dict(rendered["spec"]["template"])


def test_what_the_plan_relies_on_stays_gpumixs(inputs: Inputs) -> None:
    pod = _pod(inputs)
    (vllm,) = pod["spec"]["containers"]
    assert vllm["name"] == "vllm"
    assert vllm["ports"] == [{"containerPort": 8000, "name": "http", "protocol": "TCP"}]
    assert vllm["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert vllm["resources"]["requests"]["cpu"] == "8"  # an int in YAML, a quantity string here
    # The pool's zone wins over the template's; the template's other key is added.
    assert pod["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] == "z1"
    assert pod["spec"]["nodeSelector"]["cloud.example/spot"] == "false"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm"
    assert pod["metadata"]["labels"]["team"] == "search"


def test_the_users_annotations_and_env_win(inputs: Inputs) -> None:
    pod = _pod(inputs)
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "false"
    env = pod["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["HF_HOME", "HF_TOKEN", "HF_HUB_OFFLINE"]
    assert env[-1]["value"] == "0"  # the cache's HF_HUB_OFFLINE=1, replaced
    tolerations = pod["spec"]["tolerations"]
    assert len(tolerations) == 3  # the pool's two, plus the template's one that is new


def test_the_users_affinity_keeps_gpumixs_packing_term(inputs: Inputs) -> None:
    """A user's pod affinity terms come first, gpumix's packing term is added after them, and
    the rest of the user's affinity is left as written."""
    i = inputs
    theirs = {
        "weight": 10,
        "podAffinityTerm": {
            "topologyKey": "topology.kubernetes.io/zone",
            "labelSelector": {"matchLabels": {"app": "cache"}},
        },
    }
    required = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "cloud.example/spot", "operator": "In", "values": ["false"]}
    ]}]}  # fmt: skip
    template = PodTemplate.model_validate({"spec": {"affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required},
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [theirs]},
    }}})  # fmt: skip
    spec = i.spec.model_copy(update={"template": template})
    bare = render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], 1)
    ours = bare["spec"]["template"]["spec"]["affinity"]["podAffinity"]
    (packing,) = ours["preferredDuringSchedulingIgnoredDuringExecution"]
    assert packing["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    affinity = render_deployment(i.owner, spec, i.l4, i.choices["l4"], 1)["spec"]["template"][
        "spec"
    ]["affinity"]
    assert affinity["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": required}
    assert affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        theirs,
        packing,
    ]


def test_pods_pack_with_engines_of_their_own_size_only(inputs: Inputs) -> None:
    """The packing term selects gpumix's vLLM pods of the replica's size in every namespace:
    1-GPU pods (no size label) and 2-GPU pods each look for their own kind."""
    i = inputs

    def term(rendered: dict[str, Any]) -> dict[str, Any]:
        pod = rendered["spec"]["template"]["spec"]
        (pref,) = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        return dict(pref["podAffinityTerm"])

    one = term(render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], 1))
    two = term(render_deployment(i.owner, i.spec, i.a100, i.choices["a100-80gb"], 1))
    assert one["namespaceSelector"] == {} and two["namespaceSelector"] == {}
    assert one["labelSelector"]["matchExpressions"] == [
        {"key": "gpumix.io/gpus-per-replica", "operator": "DoesNotExist"}
    ]
    assert two["labelSelector"]["matchExpressions"] == [
        {"key": "gpumix.io/gpus-per-replica", "operator": "In", "values": ["2"]}
    ]
    for selector in (one["labelSelector"]["matchLabels"], two["labelSelector"]["matchLabels"]):
        assert selector["app.kubernetes.io/name"] == "vllm"
        assert "gpumix.io/service" not in selector  # every service's engines, not one's


def test_no_template_renders_what_gpumix_alone_renders(inputs: Inputs) -> None:
    i = inputs
    spec = i.spec.model_copy(update={"template": PodTemplate()})
    bare = render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], 1)
    assert render_deployment(i.owner, spec, i.l4, i.choices["l4"], 1) == bare


def test_a_pool_selector_key_set_otherwise_is_named(inputs: Inputs) -> None:
    template = inputs.templated_spec.template
    assert template_conflicts(template, inputs.l4) == []
    assert template_conflicts(template, inputs.a100) == [
        "spec.template.spec.nodeSelector[topology.kubernetes.io/zone]='z2': GPUPool a100-80gb "
        "selects topology.kubernetes.io/zone='z1', which is used"
    ]


def test_the_condition_names_every_override(inputs: Inputs) -> None:
    model = inputs.templated_spec.model.model_copy(update={"args": ["--block-size", "32"]})
    spec = inputs.templated_spec.model_copy(update={"model": model})
    service = LLMService(metadata={"name": "chat"}, spec=spec)
    found = pod_mismatches(service, [inputs.l4, inputs.a100])
    assert found[0] == "spec.model.args: --block-size 32 (the plan assumes 16)"
    assert found[1].startswith("spec.template.spec.nodeSelector[topology.kubernetes.io/zone]")
    assert pod_mismatches(LLMService(metadata={"name": "c"}, spec=inputs.spec), [inputs.a100]) == []


def _broken(path: list[str | int], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(TEMPLATE)
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"], 4, "limits"),
        (["spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], 4, "requests"),
        (["spec", "containers", 0, "name"], "sidecar", "name"),
        (["spec", "containers", 0, "ports"], [{"containerPort": 9000}], "ports"),
        (["spec", "containers", 0, "image"], "other:latest", "image"),
        (["spec", "volumes", 0, "name"], "dshm", "volumes"),
        (["metadata", "labels", "gpumix.io/pool"], "l4", "labels"),
    ],
    ids=["gpu-limit", "gpu-request", "container-name", "port", "image", "volume", "label"],
)
def test_rules_a_user_can_break_are_refused(path: list[str | int], value: Any, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        PodTemplate.model_validate(_broken(path, value))
    assert field in str(err.value)
