"""Benchmark: simulator speed — simulated requests per second of wall time.

Replays the Azure LLM inference trace 2023 (conversation, 1 hour, 19,366 requests; arrivals and
sizes from the trace) on a 10-pod plan for Llama-2-7B (A100-80GB×3, A10G×5, L4×2) behind
the routing core (gpumix.route; MaxTput weights from the shipped example profiles). Requests
longer than Llama-2's 4,096-token context are dropped by the pods, as vLLM rejects them; they
count as simulated requests (they are routed and rejected) and are reported separately.

Baseline, measured in the same run: the same engine with decode runs disabled
(`max_decode_run=1`: one event per decode step, i.e. a plain step-by-step simulator) on the
first `--baseline-minutes` of the trace (default 10), to keep the run bounded. The ratio is the
speed-up the decode-run fast-forward buys. Single-threaded (one core).

Usage: ``.venv/bin/python bench/sim.py [--json] [--baseline-minutes M] [--repeat N]``
The trace is the Azure conversation trace shipped in ``operator/gpumix/data/traces``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from gpumix.api import LLMService
from gpumix.manifests import (
    load_inputs,
)
from gpumix.problem import build_problem
from gpumix.profiles.models import model_shape
from gpumix.route import RoutingTable, histogram_prior
from gpumix.sim import traffic
from gpumix.sim.cluster import PodGroup, build_pods, run
from gpumix.sim.engine import EngineConfig
from gpumix.sim.routing import PlanRouter

ROOT = Path(__file__).resolve().parents[1]
MIX = {"a100-80gb": 3, "a10g": 5, "l4": 2}
PRICES = {"a100-80gb": 3.67, "a10g": 1.01, "l4": 0.70}
TARGET = 20_000.0


def _setup() -> tuple[LLMService, dict[str, list[list[float]]]]:
    samples = ROOT / "manifests" / "samples"
    services, profiles, pools = load_inputs(
        [samples / "chat.yaml", samples / "profiles-llama-2-7b.yaml"]
    )  # without GPUPools: the pools `gpumix plan` uses
    service = services[0]
    problem = build_problem(service, pools, profiles)
    assert problem.instance is not None
    return service, {g.name: g.max_tput for g in problem.instance.gpus}


def _replay(
    service: LLMService,
    weights: dict[str, list[list[float]]],
    trace: traffic.Trace,
    seconds: float | None,
    config: EngineConfig,
) -> dict[str, float]:
    requests = traffic.trace_requests(trace)
    if seconds is not None:
        requests = [r for r in requests if r.arrival <= seconds]
    groups = [PodGroup(pool=g, gpu_type=g, replicas=n, price_per_gpu_hour=PRICES[g])
              for g, n in MIX.items()]  # fmt: skip
    t0 = time.perf_counter()
    pods = build_pods(groups, model_shape(service.spec.model.name), config)
    wl = service.spec.workload
    pool_of = [g.pool for g in groups for _ in range(g.replicas)]
    table = RoutingTable.from_plan(wl.input_edges, wl.output_edges, weights, MIX)
    router = PlanRouter(table, pods, pool_of, histogram_prior(wl.output_edges, wl.histogram))
    end = run(pods, router, requests)
    wall = time.perf_counter() - t0
    done = sum(r.finish is not None for r in requests)
    return {
        "requests": len(requests),
        "completed": done,
        "dropped": len(requests) - done,
        "simulated_s": round(end, 1),
        "wall_s": round(wall, 4),
        "requests_per_wall_s": round(len(requests) / wall, 1),
        "steps": sum(p.steps for p in pods),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--baseline-minutes", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3, help="best of N full replays")
    args = parser.parse_args()
    service, weights = _setup()
    t0 = time.perf_counter()
    trace = traffic.load_trace("azure-conv")
    load_s = time.perf_counter() - t0
    runs = [_replay(service, weights, trace, None, EngineConfig()) for _ in range(args.repeat)]
    fast = max(runs, key=lambda r: r["requests_per_wall_s"])
    base = _replay(
        service, weights, trace, args.baseline_minutes * 60, EngineConfig(max_decode_run=1)
    )
    ratio = fast["requests_per_wall_s"] / base["requests_per_wall_s"]
    summary: dict[str, Any] = {
        "trace": trace.name,
        "pods": sum(MIX.values()),
        "mix": MIX,
        "trace_load_s": round(load_s, 3),
        "sim": fast,
        "baseline_step_by_step": base,
        "speedup_vs_step_by_step": round(ratio, 2),
        "target_requests_per_wall_s": TARGET,
        "target_met": fast["requests_per_wall_s"] >= TARGET,
    }
    print(
        f"Azure conversation trace, 1 h, {fast['requests']} requests on "
        f"{summary['pods']} pods ({', '.join(f'{k}×{v}' for k, v in MIX.items())})"
    )
    print(
        f"  simulator:     {fast['requests_per_wall_s']:>10,.0f} requests / wall s "
        f"({fast['wall_s']:.3f} s for {fast['simulated_s']:.0f} s simulated; "
        f"{fast['dropped']} dropped > 4096 tokens; best of {args.repeat})"
    )
    print(
        f"  step-by-step:  {base['requests_per_wall_s']:>10,.0f} requests / wall s "
        f"(first {args.baseline_minutes:g} min, {base['requests']} requests)"
    )
    print(
        f"  speed-up {ratio:.1f}×; target ≥ {TARGET:,.0f} req/s: "
        f"{'met' if summary['target_met'] else 'NOT met'}"
    )
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
