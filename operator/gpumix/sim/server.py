"""Simulated pods in real time, each behind its own HTTP server on 127.0.0.1 (see SERVER.md).

A `RealtimePod` runs one `Engine` against the wall clock (optionally sped up): requests arrive
over HTTP, the engine steps as the clock reaches each step's end, and clients get their answer
when the simulated request finishes. Each pod serves vLLM's Prometheus metrics (names and labels
as vLLM exports them), an OpenAI-compatible `/v1/completions`, `/health`, and the engine admin
endpoints the KV-cache scheduler uses (list running requests with their KV size; migrate a
request out or in).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpumix.sim.engine import Engine
from gpumix.sim.request import Request

HOST = "127.0.0.1"
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class PodMetrics:
    """vLLM's metric families for one pod, in its own registry."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self.registry = reg = CollectorRegistry()
        labels = ["model_name"]
        m = {"model_name": model_name}
        running = Gauge(
            "vllm:num_requests_running", "Requests in the running batch.", labels, registry=reg
        )
        waiting = Gauge("vllm:num_requests_waiting", "Requests waiting.", labels, registry=reg)
        kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 = full).", labels, registry=reg)
        running.labels(**m).set_function(lambda: len(engine.running) + len(engine.prefilling))
        waiting.labels(**m).set_function(lambda: len(engine.waiting))
        kv.labels(**m).set_function(lambda: engine.kv_usage)
        info = Gauge(
            "vllm:cache_config_info",
            "KV cache configuration.",
            ["model_name", "num_gpu_blocks", "block_size"],
            registry=reg,
        )
        info.labels(model_name, str(engine.kv_blocks), str(engine.bs)).set(1)
        self.prompt_tokens = Histogram(
            "vllm:request_prompt_tokens",
            "Prompt tokens per request.",
            labels,
            buckets=_TOKEN_BUCKETS,
            registry=reg,
        ).labels(**m)
        self.generation_tokens = Histogram(
            "vllm:request_generation_tokens",
            "Generated tokens per request.",
            labels,
            buckets=_TOKEN_BUCKETS,
            registry=reg,
        ).labels(**m)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=reg,
        ).labels(**m)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Inter-token latency.",
            labels,
            buckets=_ITL_BUCKETS,
            registry=reg,
        ).labels(**m)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency.",
            labels,
            buckets=_E2E_BUCKETS,
            registry=reg,
        ).labels(**m)
        self.success = Counter(
            "vllm:request_success",
            "Finished requests.",
            ["model_name", "finished_reason"],
            registry=reg,
        )
        self.success_length = self.success.labels(model_name, "length")
        self.prompt_total = Counter(
            "vllm:prompt_tokens", "Prefilled prompt tokens.", labels, registry=reg
        ).labels(**m)
        self.generation_total = Counter(
            "vllm:generation_tokens", "Generated tokens.", labels, registry=reg
        ).labels(**m)

    def finished(self, r: Request, wall: Callable[[float], float]) -> None:
        """Record a finished request; `wall` converts simulated seconds to wall seconds."""
        self.prompt_tokens.observe(r.prompt)
        self.generation_tokens.observe(r.output)
        self.ttft.observe(wall(r.ttft))
        if r.output > 1:
            gap = wall(r.itl)
            for _ in range(r.output - 1):
                self.itl.observe(gap)
        self.e2e.observe(wall(r.latency))
        self.success_length.inc()
        self.prompt_total.inc(r.prompt)
        self.generation_total.inc(r.output)

    def expose(self) -> bytes:
        return generate_latest(self.registry)


class _Pending:
    __slots__ = ("done", "first", "migrated", "request")

    def __init__(self, r: Request) -> None:
        self.request = r
        self.first = threading.Event()
        self.done = threading.Event()
        self.migrated = False


