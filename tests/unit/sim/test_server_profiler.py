"""The real-time sim server on 127.0.0.1: Prometheus metrics, OpenAI completions, admin API, and
the endpoint profiler against it (bounded: a few seconds)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_helpers import LLAMA7B, pods

from gpumix.api import BucketSamples
from gpumix.profiles.maxtput import max_rate_within
from gpumix.sim.profiler import EndpointTarget, SimTarget, make_profile, profile_bucket
from gpumix.sim.server import PodServer, RealtimePod

MODEL = "llama-2-7b"
SPEED = 10.0  # simulated seconds per wall second


@pytest.fixture
def server() -> Iterator[PodServer]:
    (engine,) = pods("a100-80gb")
    with PodServer(RealtimePod(engine, MODEL, SPEED)) as s:
        yield s


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
        return body


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def test_binds_to_localhost_only(server: PodServer) -> None:
    assert server.http.server_address[0] == "127.0.0.1"
    assert _get(f"{server.url}/health") == b""


def test_completions_then_metrics_parse_with_vllm_names(server: PodServer) -> None:
    out = _post(
        f"{server.url}/v1/completions", {"model": MODEL, "prompt": "a b c d e", "max_tokens": 20}
    )
    assert out["usage"] == {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25}
    assert out["choices"][0]["finish_reason"] == "length"
    families = {
        f.name: f for f in text_string_to_metric_families(_get(f"{server.url}/metrics").decode())
    }
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:request_prompt_tokens",
                 "vllm:request_generation_tokens", "vllm:time_to_first_token_seconds",
                 "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
                 "vllm:request_success", "vllm:prompt_tokens",
                 "vllm:generation_tokens"):  # fmt: skip
        assert name in families, name
        assert all(s.labels.get("model_name") == MODEL for s in families[name].samples)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}  # fmt: skip
    m = (("model_name", MODEL),)
    assert samples[("vllm:prompt_tokens_total", m)] == 5
    assert samples[("vllm:generation_tokens_total", m)] == 20
    assert samples[("vllm:request_success_total",
                    (("finished_reason", "length"), ("model_name", MODEL)))] == 1  # fmt: skip
    assert samples[("vllm:inter_token_latency_seconds_count", m)] == 19
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"


def test_admin_lists_requests_and_migrates_them(server: PodServer) -> None:
    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.update(
            _post(f"{server.url}/v1/completions", {"prompt": [1] * 500, "max_tokens": 2000 - 500})
        )
    )
    thread.start()
    listing: dict[str, Any] = {}
    for _ in range(100):
        listing = json.loads(_get(f"{server.url}/admin/requests"))
        if listing["requests"] and listing["requests"][0]["state"] == "running":
            break
        threading.Event().wait(0.02)
    (req,) = listing["requests"]
    assert req["kv_blocks"] > 0 and req["prompt_tokens"] == 500
    assert listing["used_blocks"] >= req["kv_blocks"]
    moved = _post(f"{server.url}/admin/migrate_out", {"id": req["id"]})
    thread.join(10)
    assert result["choices"][0]["finish_reason"] == "migrated"
    assert json.loads(_get(f"{server.url}/admin/requests"))["used_blocks"] == 0
    back = _post(f"{server.url}/admin/migrate_in", {**moved, "kv": "transfer"})
    listing = json.loads(_get(f"{server.url}/admin/requests"))
    assert [r["id"] for r in listing["requests"]] == [back["id"]]
    assert listing["requests"][0]["generated_tokens"] >= moved["generated_tokens"]


def test_endpoint_profiler_agrees_with_the_simulator(server: PodServer) -> None:
    """§5.3 against the HTTP server: at SPEED× real time the endpoint looks like a GPU SPEED×
    faster, so its MaxTput at SLO/SPEED is SPEED× the simulator's at SLO."""
    target = EndpointTarget(server.url, MODEL, requests=30, timeout_s=20)
    points = profile_bucket(
        target, 200, 50, start_rate=20.0, growth=2.0, stop_tpot_ms=40 / SPEED * 2, max_points=3
    )
    assert [p.rate for p in points][:2] == [20.0, 40.0]
    assert all(p.ttft_ms is not None and p.ttft_ms < p.tpot_ms * 50 for p in points)
    sim = profile_bucket(
        SimTarget("a100-80gb", LLAMA7B),
        200,
        50,
        start_rate=2.0,
        growth=2.0,
        stop_tpot_ms=80,
        max_points=3,
    )
    for wall, simulated in zip(points, sim, strict=False):
        assert wall.tpot_ms * SPEED == pytest.approx(simulated.tpot_ms, rel=0.35)
    profile = make_profile(
        MODEL,
        "a100-80gb",
        gpus=1,
        input_edges=[1, 400],
        output_edges=[1, 100],
        samples=[BucketSamples(input_bucket=0, output_bucket=0, points=points)],
        source="test",
        tables_at=[1000.0],
    )
    assert profile.spec.tables is not None
    assert profile.spec.tables[0].max_tput[0][0] >= 20.0
    assert max_rate_within(points, 1000.0, None) >= 20.0
