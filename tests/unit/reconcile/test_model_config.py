"""spec.model.config: a model's shape from the config.json in a ConfigMap (no cluster needed).

The pure parts (`gpumix.reconcile.modelshape`), the planner pass with the ConfigMaps of its
snapshot, and the operator's view that watches them.
"""

import base64
import json
from typing import Any

import pytest

from gpumix.api import GPUPool, LLMService
from gpumix.operator.view import ClusterView
from gpumix.profiles.hfconfig import ModelConfigError, shape_from_hf_config
from gpumix.profiles.models import SHIPPED_CONFIGS, model_shape
from gpumix.reconcile.cluster import plan_cluster
from gpumix.reconcile.modelshape import (
    FIELD,
    config_map_ref,
    service_shape,
    shape_from_config_map,
    unknown_model_message,
)
from gpumix.reconcile.objects import desired_objects
from gpumix.reconcile.service import Running, ServiceDecision
from gpumix.render import Owner

from .test_cluster_pass import cond, pools, profiles, service, snap

BUILT_IN = "Qwen/Qwen3-8B"
VARIANT = "example/qwen3-8b-variant"
"""A model gpumix has no shape of, whose config.json is Qwen3-8B's."""
KEY = ("default", "chat")
CM = ("default", "qwen3-config")


def shipped_config(name: str) -> dict[str, Any]:
    doc = json.loads(SHIPPED_CONFIGS.read_text())
    config: dict[str, Any] = next(e["config"] for e in doc["models"] if name in e["names"])
    return config


QWEN3_8B = shipped_config(BUILT_IN)


def config_map(config: Any = QWEN3_8B, key: str = "config.json") -> dict[str, Any]:
    text = config if isinstance(config, str) else json.dumps(config)
    return {"metadata": {"namespace": CM[0], "name": CM[1]}, "data": {key: text}}


def with_config(body: dict[str, Any], model: str = VARIANT, **ref: str) -> dict[str, Any]:
    body["spec"]["model"]["name"] = model
    body["spec"]["model"]["config"] = {"configMapKeyRef": {"name": CM[1], **ref}}
    return body


def profiles_for(model: str) -> list[dict[str, Any]]:
    """The sample's GPUProfiles (measured on Llama 2 7B) relabelled for ``model``."""
    out = profiles()
    for p in out:
        p["spec"]["model"] = model
    return out


def svc(body: dict[str, Any]) -> LLMService:
    return LLMService.model_validate(body)


# The pure parts.


def test_the_shape_is_the_config_json_s_under_the_service_s_model_name() -> None:
    body = with_config(service("chat", 5.5, "t0"))
    shape = service_shape(svc(body), {CM: config_map()})
    assert shape == shape_from_hf_config(QWEN3_8B, VARIANT)
    assert shape == model_shape(BUILT_IN).model_copy(update={"name": VARIANT})


def test_the_config_map_wins_over_a_built_in_shape() -> None:
    shorter = {**QWEN3_8B, "max_position_embeddings": 2048}
    body = with_config(service("chat", 5.5, "t0"), model=BUILT_IN)
    shape = service_shape(svc(body), {CM: config_map(shorter)})
    assert shape is not None and shape.max_context == 2048
    assert model_shape(BUILT_IN).max_context == 40960


def test_without_a_config_the_built_in_shape_or_none() -> None:
    body = service("chat", 5.5, "t0")
    assert service_shape(svc(body), {}) == model_shape(body["spec"]["model"]["name"])
    body["spec"]["model"]["name"] = VARIANT
    assert service_shape(svc(body), {CM: config_map()}) is None  # not named: not read


def test_another_key_and_binary_data_are_read() -> None:
    body = with_config(service("chat", 5.5, "t0"), key="qwen3.json")
    raw = base64.b64encode(json.dumps(QWEN3_8B).encode()).decode()
    binary = {"metadata": {"name": CM[1]}, "binaryData": {"qwen3.json": raw}}
    assert service_shape(svc(body), {CM: binary}) == shape_from_hf_config(QWEN3_8B, VARIANT)


NO_HIDDEN = {k: v for k, v in QWEN3_8B.items() if k != "hidden_size"}


