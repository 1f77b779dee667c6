"""decide_workload: no data is never zero load."""

from gpumix.api.base import ConditionStatus
from gpumix.api.workload import Workload
from gpumix.observe import (
    CONDITION_TYPE,
    ObservationUnknown,
    ObservedWorkload,
    UnknownReason,
    decide_workload,
)

EDGES = {"inputEdges": [1, 256, 512], "outputEdges": [1, 64, 128]}


def spec(source: str = "Prometheus") -> Workload:
    body = {"source": source, "requestRate": 5.5, "overProvision": 0.1}
    return Workload.model_validate({**body, "histogram": [[1, 1], [1, 1]], **EDGES})


def observed(rate: float, at: float, histogram: list[list[float]] | None) -> ObservedWorkload:
    return ObservedWorkload(
        at=at, window_seconds=300, request_rate=rate, finished_rate=rate, requests=rate * 300,
        input_edges=[1, 256, 512], output_edges=[1, 64, 128], histogram=histogram,
    )  # fmt: skip


UNAVAILABLE = ObservationUnknown(
    at=1000.0, reason=UnknownReason.PROMETHEUS_UNAVAILABLE, message="Prometheus: refused"
)


def test_static_spec_is_planned_as_is() -> None:
    d = decide_workload(spec("Static"), None, None, now=0)
    assert d.workload == spec("Static")
    assert d.origin == "spec"
    assert d.condition is None


def test_observation_replaces_rate_and_histogram_keeps_head_room() -> None:
    obs = observed(12.0, 990.0, [[0.7, 0.1], [0.1, 0.1]])
    d = decide_workload(spec(), None, obs, now=1000)
    assert d.workload.request_rate == 12.0
    assert d.workload.histogram == [[0.7, 0.1], [0.1, 0.1]]
    assert d.workload.over_provision == 0.1
    assert d.origin == "observed"
    assert d.condition is not None
    assert (d.condition.type, d.condition.status, d.condition.reason) == (
        CONDITION_TYPE, ConditionStatus.TRUE, "Observed",
    )  # fmt: skip
    assert d.last_good == obs


def test_prometheus_down_keeps_the_last_good_workload_not_zero() -> None:
    last = observed(12.0, 900.0, [[0.7, 0.1], [0.1, 0.1]])
    d = decide_workload(spec(), last, UNAVAILABLE, now=1000)
    assert d.workload.request_rate == 12.0  # not 0, not the spec's 5.5
    assert d.workload.histogram == [[0.7, 0.1], [0.1, 0.1]]
    assert d.origin == "last-observed"
    assert d.condition is not None
    assert d.condition.status == ConditionStatus.FALSE
    assert d.condition.reason == "PrometheusUnavailable"
    assert "last observed workload from 100 s ago (12 req/s)" in d.condition.message
    assert d.last_good == last


def test_unknown_without_a_recent_observation_falls_back_to_the_spec() -> None:
    for last in (None, observed(12.0, 0.0, [[1, 0], [0, 0]])):
        d = decide_workload(spec(), last, UNAVAILABLE, now=10_000, max_age_s=3600)
        assert d.workload == spec()
        assert d.origin == "spec"
        assert d.condition is not None
        assert d.condition.reason == "PrometheusUnavailable"
        assert "spec.workload (5.5 req/s)" in d.condition.message


def test_idle_service_keeps_its_histogram() -> None:
    last = observed(12.0, 900.0, [[0.7, 0.1], [0.1, 0.1]])
    idle = observed(0.0, 990.0, None)
    d = decide_workload(spec(), last, idle, now=1000)
    assert d.workload.request_rate == 0
    assert d.workload.histogram == [[0.7, 0.1], [0.1, 0.1]]
    assert d.last_good is not None and d.last_good.histogram == last.histogram
    assert d.condition is not None and "histogram kept" in d.condition.message
    first = decide_workload(spec(), None, idle, now=1000)
    assert first.workload.histogram == spec().histogram


def test_observation_on_other_edges_uses_the_spec_histogram() -> None:
    obs = observed(3.0, 990.0, [[1.0, 0.0], [0.0, 0.0]]).model_copy(
        update={"input_edges": [1, 100, 512]}
    )
    d = decide_workload(spec(), None, obs, now=1000)
    assert d.workload.histogram == spec().histogram
    assert d.workload.request_rate == 3.0
