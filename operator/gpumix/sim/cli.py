"""`gpumix simulate`, `gpumix sim serve` and `gpumix profile sim|endpoint`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from gpumix.api import GPUProfile
from gpumix.cliargs import (
    EXIT_BAD_INPUT,
    edges,
    fail,
    gpu_types,
    http_url,
    model_config,
    nonnegative_float,
    nonnegative_int,
    pod_counts,
    positive_float,
    positive_floats,
    positive_int,
    service_shapes,
    tcp_port,
    unit_interval,
    unknown_model,
)
from gpumix.manifests import ManifestError, describe, load_inputs
from gpumix.problem import NoUsablePoolError
from gpumix.profiles.hfconfig import model_shape_from_config
from gpumix.profiles.models import ModelShape, model_shape
from gpumix.profiles.roofline import Roofline
from gpumix.sim.cluster import PodGroup, build_pods
from gpumix.sim.engine import EngineConfig
from gpumix.sim.profiler import (
    EndpointTarget,
    SimTarget,
    bucket_mids,
    make_profile,
    profile_grid,
)
from gpumix.sim.report import SimReport
from gpumix.sim.scenario import PlanChoice, TrafficSpec, UnknownPlanPoolError, simulate_service
from gpumix.sim.server import PodServer, RealtimePod
from gpumix.sim.traffic import load_trace
from gpumix.yamlout import dump_all

EXIT_FAILED = 1


class PlanFileError(ValueError):
    """A ``--plan`` file that is not `gpumix plan --output json` of the service."""


def _read_plan(path: str, name: str) -> PlanChoice:
    """A `gpumix plan --output json` file: one JSON object per line; the one named `name` (or the
    only one). Uses `allocation` (counts) and, when present, `share`."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as err:
        raise PlanFileError(f"{path}: {err.strerror}") from None
    objects: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise PlanFileError(f"{path} line {number}: not JSON ({err.msg})") from None
        if not isinstance(obj, dict):
            raise PlanFileError(f"{path} line {number}: not a JSON object")
        objects.append(obj)
    if not objects:
        raise PlanFileError(f"{path}: no plan in the file")
    match = [o for o in objects if o.get("name") in (name, name.rsplit("/", maxsplit=1)[-1])]
    if not match and len(objects) > 1:
        names = ", ".join(repr(o.get("name")) for o in objects)
        raise PlanFileError(f"{path}: no plan named {name!r} (the file has {names})")
    chosen = match[0] if match else objects[0]
    plan = f"{path}: plan {chosen.get('name')!r}"
    counts = chosen.get("allocation")
    if not counts:
        raise PlanFileError(f"{plan} has no allocation")
    if not isinstance(counts, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values()
    ):
        raise PlanFileError(f"{plan}: allocation must map each pool to a replica count ≥ 0")
    try:
        return PlanChoice(counts=counts, share=chosen.get("share"))
    except ValidationError as err:
        raise PlanFileError(f"{plan}: {describe(err)}") from None


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
    lines.append(
        f"  {'pool':<14}{'pods':>5}{'reqs':>7}{'util':>7}{'KV':>7}{'peakKV':>8}"
        f"{'preempt':>9}{'TPOT ok':>9}{'$/h':>9}"
    )
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
        services, profiles, pools = load_inputs(Path(f) for f in args.files)
    except ManifestError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.service is not None:
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
    shapes, unknown = service_shapes([service], args.model_config)
    if unknown:
        print(f"error: {name}: {unknown_model(unknown[0])}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        plan = _read_plan(args.plan, name) if args.plan else None
    except PlanFileError as err:
        fail("gpumix simulate", f"--plan {err}")
    if "trace" in (args.arrivals, args.sizes):
        try:
            load_trace(args.trace)  # read again by the simulation, from the page cache
        except (OSError, ValueError) as err:
            fail("gpumix simulate", f"--trace: {err}")
    try:
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
            # Without the flag, the engine the service's Deployment configures (its lengths).
            engine=_engine_config(args) if args.chunked_prefill else None,
            ttft_slo_ms=args.ttft_ms,
            shape=shapes[service.spec.model.name],
        )
    except NoUsablePoolError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnknownPlanPoolError as err:
        fail("gpumix simulate", f"--plan {args.plan}: {err}")
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
    """Add `gpumix simulate` and `gpumix sim serve` to the top-level subparsers."""
    register_sim(sub)
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
    p.add_argument(
        "--model-config", type=model_config, action="append", metavar="MODEL=FILE",
        help="the Hugging Face config.json of a model gpumix has no built-in shape for",
    )  # fmt: skip
    p.add_argument("--tpot-ms", type=positive_float, help="override the service's TPOT SLO")
    p.add_argument(
        "--ttft-ms", type=positive_float, help="TTFT SLO (default: the service's, else 1000)"
    )
    p.add_argument("--rate", type=positive_float, help="request rate (default: the service's)")
    p.add_argument(
        "--requests", type=positive_int, default=2000, help="requests to send (default 2000)"
    )
    p.add_argument(
        "--arrivals", choices=["poisson", "gamma", "diurnal", "trace"], default="poisson"
    )
    p.add_argument(
        "--cv", type=positive_float, default=2.0, help="gamma arrivals: inter-arrival CV"
    )
    p.add_argument("--period", type=positive_float, default=3600.0, help="diurnal period, s")
    p.add_argument("--amplitude", type=unit_interval, default=0.5, help="diurnal amplitude (0-1)")
    p.add_argument("--sizes", choices=["histogram", "trace"], default="histogram")
    p.add_argument(
        "--trace",
        default="azure-conv",
        help="azure-conv, azure-code, mooncake-conv, mooncake-synthetic or a file "
        "(short names: the public traces shipped with gpumix, or $GPUMIX_DATA_DIR/traces)",
    )
    p.add_argument("--rate-scale", type=positive_float, default=1.0, help="trace replay speed-up")
    p.add_argument(
        "--router",
        choices=["melange", "melange-oracle", "round-robin", "least-loaded"],
        default="melange",
    )
    p.add_argument("--chunked-prefill", action="store_true")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=_simulate)