class RealtimePod:
    """An engine driven by the wall clock: `speed` simulated seconds pass per wall second."""

    def __init__(self, engine: Engine, model_name: str, speed: float = 1.0) -> None:
        self.engine = engine
        self.model_name = model_name
        self.speed = speed
        self.metrics = PodMetrics(engine, model_name)
        self._cond = threading.Condition()
        self._t0 = time.monotonic()
        self._ids = itertools.count()
        self._pending: dict[int, _Pending] = {}
        self._migrations: list[Callable[[float], None]] = []
        self._stop = False
        engine.on_finish.append(self._finished)
        engine.on_first_token.append(lambda r: self._pending[r.rid].first.set())
        self._thread = threading.Thread(target=self._loop, name=f"sim-{engine.name}", daemon=True)

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    def wall(self, sim_seconds: float) -> float:
        return sim_seconds / self.speed

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _finished(self, r: Request) -> None:
        self.metrics.finished(r, self.wall)
        pending = self._pending.pop(r.rid, None)
        if pending is not None:
            pending.first.set()
            pending.done.set()

    def _loop(self) -> None:
        engine = self.engine
        with self._cond:
            while not self._stop:
                now = self.now()
                if engine.busy and engine.step_end <= now:
                    engine.finish(engine.step_end)
                if not engine.busy:
                    while self._migrations:
                        self._migrations.pop(0)(now)
                    engine.start(now)
                timeout = None
                if engine.busy:
                    timeout = max(0.0, self.wall(engine.step_end - self.now()))
                self._cond.wait(timeout)

    # -- client side ------------------------------------------------------------------------------
    def submit(self, prompt: int, output: int) -> _Pending | None:
        """Queue a request; None if it can never fit on this pod."""
        with self._cond:
            now = self.now()
            r = Request(next(self._ids), now, prompt, output)
            pending = _Pending(r)
            self._pending[r.rid] = pending
            if not self.engine.enqueue(r, now):
                del self._pending[r.rid]
                return None
            if self.engine.busy:
                self.engine.cut(now)
            self._cond.notify_all()
            return pending

    def running(self) -> list[dict[str, Any]]:
        with self._cond:
            e = self.engine
            out = []
            for state, rs in (("running", e.running), ("prefilling", e.prefilling),
                              ("waiting", list(e.waiting))):  # fmt: skip
                for r in rs:
                    out.append(
                        {
                            "id": r.rid,
                            "state": state,
                            "prompt_tokens": r.prompt,
                            "output_tokens": r.output,
                            "generated_tokens": r.generated,
                            "kv_tokens": r.prompt + r.generated if r.blocks else 0,
                            "kv_blocks": r.blocks,
                        }
                    )
            return out

    def _between_steps(self, action: Callable[[float], Any], timeout: float = 10.0) -> Any:
        """Run `action(now)` on the engine thread at the next step boundary."""
        box: dict[str, Any] = {}
        ready = threading.Event()

        def run(now: float) -> None:
            box["result"] = action(now)
            ready.set()

        with self._cond:
            self._migrations.append(run)
            self._cond.notify_all()
        if not ready.wait(timeout):
            raise TimeoutError("the engine did not reach a step boundary")
        return box["result"]

    def migrate_out(self, rid: int) -> dict[str, Any] | None:
        def action(now: float) -> dict[str, Any] | None:
            pending = self._pending.get(rid)
            if pending is None or not self.engine.remove(pending.request):
                return None
            r = pending.request
            pending.migrated = True
            del self._pending[rid]
            pending.first.set()
            pending.done.set()
            return {"id": rid, "prompt_tokens": r.prompt, "output_tokens": r.output,
                    "generated_tokens": r.generated}  # fmt: skip

        result: dict[str, Any] | None = self._between_steps(action)
        return result

    def migrate_in(self, prompt: int, output: int, generated: int, with_kv: bool) -> int | None:
        def action(now: float) -> int | None:
            r = Request(next(self._ids), now, prompt, output)
            r.generated = generated
            r.first_token = now if generated else None
            self._pending[r.rid] = _Pending(r)
            if not self.engine.insert(r, now, with_kv=with_kv):
                del self._pending[r.rid]
                return None
            return r.rid

        result: int | None = self._between_steps(action)
        return result


