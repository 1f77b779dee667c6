"""`gpumix run`: the operator process — kopf watches, the planner loop, metrics and health."""

import argparse
import asyncio
import logging
import os
from typing import Any

import kopf
from kubernetes import client, config
from prometheus_client import start_http_server

from gpumix.cliargs import Parser, positive_float, tcp_port
from gpumix.install import ROUTER_IMAGE_ENV, default_image
from gpumix.operator.handlers import register
from gpumix.operator.kube import KubeWriter
from gpumix.operator.kvtask import KvLoop
from gpumix.operator.loop import Planner
from gpumix.operator.observing import add_observe_arguments, observer_from_args
from gpumix.operator.view import ClusterView

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


async def _main(args: argparse.Namespace) -> None:
    view = ClusterView()
    registry = kopf.OperatorRegistry()
    register(registry, view, log_json=args.log_format == "json")

    api = api_client(args.kubeconfig, args.context)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return _connection(api)

    planner = Planner(
        view,
        KubeWriter(api),
        interval_s=args.interval,
        time_limit_s=args.solver_time_limit,
        budget_per_hour=args.budget,
        router_image=args.router_image,
        observer=observer_from_args(args),
    )

    @kopf.on.probe(id="planner", registry=registry)
    def planner_probe(**_: Any) -> bool:
        return planner.ready.is_set()

    start_http_server(args.metrics_port, addr=args.bind)
    tasks = [
        asyncio.create_task(
            kopf.operator(
                registry=registry,
                clusterwide=True,
                standalone=True,
                liveness_endpoint=f"http://{args.bind}:{args.health_port}/healthz",
            ),
            name="kopf",
        ),
        asyncio.create_task(planner.run(), name="planner"),
        asyncio.create_task(KvLoop(view, KubeWriter(api)).run(), name="kv-migration"),
    ]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in done:
        task.result()


def add_parser(sub: "argparse._SubParsersAction[Parser]") -> None:
    run = sub.add_parser("run", help="run the operator (against a kubeconfig or in-cluster)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
    run.add_argument("--context", help="kubeconfig context (default: current)")
    run.add_argument("--interval", type=positive_float, default=30.0, help="seconds between passes")
    run.add_argument(
        "--solver-time-limit", type=positive_float, default=30.0, help="seconds per ILP"
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
    run.set_defaults(func=run_operator)


def run_operator(args: argparse.Namespace) -> int:
    kopf.configure(
        verbose=False,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger("gpumix").setLevel(logging.INFO)
    asyncio.run(_main(args))
    return 0
