"""The planner pass with `source: Prometheus`: plans with the observed workload, the last good
one when nothing can be observed, the spec when there is none — never with zero."""

from typing import Any

import pytest

from gpumix.api import ConditionStatus
from gpumix.observe import ObservationUnknown, ObservedWorkload, UnknownReason
from gpumix.reconcile.clock import parse_time
from gpumix.reconcile.cluster import ClusterDecision, plan_cluster
from gpumix.reconcile.service import ServiceDecision
from gpumix.reconcile.workload import ServiceObservation, round_up

from .test_cluster_pass import NOW, cond, service, snap

KEY = ("default", "chat")
IN = [1, 256, 512, 1024, 2048, 3072]
OUT = [1, 64, 128, 256, 512, 1001]
T = parse_time(NOW)


def observed(rate: float, at: float = T - 5) -> ObservedWorkload:
    """Prompts of 256–511 and outputs of 64–127 tokens only."""
    histogram = [[1.0 if (i, j) == (1, 1) else 0.0 for j in range(5)] for i in range(5)]
    return ObservedWorkload(
        at=at, window_seconds=300, request_rate=rate, finished_rate=rate, requests=300 * rate,
        input_edges=IN, output_edges=OUT, histogram=histogram, ttft_seconds=0.12345678,
        tpot_seconds=0.03,
    )  # fmt: skip


def unavailable(at: float = T) -> ObservationUnknown:
    return ObservationUnknown(
        at=at, reason=UnknownReason.PROMETHEUS_UNAVAILABLE, message="Prometheus: refused"
    )


def prometheus_service(rate: float = 0.5, **kw: Any) -> dict[str, Any]:
    body = service("chat", rate, "t0", **kw)
    body["spec"]["workload"]["source"] = "Prometheus"
    return body


def plan(body: dict[str, Any], obs: ServiceObservation | None) -> ClusterDecision:
    observations = {KEY: obs} if obs is not None else {}
    return plan_cluster(snap(services=[body], observations=observations))


def replicas(sd: ServiceDecision) -> dict[str, int]:
    assert sd.target is not None
    return {p: n for p, n in sd.target.items() if n}


def test_observed_rate_and_histogram_are_planned_and_shown() -> None:
    d = plan(prometheus_service(), ServiceObservation(result=observed(3.0)))
    sd = d.services[KEY]
    assert replicas(sd) == {"a10g": 1}  # the spec's 0.5 req/s of chat traffic would differ
    assert cond(sd.status, "WorkloadObserved")[:2] == ("True", "Observed")
    wl = sd.status.workload
    assert wl is not None
    assert (wl.source, wl.origin, wl.request_rate) == ("Prometheus", "observed", 3.0)
    assert wl.observed_at is not None and wl.observed_at.timestamp() == T - 5
    assert (wl.ttft_seconds, wl.tpot_seconds) == (0.1235, 0.03)
    assert d.last_good[KEY].request_rate == 3.0
    bigger = plan(prometheus_service(), ServiceObservation(result=observed(6.0))).services[KEY]
    assert sum(replicas(bigger).values()) > sum(replicas(sd).values())
    assert bigger.status.cost_per_hour > sd.status.cost_per_hour  # type: ignore[operator]


def test_unknown_plans_with_the_last_good_observation_not_zero() -> None:
    good = plan(prometheus_service(), ServiceObservation(result=observed(6.0))).services[KEY]
    body = prometheus_service()
    body["status"] = good.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    d = plan(body, ServiceObservation(result=unavailable(), last_good=observed(6.0)))
    sd = d.services[KEY]
    assert replicas(sd) == replicas(good)
    status, reason, message = cond(sd.status, "WorkloadObserved")
    assert (status, reason) == ("False", "PrometheusUnavailable")
    assert "last observed workload from 5 s ago (6 req/s), not zero" in message
    assert sd.status.workload is not None
    assert (sd.status.workload.origin, sd.status.workload.request_rate) == ("last-observed", 6.0)
    assert [e.reason for e in sd.events] == ["PrometheusUnavailable"]  # once, on the change
    assert d.last_good[KEY].request_rate == 6.0


