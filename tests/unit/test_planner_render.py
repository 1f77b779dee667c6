"""The planner renders a service's objects again only when what they are rendered from changed
(`Planner._rendered_objects`), and applies what it rendered."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gpumix.api import LLMService, LLMServiceStatus
from gpumix.operator import loop
from gpumix.operator.kube import digest
from gpumix.operator.loop import Planner
from gpumix.operator.view import ClusterView
from gpumix.problem import PoolChoice
from gpumix.reconcile.cluster import ClusterDecision
from gpumix.reconcile.service import ServiceDecision
from gpumix.render import router_name

from .conftest import EXAMPLES

KEY = ("default", "chat")
POOL = {"apiVersion": "gpumix.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": "l4"},
        "spec": {"gpuType": "l4", "nodeSelector": {"gpumix.io/gpu-class": "l4"}}}  # fmt: skip
CHOICE = PoolChoice(
    pool="l4", gpu_type="l4", gpus_per_replica=1, price_per_gpu_hour=0.7, profile="p"
)


class Writer:
    """Records what is applied; sends nothing."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.known: list[str | None] = []
        """The digest the planner handed with each object (the writer's unchanged-check)."""
        self.sent = 0

    def apply(self, obj: dict[str, Any], known: str | None = None) -> bool:
        self.applied.append(copy.deepcopy(obj))
        self.known.append(known)
        return True

    def remember(self, _obj: dict[str, Any], _known: str | None = None) -> None:
        pass

    def delete(self, *_: Any) -> None:
        pass

    def patch_service_status(self, *_: Any) -> None:
        pass

    def patch_pool_status(self, *_: Any) -> None:
        pass

    def event(self, *_: Any) -> None:
        pass


def body() -> dict[str, Any]:
    b: dict[str, Any] = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    b["metadata"].update(namespace="default", uid="uid-chat")
    b["spec"]["routing"] = {"mode": "Router"}
    return b


def decision(chat: dict[str, Any], replicas: int) -> ClusterDecision:
    rows, cols = LLMService.model_validate(chat).spec.workload.shape
    sd = ServiceDecision(
        apply={"l4": replicas}, target={"l4": replicas}, choices={"l4": CHOICE},
        shares={"l4": [[1.0] * cols for _ in range(rows)]}, status=LLMServiceStatus(),
    )  # fmt: skip
    return ClusterDecision(pool_status={}, services={KEY: sd})


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many objects each call of `desired_objects` rendered."""
    calls: list[int] = []
    real = loop.desired_objects

    def spy(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        objects = real(*args, **kwargs)
        calls.append(len(objects))
        return objects

    monkeypatch.setattr(loop, "desired_objects", spy)
    return calls


def planner(chat: dict[str, Any], writer: Writer) -> Planner:
    view = ClusterView()
    view.update("services", "ADDED", chat)
    view.update("pools", "ADDED", POOL)
    return Planner(view, writer, 5, 5, router_image="x")  # type: ignore[arg-type]


def replicas(objects: list[dict[str, Any]]) -> list[int]:
    return [o["spec"]["replicas"] for o in objects if o["metadata"]["name"] == "chat-l4"]


def selector(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [o["spec"]["selector"] for o in objects
            if (o["kind"], o["metadata"]["name"]) == ("Service", "chat")]  # fmt: skip


def test_an_unchanged_service_is_rendered_once_and_applied_every_pass(renders: list[int]) -> None:
    writer = Writer()
    chat = body()
    p = planner(chat, writer)
    p._write(decision(chat, 2), "now")
    first = list(writer.applied)
    writer.applied.clear()
    p._write(decision(chat, 2), "now")
    assert len(renders) == 1 and writer.applied == first  # applied: the writer skips or not
    assert replicas(first) == [2]
    assert writer.known == [digest(o) for o in first + writer.applied]


def test_what_the_objects_are_rendered_from_renders_them_again(renders: list[int]) -> None:
    """A new replica count, the router becoming ready (the Service then selects the routers)
    and a spec edited in the view's own dict each render the objects again."""
    writer = Writer()
    chat = body()
    p = planner(chat, writer)
    p._write(decision(chat, 2), "now")
    p._write(decision(chat, 3), "now")
    assert replicas(writer.applied) == [2, 3]

    before = selector(writer.applied)[-1]
    router = {"metadata": {"name": router_name("chat"), "namespace": "default"},
              "status": {"availableReplicas": 1}}  # fmt: skip
    p.view.update("deployments", "ADDED", router)
    p._write(decision(chat, 3), "now")
    assert selector(writer.applied)[-1] != before

    p.view.objects["services"][KEY]["spec"]["model"]["image"] = "vllm/vllm-openai:next"
    writer.applied.clear()
    p._write(decision(chat, 3), "now")
    assert len(renders) == 4
    (deployment,) = [o for o in writer.applied if o["metadata"]["name"] == "chat-l4"]
    images = [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert "vllm/vllm-openai:next" in images
    assert writer.known[-len(writer.applied) :] == [digest(o) for o in writer.applied]
