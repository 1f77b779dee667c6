"""The planner pass with batch services (SageServe §3.3, §6.2–6.3): own replicas are planned only
for what `servedBy`'s spare capacity cannot finish before the deadline."""

from typing import Any

import pytest

from gpumix.api import ConditionStatus
from gpumix.observe import PodLoad
from gpumix.reconcile.cluster import ClusterDecision, plan_cluster
from gpumix.reconcile.service import ServiceDecision
from gpumix.reconcile.workload import ServiceObservation

from .test_cluster_observe import observed, replicas
from .test_cluster_pass import cond, service, snap

CHAT, NIGHTLY = ("default", "chat"), ("default", "nightly")


def dumped(sd: ServiceDecision) -> dict[str, Any]:
    return sd.status.model_dump(by_alias=True, mode="json", exclude_none=True)


def chat(rate: float = 4.2, **spec: Any) -> dict[str, Any]:
    """Interactive, on A100s only, with the plan in force in status: 4.2 req/s take two A100
    replicas at 1.02 replicas of load, 0.18 replicas below 60% each pass (≈ 0.8 req/s)."""
    body = service("chat", rate, "t0", pools=["a100-80gb"], **spec)
    body["status"] = dumped(plan_cluster(snap(services=[body])).services[CHAT])
    return body


def nightly(rate: float = 0.2, *, served_by: str | None = "chat", **batch: Any) -> dict[str, Any]:
    spec = {"servedBy": served_by, **batch} if served_by else batch
    return service("nightly", rate, "t1", priority="Batch", batch=spec)


def plan(*bodies: dict[str, Any], **kw: Any) -> ClusterDecision:
    return plan_cluster(snap(services=list(bodies), **kw))


def test_spare_capacity_of_served_by_reduces_own_replicas() -> None:
    lender = chat()
    alone = plan(lender, nightly(served_by=None, backlogRequests=100000)).services[NIGHTLY]
    shared = plan(lender, nightly(backlogRequests=100000)).services[NIGHTLY]
    assert alone.status.batch is not None and shared.status.batch is not None
    assert alone.status.batch.spare_rate == 0 and alone.status.batch.reserved_rate == 1.36
    spare = shared.status.batch.spare_rate
    assert spare == pytest.approx(0.82, abs=0.01)  # (0.6 · 2 − 1.019) × 4.53 req/s per A100
    assert shared.status.batch.reserved_rate == pytest.approx(
        0.2 + 100000 / 86400 - spare, abs=2e-3
    )  # both rounded to 3 digits
    assert sum(replicas(shared).values()) < sum(replicas(alone).values())
    assert shared.status.cost_per_hour < alone.status.cost_per_hour  # type: ignore[operator]
    status, reason, message = cond(shared.status, "DeadlineOnTrack")
    assert (status, reason) == ("True", "WithinDeadline")
    assert "backlog 100000 requests drains in 24 h, deadline 24 h" in message
    assert "0.82 req/s from chat's spare capacity, 0.538 req/s reserved" in message
    assert shared.status.batch.drain_seconds is not None
    assert shared.status.batch.drain_seconds <= 86400


def test_backlog_growth_increases_the_reservation() -> None:
    lender = chat()
    rates = []
    for backlog in (30000, 60000, 100000, 200000):
        batch = plan(lender, nightly(backlogRequests=backlog)).services[NIGHTLY].status.batch
        assert batch is not None and batch.backlog_requests == backlog
        rates.append(batch.reserved_rate)
    assert rates[0] == 0  # the spare capacity drains 30000 requests in 13.4 h
    assert rates == sorted(rates) and rates[-1] > rates[1] > 0
    needed = 0.2 + 200000 / 86400 - batch.spare_rate
    assert needed <= rates[-1] <= needed + 0.01  # rounded up to 3 significant digits


def test_zero_requirement_gives_zero_replicas_and_ready() -> None:
    sd = plan(chat(), nightly(backlogRequests=30000)).services[NIGHTLY]
    assert sd.target is not None and not any(sd.target.values()) and sd.apply == {}
    assert cond(sd.status, "Ready")[:2] == ("True", "Serving")
    assert cond(sd.status, "DeadlineOnTrack")[:2] == ("True", "WithinDeadline")
    assert sd.status.batch is not None and sd.status.batch.drain_seconds == 48387
    assert sd.events == []