def _tokens(prompt: Any) -> int:
    """Prompt length: a list of token ids, or a string counted as whitespace-separated words."""
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        return max(1, len(prompt))
    return max(1, len(str(prompt).split()))


def make_handler(pod: RealtimePod) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, obj: Any) -> None:
            self._send(code, json.dumps(obj).encode())

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"", "text/plain")
            elif self.path == "/metrics":
                self._send(200, pod.metrics.expose(), CONTENT_TYPE_LATEST)
            elif self.path == "/v1/models":
                self._json(
                    200, {"object": "list", "data": [{"id": pod.model_name, "object": "model"}]}
                )
            elif self.path == "/admin/requests":
                e = pod.engine
                self._json(
                    200,
                    {
                        "pod": e.name,
                        "gpu_type": e.gpu_type,
                        "block_size": e.bs,
                        "kv_blocks": e.kv_blocks,
                        "used_blocks": e.used,
                        "requests": pod.running(),
                    },
                )
            else:
                self._json(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            try:
                body = self._body()
            except json.JSONDecodeError as err:
                self._json(400, {"error": f"invalid JSON: {err}"})
                return
            if self.path == "/v1/completions":
                self._complete(body)
            elif self.path == "/admin/migrate_out":
                out = pod.migrate_out(int(body["id"]))
                if out is None:
                    self._json(404, {"error": f"request {body['id']} is not on this pod"})
                else:
                    self._json(200, out)
            elif self.path == "/admin/migrate_in":
                rid = pod.migrate_in(
                    int(body["prompt_tokens"]),
                    int(body["output_tokens"]),
                    int(body.get("generated_tokens", 0)),
                    body.get("kv", "transfer") == "transfer",
                )
                if rid is None:
                    self._json(409, {"error": "the request does not fit on this pod"})
                else:
                    self._json(200, {"id": rid})
            else:
                self._json(404, {"error": f"no route {self.path}"})

        def _complete(self, body: dict[str, Any]) -> None:
            prompt = _tokens(body.get("prompt", ""))
            output = max(1, int(body.get("max_tokens") or 16))
            pending = pod.submit(prompt, output)
            if pending is None:
                self._json(
                    400,
                    {
                        "error": {
                            "message": "prompt + max_tokens exceeds the model's "
                            "context on this pod",
                            "type": "BadRequestError",
                        }
                    },
                )
                return
            created = int(time.time())
            rid = f"cmpl-{pod.engine.name}-{pending.request.rid}"
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                pending.first.wait()
                self._event(rid, created, "x", None)
                pending.done.wait()
                reason = "migrated" if pending.migrated else "length"
                self._event(rid, created, " x" * (pending.request.generated - 1), reason)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
                return
            pending.done.wait()
            r = pending.request
            self._json(
                200,
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": pod.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "text": " x" * r.generated,
                            "finish_reason": "migrated" if pending.migrated else "length",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": r.generated,
                        "total_tokens": prompt + r.generated,
                    },
                },
            )

        def _event(self, rid: str, created: int, text: str, reason: str | None) -> None:
            chunk = {"id": rid, "object": "text_completion", "created": created,
                     "model": pod.model_name,
                     "choices": [{"index": 0, "text": text, "finish_reason": reason}]}  # fmt: skip
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()

    return Handler


class PodServer:
    """A `RealtimePod` behind a threading HTTP server on 127.0.0.1 (port 0: any free port)."""

    def __init__(self, pod: RealtimePod, port: int = 0) -> None:
        self.pod = pod
        self.http = ThreadingHTTPServer((HOST, port), make_handler(pod))
        self.http.daemon_threads = True
        self._thread = threading.Thread(
            target=self.http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http.server_address[1]}"

    def start(self) -> PodServer:
        self.pod.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.pod.stop()

    def __enter__(self) -> PodServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
