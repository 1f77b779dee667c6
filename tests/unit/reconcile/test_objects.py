"""What a service's decision applies and, when routing mode turns to Service, deletes."""

from typing import Any

import pytest

from gpumix.api import GPUPool, LLMService, LLMServiceStatus, Routing, RoutingMode
from gpumix.problem import PoolChoice
from gpumix.reconcile.objects import ObjectRef, desired_objects, unwanted_objects
from gpumix.reconcile.service import ServiceDecision
from gpumix.render import ROUTER_KINDS, Owner

IMAGE = "registry.example/gpumix:dev"
OWNER = Owner(name="chat", namespace="default", uid="uid-chat")
POOL = GPUPool.model_validate(
    {"kind": "GPUPool", "metadata": {"name": "l4"},
     "spec": {"gpuType": "l4", "nodeSelector": {"gpumix.io/gpu-class": "l4"}}}
)  # fmt: skip
CHOICE = PoolChoice(
    pool="l4", gpu_type="l4", gpus_per_replica=1, price_per_gpu_hour=0.7, profile="p"
)


def _service(chat: LLMService, mode: RoutingMode) -> LLMService:
    spec = chat.spec.model_copy(update={"routing": Routing(mode=mode)})
    return chat.model_copy(update={"spec": spec})


def _decision(chat: LLMService) -> ServiceDecision:
    rows, cols = chat.spec.workload.shape
    return ServiceDecision(
        apply={"l4": 2},
        target={"l4": 2},
        choices={"l4": CHOICE},
        shares={"l4": [[1.0] * cols for _ in range(rows)]},
        status=LLMServiceStatus(),
    )


def _kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def _main_service(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (service,) = [o for o in objects if (o["kind"], o["metadata"]["name"]) == ("Service", "chat")]
    return service


def _render(chat: LLMService, mode: str) -> list[dict[str, Any]]:
    """The objects of ``chat`` with ``spec.routing.mode`` set, its router ready."""
    return desired_objects(_service(chat, mode), OWNER, _decision(chat), {"l4": POOL},
                           router_image=IMAGE, router_ready=True)  # fmt: skip


def test_routing_mode_router_adds_the_router_after_what_it_needs(chat: LLMService) -> None:
    objects = _render(chat, "Router")
    assert _kinds(objects) == [
        ("Deployment", "chat-l4"),
        ("Service", "chat"),
        ("Service", "chat--engines"),
        ("ConfigMap", "chat-routing"),
        ("ServiceAccount", "chat--router"),
        ("Role", "chat--router"),
        ("RoleBinding", "chat--router"),
        ("PodDisruptionBudget", "chat--router"),
        ("NetworkPolicy", "chat--router"),
        ("Deployment", "chat--router"),
    ]
    assert _main_service(objects)["spec"]["selector"] == {"gpumix.io/router": "chat"}
    (container,) = objects[-1]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE


def test_an_option_of_multi_gpu_replicas_is_deployed_on_its_pool(chat: LLMService) -> None:
    """Options are keyed `<pool>-tp<k>` for k-GPU replicas: each still gets its Deployment."""
    rows, cols = chat.spec.workload.shape
    tp2 = CHOICE.model_copy(update={"gpus_per_replica": 2})
    decision = ServiceDecision(
        apply={"l4": 1, "l4-tp2": 2},
        target={"l4": 1, "l4-tp2": 2},
        choices={"l4": CHOICE, "l4-tp2": tp2},
        shares={o: [[0.5] * cols for _ in range(rows)] for o in ("l4", "l4-tp2")},
        status=LLMServiceStatus(),
    )
    objects = desired_objects(_service(chat, "Service"), OWNER, decision, {"l4": POOL},
                              router_image=IMAGE, router_ready=True)  # fmt: skip
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert len(deployments) == 2
    by_gpus = {
        o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]: o
        for o in deployments
    }
    assert sorted(map(int, by_gpus)) == [1, 2]
    assert [o["spec"]["replicas"] for _, o in sorted(by_gpus.items())] == [1, 2]


def test_routing_mode_service_renders_no_router(chat: LLMService) -> None:
    objects = _render(chat, "Service")
    assert _kinds(objects) == [
        ("Deployment", "chat-l4"),
        ("Service", "chat"),
        ("Service", "chat--engines"),
        ("ConfigMap", "chat-routing"),
    ]
    assert _main_service(objects)["spec"]["selector"] == {"gpumix.io/service": "chat"}


def test_a_decision_that_applies_nothing_renders_nothing(chat: LLMService) -> None:
    keep = ServiceDecision(apply=None, status=LLMServiceStatus())
    assert (
        desired_objects(chat, OWNER, keep, {"l4": POOL}, router_image=IMAGE, router_ready=True)
        == []
    )


@pytest.mark.parametrize(
    ("mode", "deployed", "deleted"),
    [("Router", True, False), ("Router", False, False), ("Service", False, False),
     ("Service", True, True)],
)  # fmt: skip
def test_the_router_is_deleted_while_its_deployment_outlives_mode_router(
    chat: LLMService, mode: RoutingMode, deployed: bool, deleted: bool
) -> None:
    refs = unwanted_objects(_service(chat, mode), OWNER, router_deployed=deployed)
    if not deleted:
        assert refs == []
        return
    assert refs == [ObjectRef(v, k, "default", "chat--router") for v, k in ROUTER_KINDS]
    assert refs[-1].kind == "Deployment"  # last: a failed delete before it is retried


@pytest.mark.parametrize("served", [True, False])
def test_routing_mode_inference_pool_applies_the_pool_only_where_its_kind_is_served(
    chat: LLMService, served: bool
) -> None:
    service = _service(chat, "InferencePool")
    objects = desired_objects(service, OWNER, _decision(chat), {"l4": POOL}, router_image=IMAGE,
                              router_ready=True, inference_pools_served=served)  # fmt: skip
    tail = [("Deployment", "chat--router"), ("Service", "chat--picker")]
    kinds = _kinds(objects)
    assert kinds[-len(tail) - served :] == tail + ([("InferencePool", "chat")] if served else [])
    assert sum(kind == "InferencePool" for kind, _ in kinds) == served
