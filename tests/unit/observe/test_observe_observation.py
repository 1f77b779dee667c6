"""observe_service against canned PromQL answers: a fake MetricsSource, no Prometheus."""

import math

import numpy as np
import pytest

from gpumix.observe import (
    MetricsUnavailableError,
    ObservationUnknown,
    ObservedWorkload,
    QueryFailedError,
    Sample,
    ServiceSelector,
    UnknownReason,
    observe_service,
    promql,
)

SEL = ServiceSelector(namespace="default", service="chat")
IN, OUT = [1, 201, 1001], [1, 101, 501]
W = 60.0


def _buckets(pod: str, cum: list[tuple[float, float]]) -> list[Sample]:
    return [Sample({"pod": pod, "le": str(le)}, c) for le, c in cum]


def canned() -> dict[str, list[Sample]]:
    inf = float("inf")
    return {
        promql.targets(SEL): [Sample({"pod": "a"}, 1), Sample({"pod": "b"}, 1)],
        promql.request_rate(SEL, W): [Sample({}, 2.0)],
        promql.backlog_growth(SEL, W): [Sample({}, 0.25)],
        promql.token_buckets(promql.PROMPT_TOKENS, SEL, W): _buckets(
            "a", [(200, 60), (1000, 60), (inf, 60)]
        )
        + _buckets("b", [(200, 0), (1000, 60), (inf, 60)]),
        promql.token_buckets(promql.OUTPUT_TOKENS, SEL, W): _buckets(
            "a", [(100, 60), (500, 60), (inf, 60)]
        )
        + _buckets("b", [(100, 0), (500, 60), (inf, 60)]),
        promql.token_mean(promql.PROMPT_TOKENS, SEL, W): [Sample({}, 400)],
        promql.token_mean(promql.OUTPUT_TOKENS, SEL, W): [Sample({}, 200)],
        promql.latency_mean(promql.TTFT, SEL, W): [Sample({}, 0.2)],
        promql.latency_mean(promql.ITL, SEL, W): [Sample({}, 0.05)],
        promql.latency_quantile(promql.ITL, 0.9, SEL, W): [Sample({}, math.nan)],
        promql.per_pod_gauge(promql.KV_USAGE, SEL): [
            Sample({"pod": "a"}, 0.5),
            Sample({"pod": "b"}, 0.7),
        ],
        promql.per_pod_gauge((promql.RUNNING,), SEL): [Sample({"pod": "a"}, 3)],
        promql.per_pod_gauge((promql.WAITING,), SEL): [Sample({"pod": "a"}, 0)],
    }


class FakeSource:
    def __init__(self, answers: dict[str, list[Sample]], error: Exception | None = None) -> None:
        self.answers = answers
        self.error = error
        self.queries: list[str] = []

    def query(self, q: str) -> list[Sample]:
        self.queries.append(q)
        if self.error is not None:
            raise self.error
        return self.answers.get(q, [])


def observe(answers: dict[str, list[Sample]], **kw: object) -> object:
    return observe_service(FakeSource(answers), SEL, IN, OUT, now=100.0, window_s=W, **kw)  # type: ignore[arg-type]


def test_observed_workload() -> None:
    obs = observe(canned())
    assert isinstance(obs, ObservedWorkload)
    assert obs.request_rate == pytest.approx(2.25)  # finished + queue growth
    assert obs.finished_rate == 2.0
    assert obs.requests == 120
    # per-pod independence keeps the routing's dependence: small on a, large on b
    assert np.asarray(obs.histogram) == pytest.approx(np.array([[0.5, 0.0], [0.0, 0.5]]))
    assert obs.ttft_seconds == 0.2
    assert obs.tpot_seconds == 0.05
    assert obs.tpot_p90_seconds is None  # NaN is not a number we plan with
    assert obs.kv_utilisation == pytest.approx(0.6)
    assert [p.pod for p in obs.pods] == ["a", "b"]
    assert obs.histogram_source == "vllm-marginals"
    assert obs.router_fallback == f"no {promql.ROUTER_COMPLETED} series"
    assert "router histogram not used" in obs.summary()


def test_prior_is_raked() -> None:
    obs = observe(canned(), prior=[[1, 1], [1, 1]])
    assert isinstance(obs, ObservedWorkload)
    assert np.asarray(obs.histogram) == pytest.approx(np.full((2, 2), 0.25), abs=1e-3)


def _routed(*cells: tuple[str, str, float]) -> list[Sample]:
    return [Sample({"input_from": i, "output_from": o}, n) for i, o, n in cells]


