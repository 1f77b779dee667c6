"""Benchmark: aggregated ILP vs. Mélange's per-slice ILP (§5.4.3) on paper-sized inputs.

Paper setup (§6.1): 4 GPU types (L4, A10G, A100-80G, H100 at $0.70/1.01/3.67/7.516 per hour),
10 input × 6 output buckets, slice factor 8 = 480 slices, rates 1–32 req/s, TPOT 40 and
120 ms, short (Arena-like), long (PubMed-like) and mixed (80/20) workloads. Per case, both
formulations run back to back in the same process on each solver (HiGHS, the default, and
CBC, PuLP's default and what Mélange's reference implementation used). Per solver it reports
the speed-up paper/ours and whether the costs agree; with both solvers also the end-to-end
pairing a user of the reference solver sees: paper formulation on CBC vs. ours on HiGHS.

A run stopped by its time limit (``--cbc-time-limit``, ``--paper-time-limit``) gives a lower
bound on that formulation's time and possibly a non-optimal cost; both are counted. Ours must
never cost more than the paper formulation: if it does, the script exits with status 1.

MaxTput tables come from a small analytic model (no profiling data is shipped), chosen
only so that the instance has the paper's structure — see :func:`max_tput`.

Usage: ``.venv/bin/python bench/solver.py [--quick] [--json] [--solvers highs,cbc]
[--cbc-time-limit S] [--paper-time-limit S] [--aggregated-time-limit S]``
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from gpumix.plan import (
    AllocationInstance,
    Formulation,
    GPUOption,
    SolverError,
    solve,
)
from gpumix.plan.result import SolverName

INPUT_EDGES = [1, 25, 100, 250, 500, 1000, 2000, 4000, 8000, 12000, 16000]
OUTPUT_EDGES = [1, 25, 100, 250, 500, 1000, 2000]
RATES = [1, 2, 4, 8, 16, 32]
SLOS_MS = [40, 120]
SHAPES = ["short", "long", "mixed"]
SOLVERS: tuple[SolverName, ...] = ("highs", "cbc")
LIMIT_STATUSES = ("feasible", "time_limit_no_solution")  # what a stop at the time limit maps to
COST_TOL = 1e-6  # $/h; costs are sums of count × price


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


@dataclass(frozen=True)
class Limits:
    """Time limits (s) per formulation for one solver."""

    aggregated: float
    paper: float


@dataclass
class Run:
    """One end-to-end ``solve`` of one formulation on one solver."""

    seconds: float
    cost: float | None
    status: str
    hit_limit: bool  # stopped by the time limit: seconds is a lower bound, cost maybe not optimal
    counts: dict[str, int]


@dataclass
class Comparison:
    """Paper formulation vs. ours on one case (same solver, or the end-to-end pairing)."""

    aggregated: Run
    paper: Run
    ratio: float  # paper seconds / ours seconds
    ratio_bound: str  # "exact", "lower" (only paper hit its limit), "upper", "censored" (both)
    cost: str  # "equal", "paper_worse", "ours_worse" (must never happen), "both_missing"


@dataclass
class Case:
    shape: str
    slo_ms: int
    rate: float
    by_solver: dict[str, Comparison]
    end_to_end: Comparison | None  # paper on CBC vs. ours on HiGHS, when both solvers ran


def timed(
    instance: AllocationInstance, formulation: Formulation, solver: SolverName, limit: float
) -> Run:
    """End-to-end ``solve`` wall time: model build + solver + validation, as the operator pays."""
    start = time.perf_counter()
    try:
        allocation = solve(instance, formulation, solver=solver, time_limit_s=limit)
    except SolverError as exc:
        status = exc.result.status
        return Run(time.perf_counter() - start, None, status, status in LIMIT_STATUSES, {})
    seconds = time.perf_counter() - start
    if allocation is None:
        return Run(seconds, None, "infeasible", False, {})
    status = allocation.result.status
    return Run(
        seconds, allocation.cost_per_hour, status, status in LIMIT_STATUSES, allocation.counts
    )


def compare(ours: Run, paper: Run) -> Comparison:
    if ours.cost is None or paper.cost is None:
        if ours.cost is None and paper.cost is None:
            verdict = "both_missing"
        else:
            verdict = "ours_worse" if ours.cost is None else "paper_worse"
    elif abs(ours.cost - paper.cost) <= COST_TOL:
        verdict = "equal"
    else:
        verdict = "paper_worse" if paper.cost > ours.cost else "ours_worse"
    bound = {
        (False, False): "exact",
        (False, True): "lower",
        (True, False): "upper",
        (True, True): "censored",
    }[ours.hit_limit, paper.hit_limit]
    return Comparison(ours, paper, paper.seconds / ours.seconds, bound, verdict)


def run_case(
    shape: str, slo_ms: int, rate: float, solvers: list[SolverName], limits: dict[str, Limits]
) -> Case:
    """Both formulations on every solver, back to back, on one instance."""
    instance = build_instance(shape, rate, slo_ms)
    by_solver: dict[str, Comparison] = {}
    for solver in solvers:
        ours = timed(instance, Formulation.AGGREGATED, solver, limits[solver].aggregated)
        paper = timed(instance, Formulation.PAPER, solver, limits[solver].paper)
        by_solver[solver] = compare(ours, paper)
    end_to_end = None
    if "highs" in by_solver and "cbc" in by_solver:
        end_to_end = compare(by_solver["highs"].aggregated, by_solver["cbc"].paper)
    return Case(shape, slo_ms, rate, by_solver, end_to_end)


def order_bounds(pairs: list[Comparison]) -> dict[str, str]:
    """Whether the median/max/min ratio is "exact" or a "lower" bound, given limit-hit runs.

    A paper run stopped at its limit only raises its true ratio; the median stays exact if
    every such ratio already lies above the upper middle value. If ours hit a limit too,
    the direction is unknown.
    """
    if any(p.ratio_bound in ("upper", "censored") for p in pairs):
        return dict.fromkeys(("median", "max", "min"), "unknown")
    ratios = sorted(p.ratio for p in pairs)
    raised = [p.ratio for p in pairs if p.ratio_bound == "lower"]
    if not raised:
        return dict.fromkeys(("median", "max", "min"), "exact")
    min_exact = any(p.ratio == ratios[0] and p.ratio_bound == "exact" for p in pairs)
    return {
        "median": "exact" if all(r > ratios[len(ratios) // 2] for r in raised) else "lower",
        "max": "lower",
        "min": "exact" if min_exact else "lower",
    }


def summarise(cases: list[Case], pairs: list[Comparison]) -> dict[str, object]:
    """Figures over one column of comparisons (``pairs[n]`` belongs to ``cases[n]``)."""
    ratios = [p.ratio for p in pairs]
    worst_n = max(range(len(pairs)), key=lambda n: pairs[n].paper.seconds)
    worst, worst_case = pairs[worst_n], cases[worst_n]
    verdicts = [p.cost for p in pairs]
    bounds = {p.ratio_bound for p in pairs}
    limit_hit = [p.ratio for p in pairs if p.paper.hit_limit]
    return {
        "cases": len(pairs),
        "all_costs_equal": all(v == "equal" for v in verdicts),
        "costs_equal": verdicts.count("equal"),
        "costs_differ": len(verdicts) - verdicts.count("equal"),
        "paper_cost_worse": verdicts.count("paper_worse"),
        "ours_cost_worse": verdicts.count("ours_worse"),
        "paper_no_solution": sum(p.paper.cost is None for p in pairs),
        "ratio_median": statistics.median(ratios),
        "ratio_max": max(ratios),
        "ratio_min": min(ratios),
        **{f"ratio_{name}_bound": bound for name, bound in order_bounds(pairs).items()},
        "ratio_bounds": {b: sum(p.ratio_bound == b for p in pairs) for b in sorted(bounds)},
        "aggregated_seconds_median": statistics.median(p.aggregated.seconds for p in pairs),
        "aggregated_seconds_max": max(p.aggregated.seconds for p in pairs),
        "paper_seconds_median": statistics.median(p.paper.seconds for p in pairs),
        "paper_seconds_max": worst.paper.seconds,
        "worst_case": {
            "shape": worst_case.shape,
            "slo_ms": worst_case.slo_ms,
            "rate": worst_case.rate,
        },
        "worst_case_speedup": worst.ratio,
        "worst_case_ratio_bound": worst.ratio_bound,
        "worst_case_paper_status": worst.paper.status,
        "worst_case_costs": {"aggregated": worst.aggregated.cost, "paper": worst.paper.cost},
        "paper_time_limit_hits": len(limit_hit),
        # Runs stopped at the same limit tie for "slowest": their speed-ups, all lower bounds.
        "paper_limit_hit_ratio_min": min(limit_hit, default=None),
        "paper_limit_hit_ratio_max": max(limit_hit, default=None),
        "aggregated_time_limit_hits": sum(p.aggregated.hit_limit for p in pairs),
        "paper_not_optimal": sum(p.paper.status != "optimal" for p in pairs),
        "aggregated_not_optimal": sum(p.aggregated.status != "optimal" for p in pairs),
    }


def headline(label: str, s: dict[str, Any]) -> str:
    mark = {"exact": "", "lower": "≥", "upper": "≤", "censored": "?", "unknown": "?"}
    worst = s["worst_case"]
    text = (
        f"{label}: speed-up paper/ours median {mark[s['ratio_median_bound']]}"
        f"{s['ratio_median']:.1f}x, max {mark[s['ratio_max_bound']]}{s['ratio_max']:.1f}x, "
        f"min {mark[s['ratio_min_bound']]}{s['ratio_min']:.1f}x; "
        f"slowest paper case {worst['shape']}/{worst['slo_ms']}ms/{worst['rate']} req/s: "
        f"{s['paper_seconds_max']:.2f}s ({s['worst_case_paper_status']}) = "
        f"{mark[s['worst_case_ratio_bound']]}{s['worst_case_speedup']:.1f}x"
    )
    if s["paper_time_limit_hits"] > 1 and s["worst_case_paper_status"] != "optimal":
        text += (
            f" (tied with the other paper runs stopped at the limit; speed-ups on those "
            f"{s['paper_time_limit_hits']} cases: ≥{s['paper_limit_hit_ratio_min']:.1f}x "
            f"to ≥{s['paper_limit_hit_ratio_max']:.1f}x)"
        )
    return text + (
        f"; costs equal {s['costs_equal']}/{s['cases']} (paper worse "
        f"{s['paper_cost_worse']}, ours worse {s['ours_cost_worse']}); time-limit hits paper "
        f"{s['paper_time_limit_hits']}, ours {s['aggregated_time_limit_hits']}"
    )


def fmt_cost(cost: float | None) -> str:
    return f"{cost:9.3f}" if cost is not None else f"{'-':>9}"


def parse_solvers(text: str) -> list[SolverName]:
    names: list[SolverName] = []
    for raw in text.split(","):
        matches = [solver for solver in SOLVERS if solver == raw.strip()]
        if not matches:
            raise argparse.ArgumentTypeError(f"unknown solver {raw!r} (choose from highs, cbc)")
        solver = matches[0]
        if solver not in names:
            names.append(solver)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 cases, for a smoke test")
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument(
        "--solvers", type=parse_solvers, default=list(SOLVERS), help="default: highs,cbc"
    )
    parser.add_argument("--paper-time-limit", type=float, default=60.0, metavar="S", help="HiGHS")
    parser.add_argument(
        "--aggregated-time-limit", type=float, default=60.0, metavar="S", help="HiGHS"
    )
    parser.add_argument(
        "--cbc-time-limit", type=float, default=20.0, metavar="S", help="CBC, both formulations"
    )
    args = parser.parse_args()
    solvers: list[SolverName] = args.solvers

    grid = [(shape, slo, rate) for shape in SHAPES for slo in SLOS_MS for rate in RATES]
    if args.quick:
        grid = [("short", 120, 4), ("long", 40, 8), ("mixed", 120, 32), ("mixed", 40, 1)]
    limits = {
        "highs": Limits(args.aggregated_time_limit, args.paper_time_limit),
        "cbc": Limits(args.cbc_time_limit, args.cbc_time_limit),
    }

    cases = []
    print(
        f"{'shape':6} {'slo':>4} {'rate':>4} {'solver':6} {'ours s':>8} {'paper s':>8} "
        f"{'ratio':>7} {'ours $/h':>9} {'paper $/h':>9} {'cost':11} "
        "mix (L4/A10G/A100/H100)   paper status"
    )
    for shape, slo, rate in grid:
        case = run_case(shape, slo, rate, solvers, limits)
        cases.append(case)
        for solver, c in case.by_solver.items():
            mix = "/".join(str(c.aggregated.counts.get(g.name, 0)) for g in GPUS)
            mark = {"exact": " ", "lower": "≥", "upper": "≤", "censored": "?"}[c.ratio_bound]
            print(
                f"{shape:6} {slo:>4} {rate:>4} {solver:6} {c.aggregated.seconds:8.3f} "
                f"{c.paper.seconds:8.3f} {mark}{c.ratio:6.1f} {fmt_cost(c.aggregated.cost)} "
                f"{fmt_cost(c.paper.cost)} {c.cost:11} {mix:24}  {c.paper.status}",
                flush=True,
            )

    per_solver: dict[str, dict[str, Any]] = {}
    print()
    for solver in solvers:
        s = summarise(cases, [c.by_solver[solver] for c in cases])
        s["time_limit_s"] = asdict(limits[solver])
        per_solver[solver] = s
        print(headline(solver, s))
    summary: dict[str, Any] = {
        "cases": len(cases),
        "solvers": solvers,
        "per_solver": per_solver,
    }

    e2e = [c.end_to_end for c in cases if c.end_to_end is not None]
    if e2e:
        summary["end_to_end"] = summarise(cases, e2e) | {
            "pairing": "paper formulation on CBC vs. ours on HiGHS"
        }
        print(headline("paper+CBC vs ours+HiGHS", summary["end_to_end"]))

    # Ours must never be worse than the paper formulation, and its (proven) optimum must not
    # depend on the solver.
    ours_worse = sum(s["ours_cost_worse"] for s in per_solver.values())
    ours_worse += summary.get("end_to_end", {}).get("ours_cost_worse", 0)
    inconsistent = 0
    for case in cases:
        optimal = {
            round(c.aggregated.cost, 6)
            for c in case.by_solver.values()
            if c.aggregated.cost is not None and c.aggregated.status == "optimal"
        }
        inconsistent += len(optimal) > 1
    summary["checks"] = {
        "ours_never_worse": ours_worse == 0,
        "ours_optimum_same_on_all_solvers": inconsistent == 0,
    }
    ok = ours_worse == 0 and inconsistent == 0
    print(
        f"checks: ours never worse: {ours_worse == 0}; "
        f"ours' optimum identical across solvers: {inconsistent == 0}"
    )
    if args.json:
        summary["per_case"] = [asdict(c) for c in cases]
        print(json.dumps(summary))
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
