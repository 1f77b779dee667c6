"""The real Prometheus path: simulated vLLM pods → Prometheus (Debian's binary) → observe_service.

No Kubernetes cluster: `gpumix sim serve` runs two simulated vLLM pods on 127.0.0.1, a
Prometheus started here scrapes their /metrics every second with the labels the in-cluster
relabeling produces (namespace, gpumix_io_service, pod), and the test drives traffic into the
pods' /v1/completions. It checks that the observed rate and histogram follow a change in traffic,
and that a stopped Prometheus makes the observation "unknown" while the decision keeps the last
good workload. With `gpumix route` in front of the pods, the observed histogram is the router's
exact joint histogram of what was sent. Prometheus comes from `hack/prometheus install` (the
Makefile's `test` runs it). The pods, router, Prometheus and traffic are in observe_harness.py.

Tolerance: arrivals are evenly spaced (no Poisson noise), so a 10 s window holds the sent
requests ± 1; `rate()` over 1 s scrapes extrapolates to the window edges, which can add or
drop up to about one scrape interval's worth (10%). Each observed rate must be within 25% of the
sent rate and their ratio within 1.6–2.4 for a doubling. The same extrapolation scales every
router bucket alike (one target, the same scrapes), so the router's shares are exact and only its
count is off: scaled up by at most window / (window − 2 scrape intervals).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from observe_harness import (
    PrometheusProcess,
    Traffic,
    complete,
    router,
    running_prometheus,
    sim_pods,
)

from gpumix.api.workload import Workload
from gpumix.observe import (
    ObservationUnknown,
    ObservedWorkload,
    PrometheusSource,
    ServiceSelector,
    UnknownReason,
    decide_workload,
    observe_service,
)

pytestmark = pytest.mark.e2e

NAMESPACE, SERVICE = "e2e", "chat"
IN_EDGES = [1, 201, 501, 1001, 2001]
OUT_EDGES = [1, 51, 101, 201, 501]
WINDOW_S = 10.0
PHASE_S = 12.0


@pytest.fixture
def pods() -> Iterator[list[dict[str, str]]]:
    """Two simulated a10g vLLM pods (observe_harness.sim_pods)."""
    with sim_pods("a10g=2") as found:
        yield found


@pytest.fixture
def prometheus(tmp_path: Path, pods: list[dict[str, str]]) -> Iterator[PrometheusProcess]:
    with running_prometheus(tmp_path, pods, namespace=NAMESPACE, service=SERVICE) as prom:
        yield prom


def _observe(
    source: PrometheusSource, window_s: float = WINDOW_S, input_edges: list[int] = IN_EDGES
) -> ObservedWorkload | ObservationUnknown:
    sel = ServiceSelector(namespace=NAMESPACE, service=SERVICE)
    return observe_service(source, sel, input_edges, OUT_EDGES, now=time.time(), window_s=window_s)


def test_observed_workload_follows_traffic_and_unknown_keeps_last_good(
    pods: list[dict[str, str]], prometheus: PrometheusProcess, request: pytest.FixtureRequest
) -> None:
    started = time.monotonic()
    source = PrometheusSource(prometheus.url, timeout_s=2)
    request.addfinalizer(source.close)
    with Traffic([p["url"] for p in pods]) as traffic:
        traffic.set(rate=4.0, prompt=100, output=40)  # bucket (0, 0)
        time.sleep(PHASE_S)
        low = _observe(source)
        traffic.set(rate=8.0, prompt=700, output=150)  # bucket (2, 2)
        time.sleep(PHASE_S)
        high = _observe(source)
    assert not traffic.errors, traffic.errors[:3]
    assert isinstance(low, ObservedWorkload), low
    assert isinstance(high, ObservedWorkload), high
    assert low.request_rate == pytest.approx(4.0, rel=0.25)
    assert high.request_rate == pytest.approx(8.0, rel=0.25)
    assert 1.6 <= high.request_rate / low.request_rate <= 2.4
    assert low.histogram is not None and high.histogram is not None
    assert np.asarray(low.histogram)[0, 0] > 0.9
    assert np.asarray(high.histogram)[2, 2] > 0.9
    assert high.mean_input_tokens == pytest.approx(700, rel=0.05)
    assert high.ttft_seconds is not None and high.tpot_seconds is not None
    assert [p.pod for p in high.pods] == sorted(p["pod"] for p in pods)
    assert all(p.kv_usage is not None for p in high.pods)

    prometheus.stop()
    gone = _observe(source)
    assert isinstance(gone, ObservationUnknown)
    assert gone.reason == UnknownReason.PROMETHEUS_UNAVAILABLE
    edges = {"inputEdges": IN_EDGES, "outputEdges": OUT_EDGES}
    spec = Workload.model_validate(
        {"source": "Prometheus", "requestRate": 1.0, "histogram": [[1] * 4] * 4, **edges}
    )
    decision = decide_workload(spec, high, gone, now=time.time())
    assert decision.workload.request_rate == high.request_rate  # the last good, not zero
    assert decision.workload.histogram == high.histogram
    assert decision.condition is not None
    assert decision.condition.reason == "PrometheusUnavailable"
    assert time.monotonic() - started < 60


SENT = {(100, 40): 6, (700, 150): 3, (100, 300): 2, (1500, 20): 4}
"""(prompt, output) tokens → requests, in the buckets (0, 0), (2, 2), (0, 3), (3, 0): long
prompts with short answers and short prompts with long ones, which independence of the two
marginals would smear over all four corners."""


def _send_all(url: str, sizes: dict[tuple[int, int], int]) -> None:
    jobs = [size for size, n in sizes.items() for _ in range(n)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda size: complete(url, *size), jobs))


def test_router_joint_histogram_is_observed_exactly(
    pods: list[dict[str, str]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    started = time.monotonic()
    table = [[1.0] * (len(OUT_EDGES) - 1) for _ in IN_EDGES[:-1]]
    routing = {
        "inputEdges": IN_EDGES,
        "outputEdges": OUT_EDGES,
        "pools": {"a10g": {"replicas": len(pods), "share": table}},
    }
    engines = [("a10g", p["url"]) for p in pods]
    with (
        router(tmp_path, routing, engines) as front,
        running_prometheus(
            tmp_path, pods, namespace=NAMESPACE, service=SERVICE, routers=[front]
        ) as prom,
    ):
        source = PrometheusSource(prom.url, timeout_s=2)
        request.addfinalizer(source.close)
        # The router creates a bucket's series at its first request, which increase() cannot
        # see: two requests per bucket before the window make every series exist in it (and
        # keep Prometheus' extrapolation towards zero from treating the buckets differently).
        _send_all(front["url"], dict.fromkeys(SENT, 2))
        time.sleep(2.0)
        window_start = time.time()
        time.sleep(2.0)
        _send_all(front["url"], SENT)
        time.sleep(2.5)
        window_s = float(int(time.time() - window_start))
        obs = _observe(source, window_s)
        shifted = _observe(source, window_s, input_edges=[1, 201, 601, 1001, 2001])
    assert isinstance(obs, ObservedWorkload), obs
    expected = np.zeros((len(IN_EDGES) - 1, len(OUT_EDGES) - 1))
    expected[0, 0], expected[2, 2], expected[0, 3], expected[3, 0] = SENT.values()
    assert obs.histogram_source == "router", obs.router_fallback
    assert obs.histogram == pytest.approx(expected / expected.sum(), abs=1e-9)
    assert expected.sum() <= obs.requests <= expected.sum() * window_s / (window_s - 2)
    # Edges the router does not route on (the grid changed): vLLM's marginals instead.
    assert isinstance(shifted, ObservedWorkload), shifted
    assert shifted.histogram_source == "vllm-marginals"
    assert shifted.router_fallback is not None
    assert "input_from=501" in shifted.router_fallback
    assert time.monotonic() - started < 60
