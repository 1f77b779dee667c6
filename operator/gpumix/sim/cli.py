"""`gpumix simulate`, `gpumix sim serve` and `gpumix profile sim|endpoint`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpumix.api import GPUPool, GPUPoolSpec, GPUProfile, LLMService
from gpumix.manifests import ManifestError, load_objects
from gpumix.sim.engine import EngineConfig
from gpumix.sim.report import SimReport
from gpumix.sim.scenario import PlanChoice, TrafficSpec, simulate_service

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def _default_pools(profiles: list[GPUProfile]) -> list[GPUPool]:
    types = sorted({p.spec.gpu_type for p in profiles})
    return [
        GPUPool(
            metadata={"name": t},
            spec=GPUPoolSpec(gpu_type=t, node_selector={"gpumix.io/gpu-class": t}),
        )
        for t in types
    ]


def _read_plan(path: str, name: str) -> PlanChoice:
    """A `gpumix plan --output json` file: one JSON object per line; the one named `name` (or the
    only one). Uses `allocation` (counts) and, when present, `share`."""
    objects = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not objects:
        raise ValueError(f"{path}: no plan in the file")
    match = [o for o in objects if o.get("name") in (name, name.rsplit("/", maxsplit=1)[-1])]
    chosen = match[0] if match else objects[0]
    if not chosen.get("allocation"):
        raise ValueError(f"{path}: plan {chosen.get('name')!r} has no allocation")
    return PlanChoice(counts=chosen["allocation"], share=chosen.get("share"))


def _engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(chunked_prefill=args.chunked_prefill)


def _table(name: str, counts: dict[str, int], r: SimReport) -> str:
    mix = ", ".join(f"{k}×{v}" for k, v in counts.items() if v)
    v = r.violations
    lines = [
        f"{name}: {mix} ({r.cost_per_hour:.3f} $/h), {r.requests} requests over "
        f"{r.simulated_seconds:.0f} s simulated ({r.dropped} dropped)",
        f"  TPOT ≤ {r.tpot_slo_ms:g} ms: {100 * r.attainment_tpot:.2f}%   "
        f"TTFT ≤ {r.ttft_slo_ms:g} ms: {100 * r.attainment_ttft:.2f}%   "
        f"both: {100 * r.attainment_both:.2f}%",
        f"  {'':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    for label, p in (("TPOT ms", r.tpot_ms), ("TTFT ms", r.ttft_ms), ("ITL ms", r.itl_ms),
                     ("e2e s", r.e2e_s)):  # fmt: skip
        lines.append(
            f"  {label:<10}{p.mean:>10.1f}{p.p50:>10.1f}{p.p90:>10.1f}{p.p99:>10.1f}{p.max:>10.1f}"
        )
    lines.append(f"  {'pool':<14}{'pods':>5}{'reqs':>7}{'util':>7}{'KV':>7}{'peakKV':>8}"
                 f"{'preempt':>9}{'TPOT ok':>9}{'$/h':>9}")  # fmt: skip
    for pool, s in r.pools.items():
        lines.append(
            f"  {pool:<14}{s.pods:>5}{s.requests:>7}{s.utilisation:>7.2f}{s.kv_usage:>7.2f}"
            f"{s.peak_kv_usage:>8.2f}{s.preemptions:>9}{100 * s.attainment_tpot:>8.2f}%"
            f"{s.cost_per_hour:>9.3f}"
        )
    lines.append(
        f"  TPOT violations: {v.count} (missed even alone {v.alone}, burst {v.burst}, "
        f"large co-location "
        f"{v.large_colocation}, both {v.both}, neither {v.neither}; "
        f"{100 * v.explained:.0f}% explained)"
    )
    return "\n".join(lines)


def _simulate(args: argparse.Namespace) -> int:
    try:
        objects = load_objects(Path(f) for f in args.files)
    except ManifestError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    services = [o for o in objects if isinstance(o, LLMService)]
    profiles = [o for o in objects if isinstance(o, GPUProfile)]
    pools = [o for o in objects if isinstance(o, GPUPool)] or _default_pools(profiles)
    if args.service:
        services = [s for s in services if s.name == args.service]
    if not services:
        print("error: no (matching) LLMService in the input", file=sys.stderr)
        return EXIT_BAD_INPUT
    service = services[0]
    if args.tpot_ms is not None:
        slo = service.spec.slo.model_copy(update={"tpot_ms": args.tpot_ms})
        service = service.model_copy(update={"spec": service.spec.model_copy(update={"slo": slo})})
    if args.rate is not None:
        wl = service.spec.workload.model_copy(update={"request_rate": args.rate})
        service = service.model_copy(
            update={"spec": service.spec.model_copy(update={"workload": wl})}
        )
    ns = service.metadata.get("namespace", "default")
    name = f"{ns}/{service.name}"
    try:
        plan = _read_plan(args.plan, name) if args.plan else None
        spec = TrafficSpec(
            arrivals=args.arrivals,
            rate=args.rate,
            requests=args.requests,
            cv=args.cv,
            period_s=args.period,
            amplitude=args.amplitude,
            sizes=args.sizes,
            trace=args.trace,
            rate_scale=args.rate_scale,
            seed=args.seed,
        )
        result = simulate_service(
            service,
            pools,
            profiles,
            spec,
            plan=plan,
            router=args.router,
            engine=_engine_config(args),
            ttft_slo_ms=args.ttft_ms,
        )
    except (ValueError, OSError, KeyError) as err:
        print(f"error: {name}: {err}", file=sys.stderr)
        return EXIT_FAILED
    if args.output == "json":
        out: dict[str, Any] = {"name": name, "allocation": result.counts}
        out.update(result.report.model_dump(mode="json"))
        print(json.dumps(out))
    else:
        print(_table(name, result.counts, result.report))
    return 0


def register(sub: Any) -> None:
    """Add `gpumix simulate` to the top-level subparsers."""
    p = sub.add_parser(
        "simulate",
        help="simulate a plan against traffic (SLO attainment, latencies, utilisation, $/h)",
        description="Simulate vLLM-style pods for an LLMService's plan: planned here like "
        "`gpumix plan` (from LLMService/GPUProfile/GPUPool YAML), or read from a "
        "`gpumix plan --output json` file with --plan.",
    )
    p.add_argument("files", nargs="+", help="YAML with the LLMService, GPUProfiles, GPUPools")
    p.add_argument("--plan", help="a `gpumix plan --output json` file (default: plan here)")
    p.add_argument("--service", help="the LLMService to simulate (default: the first)")
    p.add_argument("--tpot-ms", type=float, help="override the service's TPOT SLO")
    p.add_argument("--ttft-ms", type=float, help="TTFT SLO (default: the service's, else 1000)")
    p.add_argument("--rate", type=float, help="request rate (default: the service's)")
    p.add_argument("--requests", type=int, default=2000, help="requests to send (default 2000)")
    p.add_argument("--arrivals", choices=["poisson", "gamma", "diurnal", "trace"],
                   default="poisson")  # fmt: skip
    p.add_argument("--cv", type=float, default=2.0, help="gamma arrivals: inter-arrival CV")
    p.add_argument("--period", type=float, default=3600.0, help="diurnal period, s")
    p.add_argument("--amplitude", type=float, default=0.5, help="diurnal amplitude (0-1)")
    p.add_argument("--sizes", choices=["histogram", "trace"], default="histogram")
    p.add_argument(
        "--trace",
        default="azure-conv",
        help="azure-conv, azure-code, mooncake-conv, mooncake-synthetic or a file "
        "(short names are read from $GPUMIX_SHARED_DIR/traces, default <repo>/../shared)",
    )
    p.add_argument("--rate-scale", type=float, default=1.0, help="trace replay speed-up")
    p.add_argument("--router", choices=["melange", "melange-oracle", "round-robin", "least-loaded"],
                   default="melange")  # fmt: skip
    p.add_argument("--chunked-prefill", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=_simulate)


def register_profile(psub: Any) -> None:
    """Add `gpumix profile sim` and `gpumix profile endpoint`."""