@pytest.mark.parametrize(
    ("lender", "reason", "named"),
    [
        (None, "ServedByNotFound", "has no such LLMService"),
        (service("chat", 1, "t0", priority="Batch"), "ServedByNotInteractive", "priority Batch"),
        (
            service("chat", 1, "t0", model={"name": "meta-llama/Llama-2-13b-hf"}),
            "ServedByOtherModel",
            "serves 'meta-llama/Llama-2-13b-hf', not 'meta-llama/Llama-2-7b-hf'",
        ),
        (service("chat", 1, "t0", minReplicas=2, maxReplicas=1), "ServedByNotFound", "invalid"),
    ],
)
def test_served_by_problems_plan_without_it_and_say_why(
    lender: dict[str, Any] | None, reason: str, named: str
) -> None:
    without = plan(nightly(served_by=None, backlogRequests=50000)).services[NIGHTLY]
    d = plan(*([lender] if lender else []), nightly(backlogRequests=50000))
    sd = d.services[NIGHTLY]
    status, got, message = cond(sd.status, "DeadlineOnTrack")
    assert (status, got) == ("False", reason)
    assert message.startswith("spec.batch.servedBy names 'chat'") and named in message
    assert "planned without servedBy, 0.779 req/s reserved" in message
    assert replicas(sd) == replicas(without)  # more capacity, never less
    assert [e.reason for e in sd.events] == ["PlanChanged", reason]  # predicted on target
    body = nightly(backlogRequests=50000)
    body["status"] = dumped(sd)
    again = plan(*([lender] if lender else []), body).services[NIGHTLY]
    assert again.events == []  # the Warning is not repeated each pass


def test_observed_waiting_requests_add_to_the_backlog() -> None:
    body = nightly(backlogRequests=1000)
    body["spec"]["workload"]["source"] = "Prometheus"
    pods = [PodLoad(pod="nightly-l4-0", waiting=120), PodLoad(pod="nightly-l4-1", waiting=30.0)]
    obs = ServiceObservation(result=observed(0.5).model_copy(update={"pods": pods}))
    sd = plan(chat(), body, observations={NIGHTLY: obs}).services[NIGHTLY]
    assert sd.status.batch is not None
    assert (sd.status.batch.backlog_requests, sd.status.batch.arrival_rate) == (1150, 0.5)


def test_unserved_reservation_puts_the_deadline_at_risk() -> None:
    """A budget below what the reservation costs: the backlog outlasts the deadline."""
    body = nightly(served_by=None, backlogRequests=100000)
    body["spec"]["budget"] = {"maxCostPerHour": 1.5}
    sd = plan(body).services[NIGHTLY]
    assert sd.status.unserved_fraction is not None and sd.status.unserved_fraction > 0
    status, reason, message = cond(sd.status, "DeadlineOnTrack")
    assert (status, reason) == ("False", "DeadlineAtRisk")
    assert sd.status.batch is not None and sd.status.batch.drain_seconds is not None
    assert sd.status.batch.drain_seconds > 86400
    assert message.startswith("backlog 100000 requests drains in 32.9 h, past the deadline of 24 h")
    assert "1.36 req/s reserved, 23% of it unserved: service budget reached" in message
    assert "DeadlineAtRisk" in [e.reason for e in sd.events]


def test_repeated_passes_leave_status_unchanged() -> None:
    """Once the attainment loop has run (in the first pass of a generation), a pass changes
    nothing."""
    lender = chat()
    body = nightly(backlogRequests=100000)
    for k in range(5):
        sd = plan(lender, body, now=f"2026-11-21T12:00:0{k}Z").services[NIGHTLY]
        if dumped(sd).get("derating") == (body.get("status") or {}).get("derating"):
            break
        body["status"] = dumped(sd)
    again = plan(lender, body, now="2026-11-21T12:00:07Z").services[NIGHTLY]
    assert dumped(again) == body["status"]
    assert again.events == []


def test_unplannable_keeps_the_previous_batch_status() -> None:
    first = plan(chat(), nightly(backlogRequests=100000)).services[NIGHTLY]
    body = nightly(backlogRequests=500)
    body["spec"]["pools"] = ["nonexistent"]
    body["status"] = dumped(first)
    sd = plan(chat(), body).services[NIGHTLY]
    assert sd.apply is None and cond(sd.status, "Ready")[1] == "NoUsablePool"
    assert sd.status.batch == first.status.batch


def test_interactive_again_drops_the_condition() -> None:
    first = plan(nightly(served_by=None, backlogRequests=100)).services[NIGHTLY]
    body = service("nightly", 0.2, "t1")
    body["status"] = dumped(first)
    sd = plan(body).services[NIGHTLY]
    assert sd.status.batch is None
    assert all(c.type != "DeadlineOnTrack" for c in sd.status.conditions)
    assert cond(first.status, "DeadlineOnTrack")[0] == ConditionStatus.TRUE.value
