"""`gpumix route`: run the router of one LLMService (in-cluster, as the operator deploys it), or
of a static plan and engine list (``--routing-file`` and ``--engine``; no Kubernetes). With
``--ext-proc-port`` it is the service's endpoint picker for a Gateway API Inference Extension
gateway instead (:mod:`gpumix.route.picker`): the same plan, watches and routing core."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import signal
from pathlib import Path
from typing import NoReturn

import kopf
from aiohttp import web
from pydantic import ValidationError

from gpumix.cliargs import Parser, fail, positive_float, positive_int, tcp_port
from gpumix.manifests import describe
from gpumix.operator.run import api_client
from gpumix.render.deployment import ADMIN_PORT
from gpumix.route.engines import Engines
from gpumix.route.picker import Picker, start_grpc
from gpumix.route.proxy import ENGINE_TIMEOUT_S, Proxy
from gpumix.route.table import RoutingTable
from gpumix.route.watch import start_watches

log = logging.getLogger("gpumix.route")

BACKLOG = 2048
"""Pending connections the kernel queues for the router (aiohttp's default is 128)."""


def _fail(message: str) -> NoReturn:
    fail("gpumix route", message)


def _engine(text: str) -> tuple[str, str]:
    pool, sep, url = text.partition("=")
    if not sep or not pool or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r} is not POOL=http://HOST:PORT")
    return pool, url.rstrip("/")


def static_engines(pairs: list[tuple[str, str]]) -> Engines:
    """``--engine`` pairs as engines: pods named ``<pool>-<k>`` in the order given."""
    engines: Engines = {}
    for pool, url in pairs:
        pods = engines.setdefault(pool, {})
        pods[f"{pool}-{len(pods)}"] = url
    return engines


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    route = sub.add_parser(
        "route",
        help="run the router: an OpenAI-compatible proxy that sends each request where the "
        "plan says",
        description="In a cluster (--service): follows the <service>-routing ConfigMap and the "
        "service's ready engine pods. Without one: --routing-file and one --engine per pod.",
    )
    route.add_argument("--service", help="the LLMService whose plan to follow")
    route.add_argument("--namespace", default="default", help="the LLMService's namespace")
    route.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
    route.add_argument("--context", help="kubeconfig context (default: current)")
    route.add_argument(
        "--routing-file", type=Path, help="a routing.json (as in the <service>-routing ConfigMap)"
    )
    route.add_argument(
        "--engine",
        type=_engine,
        action="append",
        default=[],
        metavar="POOL=URL",
        help="an engine pod of a pool of the routing file (repeat per pod)",
    )
    route.add_argument("--bind", default="0.0.0.0", help="address to listen on")
    route.add_argument("--port", type=tcp_port, default=8000)
    route.add_argument(
        "--max-inflight-per-pod",
        type=positive_int,
        default=256,
        help="requests one pod may hold before its pool answers 429 (default: 256)",
    )
    route.add_argument(
        "--engine-timeout",
        type=positive_float,
        default=ENGINE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"longest an engine may send nothing (default {ENGINE_TIMEOUT_S:.0f}): a request "
        "that waited this long for its first byte is tried on another pod, a stream silent "
        "this long ends with an error event; a non-streamed answer must come within it",
    )
    route.add_argument(
        "--admin-port",
        type=tcp_port,
        default=ADMIN_PORT,
        help=f"port of the admin API the KV loop reads and migrates through (/admin/inflight, "
        f"/admin/migrate; default {ADMIN_PORT}; 0: none)",
    )
    route.add_argument(
        "--migratable",
        action="store_true",
        help="relay streams so that /admin/migrate can move them to another pod (the "
        "operator sets it when kvMigration goes through the router): each event of a stream "
        "that can be continued exactly is read for its token IDs. Without it streams are "
        "relayed as they come and every move is refused (migration-off)",
    )
    route.add_argument(
        "--ext-proc-port",
        type=tcp_port,
        help="be the endpoint picker of an InferencePool instead: Envoy's ext_proc and gRPC "
        "health on this port, only /metrics, /health and /ready on --port; routing only (no "
        "admin API, no migration)",
    )
    route.add_argument("--log-format", choices=["plain", "json"], default="json")
    route.set_defaults(func=run_router)


