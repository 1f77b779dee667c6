"""The planner reports a transition once, even when its view lags its own status write (found by
tests/e2e/test_chaos.py: after an apiserver restart kopf's watch reconnects with a backoff, and
passes in between read the old status and decide the same PlanChanged again)."""

from __future__ import annotations

import threading
from typing import Any

from gpumix.api import LLMServiceStatus
from gpumix.operator.loop import Planner
from gpumix.operator.view import ClusterView
from gpumix.reconcile.cluster import ClusterDecision
from gpumix.reconcile.service import EventSpec, ServiceDecision
from gpumix.render import router_name

BODY = {"apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "chat", "namespace": "ns", "uid": "u1"}, "spec": {}}  # fmt: skip


class Writer:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.fail = False
        self.sent = 0

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


class Ordered(Writer):
    """Status patches and events, in order; a status patch fails while ``status_down``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.status_down = False

    def patch_service_status(self, *_: Any) -> None:
        if self.status_down:
            raise OSError("apiserver down")
        self.writes.append("status")

    def event(self, body: Any, type_: str, reason: str, message: str, now: str) -> None:
        super().event(body, type_, reason, message, now)
        self.writes.append(f"event {reason}")


def changed(message: str) -> ClusterDecision:
    """A transition whose status differs from the one the view holds (a patch is sent)."""
    status = LLMServiceStatus(cost_per_hour=1.0)
    sd = ServiceDecision(apply=None, status=status, events=[
        EventSpec(type="Normal", reason="PlanChanged", message=message)
    ])  # fmt: skip
    return ClusterDecision(pool_status={}, services={("ns", "chat"): sd})


def test_an_event_is_sent_only_after_its_status_holds_the_transition() -> None:
    """An operator killed between an event and its status left the event without the status;
    the next incarnation read the old status, decided the transition again and reported it
    twice (tests/e2e/test_chaos.py, SIGKILL at random points of a pass). The status goes first,
    and when it fails the event waits for the pass that writes it."""
    writer = Ordered()
    p = planner(writer)
    writer.status_down = True
    p._write(changed("a 1→2"), "now")
    assert writer.events == []  # no status: no event either
    writer.status_down = False
    p._write(changed("a 1→2"), "now")
    assert writer.writes == ["status", "event PlanChanged"]


class Recorder(Writer):
    """Every write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.statuses: dict[str, dict[str, Any]] = {}
        self.remembered: dict[tuple[str, str, str], dict[str, Any]] = {}

    def apply(self, obj: dict[str, Any], _known: str | None = None) -> None:
        """Sent unless remembered unchanged (`KubeWriter.apply`'s contract)."""
        if self.remembered.get(self._key(obj)) == obj:
            return
        if self.fail:
            raise OSError("apiserver down")
        self.writes.append(f"apply {obj['metadata']['namespace']}/{obj['kind']}")

    def remember(self, obj: dict[str, Any], _known: str | None = None) -> None:
        self.remembered[self._key(obj)] = obj

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
        return obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]

    def delete(self, *ref: str) -> None:
        self.writes.append(f"delete {ref[2]}/{ref[1]}")

    def patch_service_status(self, namespace: str, _name: str, status: dict[str, Any]) -> None:
        self.writes.append(f"status {namespace}")
        self.statuses[namespace] = status


def fleet(view: ClusterView) -> dict[tuple[str, str], ServiceDecision]:
    """Services a and b in ``view``; only b's objects are (re)applied."""
    services = {}
    for ns in ("a", "b"):
        body = {**BODY, "metadata": {**BODY["metadata"], "namespace": ns, "uid": ns}}
        body["spec"] = {
            "model": {"name": "meta-llama/Llama-2-7b-hf"}, "slo": {"tpotMs": 100},
            "workload": {"requestRate": 1, "inputEdges": [1, 512], "outputEdges": [1, 256],
                         "histogram": [[1]]},
        }  # fmt: skip
        if (ns, "chat") not in view.objects["services"]:
            view.update("services", "ADDED", body)
        status = LLMServiceStatus(cost_per_hour=1.0 if ns == "a" else None)
        apply = {} if ns == "b" else None  # only b's objects are (re)applied
        services[ns, "chat"] = ServiceDecision(apply=apply, target={}, status=status)
    return services


def write(view: ClusterView, writer: Recorder) -> None:
    services = fleet(view)
    Planner(view, writer, 5, 5, router_image="x")._write(  # type: ignore[arg-type]
        ClusterDecision(pool_status={}, services=services), "now"
    )


def test_a_pass_writes_every_services_objects_before_any_status() -> None:
    """A changed plan's objects do not wait behind the statuses of services listed before it."""
    writer, view = Recorder(), ClusterView()
    write(view, writer)
    statuses = [i for i, w in enumerate(writer.writes) if w.startswith("status")]
    objects = [i for i, w in enumerate(writer.writes) if w.startswith("apply b/")]
    assert objects and statuses
    assert max(objects) < min(statuses)
    assert writer.writes[min(statuses)] == "status a"


def test_a_restarted_operator_does_not_apply_again_what_status_says_it_applied() -> None:
    """status.appliedDigest: a new process (a restart, a new leader) skips the objects the last
    one applied; objects that differ from it, or that failed to apply, are applied."""
    writer, view = Recorder(), ClusterView()
    write(view, writer)
    assert any(w.startswith("apply b/") for w in writer.writes)
    digest = writer.statuses["b"]["appliedDigest"]
    body = view.objects["services"]["b", "chat"]
    view.update("services", "MODIFIED", {**body, "status": writer.statuses["b"]})
    gone = Recorder()
    write(view, gone)  # the router's Deployment is not in the view (deleted): applied again
    assert "apply b/Deployment" in gone.writes
    view.update(
        "deployments", "ADDED", {"metadata": {"namespace": "b", "name": router_name("chat")}}
    )
    again = Recorder()
    write(view, again)  # a new Planner and writer: nothing remembered in memory
    assert not any(w.startswith("apply") for w in again.writes)
    view.update("services", "MODIFIED", {**body, "status": {"appliedDigest": "other"}})
    failing = Recorder()
    failing.fail = True
    write(view, failing)
    assert failing.statuses["b"]["appliedDigest"] is None  # not all applied: removed
    write(view, third := Recorder())
    assert any(w.startswith("apply b/") for w in third.writes)
    assert third.statuses["b"]["appliedDigest"] == digest


class Paired(Recorder):
    """Each apply waits until another thread applies too: one writer alone never gets past."""

    def __init__(self) -> None:
        super().__init__()
        self.pair = threading.Barrier(2, timeout=5)

    def apply(self, obj: dict[str, Any], _known: str | None = None) -> None:
        self.pair.wait()
        super().apply(obj)


def test_services_objects_are_applied_side_by_side() -> None:
    """Two services' objects go out at once (loop.WRITERS), each service's in its own order; a
    pass that applied one object after another would break the pair and apply nothing."""
    writer, view = Paired(), ClusterView()
    services = fleet(view)
    services["a", "chat"] = services["b", "chat"]  # both apply the same objects
    Planner(view, writer, 5, 5, router_image="x")._write(  # type: ignore[arg-type]
        ClusterDecision(pool_status={}, services=services), "now"
    )
    assert all(writer.statuses[ns]["appliedDigest"] is not None for ns in "ab")  # all applied
    applied = {ns: [w for w in writer.writes if w.startswith(f"apply {ns}/")] for ns in "ab"}
    assert applied["a"] and [w[8:] for w in applied["a"]] == [w[8:] for w in applied["b"]]
