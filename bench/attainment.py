"""Benchmark: does a plan hold its SLO when simulated? Attainment and cost per planner.

**Cases** (deterministic, :func:`build_cases`): 5 request-size shapes × 3 models × 3 (rate, SLO)
variants = 45 LLMServices. Shapes: ``chat`` (the Azure conversation histogram of
manifests/samples/chat.yaml), ``code`` (inputs 256–3k, outputs < 256), ``rag`` (prompts 1k–3.8k,
answers < 256), ``summ`` (inputs 1k–3k, outputs 64–1k), ``gen`` (prompts < 512, answers 128–2k).
Models: Llama-2 7B, 13B and 70B. Rates 0.5–50 req/s, TPOT SLOs 40–150 ms, a TTFT SLO (1, 2 or
5 s) on every other case, over-provisioning 0.1 (as chat.yaml). Pools: the four of
manifests/samples/gpupools.yaml (L4, A10G, A100-80GB, H100 at catalog prices). Profiles: the
calibrated roofline (`estimate_profile`, with tensor parallelism's all-reduces) on each shape's
grid, tables at every TPOT used, at the smallest tensor-parallel degree whose memory holds the
model (7B: 1 GPU everywhere; 13B: 2 on L4/A10G; 70B: 8 on L4/A10G, 2 on A100/H100) and at twice
that (`--max-tp N`: up to N times; 1, the smallest only, as before session 21): a larger replica
prefills faster, which long prompts with short answers need. A case no pool can serve is skipped
and counted.

**Per case and planner**: the planner (a function in :data:`PLANNERS`, timed: ``melange``, the
paper's ILP; ``slo``, `gpumix plan`'s default; ``operator``, what the operator applies for the
service alone in a cluster) returns counts and the per-bucket share; the plan runs through
`simulate_service` (default router ``melange``: the gpumix routing core with the plan's share
and App. A.2's output prediction; ``--router melange-oracle`` knows each request's output
length, as a ``max_tokens`` as long as the answer lets the router), Poisson arrivals at the
service's rate, `--requests` requests, seed `--seed` (the same traffic for every plan). Recorded:
attainment of TPOT, TTFT (where the case sets one) and both; the case's attainment is "both"
where a TTFT SLO is set, else TPOT; cost, mix, mixed (≥ 2 pools) or single-type, utilisation.
Per case, `alone_floor`: the least share of requests any routable placement leaves missing the
SLO even alone on an idle pod (`gpumix.attainment.least_alone_miss`), what the planners expect;
and `alone_floor_measured`: the share of the measured requests that miss even alone on every
option (:func:`measured_floor`). Above 1 − target, no plan on these pools can reach the target
on this traffic, and the summary counts such cases apart.

**Baseline: the cheapest single-type plan at equal attainment.** Per pool, Mélange's single-type
plan (`solve(..., only=pool)`) with replicas added one at a time (each simulated, same traffic)
until the case's attainment reaches `--target` with its KV cache within the planner's headroom
(`gpumix.attainment.KV_HEADROOM`: the promise the `slo` planner is held to), or a cap (4× the
start, at most 64, never below the start); the cheapest over pools. Pools are tried cheapest
start first, and a pool stops as soon as it costs at least the cheapest baseline found so far
(it cannot be the cheapest any more).

Usage: ``.venv/bin/python bench/attainment.py [--json] [--quick] [--planner NAME ...]
[--target 0.99] [--requests N] [--seed S] [--cases SUBSTR] [--jobs N] [--router R]
[--no-baseline] [--max-tp N]``. Costs are the simulated pods' (GPUs × catalog price).
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.api.gpuprofile import TPDegree
from gpumix.attainment import KV_HEADROOM, least_alone_miss, promise, with_alone_misses
from gpumix.manifests import load_inputs
from gpumix.plan import Formulation, UnservableBucketError, solve
from gpumix.plan.errors import check_servable
from gpumix.problem import ServiceProblem, build_problem, replica_fits
from gpumix.profiles import CATALOG
from gpumix.profiles.catalog import GPUType
from gpumix.profiles.models import ModelShape, model_shape
from gpumix.profiles.roofline import Roofline, estimate_profile
from gpumix.reconcile.capacity import NodeInfo
from gpumix.reconcile.cluster import Snapshot, plan_cluster
from gpumix.sim.scenario import (
    PlanChoice,
    RouterName,
    TrafficSpec,
    make_traffic,
    simulate_service,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "manifests" / "samples"
Matrix = list[list[float]]

MODELS = {
    "7b": "meta-llama/Llama-2-7b-hf",
    "13b": "meta-llama/Llama-2-13b-hf",
    "70b": "meta-llama/Llama-2-70b-hf",
}
RATES = {"7b": (1.0, 10.0, 50.0), "13b": (0.5, 4.0, 20.0), "70b": (0.5, 2.0, 10.0)}
TPOTS_MS = (40.0, 60.0, 80.0, 100.0, 120.0, 150.0)
TTFTS_MS = (1000.0, 2000.0, 5000.0)
SHAPE_NAMES = ("chat", "code", "rag", "summ", "gen")
OVER_PROVISION = 0.1
TP_DEGREES: tuple[TPDegree, ...] = (1, 2, 4, 8)
CAP_FACTOR, CAP_REPLICAS = 4, 64
QUICK_CASES = (
    "chat-7b-10rps",
    "rag-7b-50rps",
    "code-13b-0.5rps",
    "summ-13b-20rps",
    "gen-70b-2rps",
    "chat-70b-0.5rps",
)


@dataclass(frozen=True)
class Shape:
    input_edges: list[int]
    output_edges: list[int]
    histogram: Matrix


def _shapes() -> dict[str, Shape]:
    chat = load_inputs([SAMPLES / "chat.yaml"]).services[0].spec.workload
    return {
        "chat": Shape(chat.input_edges, chat.output_edges, [list(r) for r in chat.histogram]),
        "code": Shape(  # completion: long context in, a few lines out
            [256, 512, 1024, 2048, 3072],
            [1, 16, 32, 64, 128, 256],
            [[10, 14, 8, 4, 1], [14, 20, 12, 6, 2], [10, 14, 9, 5, 2], [4, 6, 4, 2, 1]],
        ),
        "rag": Shape(  # retrieved passages in, a short answer out (≤ 4,096 tokens in all)
            [1024, 1536, 2048, 3072, 3840],
            [1, 32, 64, 128, 256],
            [[6, 10, 8, 3], [8, 14, 10, 4], [8, 14, 12, 5], [4, 7, 6, 3]],
        ),
        "summ": Shape(  # documents in, a summary out
            [1024, 1536, 2048, 3072],
            [64, 128, 256, 512, 1001],
            [[6, 12, 10, 3], [6, 14, 12, 4], [4, 10, 10, 4]],
        ),
        "gen": Shape(  # synthetic: short prompts, long answers
            [1, 64, 128, 256, 512],
            [128, 256, 512, 1024, 2048],
            [[4, 8, 10, 5], [5, 10, 12, 6], [3, 8, 10, 5], [2, 5, 6, 3]],
        ),
    }


@dataclass(frozen=True)
class Case:
    name: str
    shape: str
    model: str
    """Key of MODELS."""
    rate: float
    tpot_ms: float
    ttft_ms: float | None


def build_cases() -> list[Case]:
    """45 cases: shape × model × 3 variants (low / mid / high rate); TPOT cycles through
    TPOTS_MS and every other case gets a TTFT SLO, so that both spread over shapes and models."""
    cases = []
    for m, model in enumerate(MODELS):
        for s, shape in enumerate(SHAPE_NAMES):
            for v in range(3):
                k = 3 * s + v + m
                rate = RATES[model][v]
                tpot = TPOTS_MS[(2 * v + s + m) % len(TPOTS_MS)]
                ttft = TTFTS_MS[(k // 2) % len(TTFTS_MS)] if k % 2 else None
                name = f"{shape}-{model}-{rate:g}rps-{tpot:g}ms"
                if ttft is not None:
                    name += f"-ttft{ttft / 1000:g}s"
                cases.append(Case(name, shape, model, rate, tpot, ttft))
    return cases


def make_service(case: Case, shape: Shape) -> LLMService:
    slo: dict[str, float] = {"tpotMs": case.tpot_ms}
    if case.ttft_ms is not None:
        slo["ttftMs"] = case.ttft_ms
    return LLMService.model_validate({
        "metadata": {"name": case.name, "namespace": "bench"},
        "spec": {
            "model": {"name": MODELS[case.model]},
            "slo": slo,
            "workload": {
                "requestRate": case.rate,
                "overProvision": OVER_PROVISION,
                "inputEdges": shape.input_edges,
                "outputEdges": shape.output_edges,
                "histogram": shape.histogram,
            },
        },
    })  # fmt: skip


def load_pools() -> list[GPUPool]:
    return load_inputs([SAMPLES / "gpupools.yaml"]).pools


_PROFILES: dict[tuple[str, str, int], list[GPUProfile]] = {}


def profiles_for(
    model: str, shape_name: str, shape: Shape, pools: list[GPUPool], max_tp: int = 2
) -> list[GPUProfile]:
    """Roofline profiles of `model` on the shape's grid for each pool's GPU type, at every TP
    degree whose memory holds the model, up to `max_tp` times the smallest; made once per
    (model, shape, max_tp) in each process."""
    key = (model, shape_name, max_tp)
    if key not in _PROFILES:
        shape_m = model_shape(MODELS[model])
        _PROFILES[key] = [
            estimate_profile(
                CATALOG[gpu_name],
                shape_m,
                input_edges=shape.input_edges,
                output_edges=shape.output_edges,
                tpots_ms=list(TPOTS_MS),
                gpus=k,
            )
            for gpu_name in sorted({p.spec.gpu_type for p in pools})
            for k in tp_degrees(CATALOG[gpu_name], shape_m, max_tp)
        ]
    return _PROFILES[key]


def tp_degrees(gpu: GPUType, model: ModelShape, max_tp: int) -> list[TPDegree]:
    """The TP degrees (1, 2, 4, 8) a GPU type is profiled at: every one whose memory holds the
    model, up to `max_tp` times the smallest."""
    fit = [k for k in TP_DEGREES if replica_fits(gpu, model, k)]
    return [k for k in fit if k <= fit[0] * max_tp]


# --- planners ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanOutcome:
    """What a planner returns: replicas per option (`build_problem`'s option keys: the pool name,
    `<pool>-tp<k>` for k-GPU replicas), the share of each bucket's traffic per option (None: the
    router weighs by MaxTput), the cost, and optionally the attainment the planner predicts."""

    counts: dict[str, int]
    share: dict[str, Matrix] | None
    cost_per_hour: float
    predicted_attainment: float | None = None


Planner = Callable[[LLMService, list[GPUPool], list[GPUProfile], float], PlanOutcome | None]
"""(service, pools, profiles, attainment target) → a plan, or None when it finds none. May raise
`UnservableBucketError`."""


def plan_melange(
    service: LLMService, pools: list[GPUPool], profiles: list[GPUProfile], target: float
) -> PlanOutcome | None:
    """Today's planner: Mélange's ILP on the per-bucket MaxTput tables, as `gpumix plan` does for
    one service. Knows nothing of the attainment target."""
    del target
    problem = build_problem(service, pools, profiles)
    if problem.instance is None:
        return None
    alloc = solve(problem.instance)
    if alloc is None:
        return None
    return PlanOutcome(dict(alloc.counts), alloc.share, alloc.cost_per_hour)


def plan_slo(
    service: LLMService, pools: list[GPUPool], profiles: list[GPUProfile], target: float
) -> PlanOutcome | None:
    """`gpumix plan`'s default (`gpumix.attainment.promise`): the routable ILP, simulated as
    deployed and derated until the predicted attainment reaches the target, never dearer than
    the cheapest single type that reaches it. It predicts with its own seed (1), so the bench's
    simulation (seed 0 by default) is out of sample."""
    problem = build_problem(service, pools, profiles)
    if problem.instance is None:
        return None
    promised = promise(service, pools, profiles, problem.instance, target=target)
    alloc = promised.plan.allocation
    if alloc is None or promised.predicted is None:
        return None
    return PlanOutcome(dict(alloc.counts), alloc.share, alloc.cost_per_hour, promised.predicted.met)


OPERATOR_NODES = 64
"""Nodes of 8 GPUs per pool the ``operator`` planner's cluster has: more than any case uses."""
OPERATOR_NOW = "2026-01-01T00:00:00Z"