def _static_table(path: Path) -> RoutingTable:
    try:
        return RoutingTable.model_validate(json.loads(path.read_text()))
    except OSError as err:
        _fail(f"--routing-file: {err.strerror}: {path}")
    except ValidationError as err:
        _fail(f"--routing-file {path} is not a routing table: {describe(err)}")
    except ValueError as err:  # not JSON, or not UTF-8
        _fail(f"--routing-file {path} is not JSON: {err}")


def run_router(args: argparse.Namespace) -> int:
    static = args.routing_file is not None
    if static == (args.service is not None):
        _fail("give either --service or --routing-file (with --engine)")
    if static and not args.engine:
        _fail("--routing-file needs at least one --engine POOL=URL")
    if args.migratable and (args.admin_port == 0 or args.ext_proc_port is not None):
        _fail("--migratable needs the admin API (an --admin-port, no --ext-proc-port)")
    kopf.configure(
        verbose=False,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger("gpumix").setLevel(logging.INFO)
    proxy = (
        Picker(max_inflight=args.max_inflight_per_pod)
        if args.ext_proc_port is not None
        else Proxy(
            max_inflight=args.max_inflight_per_pod,
            migration=args.migratable,
            engine_timeout_s=args.engine_timeout,
        )
    )
    if static:
        table = _static_table(args.routing_file)
        unknown = sorted({pool for pool, _ in args.engine} - set(table.pools))
        if unknown:
            _fail(f"--engine pools not in the routing file: {unknown}")
        proxy.set_table(table)
        proxy.set_engines(static_engines(args.engine))
    asyncio.run(_serve(proxy, args))
    return 0


async def _serve(proxy: Proxy, args: argparse.Namespace) -> None:
    if args.service is not None:
        start_watches(
            proxy, api_client(args.kubeconfig, args.context), args.namespace, args.service
        )
    if isinstance(proxy, Picker):
        await _serve_picker(proxy, args)
        return
    # A client that goes away cancels its handler, which closes the engine connection: how the
    # engine learns to abort (vLLM aborts a request whose connection closes).
    runner = web.AppRunner(proxy.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    # Start-up objects leave the collector's reach: a full collection would walk ~90k of them
    # on every pass and stall every stream (bench/router.py: 160-210 ms with 2,000 open).
    gc.collect()
    gc.freeze()
    # A listen queue as deep as vLLM's: a burst during a short stall must not overflow it (the
    # kernel drops the connection and the client retries 1 s later).
    await web.TCPSite(runner, args.bind, args.port, backlog=BACKLOG).start()
    log.info("routing on %s:%d", args.bind, args.port)
    if args.admin_port:
        admin = web.AppRunner(proxy.admin_app(), access_log=None)
        await admin.setup()
        await web.TCPSite(admin, args.bind, args.admin_port).start()
        log.info("admin API on %s:%d", args.bind, args.admin_port)
        await until_signalled(runner, admin)
    else:
        await until_signalled(runner)


async def _serve_picker(picker: Picker, args: argparse.Namespace) -> None:
    """Metrics and probes over HTTP first (its cleanup context opens the tokenizer's engine
    connections), then ext_proc; on a signal, gRPC stops taking streams before HTTP goes."""
    runner = web.AppRunner(picker.metrics_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.bind, args.port).start()
    server = await start_grpc(picker, args.bind, args.ext_proc_port)
    log.info("picking on %s:%d (ext_proc), metrics on :%d", args.bind, args.ext_proc_port,
             args.port)  # fmt: skip
    try:
        await until_signalled()
    finally:
        await server.stop(grace=5.0)
        await runner.cleanup()


async def until_signalled(*runners: web.BaseRunner) -> None:
    """Serve until SIGTERM or SIGINT, then let requests in flight finish (each runner's
    shutdown timeout) and stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for runner in runners:
        await runner.cleanup()
