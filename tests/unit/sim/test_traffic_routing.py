"""Arrival processes, size sampling, trace replay and the routers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from sim_helpers import LLAMA7B, pods, poisson

from gpumix.profiles.roofline import RooflineParams
from gpumix.route import RoutingTable
from gpumix.sim import traffic
from gpumix.sim.cluster import PodGroup, build_pods, run
from gpumix.sim.engine import Engine, EngineConfig
from gpumix.sim.request import Request
from gpumix.sim.routing import LeastLoaded, PlanRouter, RoundRobin


def test_poisson_and_gamma_have_the_rate_and_burstiness_asked_for() -> None:
    for times, cv in (
        (traffic.poisson_times(4.0, 20_000, 1), 1.0),
        (traffic.gamma_times(4.0, 3.0, 20_000, 1), 3.0),
    ):
        gaps = np.diff(times)
        assert abs(1 / gaps.mean() - 4.0) / 4.0 < 0.05
        assert abs(gaps.std() / gaps.mean() - cv) / cv < 0.1


def test_diurnal_rate_follows_the_cycle() -> None:
    times = traffic.diurnal_times(5.0, 20_000, 2, period_s=1000.0, amplitude=0.8)
    phase = (times % 1000.0) / 1000.0
    peak = np.sum((phase < 0.1) | (phase > 0.9))
    trough = np.sum((phase > 0.4) & (phase < 0.6))
    assert peak > 4 * trough
    assert abs(len(times) / times[-1] - 5.0) / 5.0 < 0.1


def test_histogram_sizes_stay_in_their_buckets() -> None:
    prompts, outputs = traffic.histogram_sizes([1, 10, 100], [1, 5, 50], [[0, 1], [3, 0]], 4000, 3)
    in_a = (prompts < 10) & (outputs >= 5)
    in_b = (prompts >= 10) & (outputs < 5)
    assert np.all(in_a | in_b)
    assert abs(in_b.mean() - 0.75) < 0.03
    assert prompts.max() < 100 and outputs.max() < 50


def test_trace_replay_scales_the_rate() -> None:
    trace = traffic.load_trace("azure-conv")
    assert len(trace) == 19_366
    assert 5.4 < trace.rate < 5.7
    fast = traffic.trace_requests(trace, rate_scale=2.0)
    assert abs(fast[-1].arrival - trace.duration / 2) < 1e-6
    assert [r.prompt for r in fast[:3]] == [int(x) for x in trace.prompts[:3]]
    code = traffic.load_trace("azure-code")
    assert len(code) == 8_819
    moon = traffic.load_trace("mooncake-conv")
    assert len(moon) == 12_031 and np.all(np.diff(moon.times) >= 0)


def test_unknown_trace_names_the_short_names() -> None:
    with pytest.raises(FileNotFoundError, match="azure-conv"):
        traffic.load_trace("nope.csv")


def test_plan_router_follows_the_split_of_the_estimated_bucket() -> None:
    engines = pods("a10g", 3)
    share = {"a": [[1.0, 0.0]], "b": [[0.0, 1.0]]}
    table = RoutingTable.from_plan([1, 100], [1, 10, 100], share, {"a": 1, "b": 2})
    router = PlanRouter(table, engines, ["a", "b", "b"], prior_output=[50.0])
    picks = Counter(router.route(Request(k, 0, 10, 5), engines, 0.0) for k in range(30))
    assert picks == {1: 15, 2: 15}  # bucket (0, 1): all on type b, its two pods alike
    for k in range(30):  # observed outputs are short: the estimate moves to bucket (0, 0)
        router.observe(Request(k, 0, 10, 3))
    assert {router.route(Request(100 + k, 0, 10, 80), engines, 0.0) for k in range(20)} == {0}
    oracle = PlanRouter(table, engines, ["a", "b", "b"], prior_output=[5.0], oracle=True)
    assert oracle.route(Request(0, 0, 10, 80), engines, 0.0) in (1, 2)
    assert router.core.ledger.requests("a10g-0") == 20
    router.dropped(Request(100, 0, 10, 80))
    assert router.core.ledger.requests("a10g-0") == 19


def test_the_simulated_ledger_counts_what_reporting_every_request_would() -> None:
    """PlanRouter's ledger reads generated tokens off the pods instead of being told each
    request's count: before every routing decision each pod's tokens must still be its requests'
    prompts plus what they generated so far, through decode runs, preemptions and drops."""
    groups = [PodGroup(pool="a", gpu_type="a10g", replicas=2),
              PodGroup(pool="b", gpu_type="l4", replicas=1)]  # fmt: skip
    squeezed = {"l4": RooflineParams(gpu_memory_utilization=0.62)}  # preempts under load
    engines = build_pods(groups, LLAMA7B, EngineConfig(), squeezed)
    table = RoutingTable.from_plan([1, 800, 5000], [1, 200, 5000],
                                   {"a": [[0.5, 0.5], [1.0, 1.0]], "b": [[0.5, 0.5], [0.0, 0.0]]},
                                   {"a": 2, "b": 1})  # fmt: skip
    where: dict[int, tuple[Request, int]] = {}
    checked = 0

    class Checked(PlanRouter):
        def route(self, r: Request, pods_: Sequence[Engine], now: float) -> int:
            nonlocal checked
            for k, pod in enumerate(pods_):
                held = sum(q.prompt + q.generated for q, at in where.values() if at == k)
                assert self.ledger.tokens(pod.name) == held, (pod.name, now)
                checked += 1
            k = super().route(r, pods_, now)
            where[r.rid] = (r, k)
            return k

        def observe(self, r: Request) -> None:
            super().observe(r)
            del where[r.rid]

        def dropped(self, r: Request) -> None:
            super().dropped(r)
            del where[r.rid]

    requests = poisson(12.0, 1500, seed=3, prompt=(100, 1500), output=(10, 400))
    requests += [Request(10_000, requests[700].arrival, 4000, 900)]  # fits no pod: dropped
    requests.sort(key=lambda r: r.arrival)
    run(engines, Checked(table, engines, ["a", "a", "b"], prior_output=[100.0, 100.0]), requests)
    assert checked == 3 * len(requests)
    assert engines[2].preemptions > 0 and sum(e.dropped for e in engines) == 1
    assert not where


def test_round_robin_and_least_loaded() -> None:
    engines = pods("a10g", 3)
    rr = RoundRobin()
    assert [rr.route(Request(k, 0, 5, 5), engines, 0.0) for k in range(5)] == [0, 1, 2, 0, 1]
    engines[0].enqueue(Request(0, 0, 5, 5), 0.0)
    engines[1].enqueue(Request(1, 0, 5, 5), 0.0)
    assert LeastLoaded().route(Request(2, 0, 5, 5), engines, 0.0) == 2
