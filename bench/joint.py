"""Benchmark: the joint planner at Coral scale, and churn with and without Coral's penalty.

**Scale** (Coral §6, core setting; Jiang §4.3 configurations): 6 services (Llama-2 7B, 13B and
70B, two workloads/SLOs each), 5 GPU types (L4, A10G, A40, A100-80GB, H100) × {1, 2, 4, 8} GPUs
per replica = 20 replica configurations (those whose memory cannot hold the weights plus a
minimum KV cache are never generated), 10 × 6 buckets, slice factor 8, MaxTput from the
calibrated roofline (`gpumix.profiles.roofline`). Pool limits bind: each pool gets 60% of the
GPUs the unconstrained joint plan would put there (at least 8). Reported: joint solve time
(build + every stage + validation), status and gap, cost, services fully served, and the same for
the baseline measured in the same run — the services planned one at a time, oldest first, each
taking the cheapest full plan in what is left (the operator's previous behaviour).

**Churn** (Coral §4.3): 3 services follow a fluctuating demand trace (diurnal sine ± 30%, plus
± 6% noise, `--steps` planning intervals, seeded). Baseline: replan every step at the exact
demand with no churn penalty (ties still go to the running mix). Churn-aware: Coral's penalty
λ = `--churn-penalty` on newly added replicas plus the scale-down deadband
(`gpumix.plan.joint.churn.planned_rate`, tolerance `--tolerance`). Reported: replica changes
(added + removed over the trace), mean $/h, and both as ratios.

The joint solve is repeated ``--repeats`` times (median reported, each time listed, with the load
average: the VM is shared); ``--compact`` also times the single compact ILP the Benders
decomposition replaces (``solve_joint(..., decompose=False)``, once).

Usage: ``.venv/bin/python bench/joint.py [--json] [--quick] [--steps N] [--gap G] [--repeats N]
[--compact]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import statistics
import sys
import time
from typing import Any

from gpumix.plan.joint import (
    JointInstance,
    PoolLimit,
    ReplicaOption,
    ServiceDemand,
    solve_joint,
    solve_sequential,
)
from gpumix.plan.joint.churn import DEFAULT_CHURN_PENALTY, DEFAULT_TOLERANCE, planned_rate
from gpumix.problem import replica_fits
from gpumix.profiles import CATALOG
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import Roofline

INPUT_EDGES = [1, 64, 128, 256, 512, 768, 1024, 1536, 2048, 2560, 3072]
OUTPUT_EDGES = [1, 32, 64, 128, 256, 512, 1001]
GPUS = ["l4", "a10g", "a40", "a100-80gb", "h100"]
TP = [1, 2, 4, 8]
SERVICES = [  # (name, model, TPOT ms, workload shape, req/s)
    ("chat-7b", "meta-llama/Llama-2-7b-hf", 120, "short", 24.0),
    ("rag-7b", "meta-llama/Llama-2-7b-hf", 60, "long", 8.0),
    ("chat-13b", "meta-llama/Llama-2-13b-hf", 120, "short", 12.0),
    ("code-13b", "meta-llama/Llama-2-13b-hf", 80, "mixed", 6.0),
    ("chat-70b", "meta-llama/Llama-2-70b-hf", 150, "short", 4.0),
    ("summ-70b", "meta-llama/Llama-2-70b-hf", 200, "long", 1.5),
]


def _norm(w: list[float]) -> list[float]:
    return [x / sum(w) for x in w]


SHORT = (_norm([10, 18, 22, 20, 14, 8, 5, 2, 1, 0]), _norm([12, 25, 30, 20, 10, 3]))
LONG = (_norm([0, 1, 2, 6, 10, 14, 22, 22, 14, 9]), _norm([20, 35, 25, 14, 5, 1]))


def histogram(shape: str) -> list[list[float]]:
    def outer(m: tuple[list[float], list[float]]) -> list[list[float]]:
        return [[a * b for b in m[1]] for a in m[0]]

    short, long = outer(SHORT), outer(LONG)
    if shape == "short":
        return short
    if shape == "long":
        return long
    return [
        [0.5 * s + 0.5 * q for s, q in zip(a, b, strict=True)]
        for a, b in zip(short, long, strict=True)
    ]


def options(model: str, tpot_ms: float, gpus: list[str], tps: list[int]) -> list[ReplicaOption]:
    """Replica configurations of one service: memory check, then roofline MaxTput per bucket."""
    shape = model_shape(model)
    mids_in = [(a + b) / 2 for a, b in itertools.pairwise(INPUT_EDGES)]
    mids_out = [(a + b) / 2 for a, b in itertools.pairwise(OUTPUT_EDGES)]
    out = []
    for gpu, k in itertools.product(gpus, tps):
        spec = CATALOG[gpu]
        if not replica_fits(spec, shape, k):
            continue
        roof = Roofline(spec, shape, k)
        table = [[round(roof.max_tput(i, o, tpot_ms), 4) for o in mids_out] for i in mids_in]
        if not any(v > 0 for row in table for v in row):
            continue
        assert spec.price_per_hour is not None
        out.append(ReplicaOption(
            name=gpu if k == 1 else f"{gpu}-tp{k}", pool=gpu, gpus_per_replica=k,
            cost_per_hour=round(spec.price_per_hour * k, 4), max_tput=table,
        ))  # fmt: skip
    return out


def build_services(gpus: list[str], tps: list[int], chosen: list[int]) -> list[ServiceDemand]:
    services = []
    for idx in chosen:
        name, model, tpot, shape, rate = SERVICES[idx]
        services.append(ServiceDemand(
            name=name, rates=[[rate * f for f in row] for row in histogram(shape)],
            options=options(model, tpot, gpus, tps), slice_factor=8,
            input_edges=INPUT_EDGES, output_edges=OUTPUT_EDGES, slo_label=f"TPOT {tpot} ms",
        ))  # fmt: skip
    return services


def scale_bench(
    quick: bool, gap: float, time_limit: float, repeats: int = 3, with_compact: bool = False
) -> dict[str, Any]:
    chosen = [0, 2, 4] if quick else list(range(len(SERVICES)))
    t0 = time.perf_counter()
    services = build_services(GPUS, TP, chosen)
    build_s = time.perf_counter() - t0
    configs = len(GPUS) * len(TP)
    generated = sum(len(s.options) for s in services)
    free = JointInstance(services=services, pools=[PoolLimit(name=g) for g in GPUS])
    unconstrained = solve_joint(free, time_limit_s=time_limit, gap_rel=gap)
    assert unconstrained is not None
    limits = {g: max(8, math.floor(0.6 * unconstrained.pool_gpus[g])) for g in GPUS}
    inst = free.model_copy(update={"pools": [PoolLimit(name=g, gpus=n) for g, n in limits.items()]})
    load_start = os.getloadavg()[0]
    joint_times, seq_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        joint = solve_joint(inst, time_limit_s=time_limit, gap_rel=gap)
        joint_times.append(time.perf_counter() - t0)
        assert joint is not None
        t0 = time.perf_counter()
        seq = solve_sequential(inst, time_limit_s=time_limit, gap_rel=gap)
        seq_times.append(time.perf_counter() - t0)
    joint_s, seq_s = statistics.median(joint_times), statistics.median(seq_times)
    compact: dict[str, Any] = {}
    if with_compact:  # the single compact ILP the decomposition replaces (same run, once)
        t0 = time.perf_counter()
        plain = solve_joint(inst, time_limit_s=time_limit, gap_rel=gap, decompose=False)
        assert plain is not None
        compact = {"compact_s": round(time.perf_counter() - t0, 3),
                   "compact_status": plain.result.status, "compact_gap": plain.result.gap,
                   "compact_cost": round(plain.cost_per_hour, 3)}  # fmt: skip
    joint_served = sum(a.unserved_rate == 0 for a in joint.services.values())
    unserved = {n: round(a.unserved_fraction, 4) for n, a in joint.services.items()}
    seq_unserved_rate = sum(s.total_rate for s in services if seq.services[s.name] is None) / sum(
        s.total_rate for s in services
    )
    joint_unserved_rate = sum(a.unserved_rate for a in joint.services.values()) / sum(
        s.total_rate for s in services
    )
    return {
        "services": len(services),
        "configurations": configs,
        "options_generated": generated,
        "buckets": (len(INPUT_EDGES) - 1) * (len(OUTPUT_EDGES) - 1),
        "pool_limits": limits,
        "unconstrained_pool_gpus": unconstrained.pool_gpus,
        "profile_build_s": round(build_s, 3),
        "repeats": repeats,
        "load_average_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "joint_s": round(joint_s, 3),
        "joint_s_all": [round(t, 3) for t in joint_times],
        "joint_message": joint.result.message,
        "joint_stages": len(joint.stages),
        "joint_status": joint.result.status,
        "joint_gap": joint.result.gap,
        "joint_cost": round(joint.cost_per_hour, 3),
        "joint_served_in_full": joint_served,
        "joint_unserved_traffic": round(joint_unserved_rate, 4),
        "joint_unserved_by_service": unserved,
        "joint_pool_gpus": joint.pool_gpus,
        "sequential_s": round(seq_s, 3),
        "sequential_s_all": [round(t, 3) for t in seq_times],
        "sequential_cost": round(seq.cost_per_hour, 3),
        "sequential_served_in_full": seq.served,
        "sequential_unserved_traffic": round(seq_unserved_rate, 4),
        "joint_vs_sequential_time": round(joint_s / seq_s, 3) if seq_s else None,
        "joint_vs_sequential_cost": round(joint.cost_per_hour / seq.cost_per_hour, 4)
        if seq.cost_per_hour
        else None,
        **compact,
    }


def trace(steps: int, seed: int, n: int) -> list[list[float]]:
    """Demand multipliers per step and service: a day-shaped sine, ±30%, with ±6% noise."""
    rng = random.Random(seed)
    return [
        [
            (1 + 0.3 * math.sin(2 * math.pi * (t / 24 + s / n))) * (1 + rng.uniform(-0.06, 0.06))
            for s in range(n)
        ]
        for t in range(steps)
    ]


def churn_run(
    base: list[ServiceDemand], pools: list[PoolLimit], mult: list[list[float]], *, aware: bool,
    penalty: float, tolerance: float, time_limit: float,
) -> dict[str, Any]:  # fmt: skip
    running: dict[str, dict[str, int]] = {s.name: {} for s in base}
    planned: dict[str, float | None] = {s.name: None for s in base}
    changes, costs, seconds, unserved = 0, [], [], 0.0
    for step in mult:
        services = []
        for s, m in zip(base, step, strict=True):
            actual = s.total_rate * m
            rate = planned_rate(actual, planned[s.name], tolerance) if aware else actual
            planned[s.name] = rate
            scale = rate / s.total_rate
            services.append(s.model_copy(update={
                "rates": [[r * scale for r in row] for row in s.rates],
                "churn_penalty": penalty if aware else 0.0,
                "options": [o.model_copy(update={"running": running[s.name].get(o.name, 0)})
                            for o in s.options],
            }))  # fmt: skip
        t0 = time.perf_counter()
        plan = solve_joint(JointInstance(services=services, pools=pools), time_limit_s=time_limit)
        seconds.append(time.perf_counter() - t0)
        assert plan is not None
        for s in services:
            alloc = plan.services[s.name]
            before = running[s.name]
            changes += sum(abs(alloc.counts[o.name] - before.get(o.name, 0)) for o in s.options)
            running[s.name] = dict(alloc.counts)
            unserved += alloc.unserved_rate
        costs.append(plan.cost_per_hour)
    return {
        "replica_changes": changes,
        "mean_cost": round(statistics.fmean(costs), 3),
        "median_solve_s": round(statistics.median(seconds), 3),
        "unserved_req_s_total": round(unserved, 4),
    }


def churn_bench(
    steps: int, seed: int, penalty: float, tolerance: float, limit: float
) -> dict[str, Any]:
    base = build_services(["l4", "a10g", "a100-80gb", "h100"], [1, 2], [0, 2, 4])
    pools = [PoolLimit(name=g) for g in ("l4", "a10g", "a100-80gb", "h100")]
    mult = trace(steps, seed, len(base))
    plain = churn_run(base, pools, mult, aware=False, penalty=0.0, tolerance=0.0, time_limit=limit)
    aware = churn_run(
        base, pools, mult, aware=True, penalty=penalty, tolerance=tolerance, time_limit=limit
    )
    return {
        "steps": steps,
        "churn_penalty": penalty,
        "tolerance": tolerance,
        "baseline": plain,
        "churn_aware": aware,
        "changes_ratio": round(aware["replica_changes"] / max(1, plain["replica_changes"]), 3),
        "cost_ratio": round(aware["mean_cost"] / plain["mean_cost"], 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--quick", action="store_true", help="3 services, 12-step trace")
    parser.add_argument("--steps", type=int, default=48, help="planning intervals in the trace")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--gap", type=float, default=0.01, help="relative MIP gap (0 = optimal)")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per solve stage")
    parser.add_argument("--repeats", type=int, default=3, help="scale solves (median reported)")
    parser.add_argument(
        "--compact", action="store_true", help="also time the compact ILP (~15 s, once)"
    )
    parser.add_argument("--churn-penalty", type=float, default=DEFAULT_CHURN_PENALTY)
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    args = parser.parse_args()
    scale = scale_bench(args.quick, args.gap, args.time_limit, args.repeats, args.compact)
    steps = 12 if args.quick else args.steps
    churn = churn_bench(steps, args.seed, args.churn_penalty, args.tolerance, args.time_limit)
    print(f"scale: {scale['services']} services × {scale['configurations']} configurations "
          f"({scale['options_generated']} generated after the memory check) × "
          f"{scale['buckets']} buckets; pool limits {scale['pool_limits']}")  # fmt: skip
    print(f"  joint:      {scale['joint_s']:.3f} s median of {scale['joint_s_all']} "
          f"({scale['joint_status']}, gap {scale['joint_gap']:.4%}; {scale['joint_message']}), "
          f"{scale['joint_cost']:.2f} $/h, "
          f"{scale['joint_served_in_full']}/{scale['services']} served in full, "
          f"{100 * scale['joint_unserved_traffic']:.1f}% of traffic unserved")  # fmt: skip
    if "compact_s" in scale:
        print(f"  compact ILP (no decomposition): {scale['compact_s']:.3f} s "
              f"({scale['compact_status']}, gap {scale['compact_gap']}), "
              f"{scale['compact_cost']:.2f} $/h")  # fmt: skip
    print(f"  one by one: {scale['sequential_s']:.3f} s median of {scale['sequential_s_all']}, "
          f"{scale['sequential_cost']:.2f} $/h, "
          f"{scale['sequential_served_in_full']}/{scale['services']} served in full, "
          f"{100 * scale['sequential_unserved_traffic']:.1f}% of traffic unserved")  # fmt: skip
    print(f"  load average (1 min) before/after: {scale['load_average_1m']}")
    print(f"  ratios joint/one-by-one: time {scale['joint_vs_sequential_time']}×, "
          f"cost {scale['joint_vs_sequential_cost']}×")  # fmt: skip
    b, a = churn["baseline"], churn["churn_aware"]
    print(f"churn: {churn['steps']} steps, λ={churn['churn_penalty']}, "
          f"tolerance {churn['tolerance']:.0%}")  # fmt: skip
    print(f"  baseline:    {b['replica_changes']} replica changes, {b['mean_cost']:.2f} $/h mean")
    print(f"  churn-aware: {a['replica_changes']} replica changes, {a['mean_cost']:.2f} $/h mean")
    print(
        f"  ratios aware/baseline: changes {churn['changes_ratio']}×, cost {churn['cost_ratio']}×"
    )
    if args.json:
        print(json.dumps({"scale": scale, "churn": churn}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