def plan_operator(
    service: LLMService, pools: list[GPUPool], profiles: list[GPUProfile], target: float
) -> PlanOutcome | None:
    """What the operator applies for this service alone in a cluster with these pools (a first
    pass of `gpumix.reconcile.cluster.plan_cluster`): the joint ILP, routable and with the
    alone-miss budget (`with_alone_miss_budget`), searched alone and derated until its
    prediction (seed 1, as `slo`'s) reaches the target."""
    body = service.model_dump(by_alias=True, mode="json", exclude_none=True)
    body["metadata"] = {"name": "svc", "namespace": "bench", "uid": "bench", "generation": 1,
                        "creationTimestamp": OPERATOR_NOW}  # fmt: skip
    body["spec"]["slo"]["attainmentTarget"] = target
    nodes = [
        NodeInfo(name=f"{p.name}-{i}", labels=dict(p.spec.node_selector), allocatable_gpus=8)
        for p in pools
        for i in range(OPERATOR_NODES)
    ]
    dump = [
        o.model_dump(by_alias=True, mode="json", exclude_none=True) for o in (*pools, *profiles)
    ]
    snap = Snapshot(
        services=[body], pools=dump[: len(pools)], profiles=dump[len(pools) :], nodes=nodes,
        pods=[], running={}, autoscalers={}, now=OPERATOR_NOW,
    )  # fmt: skip
    sd = plan_cluster(snap).services[("bench", "svc")]
    counts = {o: n for o, n in (sd.target or {}).items() if n}
    if not counts:
        return None
    share = {o: sd.shares[o] for o in counts}
    return PlanOutcome(
        counts, share, sd.status.cost_per_hour or 0.0, sd.status.predicted_attainment
    )


