"""A service, a plan and traffic → a simulation run: what `gpumix simulate` does, as a function.

The plan is either given (allocation counts per pool, optionally the per-bucket `share` of each
pool) or solved here exactly as `gpumix plan` would (Mélange's ILP over the service's pools and
profiles). Pods: one engine per replica, of the pool's GPU type and replica size, configured as
the Deployment configures vLLM (`gpumix.profiles.vllm`) unless `engine` says otherwise. Routing
weights for Mélange's load balancer: the plan's `share` when known, else MaxTput per pool (A.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.plan import solve
from gpumix.problem import NoUsablePoolError, build_problem, pool_price
from gpumix.profiles.models import ModelShape, model_shape
from gpumix.profiles.vllm import for_workload
from gpumix.route import RoutingTable, histogram_prior
from gpumix.sim import traffic
from gpumix.sim.cluster import PodGroup, build_pods, run
from gpumix.sim.engine import Engine, EngineConfig
from gpumix.sim.report import PoolStats, SimReport, pools_of, summarise
from gpumix.sim.request import Request
from gpumix.sim.routing import LeastLoaded, PlanRouter, RoundRobin, Router

Matrix = list[list[float]]
RouterName = Literal["melange", "melange-oracle", "round-robin", "least-loaded"]
ArrivalKind = Literal["poisson", "gamma", "diurnal", "trace"]
SizeKind = Literal["histogram", "trace"]
DEFAULT_TTFT_MS = 1000.0
"""TTFT SLO when the service sets none (an interactive-chat budget)."""


class TrafficSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    arrivals: ArrivalKind = "poisson"
    rate: float | None = Field(default=None, gt=0, description="req/s; default: the service's.")
    requests: int = Field(default=2000, ge=1)
    cv: float = Field(default=2.0, gt=0, description="Gamma inter-arrival CV (bursty).")
    period_s: float = Field(default=3600.0, gt=0, description="Diurnal period.")
    amplitude: float = Field(default=0.5, ge=0, le=1)
    sizes: SizeKind = "histogram"
    trace: str = "azure-conv"
    rate_scale: float = Field(default=1.0, gt=0, description="Trace replay speed-up.")
    seed: int = 0


class UnknownPlanPoolError(ValueError):
    """A given plan names neither an input GPUPool nor one of its `<pool>-tp<k>` options."""


class PlanChoice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    counts: dict[str, int]
    share: dict[str, Matrix] | None = None


def make_traffic(service: LLMService, spec: TrafficSpec) -> list[Request]:
    wl = service.spec.workload
    rate = spec.rate or wl.request_rate
    n = spec.requests
    trace = traffic.load_trace(spec.trace) if "trace" in (spec.arrivals, spec.sizes) else None
    if spec.arrivals == "trace":
        assert trace is not None
        times = traffic.replay_times(trace, spec.rate_scale)[:n]
        n = len(times)
    elif spec.arrivals == "gamma":
        times = traffic.gamma_times(rate, spec.cv, n, spec.seed)
    elif spec.arrivals == "diurnal":
        times = traffic.diurnal_times(
            rate, n, spec.seed, period_s=spec.period_s, amplitude=spec.amplitude
        )
    else:
        times = traffic.poisson_times(rate, n, spec.seed)
    if spec.sizes == "trace":
        assert trace is not None
        if spec.arrivals == "trace":
            prompts, outputs = trace.prompts[:n], trace.outputs[:n]
        else:
            prompts, outputs = traffic.trace_sizes(trace, n, spec.seed + 1)
    else:
        prompts, outputs = traffic.histogram_sizes(
            wl.input_edges, wl.output_edges, wl.histogram, n, spec.seed + 1
        )
    return traffic.make_requests(np.asarray(times), prompts, outputs)


@dataclass(frozen=True)
class SimRun:
    """A finished run. Its report is summarised when first read: the attainment loop reads only
    the pools' figures (`pools`), which cost a fraction of the violation causes."""

    counts: dict[str, int]
    pods: list[Engine]
    requests: list[Request]
    end: float
    tpot_slo_ms: float
    ttft_slo_ms: float

    @cached_property
    def report(self) -> SimReport:
        return summarise(
            self.requests, self.pods, tpot_slo_ms=self.tpot_slo_ms,
            ttft_slo_ms=self.ttft_slo_ms, end=self.end,
        )  # fmt: skip

    @cached_property
    def pools(self) -> dict[str, PoolStats]:
        done = [r for r in self.requests if r.finish is not None]
        return pools_of(self.pods, done, tpot_slo_ms=self.tpot_slo_ms, end=self.end)


def simulate_service(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    traffic_spec: TrafficSpec,
    *,
    plan: PlanChoice | None = None,
    router: RouterName = "melange",
    engine: EngineConfig | None = None,
    ttft_slo_ms: float | None = None,
    solver: Literal["highs", "cbc"] = "highs",
    shape: ModelShape | None = None,
) -> SimRun:
    """Simulate ``service`` served by ``plan`` (default: its optimal allocation) with pods of
    the model's ``shape`` (from its config.json; default: the built-in shape of its name)."""
    problem = build_problem(service, pools, profiles, shape=shape)
    if plan is None:
        if problem.instance is None:
            raise NoUsablePoolError(problem.unusable(service))
        alloc = solve(problem.instance, solver=solver)
        if alloc is None:
            raise ValueError(f"{service.name}: no feasible allocation")
        plan = PlanChoice(counts=dict(alloc.counts), share=alloc.share)
    by_name = {p.name: p for p in pools}
    groups = []
    for name, count in plan.counts.items():
        if count <= 0:
            continue
        # A plan's keys are the problem's options: a pool, or `<pool>-tp<k>` for k-GPU replicas.
        choice = problem.choices.get(name)
        pool = by_name.get(choice.pool if choice else name)
        if pool is None:
            known = ", ".join(sorted(by_name.keys() | problem.choices.keys()))
            raise UnknownPlanPoolError(
                f"the plan names pool {name!r}, which is not in the input (known pools: {known})"
            )
        groups.append(
            PodGroup(
                pool=name,
                gpu_type=pool.spec.gpu_type,
                replicas=count,
                gpus=choice.gpus_per_replica if choice else 1,
                price_per_gpu_hour=pool_price(pool) or 0.0,
            )
        )
    model = shape or model_shape(service.spec.model.name)
    config = engine or EngineConfig.of(for_workload(service.spec.workload, model))
    pods = build_pods(groups, model, config)
    requests = make_traffic(service, traffic_spec)
    wl = service.spec.workload
    pool_of = [g.pool for g in groups for _ in range(g.replicas)]
    weights: Mapping[str, Matrix] | None = plan.share
    if weights is None and problem.instance is not None:
        weights = {g.name: g.max_tput for g in problem.instance.gpus}
    chosen: Router
    if router == "round-robin":
        chosen = RoundRobin()
    elif router == "least-loaded":
        chosen = LeastLoaded()
    else:
        table = RoutingTable.from_plan(
            wl.input_edges, wl.output_edges, dict(weights or {}), dict(plan.counts)
        )
        chosen = PlanRouter(
            table,
            pods,
            pool_of,
            histogram_prior(wl.output_edges, wl.histogram),
            oracle=router == "melange-oracle",
        )
    end = run(pods, chosen, requests)
    slo = service.spec.slo
    ttft = ttft_slo_ms or slo.ttft_ms or DEFAULT_TTFT_MS
    return SimRun(
        counts=dict(plan.counts), pods=pods, requests=requests, end=end,
        tpot_slo_ms=slo.tpot_ms, ttft_slo_ms=ttft,
    )  # fmt: skip