def _emit(profiles: list[GPUProfile], header: str) -> None:
    print(header)
    print(
        dump_all([p.model_dump(by_alias=True, exclude_none=True, mode="json") for p in profiles]),
        end="",
    )


def add_model_args(p: argparse.ArgumentParser) -> None:
    """`--model`, and `--model-config` for a model gpumix has no shape of."""
    p.add_argument("--model", required=True, help="e.g. meta-llama/Llama-2-7b-hf")
    p.add_argument(
        "--model-config",
        metavar="FILE",
        help="the model's Hugging Face config.json (for models gpumix does not know by name)",
    )


def model_of(args: argparse.Namespace) -> ModelShape:
    """The shape `add_model_args` asked for (KeyError/ValueError name what is wrong)."""
    if args.model_config:
        return model_shape_from_config(args.model_config, args.model)
    return model_shape(args.model)


def no_room(prog: str, roof: Roofline) -> NoReturn:
    """Exit 2 naming what to change when no bucket's midpoint request fits `roof`'s replica (the
    model's context, or its KV cache beside the weights): the profile would be all zeros. Each
    profiler tests the fit at its own midpoints (`SimTarget.fits` on `bucket_mids`; the
    estimate's roofline at half-token midpoints), so the test is the caller's."""
    model, kv = roof.model, roof.kv_capacity_tokens
    gpus = f"{roof.gpus} {roof.gpu.name} GPU(s)"
    if kv <= 0:
        fix = "more --gpus-per-replica, or another --gpu"
        fail(prog, f"--gpu {roof.gpu.name}: {model.name} does not fit on {gpus} ({fix})")
    if kv < model.max_context:
        room = f"room for {kv} tokens of KV cache on {gpus}, too few for any bucket"
        fix = "more --gpus-per-replica, or smaller --input-edges/--output-edges"
        fail(prog, f"--gpu {roof.gpu.name}: {model.name} leaves {room} ({fix})")
    fail(
        prog,
        f"--input-edges/--output-edges: no bucket's midpoint request fits {model.name}'s context "
        f"of {model.max_context} tokens (smaller edges)",
    )