PLANNERS: dict[str, Planner] = {"melange": plan_melange, "slo": plan_slo, "operator": plan_operator}
"""Planners by name (`--planner NAME`); register another one here to compare it, or name it
on the command line as ``--planner package.module:function`` (imported in each process)."""


def resolve_planner(name: str) -> Planner:
    if name in PLANNERS:
        return PLANNERS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise ValueError(f"unknown planner {name!r}; known: {', '.join(sorted(PLANNERS))}")
    planner: Planner = getattr(importlib.import_module(module), attr)
    return planner


# --- simulation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What every case of a run shares."""

    target: float
    requests: int
    seed: int
    router: RouterName
    baseline: bool
    max_tp: int = 2
    """Profile TP degrees up to this multiple of the smallest that holds the model."""


@dataclass(frozen=True)
class Context:
    """One case, built: its service, allocation problem, pools and profiles."""

    case: Case
    service: LLMService
    problem: ServiceProblem
    pools: list[GPUPool]
    profiles: list[GPUProfile]


@dataclass(frozen=True)
class Attainment:
    tpot: float
    ttft: float | None
    both: float | None
    case: float
    """"both" where the case sets a TTFT SLO, else TPOT."""
    cost_per_hour: float
    """From the simulated pods (GPUs × the pool's price), not the planner's claim."""
    utilisation: dict[str, float]
    kv_usage: dict[str, float]
    """Time-averaged KV-cache usage per pool."""
    dropped: int
    missed_alone: float
    """Share of requests that miss the TPOT SLO even alone on an idle pod of the plan (the
    report's `violations.alone`): no replica count on these pods recovers them."""


