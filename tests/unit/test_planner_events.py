"""The planner reports a transition once, even when its view lags its own status write (found by
tests/e2e/test_chaos.py: after an apiserver restart kopf's watch reconnects with a backoff, and
passes in between read the old status and decide the same PlanChanged again)."""

from __future__ import annotations

from typing import Any

from gpumix.api import LLMServiceStatus
from gpumix.operator.loop import Planner
from gpumix.operator.view import ClusterView
from gpumix.reconcile.cluster import ClusterDecision
from gpumix.reconcile.service import EventSpec, ServiceDecision

BODY = {"apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "chat", "namespace": "ns", "uid": "u1"}, "spec": {}}  # fmt: skip


class Writer:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.fail = False

    def patch_service_status(self, *_: Any) -> None:
        pass

    def event(self, _body: Any, _type: str, reason: str, message: str, _now: str) -> None:
        if self.fail:
            raise OSError("apiserver down")
        self.events.append(f"{reason}: {message}")


def decision(*messages: str) -> ClusterDecision:
    events = [EventSpec(type="Normal", reason="PlanChanged", message=m) for m in messages]
    sd = ServiceDecision(apply=None, status=LLMServiceStatus(), events=events)
    return ClusterDecision(pool_status={}, services={("ns", "chat"): sd})


def planner(writer: Writer, body: dict[str, Any] = BODY) -> Planner:
    view = ClusterView()
    view.update("services", "ADDED", body)
    return Planner(view, writer, 5, 5, router_image="x")  # type: ignore[arg-type]


def test_a_transition_decided_again_on_a_stale_view_is_reported_once() -> None:
    writer = Writer()
    p = planner(writer)
    p._write(decision("a 1→2"), "now")
    p._write(decision("a 1→2"), "now")  # the view still shows the old status
    assert writer.events == ["PlanChanged: a 1→2"]
    p._write(decision("a 2→1"), "now")
    p._write(decision("a 1→2"), "now")  # back again: a new transition
    assert writer.events == ["PlanChanged: a 1→2", "PlanChanged: a 2→1", "PlanChanged: a 1→2"]


def test_an_event_that_failed_is_written_by_the_next_pass() -> None:
    writer = Writer()
    p = planner(writer)
    writer.fail = True
    p._write(decision("a 1→2"), "now")
    writer.fail = False
    p._write(decision("a 1→2"), "now")
    assert writer.events == ["PlanChanged: a 1→2"]


def test_a_service_recreated_under_the_same_name_is_reported_again() -> None:
    writer = Writer()
    p = planner(writer)
    p._write(decision("a 0→1"), "now")
    p.view.update("services", "DELETED", BODY)
    p.view.update("services", "ADDED", {**BODY, "metadata": {**BODY["metadata"], "uid": "u2"}})
    p._write(decision("a 0→1"), "now")
    assert writer.events == ["PlanChanged: a 0→1", "PlanChanged: a 0→1"]