@pytest.mark.parametrize(
    ("config_maps", "key", "field", "says"),
    [
        ({}, "config.json", f"{FIELD}.name", "ConfigMap 'qwen3-config' not found in namespace "
         "'default' (create it, e.g. `kubectl create configmap qwen3-config "
         "--from-file=config.json=config.json`)"),
        ({CM: config_map()}, "qwen3.json", f"{FIELD}.key",
         "ConfigMap 'qwen3-config' has no key 'qwen3.json' (its keys: config.json)"),
        ({CM: {"metadata": {}}}, "config.json", f"{FIELD}.key", "(it has no data)"),
        ({CM: config_map("{not json")}, "config.json", FIELD,
         "'config.json' of ConfigMap 'qwen3-config': not JSON: Expecting property name"),
        ({CM: config_map("[1, 2]")}, "config.json", FIELD, "a config.json holds one JSON object"),
        ({CM: config_map(NO_HIDDEN)}, "config.json", FIELD, "config has no 'hidden_size'"),
        ({CM: config_map({**QWEN3_8B, "layers_block_type": ["mamba"]})}, "config.json", FIELD,
         "Mamba layers ('layers_block_type') are not modelled"),
        ({CM: {"metadata": {}, "binaryData": {"config.json": "//79"}}}, "config.json",
         f"{FIELD}.key", "binaryData 'config.json' is not UTF-8 text"),
    ],
    ids=["no-config-map", "no-key", "no-data", "not-json", "not-object", "missing-field",
         "unmodelled", "binary-not-text"],
)  # fmt: skip
def test_what_gives_no_shape_is_an_error_naming_the_field(
    config_maps: dict[Any, Any], key: str, field: str, says: str
) -> None:
    body = with_config(service("chat", 5.5, "t0"), key=key)
    with pytest.raises(ModelConfigError) as raised:
        service_shape(svc(body), config_maps)
    message = str(raised.value)
    assert message.startswith(field + ": "), message
    assert says in message


def test_shape_from_config_map_alone() -> None:
    ref = svc(with_config(service("chat", 5.5, "t0"))).spec.model.config
    assert ref is not None
    shape = shape_from_config_map(config_map(), ref.config_map_key_ref, "default", VARIANT)
    assert shape.name == VARIANT and shape.kv_heads == 8 and shape.layers == 36


def test_config_map_ref_reads_raw_bodies_leniently() -> None:
    assert config_map_ref(with_config(service("chat", 1, "t0"))) == CM
    assert config_map_ref(service("chat", 1, "t0")) is None
    assert config_map_ref({"spec": {"model": {"config": None}}}) is None
    assert config_map_ref({"spec": {"model": {"config": {"configMapKeyRef": {"name": 3}}}}}) is None


# The planner pass.


def planned(body: dict[str, Any], config_maps: dict[Any, Any], **kw: Any) -> ServiceDecision:
    model = body["spec"]["model"]["name"]
    snapshot = snap(services=[body], profiles=profiles_for(model), config_maps=config_maps, **kw)
    return plan_cluster(snapshot).services[KEY]


def vllm_args(body: dict[str, Any], sd: ServiceDecision) -> dict[str, list[str]]:
    """The vLLM args of each Deployment the decision renders."""
    owner = Owner(name="chat", namespace="default", uid="uid-chat")
    gpu_pools = {p["metadata"]["name"]: GPUPool.model_validate(p) for p in pools()}
    objects = desired_objects(
        svc(body), owner, sd, gpu_pools,
        router_image="gpumix:test", router_ready=True,
    )  # fmt: skip
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["args"]
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"].get("gpumix.io/pool")
    }


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_model_from_a_config_map_is_planned_as_the_built_in_one_with_that_shape() -> None:
    built_in = service("chat", 5.5, "t0")
    built_in["spec"]["model"]["name"] = BUILT_IN
    variant = with_config(service("chat", 5.5, "t0"))
    a, b = planned(built_in, {}), planned(variant, {CM: config_map()})
    assert a.target and a.target == b.target
    assert b.shape == model_shape(BUILT_IN).model_copy(update={"name": VARIANT})
    assert b.status.predicted_attainment is not None
    assert b.status.predicted_attainment == a.status.predicted_attainment  # same simulation
    assert b.status.cost_per_hour == a.status.cost_per_hour
    assert cond(b.status, "SLOAtRisk")[:2] == cond(a.status, "SLOAtRisk")[:2]
    args_a, args_b = vllm_args(built_in, a), vllm_args(variant, b)
    assert args_a.keys() == args_b.keys()
    for name, args in args_b.items():
        assert args == [VARIANT if v == BUILT_IN else v for v in args_a[name]]
        assert flag(args, "--max-model-len") == "4073"  # the workload's longest request


