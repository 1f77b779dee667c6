"""Benchmark: a mixed plan's prediction, its two simulations side by side or one after the other.

A mixed plan is predicted twice, its router guessing output lengths and knowing them
(`gpumix.attainment.predict`); `gpumix run` hands the second run to a worker process
(`gpumix.sim.workers`, `--simulation-processes 2`), and a change's search is mostly such
predictions. Inputs: the attainment bench's cases (`bench/attainment.py`: shapes, models, rates,
SLOs, roofline profiles, the sample pools), each planned by Mélange's ILP (one solve, and mostly
a mix); the first `--cases` whose plan mixes two or more options. Like for like: each case's
prediction (3,000 requests, seed 1, as the operator predicts) is made `--repeat` times one way,
then `--repeat` times the other, on the same plan (the worker starts in between, and makes one
prediction untimed, as an operator's worker has imported what it runs by then); the
median per case is taken and the ratio is the sum of the medians one after the other over the
sum side by side. Every prediction of a case must be the same. It needs a free core: on a
machine whose cores are busy the worker's run waits for one, and the ratio falls to about 1 or
below.

Usage: ``.venv/bin/python bench/predict.py [--json] [--cases N] [--repeat N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from attainment import _shapes, build_cases, load_pools, make_service, profiles_for
from gpumix.attainment import predict
from gpumix.plan import solve
from gpumix.problem import build_problem
from gpumix.sim import workers


def _mixed_plans(count: int) -> list[tuple[str, Any, Any, Any, Any]]:
    """(case, service, pools, profiles, allocation) of the first ``count`` mixed Mélange plans."""
    shapes, pools = _shapes(), load_pools()
    plans = []
    for case in build_cases():
        shape = shapes[case.shape]
        service = make_service(case, shape)
        profiles = profiles_for(case.model, case.shape, shape, pools)
        instance = build_problem(service, pools, profiles).instance
        allocation = None if instance is None else solve(instance)
        if allocation is None or sum(n > 0 for n in allocation.counts.values()) < 2:
            continue
        plans.append((case.name, service, pools, profiles, allocation))
        if len(plans) == count:
            break
    return plans


def _timed(service: Any, pools: Any, profiles: Any, allocation: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    predicted = predict(service, pools, profiles, allocation)
    return time.perf_counter() - start, predicted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--cases", type=int, default=8, help="mixed plans to predict")
    parser.add_argument("--repeat", type=int, default=3, help="predictions per way (median)")
    args = parser.parse_args()
    plans = _mixed_plans(args.cases)
    rows = []
    try:
        for name, service, pools, profiles, allocation in plans:
            # One way, then the other, case by case: a worker's start (its imports) is not timed.
            workers.stop()
            serial = [_timed(service, pools, profiles, allocation) for _ in range(args.repeat)]
            workers.start(2)
            predict(service, pools, profiles, allocation)  # untimed: the worker's imports
            side = [_timed(service, pools, profiles, allocation) for _ in range(args.repeat)]
            rows.append({
                "case": name,
                "mix": {o: n for o, n in allocation.counts.items() if n},
                "one_after_the_other_s": round(statistics.median(t for t, _ in serial), 3),
                "side_by_side_s": round(statistics.median(t for t, _ in side), 3),
                "same_prediction": all(p == serial[0][1] for _, p in serial + side),
            })  # fmt: skip
    finally:
        workers.stop()
    total_serial = sum(r["one_after_the_other_s"] for r in rows)
    total_side = sum(r["side_by_side_s"] for r in rows)
    summary: dict[str, Any] = {
        "cases": len(rows),
        "repeat": args.repeat,
        "one_after_the_other_s": round(total_serial, 3),
        "side_by_side_s": round(total_side, 3),
        "one_after_the_other_vs_side_by_side": round(total_serial / total_side, 2),
        "every_prediction_the_same": all(r["same_prediction"] for r in rows),
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "per_case": rows,
    }
    print(f"{len(rows)} mixed plans of bench/attainment.py's cases, a prediction each "
          f"(3,000 requests, two router runs), median of {args.repeat} per way; "
          f"{summary['cpus']} CPUs, load {summary['load_average_1m']}")  # fmt: skip
    for r in rows:
        print(f"  {r['case']:<34} {r['one_after_the_other_s']:6.3f} s one after the other, "
              f"{r['side_by_side_s']:6.3f} s side by side"
              f"{'' if r['same_prediction'] else '  (predictions DIFFER)'}")  # fmt: skip
    print(f"  total {total_serial:.2f} s against {total_side:.2f} s: "
          f"{summary['one_after_the_other_vs_side_by_side']}×")  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