def _traffic(settings: Settings) -> TrafficSpec:
    """The traffic every plan of a case is measured on."""
    return TrafficSpec(arrivals="poisson", requests=settings.requests, seed=settings.seed)


def measured_floor(ctx: Context, settings: Settings) -> float:
    """Share of the measured requests (:func:`_traffic`) that miss the SLO even alone on every
    option the pools offer (`Roofline.meets_alone`): no plan, however it routes, meets them,
    so above 1 − target no plan reaches the target on this traffic. The expected share
    (`alone_floor`) can sit just under 1 − target while the drawn requests sit over it."""
    shape = model_shape(MODELS[ctx.case.model])
    roofs = [
        Roofline(CATALOG[c.gpu_type], shape, c.gpus_per_replica)
        for c in ctx.problem.choices.values()
    ]
    requests = make_traffic(ctx.service, _traffic(settings))
    tpot, ttft = ctx.case.tpot_ms, ctx.case.ttft_ms
    missed = sum(
        not any(roof.meets_alone(r.prompt, r.output, tpot, ttft) for roof in roofs)
        for r in requests
    )
    return missed / len(requests) if requests else 0.0


def simulate(
    ctx: Context, counts: dict[str, int], share: dict[str, Matrix] | None, settings: Settings
) -> Attainment:
    used = {k: n for k, n in counts.items() if n > 0}
    run = simulate_service(
        ctx.service,
        ctx.pools,
        ctx.profiles,
        _traffic(settings),
        plan=PlanChoice(
            counts=used, share={k: v for k, v in share.items() if k in used} if share else None
        ),
        router=settings.router,
        ttft_slo_ms=ctx.case.ttft_ms,
    )
    r = run.report
    has_ttft = ctx.case.ttft_ms is not None
    both = r.attainment_both if has_ttft else None
    return Attainment(
        tpot=r.attainment_tpot,
        ttft=r.attainment_ttft if has_ttft else None,
        both=both,
        case=both if both is not None else r.attainment_tpot,
        cost_per_hour=round(r.cost_per_hour, 4),
        utilisation={k: s.utilisation for k, s in r.pools.items()},
        kv_usage={k: s.kv_usage for k, s in r.pools.items()},
        dropped=r.dropped,
        missed_alone=round(r.violations.alone / r.requests, 6) if r.requests else 0.0,
    )


