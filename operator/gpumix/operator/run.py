"""`gpumix run`: the operator process — kopf watches, the planner loop, metrics and health."""

import argparse
import asyncio
import functools
import logging
import os
import signal
from typing import Any

import kopf
from kubernetes import client, config
from prometheus_client import start_http_server

from gpumix.cliargs import Parser, fail, positive_float, positive_int, tcp_port
from gpumix.install import LEASE_NAME, NAMESPACE, ROUTER_IMAGE_ENV, default_image
from gpumix.operator import memory
from gpumix.operator.election import (
    FollowerHealth,
    LeaseElector,
    default_identity,
    default_namespace,
)
from gpumix.operator.handlers import register
from gpumix.operator.kube import KubeWriter
from gpumix.operator.kvtask import KvLoop
from gpumix.operator.listing import listed_counts
from gpumix.operator.loop import Planner
from gpumix.operator.observing import add_observe_arguments, observer_from_args
from gpumix.operator.view import ClusterView
from gpumix.reconcile.cluster import SEARCH_SLICE_S, SEARCH_TIME_LIMIT_S
from gpumix.reconcile.leadership import Timing
from gpumix.sim import workers

log = logging.getLogger("gpumix")


def api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """In-cluster credentials unless a kubeconfig or context is named, else that kubeconfig."""
    if kubeconfig is None and context is None:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig, context=context)
    return client.ApiClient()


def _connection(api: client.ApiClient) -> kopf.ConnectionInfo:
    """kopf logs in with exactly the credentials our own client uses (same context), asking the
    client again on every re-login so that rotated in-cluster tokens are picked up."""
    cfg = api.configuration
    # kubernetes>=30 keeps tokens (kubeconfig and in-cluster) under "BearerToken"; older ones
    # under "authorization". Asking for one only made kopf log in anonymously with a token.
    auth = cfg.get_api_key_with_prefix("BearerToken", alias="authorization") or ""
    scheme, _, token = auth.partition(" ")
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        scheme=scheme or None,
        token=token or None,
    )


async def _main(
    args: argparse.Namespace, api: client.ApiClient, elector: LeaseElector | None
) -> None:
    view = ClusterView()
    registry = kopf.OperatorRegistry()
    register(registry, view, log_json=args.log_format == "json")

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return _connection(api)

    guard = None if elector is None else elector.check  # every write checks the Lease first
    planner = Planner(
        view,
        KubeWriter(api, guard),
        interval_s=args.interval,
        time_limit_s=args.solver_time_limit,
        search_time_limit_s=args.search_time_limit,
        search_slice_s=args.search_slice,
        budget_per_hour=args.budget,
        router_image=args.router_image,
        operator_namespace=default_namespace(NAMESPACE),
        observer=observer_from_args(args),
        listing=functools.partial(listed_counts, api),
    )

    @kopf.on.probe(id="planner", registry=registry)
    def planner_probe(**_: Any) -> bool:
        return planner.ready.is_set()

    start_http_server(args.metrics_port, addr=args.bind)
    if elector is not None and not await _until_leading(args, elector):
        return
    workers.start(args.simulation_processes)  # only the leader plans
    tasks = [
        asyncio.create_task(
            kopf.operator(
                registry=registry,
                clusterwide=True,
                # No kopf peering: the Lease (gpumix.operator.election) decides who runs at all.
                standalone=True,
                liveness_endpoint=f"http://{args.bind}:{args.health_port}/healthz",
            ),
            name="kopf",
        ),
        asyncio.create_task(planner.run(), name="planner"),
        asyncio.create_task(
            KvLoop(view, KubeWriter(api, guard), after=planner.ready).run(), name="kv-migration"
        ),
    ]
    await until_first_ends(tasks)


async def until_first_ends(tasks: list[asyncio.Task[None]]) -> None:
    """Run ``tasks`` until one ends, cancel the rest and raise what failed. On SIGTERM kopf
    cancels the tasks it finds in the loop as it stops, ours among them: a cancelled task is a
    stop, not a failure (it was raising CancelledError, a traceback at every pod shutdown)."""
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if not task.cancelled():
            task.result()