def test_router_joint_histogram_is_preferred() -> None:
    """The routers' counts are the joint histogram as is: no independence, no raking (the pods'
    marginals say the opposite: small prompts with small answers)."""
    answers = canned()
    answers[promql.router_buckets(SEL, W)] = _routed(
        ("1", "101", 90), ("201", "1", 30), ("201", "101", 0), ("64", "1", 0)
    )  # ("64", "1"): a bucket of a former grid, no request in the window
    obs = observe(answers, prior=[[1, 1], [1, 1]])
    assert isinstance(obs, ObservedWorkload)
    assert obs.histogram == [[0.0, 0.75], [0.25, 0.0]]
    assert obs.requests == 120
    assert obs.histogram_source == "router"
    assert obs.router_fallback is None
    assert obs.summary().endswith("histogram from router")


@pytest.mark.parametrize(
    ("cells", "why"),
    [
        ([("1", "1", 50), ("64", "1", 10)], "input_from=64 output_from=1 is not on the grid"),
        ([("1", "501", 5)], "output_from=501 is not on the grid"),  # the last edge bounds
        ([("1", "1", 0.0), ("201", "101", math.nan)], "no request through a router"),
    ],
)
def test_router_histogram_off_grid_or_empty_falls_back(
    cells: list[tuple[str, str, float]], why: str
) -> None:
    answers = canned()
    answers[promql.router_buckets(SEL, W)] = _routed(*cells)
    obs = observe(answers)
    assert isinstance(obs, ObservedWorkload)
    assert np.asarray(obs.histogram) == pytest.approx(np.array([[0.5, 0.0], [0.0, 0.5]]))
    assert obs.requests == 120
    assert obs.histogram_source == "vllm-marginals"
    assert obs.router_fallback is not None and why in obs.router_fallback


@pytest.mark.parametrize(
    ("drop", "reason"),
    [
        (promql.targets(SEL), UnknownReason.NO_TARGETS),
        (promql.request_rate(SEL, W), UnknownReason.NO_SERIES),
        (promql.token_buckets(promql.OUTPUT_TOKENS, SEL, W), UnknownReason.NO_SERIES),
    ],
)
def test_missing_series_is_unknown_not_zero(drop: str, reason: UnknownReason) -> None:
    answers = canned()
    del answers[drop]
    obs = observe(answers)
    assert isinstance(obs, ObservationUnknown)
    assert obs.reason == reason
    assert "chat" in obs.message


def test_a_target_down_is_unknown() -> None:
    answers = canned()
    answers[promql.targets(SEL)] = [Sample({"pod": "a"}, 1), Sample({"pod": "b"}, 0)]
    obs = observe(answers)
    assert isinstance(obs, ObservationUnknown)
    assert obs.reason == UnknownReason.TARGETS_DOWN
    assert "1 of 2" in obs.message and "b" in obs.message


def test_zero_traffic_is_a_zero_rate_without_histogram() -> None:
    answers = canned()
    answers[promql.request_rate(SEL, W)] = [Sample({}, 0.0)]
    answers[promql.backlog_growth(SEL, W)] = [Sample({}, -0.1)]
    for metric in (promql.PROMPT_TOKENS, promql.OUTPUT_TOKENS):
        q = promql.token_buckets(metric, SEL, W)
        answers[q] = [Sample(s.labels, 0.0) for s in answers[q]]
    obs = observe(answers)
    assert isinstance(obs, ObservedWorkload)
    assert obs.request_rate == 0
    assert obs.histogram is None
    assert obs.histogram_source is None


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (MetricsUnavailableError("connection refused"), UnknownReason.PROMETHEUS_UNAVAILABLE),
        (QueryFailedError("HTTP 400"), UnknownReason.QUERY_FAILED),
    ],
)
def test_backend_errors_are_unknown(error: Exception, reason: UnknownReason) -> None:
    obs = observe_service(FakeSource({}, error), SEL, IN, OUT, now=1.0, window_s=W)
    assert isinstance(obs, ObservationUnknown)
    assert obs.reason == reason


def test_promql_has_fallbacks_and_selector() -> None:
    q = promql.per_pod_gauge(promql.KV_USAGE, SEL)
    assert "vllm:kv_cache_usage_perc{" in q and " or " in q and "vllm:gpu_cache_usage_perc{" in q
    q = promql.latency_mean(promql.ITL, SEL, W)
    assert "vllm:inter_token_latency_seconds_sum" in q
    assert "vllm:time_per_output_token_seconds_sum" in q
    assert 'gpumix_io_service="chat"' in q and 'namespace="default"' in q
    assert "[60s]" in q
    tricky = ServiceSelector(namespace="n", service='a"b')
    assert 'gpumix_io_service="a\\"b"' in tricky.matchers()


def test_router_query_selects_the_router_pods() -> None:
    q = promql.router_buckets(ServiceSelector("default", "chat", extra={"gpumix_io_pool": "x"}), W)
    assert q == (
        "sum by (input_from, output_from) (increase(gpumix_router_completed_requests_total"
        '{gpumix_io_router="chat",namespace="default"}[60s]))'
    )