# --- one case ---------------------------------------------------------------------------------


def _pool_of(problem: ServiceProblem, key: str) -> str:
    choice = problem.choices.get(key)
    return choice.pool if choice else key


def _mix(counts: dict[str, int]) -> str:
    return ",".join(f"{k}×{n}" for k, n in sorted(counts.items()) if n > 0) or "-"


def equal_attainment_baseline(ctx: Context, settings: Settings) -> dict[str, Any]:
    """The cheapest single-pool plan whose simulated attainment reaches the target (see the
    module docstring); per option: start count and attainment, where it stopped and why."""
    instance = ctx.problem.instance
    assert instance is not None
    starts: list[tuple[float, str, int, dict[str, Matrix]]] = []
    per_option: dict[str, dict[str, Any]] = {}
    for gpu in instance.gpus:
        try:
            alloc = solve(instance, only=gpu.name)
        except UnservableBucketError:
            per_option[gpu.name] = {"status": "cannot serve alone"}
            continue
        if alloc is None or alloc.counts[gpu.name] == 0:
            per_option[gpu.name] = {"status": "infeasible"}
            continue
        n = alloc.counts[gpu.name]
        starts.append((n * gpu.cost_per_hour, gpu.name, n, alloc.share))
    best: dict[str, Any] | None = None
    sims = 0
    for start_cost, name, start, share in sorted(starts):
        price = start_cost / start
        info: dict[str, Any] = {"start": start, "start_cost": round(start_cost, 4)}
        per_option[name] = info
        if best is not None and start_cost >= best["cost_per_hour"]:
            info["status"] = "pruned: start costs ≥ cheapest found"
            continue
        cap = max(start, min(CAP_FACTOR * start, CAP_REPLICAS))
        n = start
        while True:
            att = simulate(ctx, {name: n}, share, settings)
            sims += 1
            if n == start:
                info["start_attainment"] = att.case
            info["replicas"], info["attainment"] = n, att.case
            if att.case >= settings.target and max(att.kv_usage.values()) <= KV_HEADROOM:
                info["status"] = "reached"
                info["cost_per_hour"] = att.cost_per_hour
                if best is None or att.cost_per_hour < best["cost_per_hour"]:
                    best = {
                        "option": name,
                        "pool": _pool_of(ctx.problem, name),
                        "replicas": n,
                        "start": start,
                        "cost_per_hour": att.cost_per_hour,
                        "attainment": att.case,
                    }
                break
            if n + 1 > cap:
                info["status"] = f"cap {cap} reached below target"
                break
            if best is not None and (n + 1) * price >= best["cost_per_hour"] - 1e-9:
                info["status"] = "pruned: costs ≥ cheapest found"
                break
            n += 1
    return {"best": best, "options": per_option, "simulations": sims}