def _profile_sim(args: argparse.Namespace) -> int:
    try:
        model = model_of(args)
    except (KeyError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ins, outs, slos = args.input_edges, args.output_edges, args.tpot
    gpus: list[str] = [g.name for g in args.gpu]
    targets = {
        gpu: SimTarget(gpu, model, args.gpus_per_replica, _engine_config(args), args.requests)
        for gpu in gpus
    }
    for target in targets.values():  # before simulating anything
        if not any(target.fits(i, o) for i in bucket_mids(ins) for o in bucket_mids(outs)):
            no_room("gpumix profile sim", target.roof)
    profiles = []
    for gpu, target in targets.items():
        samples = profile_grid(
            target,
            ins,
            outs,
            stop_tpot_ms=2 * max(slos),
            estimate=target.roof,
            fits=target.fits,
            seed=args.seed,
        )
        profiles.append(
            make_profile(
                model.name,
                gpu,
                gpus=args.gpus_per_replica,
                input_edges=ins,
                output_edges=outs,
                samples=samples,
                source="gpumix simulator (calibrated roofline); not measured",
                tables_at=slos if args.form == "tables" else None,
            )
        )
    _emit(profiles, "# Generated by `gpumix profile sim` (simulated pods, not measurements).")
    return 0


def _profile_endpoint(args: argparse.Namespace) -> int:
    ins, outs, slos = args.input_edges, args.output_edges, args.tpot
    target = EndpointTarget(args.url, args.model, args.requests, args.timeout)
    try:
        samples = profile_grid(
            target,
            ins,
            outs,
            stop_tpot_ms=2 * max(slos),
            start_rate=args.start_rate,
            max_points=args.max_points,
            seed=args.seed,
        )
    except OSError as err:
        print(f"error: {args.url}: {err}", file=sys.stderr)
        return EXIT_FAILED
    profile = make_profile(
        args.model,
        args.gpu_type,
        gpus=args.gpus_per_replica,
        input_edges=ins,
        output_edges=outs,
        samples=samples,
        source=f"measured at {args.url}",
        tables_at=slos if args.form == "tables" else None,
    )
    _emit([profile], f"# Generated by `gpumix profile endpoint` against {args.url}.")
    return 0


def add_grid_args(p: argparse.ArgumentParser) -> None:
    """The profile grid every `gpumix profile` subcommand takes: SLOs, bucket edges, GPUs."""
    p.add_argument(
        "--tpot", type=positive_floats, default=[40.0, 120.0],
        help="TPOT SLOs in ms (default: 40,120)",
    )  # fmt: skip
    p.add_argument("--input-edges", type=edges, required=True, help="e.g. 1,256,512,1024,2048,3072")
    p.add_argument("--output-edges", type=edges, required=True, help="e.g. 1,64,128,256,512,1001")
    p.add_argument("--gpus-per-replica", type=int, choices=[1, 2, 4, 8], default=1)


def _common_profile_args(p: argparse.ArgumentParser) -> None:
    add_grid_args(p)
    p.add_argument(
        "--form",
        choices=["samples", "tables"],
        default="samples",
        help="latency-vs-rate samples, or MaxTput tables at the --tpot SLOs",
    )
    p.add_argument("--seed", type=nonnegative_int, default=0)


def register_profile(psub: Any) -> None:
    """Add `gpumix profile sim` and `gpumix profile endpoint`."""
    sim = psub.add_parser(
        "sim", help="GPUProfile YAML by profiling simulated pods (Mélange §5.3, no hardware)"
    )
    add_model_args(sim)
    _common_profile_args(sim)
    sim.add_argument(
        "--gpu", type=gpu_types, required=True, help="comma-separated catalog GPU types"
    )
    sim.add_argument(
        "--requests", type=positive_int, default=200, help="requests per rate (minimum)"
    )
    sim.add_argument("--chunked-prefill", action="store_true")
    sim.set_defaults(func=_profile_sim)
    ep = psub.add_parser(
        "endpoint", help="GPUProfile YAML by profiling an OpenAI-compatible server (§5.3)"
    )
    ep.add_argument("--model", required=True, help="the model the server serves")
    _common_profile_args(ep)
    ep.add_argument(
        "--url", type=http_url, required=True, help="base URL, e.g. http://127.0.0.1:8000"
    )
    ep.add_argument("--gpu-type", required=True, help="the GPU type the server runs on")
    ep.add_argument("--requests", type=positive_int, default=40, help="requests per rate")
    ep.add_argument("--start-rate", type=positive_float, default=0.5, help="first rate, req/s")
    ep.add_argument("--max-points", type=positive_int, default=8, help="rates per bucket at most")
    ep.add_argument("--timeout", type=positive_float, default=120.0, help="seconds per request")
    ep.set_defaults(func=_profile_endpoint)


def _serve(args: argparse.Namespace) -> int:
    try:
        model = model_of(args)
        groups = [
            PodGroup(pool=gpu.name, gpu_type=gpu.name, replicas=count) for gpu, count in args.pods
        ]
        engines = build_pods(groups, model, _engine_config(args))
    except (KeyError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for engine in engines:  # a pod that holds no request would only ever answer errors
        if not engine.max_tokens:
            fail(
                "gpumix sim serve",
                f"--pods {engine.gpu_type}: --model {model.name} does not fit on one "
                f"{engine.gpu_type} GPU with room for its KV cache (a GPU type with more memory, "
                "or a smaller model)",
            )
    servers = []
    for k, engine in enumerate(engines):
        port = args.base_port + k if args.base_port else 0
        server = PodServer(RealtimePod(engine, args.served_name or args.model, args.speed), port)
        servers.append(server.start())
        print(
            json.dumps({"pod": engine.name, "gpu_type": engine.gpu_type, "url": server.url}),
            flush=True,
        )
    try:
        deadline = time.monotonic() + args.duration if args.duration else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for server in servers:
            server.stop()
    return 0


def register_sim(sub: Any) -> None:
    """Add `gpumix sim serve`."""
    sim = sub.add_parser("sim", help="simulated vLLM pods")
    ssub = sim.add_subparsers(dest="sim_command", required=True)
    serve = ssub.add_parser(
        "serve",
        help="run simulated pods in real time, each with /metrics, /v1/completions, /health "
        "and the engine admin API on 127.0.0.1 (see gpumix/sim/SERVER.md)",
    )
    add_model_args(serve)
    serve.add_argument("--served-name", help="model name in the API and metrics labels")
    serve.add_argument(
        "--pods", type=pod_counts, required=True, help="GPU types and counts, e.g. a10g=2,l4=1"
    )
    serve.add_argument(
        "--base-port", type=tcp_port, default=0, help="first port (default: any free)"
    )
    serve.add_argument("--speed", type=positive_float, default=1.0, help="simulated s per wall s")
    serve.add_argument(
        "--duration", type=nonnegative_float, default=0.0, help="stop after s (0: never)"
    )
    serve.add_argument("--chunked-prefill", action="store_true")
    serve.set_defaults(func=_serve)