def test_the_config_map_s_context_caps_max_model_len() -> None:
    short = {**QWEN3_8B, "max_position_embeddings": 2048}
    body = with_config(service("chat", 5.5, "t0"))
    sd = planned(body, {CM: config_map(short)})
    assert sd.shape is not None and sd.shape.max_context == 2048
    args = vllm_args(body, sd)
    assert args and {flag(a, "--max-model-len") for a in args.values()} == {"2048"}
    assert cond(sd.status, "PodsMatchPlan")[:2] == ("True", "AsPlanned")


@pytest.mark.parametrize(
    ("config_maps", "field"),
    [({}, f"{FIELD}.name"), ({CM: config_map("{")}, FIELD)],
    ids=["deleted", "broken"],
)
def test_a_config_map_that_gives_no_shape_keeps_the_last_plan(
    config_maps: dict[Any, Any], field: str
) -> None:
    body = with_config(service("chat", 5.5, "t0"))
    first = planned(body, {CM: config_map()})
    assert first.target
    live = {p: n for p, n in first.target.items() if n}
    body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    running = {KEY: Running(replicas=live, ready=live)}
    sd = planned(body, config_maps, running=running)
    assert sd.apply is None and sd.delete == []  # nothing applied, nothing deleted
    assert desired_objects(svc(body), Owner(name="chat", namespace="default", uid="u"), sd, {},
                           router_image="x", router_ready=True) == []  # fmt: skip
    state, reason, message = cond(sd.status, "Ready")
    assert (state, reason) == ("False", "InvalidModelConfig")
    assert message.startswith(field + ": ")
    assert cond(sd.status, "Planned")[:2] == ("False", "InvalidModelConfig")
    assert cond(sd.status, "Degraded")[:2] == ("True", "KeepingLastPlan")
    assert sd.status.allocation == first.status.allocation  # the last plan, as it serves
    assert sd.held_gpus == Running(replicas=live).gpus()  # its GPUs stay its own
    assert [e.reason for e in sd.events] == ["InvalidModelConfig"]
    body["status"] = sd.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    again = planned(body, config_maps, running=running)
    assert again.events == []  # said once
    body["status"] = again.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    fixed = planned(body, {CM: config_map()}, running=running)
    assert fixed.apply is not None and fixed.shape == first.shape  # planned again
    assert cond(fixed.status, "Planned")[:2] == ("True", "PlanComputed")


def test_an_unknown_model_without_a_config_map_is_told_to_add_one() -> None:
    body = service("chat", 5.5, "t0")
    body["spec"]["model"]["name"] = VARIANT
    sd = planned(body, {})
    assert sd.apply and sd.shape is None  # planned from its GPUProfiles, as before
    state, reason, message = cond(sd.status, "SLOAtRisk")
    assert (state, reason) == ("Unknown", "PredictionFailed")
    assert message == "not predicted: " + unknown_model_message(VARIANT)
    assert "spec.model.config.configMapKeyRef" in message
    args = vllm_args(body, sd)
    assert {flag(a, "--max-model-len") for a in args.values()} == {"4073"}  # not capped


# The operator's view.


def test_the_view_keeps_config_maps_lean_and_wakes_the_planner_only_for_named_ones() -> None:
    view = ClusterView()
    view.update("services", "ADDED", with_config(service("chat", 1, "t0")))
    view.changed.clear()
    other = {"metadata": {"namespace": "default", "name": "other", "uid": "u"}, "data": {"a": "b"}}
    view.update("configmaps", "ADDED", other)
    assert not view.changed.is_set()  # a ConfigMap no service names changes no plan
    named = {**config_map(), "metadata": {**config_map()["metadata"], "annotations": {"x": "y"}}}
    view.update("configmaps", "MODIFIED", named)
    assert view.changed.is_set()
    assert view.objects["configmaps"][CM] == config_map()  # name and data only
    snapshot = view.snapshot("t", 1.0)
    assert snapshot.config_maps == {CM: config_map()}  # only the named ones
    view.changed.clear()
    view.update("configmaps", "DELETED", named)
    assert view.changed.is_set() and view.snapshot("t", 1.0).config_maps == {}