def run_case(case: Case, planners: list[str], settings: Settings) -> dict[str, Any]:
    shape = _SHAPES[case.shape]
    pools = load_pools()
    profiles = profiles_for(case.model, case.shape, shape, pools, settings.max_tp)
    service = make_service(case, shape)
    row: dict[str, Any] = {
        "case": case.name,
        "shape": case.shape,
        "model": MODELS[case.model],
        "rate": case.rate,
        "tpot_ms": case.tpot_ms,
        "ttft_ms": case.ttft_ms,
    }
    t_case = time.perf_counter()
    problem = build_problem(service, pools, profiles)
    instance = problem.instance
    try:
        if instance is None:
            raise ValueError(f"no usable pool: {problem.excluded}")
        usable = [k for k in range(len(instance.gpus)) if instance.usable(k)]
        check_servable(instance, usable)
        mel = solve(instance)
        if mel is None:
            raise ValueError("Mélange's ILP is infeasible")
    except (ValueError, UnservableBucketError) as err:
        row["skipped"] = str(err)
        return row
    ctx = Context(case, service, problem, pools, profiles)
    row["melange_cost"] = round(mel.cost_per_hour, 4)
    filled = with_alone_misses(service, pools, profiles, instance)
    row["alone_floor"] = round(least_alone_miss(filled, Formulation.ROUTABLE, usable), 6)
    row["alone_floor_measured"] = round(measured_floor(ctx, settings), 6)
    row["planners"] = {}
    for name in planners:
        t0 = time.perf_counter()
        try:
            plan = resolve_planner(name)(service, pools, profiles, settings.target)
        except UnservableBucketError as err:
            plan, why = None, str(err)
        else:
            why = "no plan"
        plan_s = time.perf_counter() - t0
        if plan is None:
            row["planners"][name] = {"plan_s": round(plan_s, 4), "failed": why}
            continue
        att = simulate(ctx, plan.counts, plan.share, settings)
        used_pools = {_pool_of(problem, k) for k, n in plan.counts.items() if n > 0}
        row["planners"][name] = {
            "plan_s": round(plan_s, 4),
            "counts": {k: n for k, n in plan.counts.items() if n > 0},
            "mix": _mix(plan.counts),
            "mixed": len(used_pools) >= 2,
            "cost_per_hour": att.cost_per_hour,
            "planner_cost_per_hour": round(plan.cost_per_hour, 4),
            "vs_melange_cost": round(att.cost_per_hour / mel.cost_per_hour, 4),
            "predicted_attainment": plan.predicted_attainment,
            "attainment_tpot": att.tpot,
            "attainment_ttft": att.ttft,
            "attainment_both": att.both,
            "attainment": att.case,
            "reached_target": att.case >= settings.target,
            "utilisation": att.utilisation,
            "dropped": att.dropped,
            "tpot_missed_alone": att.missed_alone,
        }
    if settings.baseline:
        base = equal_attainment_baseline(ctx, settings)
        row["baseline"] = base
        best = base["best"]
        for p in row["planners"].values():
            if "cost_per_hour" in p and best is not None:
                p["vs_baseline_cost"] = round(p["cost_per_hour"] / best["cost_per_hour"], 4)
    row["case_s"] = round(time.perf_counter() - t_case, 3)
    return row


_SHAPES: dict[str, Shape] = {}


def _init_worker() -> None:
    _SHAPES.update(_shapes())


Work = tuple[Case, list[str], Settings]


def _run_case_star(work: Work) -> dict[str, Any]:
    t0 = time.perf_counter()
    row = run_case(*work)
    print(f"  {work[0].name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return row


# --- summary ----------------------------------------------------------------------------------


def _pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 6) if values else None


