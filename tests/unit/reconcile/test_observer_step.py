"""The planner pass's observation step (gpumix.operator.observing) with a fake MetricsSource."""

import asyncio
import math
import threading
import time
from typing import Any

import pytest

from gpumix.cli import build_parser
from gpumix.observe import (
    MetricsUnavailableError,
    ObservationUnknown,
    ObservedWorkload,
    Sample,
    UnknownReason,
)
from gpumix.operator.observing import Observer, observer_from_args
from gpumix.reconcile.cluster import Snapshot
from gpumix.render.names import labels_for

from .test_cluster_pass import service, snap


class Source:
    def __init__(self) -> None:
        self.queries: list[str] = []
        self.ranges: list[tuple[str, float, float, float]] = []
        self.error: Exception | None = None

    def query(self, q: str) -> list[Sample]:
        self.queries.append(q)
        if self.error is not None:
            raise self.error
        return []  # no scrape targets: unknown, never zero

    def query_range(
        self, q: str, start: float, end: float, step_s: float
    ) -> list[tuple[float, float]]:
        self.ranges.append((q, start, end, step_s))
        if self.error is not None:
            raise self.error
        return [(end - step_s, 2.0), (end, 3.0)]  # only the last two steps have data


def prometheus(name: str) -> dict[str, Any]:
    body = service(name, 1.0, "t0")
    body["spec"]["workload"]["source"] = "Prometheus"
    return body


def attach(observer: Observer, *bodies: dict[str, Any]) -> Snapshot:
    return asyncio.run(observer.attach(snap(services=list(bodies))))


def test_without_a_source_nothing_is_observed() -> None:
    assert attach(Observer(None), prometheus("chat")).observations == {}


def test_only_prometheus_services_are_observed_and_results_reused_until_stale() -> None:
    source = Source()
    observer = Observer(source, refresh_s=60)
    s = attach(observer, prometheus("chat"), service("static", 1.0, "t0"))
    assert list(s.observations) == [("default", "chat")]
    result = s.observations[("default", "chat")].result
    assert isinstance(result, ObservationUnknown)
    assert result.reason == UnknownReason.NO_TARGETS
    assert all('gpumix_io_service="chat"' in q for q in source.queries)
    n = len(source.queries)
    assert attach(observer, prometheus("chat")).observations[("default", "chat")].result == result
    assert len(source.queries) == n  # a pass within refresh_s asks nothing
    changed = prometheus("chat")
    changed["spec"]["workload"]["inputEdges"][-1] = 4000
    attach(observer, changed)
    assert len(source.queries) > n  # the spec's grid changed: observed again


def test_an_unreachable_prometheus_is_asked_once_per_pass() -> None:
    source = Source()
    source.error = MetricsUnavailableError("refused")
    s = attach(Observer(source), prometheus("a"), prometheus("b"), prometheus("c"))
    assert len(source.queries) == 1
    reasons = {k[1]: o.result.reason for k, o in s.observations.items()}  # type: ignore[union-attr]
    assert reasons == dict.fromkeys("abc", UnknownReason.PROMETHEUS_UNAVAILABLE)


def test_last_good_is_remembered_and_forgotten_with_the_service() -> None:
    observer = Observer(Source(), refresh_s=0)
    good = ObservedWorkload(
        at=time.time(), window_seconds=60, request_rate=2.0, finished_rate=2.0, requests=120,
        input_edges=[1, 2], output_edges=[1, 2], histogram=[[1.0]],
    )  # fmt: skip
    observer.remember({("default", "chat"): good})
    s = attach(observer, prometheus("chat"))
    assert s.observations[("default", "chat")].last_good == good
    attach(observer)
    assert observer.last_good == {}


def test_the_observation_runs_off_the_event_loop() -> None:
    loop_thread: list[object] = []
    query_thread: list[object] = []

    class Probe(Source):
        def query(self, q: str) -> list[Sample]:
            query_thread.append(threading.current_thread())
            return super().query(q)

    async def run() -> None:
        loop_thread.append(threading.current_thread())
        await Observer(Probe()).attach(snap(services=[prometheus("chat")]))

    asyncio.run(run())
    assert query_thread and all(t is not loop_thread[0] for t in query_thread)


@pytest.mark.parametrize("flag", [[], ["--prometheus-url", "http://prom:9090"]])
def test_run_flags(flag: list[str]) -> None:
    args = build_parser().parse_args(["run", "--interval", "10", *flag])
    observer = observer_from_args(args)
    assert (observer.source is None) == (not flag)
    assert (observer.window_s, observer.refresh_s) == (300.0, 8.0)


def forecasting(name: str, step: int = 300) -> dict[str, Any]:
    body = prometheus(name)
    body["spec"]["scaling"] = {"forecast": {"enabled": True, "stepSeconds": step}}
    return body


def test_rate_history_is_fetched_for_forecasting_services_once_per_step() -> None:
    source = Source()
    observer = Observer(source, refresh_s=0)
    s = attach(observer, forecasting("chat"), prometheus("plain"))
    assert len(source.ranges) == 1
    promql, start, end, step = source.ranges[0]
    assert 'gpumix_io_service="chat"' in promql
    assert step == 300 and end % 300 == 0 and end <= time.time()
    assert (end - start) / step + 1 == 576  # two seasons (days) of 5-minute steps
    history = s.observations[("default", "chat")].history
    assert history is not None and history.points == 2
    assert history.values[-2:] == (2.0, 3.0)
    assert math.isnan(history.values[0])  # no data is NaN, never 0
    assert s.observations[("default", "plain")].history is None
    attach(observer, forecasting("chat"), prometheus("plain"))
    assert len(source.ranges) == 1  # same step: the history is reused
    attach(observer, forecasting("chat", step=600))
    assert len(source.ranges) == 2  # new settings: fetched again


def test_history_survives_an_unreachable_prometheus() -> None:
    source = Source()
    observer = Observer(source, refresh_s=0)
    first = attach(observer, forecasting("chat")).observations[("default", "chat")]
    source.error = MetricsUnavailableError("refused")
    time.sleep(0.01)
    observer._history[("default", "chat")] = (
        observer._history[("default", "chat")][0],
        first.history.model_copy(update={"end": 0.0}),  # type: ignore[union-attr]
    )  # stale: the next pass refetches, and fails
    kept = attach(observer, forecasting("chat")).observations[("default", "chat")]
    assert len(source.ranges) == 2
    assert kept.history is not None and kept.history.values == first.history.values  # type: ignore[union-attr]
    assert kept.result.reason == UnknownReason.PROMETHEUS_UNAVAILABLE  # type: ignore[union-attr]


def test_the_longest_service_name_is_selected_by_the_label_value_its_pods_carry() -> None:
    """63 characters, the most the API admits (a label value's limit: longer names are refused
    at apply, tests/unit/test_api_bounds.py)."""
    name = "a-very-long-service-name-" + "x" * 38
    source = Source()
    attach(Observer(source), prometheus(name))
    value = labels_for(name)["gpumix.io/service"]
    assert len(name) == 63 == len(value)
    assert source.queries and all(f'gpumix_io_service="{value}"' in q for q in source.queries)
