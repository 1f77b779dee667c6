"""Benchmark: aggregated ILP vs. Mélange's per-slice ILP (§5.4.3) on paper-sized inputs.

Paper setup (§6.1): 4 GPU types (L4, A10G, A100-80G, H100 at $0.70/1.01/3.67/7.516 per hour),
10 input × 6 output buckets, slice factor 8 = 480 slices, rates 1–32 req/s, TPOT 40 and
120 ms, short (Arena-like), long (PubMed-like) and mixed (80/20) workloads. Both
formulations run on HiGHS in the same process per case; costs must match.

MaxTput tables come from a small analytic model (no profiling data is shipped), chosen
only so that the instance has the paper's structure — see :func:`max_tput`.

Usage: ``.venv/bin/python bench/solver.py [--quick] [--json] [--paper-time-limit S]``
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass

from gpumix.plan import (
    AllocationInstance,
    Formulation,
    GPUOption,
    SolverError,
    solve,
)

INPUT_EDGES = [1, 25, 100, 250, 500, 1000, 2000, 4000, 8000, 12000, 16000]
OUTPUT_EDGES = [1, 25, 100, 250, 500, 1000, 2000]
RATES = [1, 2, 4, 8, 16, 32]
SLOS_MS = [40, 120]
SHAPES = ["short", "long", "mixed"]


@dataclass(frozen=True)
class GPUModel:
    """Parameters of the analytic throughput model for one GPU type."""

    name: str
    cost: float
    speed: float  # relative compute/bandwidth (L4 = 1)
    base_tpot_ms: float  # decode latency at batch 1: the SLO leaves 1 - base/SLO for batching
    kv_tokens: int  # KV-cache scale: long prompts crowd out batching sooner on small memory
    saturation_tokens: int  # request size at which the GPU reaches half its peak efficiency
    max_tokens: int | None  # longest input that fits at all (None = any bucket)


GPUS = [
    GPUModel("L4", 0.70, 1.0, 30.0, 6_000, 50, 12_000),
    GPUModel("A10G", 1.01, 1.5, 25.0, 6_000, 80, 12_000),
    GPUModel("A100-80G", 3.67, 6.0, 12.0, 40_000, 600, None),
    GPUModel("H100", 7.516, 12.0, 8.0, 40_000, 1500, None),
]
DECODE_WEIGHT = 20  # an output token costs ~20 prompt tokens of work


def midpoint(edges: list[int], k: int) -> float:
    return math.sqrt(edges[k] * edges[k + 1])


def max_tput(gpu: GPUModel, i: int, j: int, slo_ms: int) -> float:
    """MaxTput(G, bucket, SLO) in req/s, a stand-in for §5.3 profiling.

    ``speed · (1 - base_tpot/SLO) · util · 1000 / (in · (1 + in/kv_tokens) + 20 · out)`` at
    the bucket's geometric midpoint, with ``util = size / (size + saturation_tokens)``:
    throughput falls with request size, grows with GPU size, shrinks as the SLO tightens;
    big GPUs need big requests to be used well, small-memory GPUs degrade faster on long
    prompts and cannot take inputs beyond 12k tokens at all (as L4/A10G in §6.2). So cheap
    GPUs win on short requests at loose SLOs and A100/H100 on long ones and tight SLOs.
    """
    if gpu.max_tokens is not None and INPUT_EDGES[i + 1] > gpu.max_tokens:
        return 0.0
    headroom = 1.0 - gpu.base_tpot_ms / slo_ms
    size_in, size_out = midpoint(INPUT_EDGES, i), midpoint(OUTPUT_EDGES, j)
    work = size_in * (1 + size_in / gpu.kv_tokens) + DECODE_WEIGHT * size_out
    util = (size_in + size_out) / (size_in + size_out + gpu.saturation_tokens)
    return round(gpu.speed * headroom * util * 1000.0 / work, 4)


def _normalise(weights: list[float]) -> list[float]:
    total = sum(weights)
    return [w / total for w in weights]


# Marginal histograms (input over 10 buckets, output over 6), shaped like Fig. 10.
SHORT_IN = _normalise([4, 14, 22, 22, 16, 12, 7, 3, 0, 0])
SHORT_OUT = _normalise([10, 30, 30, 20, 8, 2])
LONG_IN = _normalise([0, 0, 0, 0, 1, 4, 16, 36, 28, 15])
LONG_OUT = _normalise([0, 5, 35, 45, 13, 2])


def histogram(shape: str) -> list[list[float]]:
    """Fraction of requests per bucket; independent input/output marginals."""
    short = [[a * b for b in SHORT_OUT] for a in SHORT_IN]
    long = [[a * b for b in LONG_OUT] for a in LONG_IN]
    if shape == "short":
        return short
    if shape == "long":
        return long
    return [
        [0.8 * s + 0.2 * p for s, p in zip(rs, rp, strict=True)]
        for rs, rp in zip(short, long, strict=True)
    ]


def build_instance(shape: str, rate: float, slo_ms: int) -> AllocationInstance:
    rows, cols = len(INPUT_EDGES) - 1, len(OUTPUT_EDGES) - 1
    return AllocationInstance(
        rates=[[rate * f for f in row] for row in histogram(shape)],
        gpus=[
            GPUOption(
                name=g.name,
                cost_per_hour=g.cost,
                max_tput=[[max_tput(g, i, j, slo_ms) for j in range(cols)] for i in range(rows)],
            )
            for g in GPUS
        ],
        slice_factor=8,
        input_edges=INPUT_EDGES,
        output_edges=OUTPUT_EDGES,
        slo_label=f"TPOT {slo_ms} ms",
    )


@dataclass
class Run:
    seconds: float
    cost: float | None
    status: str


@dataclass
class Case:
    shape: str
    slo_ms: int
    rate: float
    aggregated: Run
    paper: Run
    ratio: float
    costs_equal: bool
    counts: dict[str, int]


def timed(instance: AllocationInstance, formulation: Formulation, limit: float) -> Run:
    """End-to-end ``solve`` wall time: model build + HiGHS + validation, as the operator pays."""
    start = time.perf_counter()
    try:
        allocation = solve(instance, formulation, time_limit_s=limit)
    except SolverError as exc:
        return Run(time.perf_counter() - start, None, exc.result.status)
    seconds = time.perf_counter() - start
    if allocation is None:
        return Run(seconds, None, "infeasible")
    return Run(seconds, allocation.cost_per_hour, allocation.result.status)


def run_case(shape: str, slo_ms: int, rate: float, limits: tuple[float, float]) -> Case:
    instance = build_instance(shape, rate, slo_ms)
    ours = timed(instance, Formulation.AGGREGATED, limits[0])
    paper = timed(instance, Formulation.PAPER, limits[1])
    counts = solve(instance)
    equal = ours.cost is not None and paper.cost is not None and abs(ours.cost - paper.cost) <= 1e-6
    return Case(
        shape=shape,
        slo_ms=slo_ms,
        rate=rate,
        aggregated=ours,
        paper=paper,
        ratio=paper.seconds / ours.seconds,
        costs_equal=equal,
        counts=counts.counts if counts is not None else {},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 cases, for a smoke test")
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--paper-time-limit", type=float, default=60.0, metavar="S")
    parser.add_argument("--aggregated-time-limit", type=float, default=60.0, metavar="S")
    args = parser.parse_args()

    grid = [(shape, slo, rate) for shape in SHAPES for slo in SLOS_MS for rate in RATES]
    if args.quick:
        grid = [("short", 120, 4), ("long", 40, 8), ("mixed", 120, 32), ("mixed", 40, 1)]
    limits = (args.aggregated_time_limit, args.paper_time_limit)

    cases = []
    header = f"{'shape':6} {'slo':>4} {'rate':>4} {'ours s':>8} {'paper s':>8} {'ratio':>7} "
    print(header + f"{'cost $/h':>9} equal  mix (L4/A10G/A100/H100)   paper status")
    for shape, slo, rate in grid:
        case = run_case(shape, slo, rate, limits)
        cases.append(case)
        cost = case.aggregated.cost
        mix = "/".join(str(case.counts.get(g.name, 0)) for g in GPUS)
        print(
            f"{shape:6} {slo:>4} {rate:>4} {case.aggregated.seconds:8.3f} "
            f"{case.paper.seconds:8.3f} {case.ratio:7.1f} "
            f"{cost if cost is not None else float('nan'):9.3f} {case.costs_equal!s:5}  "
            f"{mix:24} {case.paper.status}",
            flush=True,
        )

    ratios = [c.ratio for c in cases]
    worst = max(cases, key=lambda c: c.paper.seconds)
    summary = {
        "cases": len(cases),
        "all_costs_equal": all(c.costs_equal for c in cases),
        "ratio_median": statistics.median(ratios),
        "ratio_max": max(ratios),
        "ratio_min": min(ratios),
        "aggregated_seconds_median": statistics.median(c.aggregated.seconds for c in cases),
        "aggregated_seconds_max": max(c.aggregated.seconds for c in cases),
        "paper_seconds_median": statistics.median(c.paper.seconds for c in cases),
        "paper_seconds_max": worst.paper.seconds,
        "worst_case": {"shape": worst.shape, "slo_ms": worst.slo_ms, "rate": worst.rate},
        "worst_case_speedup": worst.ratio,
        "paper_time_limit_hits": sum(c.paper.status != "optimal" for c in cases),
        "aggregated_time_limit_hits": sum(c.aggregated.status != "optimal" for c in cases),
        "paper_time_limit_s": args.paper_time_limit,
    }
    print(
        f"\nratio paper/ours: median {summary['ratio_median']:.1f}x, "
        f"max {summary['ratio_max']:.1f}x, min {summary['ratio_min']:.1f}x; "
        f"worst paper case {worst.shape}/{worst.slo_ms}ms/"
        f"{worst.rate} req/s: {worst.paper.seconds:.2f}s vs {worst.aggregated.seconds:.3f}s "
        f"= {worst.ratio:.1f}x; costs equal: {summary['all_costs_equal']}; "
        f"paper time-limit hits: {summary['paper_time_limit_hits']}"
    )
    if args.json:
        summary["per_case"] = [asdict(c) for c in cases]
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