async def _until_leading(args: argparse.Namespace, elector: LeaseElector) -> bool:
    """Follow — serve /healthz, campaign for the Lease — until this replica leads (True) or is
    asked to stop (False). kopf installs its own SIGTERM/SIGINT handlers once it runs."""
    loop = asyncio.get_running_loop()
    leading, stopping = asyncio.Event(), asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    health = FollowerHealth(args.bind, args.health_port, elector)

    def on_leading() -> None:  # called from the campaign's thread
        loop.call_soon_threadsafe(leading.set)

    elector.start(on_leading)
    waits = [asyncio.create_task(leading.wait()), asyncio.create_task(stopping.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.to_thread(health.close)  # kopf's liveness endpoint takes the port over
    return leading.is_set() and not stopping.is_set()


def _elector(args: argparse.Namespace, api: client.ApiClient) -> LeaseElector | None:
    if not args.leader_elect:
        return None
    timing = Timing(
        lease_duration_s=args.leader_elect_lease_duration,
        renew_deadline_s=args.leader_elect_renew_deadline,
        retry_period_s=args.leader_elect_retry_period,
    )
    if problems := timing.problems():
        fail("gpumix run", "; ".join(problems))
    return LeaseElector(
        api,
        name=args.leader_elect_resource_name,
        namespace=args.leader_elect_resource_namespace or default_namespace(NAMESPACE),
        identity=args.leader_elect_identity or default_identity(),
        timing=timing,
    )


def add_parser(sub: "argparse._SubParsersAction[Parser]") -> None:
    run = sub.add_parser("run", help="run the operator (against a kubeconfig or in-cluster)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
    run.add_argument("--context", help="kubeconfig context (default: current)")
    run.add_argument("--interval", type=positive_float, default=30.0, help="seconds between passes")
    run.add_argument(
        "--solver-time-limit", type=positive_float, default=30.0, help="seconds per ILP"
    )
    run.add_argument(
        "--search-time-limit",
        type=positive_float,
        default=SEARCH_TIME_LIMIT_S,
        help="seconds one service's attainment search may take in a pass; a longer one keeps "
        "the best plan its rounds found",
    )
    run.add_argument(
        "--search-slice",
        type=positive_float,
        default=SEARCH_SLICE_S,
        help="seconds the attainment search of a service that already serves may take in the "
        "pass its change starts it in; cut there, its best plan so far is applied and the next "
        "pass searches on",
    )
    run.add_argument(
        "--simulation-processes",
        type=positive_int,
        default=2,
        help="simulations a prediction may run at once, in worker processes beside the "
        "operator's (a mixed plan's prediction runs two; 1: all in the operator's process)",
    )
    run.add_argument(
        "--budget",
        type=positive_float,
        default=None,
        help="cluster-wide cap on $/h over every LLMService (the joint plan stays within it)",
    )
    run.add_argument(
        "--router-image",
        default=os.environ.get(ROUTER_IMAGE_ENV) or default_image(),
        help=f"image of the LLMServices' router pods, which run `gpumix route` (default: "
        f"${ROUTER_IMAGE_ENV}, which the install sets to the operator's image, else "
        f"{default_image()})",
    )
    add_observe_arguments(run)
    run.add_argument("--metrics-port", type=tcp_port, default=8080)
    run.add_argument("--health-port", type=tcp_port, default=8081, help="GET /healthz")
    run.add_argument("--bind", default="0.0.0.0", help="address of the metrics/health servers")
    run.add_argument("--log-format", choices=["plain", "json"], default="json")
    _add_leader_election_arguments(run)
    run.set_defaults(func=run_operator)


def _env(name: str, default: str) -> str:
    return os.environ.get(f"GPUMIX_{name}") or default


def _add_leader_election_arguments(run: argparse.ArgumentParser) -> None:
    """kube-controller-manager's flag names; each also read from $GPUMIX_<FLAG_IN_CAPITALS>."""
    le = run.add_argument_group(
        "leader election",
        "Replicas campaign for a coordination.k8s.io/v1 Lease; only its holder runs the "
        "operator and writes, the others wait as followers (Ready, serving metrics and "
        "/healthz). A holder that cannot renew within the renew deadline exits.",
    )
    le.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=_env("LEADER_ELECT", "true").lower() not in ("0", "false", "no"),
        help="campaign for the Lease before running (default: yes; --no-leader-elect runs at "
        "once, for a single replica without the Lease's RBAC)",
    )
    le.add_argument(
        "--leader-elect-resource-name",
        default=_env("LEADER_ELECT_RESOURCE_NAME", LEASE_NAME),
        help=f"the Lease's name (default: {LEASE_NAME})",
    )
    le.add_argument(
        "--leader-elect-resource-namespace",
        default=os.environ.get("GPUMIX_LEADER_ELECT_RESOURCE_NAMESPACE"),
        help=f"the Lease's namespace (default: $POD_NAMESPACE, else the in-cluster service "
        f"account's, else {NAMESPACE})",
    )
    le.add_argument(
        "--leader-elect-identity",
        default=os.environ.get("GPUMIX_LEADER_ELECT_IDENTITY"),
        help="this replica's holderIdentity (default: $POD_NAME, else hostname_pid)",
    )
    timing = Timing()
    le.add_argument(
        "--leader-elect-lease-duration", type=positive_int,
        default=_env("LEADER_ELECT_LEASE_DURATION", str(timing.lease_duration_s)),
        help="whole seconds followers wait after the last renewal they saw before taking over "
        f"(default: {timing.lease_duration_s})",
    )  # fmt: skip
    le.add_argument(
        "--leader-elect-renew-deadline", type=positive_float,
        default=_env("LEADER_ELECT_RENEW_DEADLINE", str(timing.renew_deadline_s)),
        help="seconds the leader acts after the start of its last successful renewal; "
        f"less than the lease duration (default: {timing.renew_deadline_s:g})",
    )  # fmt: skip
    le.add_argument(
        "--leader-elect-retry-period", type=positive_float,
        default=_env("LEADER_ELECT_RETRY_PERIOD", str(timing.retry_period_s)),
        help=f"seconds between renewals and attempts (default: {timing.retry_period_s:g})",
    )  # fmt: skip


def run_operator(args: argparse.Namespace) -> int:
    kopf.configure(
        verbose=False,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger("gpumix").setLevel(logging.INFO)
    # kopf logs "Handler ... succeeded." at INFO for every watch event: with thousands of nodes
    # and pods that was 96% of the log (live 50 services × 500 nodes: 2,767 of 2,883 lines).
    # Its warnings and errors still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    memory.collect_less()
    api = api_client(args.kubeconfig, args.context)
    elector = _elector(args, api)
    try:
        asyncio.run(_main(args, api, elector))
    finally:
        # asyncio.run has waited for the writing threads: nothing writes any more.
        if elector is not None:
            elector.close()
        workers.stop()
    return 0