def test_after_a_restart_with_prometheus_down_the_last_observation_comes_from_status() -> None:
    """The operator restarted (nothing in memory) and Prometheus is down: plan with what status
    says was observed, not with the spec's 0.5 req/s."""
    good = plan(prometheus_service(), ServiceObservation(result=observed(6.0))).services[KEY]
    assert good.status.workload is not None and good.status.workload.observed_rate == 6.0
    body = prometheus_service()
    body["status"] = good.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    d = plan(body, ServiceObservation(result=unavailable()))
    sd = d.services[KEY]
    assert replicas(sd) == replicas(good)
    assert sd.status.workload is not None
    assert (sd.status.workload.origin, sd.status.workload.request_rate) == ("last-observed", 6.0)
    assert "(6 req/s), not zero" in cond(sd.status, "WorkloadObserved")[2]
    assert d.last_good[KEY].request_rate == 6.0
    stale = body["status"]["workload"] | {"observedAt": "2026-11-21T09:00:00Z"}
    body["status"] = body["status"] | {"workload": stale}  # 3 h old: past the 1 h limit
    old = plan(body, ServiceObservation(result=unavailable())).services[KEY]
    assert old.status.workload is not None and old.status.workload.origin == "spec"


def test_unknown_without_a_good_observation_plans_the_spec() -> None:
    spec_plan = replicas(plan_cluster(snap(services=[service("chat", 5.5, "t0")])).services[KEY])
    sd = plan(prometheus_service(5.5), ServiceObservation(result=unavailable())).services[KEY]
    assert replicas(sd) == spec_plan
    assert cond(sd.status, "WorkloadObserved")[1] == "PrometheusUnavailable"
    assert sd.status.workload is not None and sd.status.workload.origin == "spec"
    assert sd.status.workload.observed_at is None


def test_without_prometheus_the_spec_is_planned_and_the_flag_named() -> None:
    spec_plan = replicas(plan_cluster(snap(services=[service("chat", 5.5, "t0")])).services[KEY])
    d = plan(prometheus_service(5.5), None)
    sd = d.services[KEY]
    assert replicas(sd) == spec_plan
    status, reason, message = cond(sd.status, "WorkloadObserved")
    assert (status, reason) == ("False", "PrometheusNotConfigured")
    assert "--prometheus-url" in message
    assert d.last_good == {}


def test_static_services_have_no_workload_condition() -> None:
    first = plan(prometheus_service(5.5), None).services[KEY]
    body = service("chat", 5.5, "t0")  # switched back to Static
    body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    sd = plan_cluster(snap(services=[body])).services[KEY]
    assert all(c.type != "WorkloadObserved" for c in sd.status.conditions)
    assert sd.status.workload is not None
    assert (sd.status.workload.source, sd.status.workload.origin) == ("Static", "spec")


def test_a_repeated_observation_leaves_status_unchanged() -> None:
    """Passes between two observations must not rewrite status (the loop would never settle)."""
    obs = ServiceObservation(result=unavailable(), last_good=observed(3.0))
    first = plan(prometheus_service(), obs).services[KEY]
    body = prometheus_service()
    body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    again = plan_cluster(
        snap(services=[body], observations={KEY: obs}, now="2026-11-21T12:00:07Z")
    ).services[KEY]
    dump = again.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert dump == body["status"]
    assert again.events == []


def test_the_condition_is_set_even_when_planning_fails() -> None:
    body = prometheus_service(pools=["nonexistent"])
    sd = plan(body, ServiceObservation(result=observed(3.0))).services[KEY]
    assert sd.apply is None
    assert cond(sd.status, "Ready")[1] == "NoUsablePool"
    assert cond(sd.status, "WorkloadObserved")[0] == ConditionStatus.TRUE.value


@pytest.mark.parametrize(
    ("rate", "up"), [(3.0, 3.0), (6.0123, 6.02), (0.0, 0.0), (1234.5, 1240.0), (0.01234, 0.0124)]
)
def test_observed_rates_round_up(rate: float, up: float) -> None:
    assert round_up(rate) == pytest.approx(up)