def _dist(values: Sequence[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "min": round(min(values), 6) if values else None,
        "p5": _pct(values, 5),
        "median": _pct(values, 50),
    }


def summarise(rows: list[dict[str, Any]], planner: str, target: float) -> dict[str, Any]:
    got = [r["planners"][planner] for r in rows if "planners" in r]
    ok = [p for p in got if "attainment" in p]
    att = [p["attainment"] for p in ok]
    mixed = [p["attainment"] for p in ok if p["mixed"]]
    single = [p["attainment"] for p in ok if not p["mixed"]]
    reached = [p for p in ok if p["reached_target"]]
    vs_mel = [p["vs_melange_cost"] for p in ok]
    # equal attainment: only where this planner's plan reached the target
    with_base = [r for r in rows if "planners" in r and "baseline" in r]
    eq: list[float] = []
    base_missing = 0
    for r in with_base:
        p = r["planners"][planner]
        if not p.get("reached_target"):
            continue
        if r["baseline"]["best"] is None:
            base_missing += 1
        else:
            eq.append(p["vs_baseline_cost"])
    times = [p["plan_s"] for p in got]
    alone = [p for p in ok if p["tpot_missed_alone"] > 1 - target]
    planned = [r for r in rows if "planners" in r and "attainment" in r["planners"][planner]]
    reachable = [r["planners"][planner] for r in planned if r["alone_floor_measured"] <= 1 - target]
    return {
        "cases": len(got),
        "failed": len(got) - len(ok),
        "attainment": _dist(att),
        "attainment_mixed": _dist(mixed),
        "attainment_single": _dist(single),
        "reached_target": len(reached),
        "reached_target_share": round(len(reached) / len(ok), 4) if ok else None,
        "reached_target_mixed": sum(p["mixed"] for p in reached),
        "reached_target_single": sum(not p["mixed"] for p in reached),
        "capped_by_alone": len(alone),
        "out_of_reach": len(planned) - len(reachable),
        "reachable": len(reachable),
        "reached_target_where_reachable": sum(p["reached_target"] for p in reachable),
        "mixed_plans": len(mixed),
        "single_plans": len(single),
        "cost_vs_melange": {
            "median": _pct(vs_mel, 50),
            "min": min(vs_mel, default=None),
            "max": max(vs_mel, default=None),
        },
        "equal_attainment": {
            "compared": len(eq),
            "baseline_not_reached": base_missing,
            "cheaper": sum(x < 1 - 1e-9 for x in eq),
            "equal": sum(abs(x - 1) <= 1e-9 for x in eq),
            "dearer": sum(x > 1 + 1e-9 for x in eq),
            "cheaper_share": round(sum(x < 1 - 1e-9 for x in eq) / len(eq), 4) if eq else None,
            "cost_ratio_median": _pct(eq, 50),
            "cost_ratio_min": round(min(eq), 4) if eq else None,
            "cost_ratio_max": round(max(eq), 4) if eq else None,
            "saving_median_when_cheaper": _pct([1 - x for x in eq if x < 1 - 1e-9], 50),
        },
        "plan_s": {
            "median": _pct(times, 50),
            "max": round(max(times), 4) if times else None,
        },
    }


# --- output -----------------------------------------------------------------------------------


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def print_rows(rows: list[dict[str, Any]], planners: list[str]) -> None:
    """One line per case and planner. TPOT/TTFT/case: simulated attainment ("case" is what the
    target applies to); pred: the planner's own prediction; baseline: the cheapest single type
    at the target, as option×replicas (from Mélange's single-type count)."""
    w = max(7, *(len(n) for n in planners))
    head = (f"{'case':<34} {'planner':<{w}} {'mix':<30} {'$/h':>8} {'mix?':>4} {'plan s':>7} "
            f"{'TPOT':>6} {'TTFT':>6} {'case':>6} {'pred':>6} {'baseline at target':<24} "
            f"{'$/h':>8} {'vs base':>7}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for r in rows:
        if "skipped" in r:
            print(f"{r['case']:<34} skipped: {r['skipped'][:110]}")
            continue
        best = r.get("baseline", {}).get("best")
        base = "-" if "baseline" not in r else "not reached"
        if best is not None:
            base = f"{best['option']}×{best['replicas']} (from {best['start']})"
        for name in planners:
            p = r["planners"][name]
            if "attainment" not in p:
                print(f"{r['case']:<34} {name:<{w}} failed: {p['failed']}")
                continue
            print(
                f"{r['case']:<34} {name:<{w}} {p['mix']:<30} {p['cost_per_hour']:>8.2f} "
                f"{'yes' if p['mixed'] else 'no':>4} {p['plan_s']:>7.3f} "
                f"{_f(p['attainment_tpot']):>6} {_f(p['attainment_ttft']):>6} "
                f"{_f(p['attainment']):>6} {_f(p['predicted_attainment']):>6} {base:<24} "
                f"{_f(best['cost_per_hour'] if best else None, '.2f'):>8} "
                f"{_f(p.get('vs_baseline_cost'), '.3f'):>7}"
            )


def print_summary(name: str, s: dict[str, Any], target: float) -> None:
    def dist(d: dict[str, Any]) -> str:
        return (f"min {_f(d['min'])} / p5 {_f(d['p5'])} / median {_f(d['median'])} "
                f"(n={d['n']})")  # fmt: skip

    print(f"planner {name}: {s['cases']} cases, {s['failed']} without a plan")
    print(f"  attainment, all:    {dist(s['attainment'])}")
    print(f"  attainment, mixed:  {dist(s['attainment_mixed'])}")
    print(f"  attainment, single: {dist(s['attainment_single'])}")
    print(f"  ≥ target {target:g}: {s['reached_target']}/{s['cases'] - s['failed']} "
          f"({_f(s['reached_target_share'], '.1%')}; mixed {s['reached_target_mixed']}/"
          f"{s['mixed_plans']}, single {s['reached_target_single']}/"
          f"{s['single_plans']})")  # fmt: skip
    print(f"  plans where > {1 - target:.2%} of requests miss TPOT even alone on an idle pod "
          f"(the target is out of reach on those pods): {s['capped_by_alone']}")  # fmt: skip
    print(f"  cases where no plan can reach the target (> {1 - target:.2%} of the measured "
          f"requests miss even alone on every option): {s['out_of_reach']}; ≥ target among the "
          f"others: {s['reached_target_where_reachable']}/{s['reachable']}")  # fmt: skip
    c = s["cost_vs_melange"]
    print(f"  cost / Mélange plan: median {_f(c['median'])}, min {_f(c['min'])}, "
          f"max {_f(c['max'])}")  # fmt: skip
    e = s["equal_attainment"]
    print(f"  vs cheapest single type at equal attainment (cases where the plan reached the "
          f"target: {e['compared']} compared, {e['baseline_not_reached']} where no single type "
          f"reached it within the cap):")  # fmt: skip
    print(f"    cheaper {e['cheaper']}, equal {e['equal']}, dearer {e['dearer']} "
          f"(cheaper share {_f(e['cheaper_share'], '.1%')}); cost ratio median "
          f"{_f(e['cost_ratio_median'])}, min {_f(e['cost_ratio_min'])}, "
          f"max {_f(e['cost_ratio_max'])}; median saving where cheaper "
          f"{_f(e['saving_median_when_cheaper'], '.1%')}")  # fmt: skip
    print(f"  planning time: median {_f(s['plan_s']['median'], '.4f')} s, "
          f"max {_f(s['plan_s']['max'], '.4f')} s")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--quick", action="store_true", help="6 cases, 1,000 requests")
    parser.add_argument(
        "--planner",
        action="append",
        help=f"planner: {', '.join(sorted(PLANNERS))} or module:function (repeat to compare; "
        "default: all registered)",
    )
    parser.add_argument("--target", type=float, default=0.99, help="attainment target")
    parser.add_argument("--requests", type=int, help="requests per simulation (default 3000)")
    parser.add_argument("--seed", type=int, default=0, help="traffic seed (same for every run)")
    parser.add_argument("--cases", help="only cases whose name contains this")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--router",
        default="melange",
        choices=list(get_args(RouterName)),
        help="simulated router (melange-oracle: output lengths known; a diagnostic)",
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the equal-attainment baseline search"
    )
    parser.add_argument(
        "--max-tp",
        type=int,
        default=2,
        help="profile TP degrees up to this multiple of the smallest that holds the model "
        "(default 2; 8: every degree up to 8; 1: the smallest only)",
    )
    args = parser.parse_args()
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    planners: list[str] = args.planner or list(PLANNERS)
    for name in planners:
        try:
            resolve_planner(name)
        except (ValueError, ImportError, AttributeError) as err:
            parser.error(str(err))
    requests = args.requests or (1000 if args.quick else 3000)
    cases = build_cases()
    if args.quick:
        cases = [c for c in cases if c.name.startswith(QUICK_CASES)]
    if args.cases:
        cases = [c for c in cases if args.cases in c.name]
    settings = Settings(
        args.target, requests, args.seed, args.router, not args.no_baseline, args.max_tp
    )
    work: list[Work] = [(c, planners, settings) for c in cases]
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs, _init_worker) as pool:
            rows = list(pool.imap(_run_case_star, work))
    else:
        _init_worker()
        rows = [_run_case_star(w) for w in work]
    run_s = time.perf_counter() - t_start
    load_end = os.getloadavg()
    print()
    print_rows(rows, planners)
    served = [r for r in rows if "planners" in r]
    skipped = [r["case"] for r in rows if "skipped" in r]
    print()
    print(f"{len(rows)} cases: {len(served)} planned and simulated, {len(skipped)} skipped "
          f"(no pool can serve every bucket within the SLO); {requests} requests per "
          f"simulation, seed {args.seed}, target {args.target:g}, "
          f"router {args.router}")  # fmt: skip
    summaries = {name: summarise(rows, name, args.target) for name in planners}
    for name in planners:
        print_summary(name, summaries[name], args.target)
    sims = sum(r.get("baseline", {}).get("simulations", 0) for r in rows)
    print(f"baseline search: {sims} simulations")
    print(f"run time {run_s:.1f} s with {args.jobs} job(s); load average (1/5/15 min) at start "
          f"{', '.join(f'{x:.2f}' for x in load_start)}, at end "
          f"{', '.join(f'{x:.2f}' for x in load_end)}; {os.cpu_count()} CPUs")  # fmt: skip
    if args.json:
        out = {
            "config": {
                "planners": planners,
                "target": args.target,
                "requests": requests,
                "seed": args.seed,
                "quick": args.quick,
                "cases_filter": args.cases,
                "jobs": args.jobs,
                "router": args.router,
                "baseline": not args.no_baseline,
                "max_tp": args.max_tp,
                "over_provision": OVER_PROVISION,
                "cap": f"max(start, min({CAP_FACTOR} × start, {CAP_REPLICAS}))",
            },
            "cases": len(rows),
            "served": len(served),
            "skipped": skipped,
            "summary": summaries,
            "baseline_simulations": sims,
            "run_s": round(run_s, 2),
            "load_average": {"start": list(load_start), "end": list(load_end)},
            "cpus": os.cpu_count(),
            "per_case": rows,
        }
        print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
