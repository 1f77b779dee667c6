"""Simulated pods in real time, each behind its own HTTP server on 127.0.0.1 (see SERVER.md).

A `RealtimePod` runs one `Engine` against the wall clock (optionally sped up): requests arrive
over HTTP, the engine steps as the clock reaches each step's end, and streaming clients get each
token when the simulated engine produces it. Each pod speaks the HTTP surface of vLLM's OpenAI
server that a router uses (`/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/tokenize`,
`/detokenize`, `/health`, and vLLM's Prometheus metrics, names and labels as vLLM exports them),
with a deterministic toy tokenizer and model, plus the engine admin endpoints the KV-cache
scheduler uses (list running requests with their KV size; migrate a request out or in).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

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

_POLL_S = 0.1
"""Wall seconds between checks that a waiting client is still connected."""
DEFAULT_MAX_TOKENS = 16
"""Output length when a completion gives no `max_tokens` (vLLM's completions default; a chat's
is the rest of the context, as in vLLM's `get_max_tokens`)."""


class ApiError(Exception):
    """An error answered as vLLM's OpenAI server does: `{"error": {message, type, param, code}}`."""

    def __init__(self, message: str, param: str | None = None, code: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        kind = "NotFoundError" if self.code == 404 else "BadRequestError"
        error = {"message": str(self), "type": kind, "param": self.param, "code": self.code}
        return {"error": error}


# -- the toy tokenizer and model ------------------------------------------------------------------
VOCAB = 32000
"""Vocabulary size (Llama-2's)."""
EOS = 2
"""End of sequence (Llama-2's `</s>`), the only special token: it detokenizes to ""."""
_CONTEXT = 4
"""The toy model's next token depends on this many preceding ids."""


def _hash(data: bytes) -> int:
    """Stable across processes and runs (unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def token_id(word: str) -> int:
    """A word's id: `w<n>` (how `detokenize` spells id n) is n, so that
    `tokenize(detokenize(ids)) == ids`; any other word hashes into the vocabulary."""
    digits = word[1:]
    if word[:1] == "w" and digits.isascii() and digits.isdecimal() and int(digits) < VOCAB:
        return int(digits)
    return _hash(word.encode()) % VOCAB


def tokenize(text: str) -> list[int]:
    """One token per whitespace-separated word."""
    return [token_id(w) for w in text.split()]


def token_str(t: int) -> str:
    """A token's string (vLLM's `token_strs`)."""
    return "</s>" if t == EOS else f"w{t}"


def detokenize(ids: Sequence[int]) -> str:
    """Each id as a space and `w<n>`; EOS is skipped (vLLM's `skip_special_tokens`)."""
    return "".join("" if t == EOS else f" w{t}" for t in ids)


def chat_prompt(messages: Any, add_generation_prompt: bool = True) -> list[int]:
    """The toy chat template: per message a `<|role|>` token and its text's words, then
    `<|assistant|>` (the generation prompt)."""
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise ApiError("`messages` must be a non-empty list of {role, content}", "messages")
    words: list[str] = []
    for m in messages:
        words.append(f"<|{m['role']}|>")
        words.extend(_content_text(m.get("content")).split())
    if add_generation_prompt:
        words.append("<|assistant|>")
    return [token_id(w) for w in words]


def _content_text(content: Any) -> str:
    """A message's text: a string, or the `text` parts of a list of content parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return " ".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    raise ApiError("a message's content must be a string or a list of content parts", "messages")


def next_token(ids: Sequence[int]) -> int:
    """The toy model: a hash of the last `_CONTEXT` ids. A function of the sequence alone, so a
    request continued anywhere from prompt + generated ids produces the tokens it would have."""
    return _hash(",".join(map(str, ids[-_CONTEXT:])).encode()) % VOCAB


def generate(prompt: Sequence[int], max_tokens: int, ignore_eos: bool) -> tuple[list[int], str]:
    """The output ids and vLLM's finish reason: `stop` after an EOS (about one token in
    `VOCAB`) unless `ignore_eos`, else `length` after `max_tokens`."""
    context = list(prompt[-_CONTEXT:])
    out: list[int] = []
    while len(out) < max_tokens:
        t = next_token(context)
        out.append(t)
        if t == EOS and not ignore_eos:
            return out, "stop"
        context = [*context[1 - _CONTEXT :], t]
    return out, "length"


class PodMetrics:
    """vLLM's metric families for one pod, in its own registry."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self.model_name = model_name
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
        for reason in ("stop", "length", "abort"):  # vLLM exports every reason from the start
            self.success.labels(model_name, reason)
        self.prompt_total = Counter(
            "vllm:prompt_tokens", "Prefilled prompt tokens.", labels, registry=reg
        ).labels(**m)
        self.generation_total = Counter(
            "vllm:generation_tokens", "Generated tokens.", labels, registry=reg
        ).labels(**m)
        self.aborted = Counter(
            "gpumix_sim:aborted_requests",
            "Requests aborted because their client disconnected (vLLM counts them nowhere).",
            labels,
            registry=reg,
        ).labels(**m)

    def finished(self, r: Request, wall: Callable[[float], float], reason: str) -> None:
        """Record a finished request; `wall` converts simulated seconds to wall seconds."""
        self.prompt_tokens.observe(r.prompt)
        self.generation_tokens.observe(r.output)
        self.ttft.observe(wall(r.ttft))
        if r.output > 1:
            gap = wall(r.itl)
            for _ in range(r.output - 1):
                self.itl.observe(gap)
        self.e2e.observe(wall(r.latency))
        self.success.labels(self.model_name, reason).inc()
        self.prompt_total.inc(r.prompt)
        self.generation_total.inc(r.output)

    def expose(self) -> bytes:
        return generate_latest(self.registry)


class _Pending:
    __slots__ = ("done", "migrated", "reason", "request")

    def __init__(self, r: Request, reason: str = "length") -> None:
        self.request = r
        self.reason = reason
        """vLLM's finish reason if it finishes here."""
        self.done = threading.Event()
        self.migrated = False


class RealtimePod:
    """An engine driven by the wall clock: `speed` simulated seconds pass per wall second.

    Streaming clients get each token when its step ends (`wait_tokens`, from
    `Engine.progress`), not when the engine applies a decode run of up to `max_decode_run` steps.
    That keeps the engine exactly as the offline simulator runs it (same events, same step
    times, one wake-up of the engine thread per run), where running real-time pods with
    `max_decode_run=1` would change their events and wake the engine thread every step; a run's
    steps all last its `step_time`, so the token times inside a run are the engine's own.

    The events reach the engine in `cluster.run`'s order whatever thread wakes late (a busy CPU,
    the GIL): whichever thread takes the lock first applies the steps that ended by then
    (`_advance`), and an arrival, abort or migration is applied only after that. So a pod's
    simulated timeline is the offline engine's on the same arrivals (test_server_fidelity.py).
    """

    def __init__(self, engine: Engine, model_name: str, speed: float = 1.0) -> None:
        self.engine = engine
        self.model_name = model_name
        self.speed = speed
        self.metrics = PodMetrics(engine, model_name)
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        """Wakes the engine thread (a step was started or cut; stop)."""
        self._progress = threading.Condition(lock)
        """Wakes clients waiting for tokens (steps were applied or started)."""
        self._t0 = time.monotonic()
        self._ids = itertools.count()
        self._pending: dict[int, _Pending] = {}
        self._migrations: list[Callable[[float], None]] = []
        """Actions for the next step boundary (aborts, migrations; see `_boundary`)."""
        self._stop = False
        engine.on_finish.append(self._finished)
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
        pending = self._pending.pop(r.rid, None)
        self.metrics.finished(r, self.wall, pending.reason if pending else "length")
        if pending is not None:
            pending.done.set()

    def _loop(self) -> None:
        """Sleep until the step in flight ends (or a client starts or cuts one), then apply it."""
        engine = self.engine
        with self._cond:
            while not self._stop:
                self._advance(self.now())
                timeout = None
                if engine.busy:
                    timeout = max(0.0, self.wall(engine.step_end - self.now()))
                self._cond.wait(timeout)

    def _advance(self, now: float) -> None:
        """Apply every step that ended by `now`, each next one planned at the previous one's end,
        not when a thread got to run: a late thread would otherwise let an arrival that came
        after a step's end into the step that should have started then (`cluster.run` starts it
        and the arrival cuts it), or leave the engine idle until the arrival."""
        engine = self.engine
        if not (engine.busy and engine.step_end <= now):
            return
        while engine.busy and engine.step_end <= now:
            end = engine.step_end
            engine.finish(end)
            self._boundary(end)
        self._progress.notify_all()

    def _boundary(self, at: float) -> None:
        """Between steps at `at`: the aborts and migrations asked for, then the next step."""
        while self._migrations:
            self._migrations.pop(0)(at)
        self.engine.start(at)

    def _changed(self) -> None:
        """A client started or cut a step: the engine thread's wake-up and streams' next token
        times moved."""
        self._cond.notify_all()
        self._progress.notify_all()

    # -- client side ------------------------------------------------------------------------------
    def submit(self, prompt: int, output: int, reason: str = "length") -> _Pending | None:
        """Queue a request; None if it can never fit on this pod. `reason`: vLLM's finish reason
        once its `output` tokens are out (`stop` if the last is EOS)."""
        with self._cond:
            now = self.now()
            self._advance(now)
            r = Request(next(self._ids), now, prompt, output)
            pending = _Pending(r, reason)
            self._pending[r.rid] = pending
            if not self.engine.enqueue(r, now):
                del self._pending[r.rid]
                return None
            if self.engine.busy:
                self.engine.cut(now)
            else:
                self.engine.start(now)
            self._changed()
            return pending

    def wait_tokens(self, pending: _Pending, sent: int, timeout: float) -> int:
        """Wait until the request has generated more than `sent` tokens or left the engine, at
        most `timeout` wall seconds; returns how many tokens it has generated."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = self.now()
                self._advance(now)
                generated, due = self.engine.progress(pending.request, now)
                left = deadline - time.monotonic()
                if generated > sent or pending.done.is_set() or left <= 0:
                    return generated
                if due is not None:
                    left = min(left, self.wall(due - now))
                self._progress.wait(max(0.0, left))

    def abort(self, pending: _Pending) -> None:
        """The client went away: as vLLM aborts such a request, it leaves the engine at the next
        step boundary (the decode run in flight is cut to end with the step in progress) and its
        KV blocks are freed. Counted in `gpumix_sim:aborted_requests_total` if it had not
        finished by then."""
        r = pending.request

        def drop(now: float) -> None:
            if self._pending.get(r.rid) is pending and self.engine.remove(r):
                del self._pending[r.rid]
                self.metrics.aborted.inc()
                pending.done.set()

        with self._cond:
            now = self.now()
            self._advance(now)
            if pending.done.is_set():
                return
            self._migrations.append(drop)
            if self.engine.busy:
                self.engine.cut(now)
            else:
                self._boundary(now)
            self._changed()

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
        """Run `action(at)` at the next step boundary `at` (now, if the engine is idle)."""
        box: dict[str, Any] = {}
        ready = threading.Event()

        def run(now: float) -> None:
            box["result"] = action(now)
            ready.set()

        with self._cond:
            now = self.now()
            self._advance(now)
            self._migrations.append(run)
            if not self.engine.busy:
                self._boundary(now)
            self._changed()
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


def _check_ids(ids: list[Any], param: str) -> list[int]:
    if not all(type(t) is int and 0 <= t < VOCAB for t in ids):
        raise ApiError(f"token ids must be integers in [0, {VOCAB})", param)
    return ids


def _prompt_ids(prompt: Any) -> list[int]:
    """A completions `prompt`: a string, a list of token ids, or a list of one of those."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = tokenize(prompt)
    elif isinstance(prompt, list) and all(type(t) is int for t in prompt):
        ids = _check_ids(prompt, "prompt")
    else:
        raise ApiError("`prompt` must be a string or a list of token ids (one prompt)", "prompt")
    if not ids:
        raise ApiError("the prompt is empty", "prompt")
    return ids


@dataclass(frozen=True)
class _Generation:
    """A `/v1/completions` or `/v1/chat/completions` request; builds its answers, shaped as
    vLLM's `CompletionResponse` / `ChatCompletionResponse` and their stream chunks."""

    chat: bool
    prompt: list[int]
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    return_token_ids: bool

    @classmethod
    def parse(cls, body: dict[str, Any], chat: bool, max_model_len: int) -> _Generation:
        if chat:
            prompt = chat_prompt(body.get("messages"))
            max_tokens = body.get("max_completion_tokens")
            if max_tokens is None:
                max_tokens = body.get("max_tokens")
        else:
            prompt = _prompt_ids(body.get("prompt"))
            max_tokens = body.get("max_tokens")
        if max_tokens is None:
            # A chat's prompt that fills the context asks for 1: the length check refuses it.
            max_tokens = max(1, max_model_len - len(prompt)) if chat else DEFAULT_MAX_TOKENS
        if type(max_tokens) is not int or max_tokens < 1:
            raise ApiError("`max_tokens` must be an integer >= 1", "max_tokens")
        if body.get("n", 1) not in (1, None):
            raise ApiError("only n = 1 is simulated", "n")
        stream = bool(body.get("stream"))
        options = body.get("stream_options")
        if options is not None and not (stream and isinstance(options, dict)):
            raise ApiError("`stream_options` needs `stream: true`", "stream_options")
        if len(prompt) + max_tokens > max_model_len:
            raise ApiError(
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the prompt, "
                f"{max_tokens} in the completion).",
                "max_tokens",
            )
        return cls(chat, prompt, max_tokens, bool(body.get("ignore_eos")), stream,
                   bool((options or {}).get("include_usage")),
                   bool(body.get("return_token_ids")))  # fmt: skip

    def usage(self, generated: int) -> dict[str, int]:
        prompt = len(self.prompt)
        return {"prompt_tokens": prompt, "completion_tokens": generated,
                "total_tokens": prompt + generated}  # fmt: skip

    def response(self, head: dict[str, Any], tokens: list[int], reason: str) -> dict[str, Any]:
        text = detokenize(tokens)
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=reason, stop_reason=None)
        out = {**head, "choices": [choice], "usage": self.usage(len(tokens))}
        if self.return_token_ids:
            choice["token_ids"] = tokens
            (out if self.chat else choice)["prompt_token_ids"] = self.prompt
        return out

    def chunks(
        self, head: dict[str, Any], tokens: list[int], reason: str | None, first: bool
    ) -> list[dict[str, Any]]:
        """The stream chunks for `tokens` (one token, or none with the finish reason): the first
        also carries the prompt ids (`return_token_ids`); chat opens with the role's chunk."""
        out: list[dict[str, Any]] = []
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            if first:
                role: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "logprobs": None, "finish_reason": None}  # fmt: skip
                out.append({**head, "choices": [role]})
                if self.return_token_ids:
                    out[0]["prompt_token_ids"] = self.prompt
            choice["delta"] = {"content": detokenize(tokens)} if tokens else {}
        else:
            choice["text"] = detokenize(tokens)
        choice.update(logprobs=None, finish_reason=reason)
        if self.return_token_ids:
            choice["token_ids"] = tokens
            if first and not self.chat:
                choice["prompt_token_ids"] = self.prompt
        return [*out, {**head, "choices": [choice]}]


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

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/health":
                self._send(200, b"", "text/plain")
            elif path == "/metrics":
                self._send(200, pod.metrics.expose(), CONTENT_TYPE_LATEST)
            elif path == "/v1/models":
                card = {
                    "id": pod.model_name,
                    "object": "model",
                    "max_model_len": pod.engine.max_tokens,
                }
                self._json(200, {"object": "list", "data": [card]})
            elif path == "/admin/requests":
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
                self._json(404, ApiError(f"no route GET {path}", code=404).body())

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            routes: dict[str, Callable[[dict[str, Any]], None]] = {
                "/v1/completions": lambda body: self._generate(body, chat=False),
                "/v1/chat/completions": lambda body: self._generate(body, chat=True),
                "/tokenize": self._tokenize,
                "/detokenize": self._detokenize,
                "/admin/migrate_out": self._migrate_out,
                "/admin/migrate_in": self._migrate_in,
            }
            try:
                route = routes.get(path)
                if route is None:
                    raise ApiError(f"no route POST {path}", code=404)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError as err:
                    raise ApiError(f"invalid JSON: {err}") from err
                if not isinstance(body, dict):
                    raise ApiError("the body must be a JSON object")
                route(body)
            except ApiError as err:
                self._json(err.code, err.body())

        def _check_model(self, body: dict[str, Any]) -> None:
            model = body.get("model")
            if model is not None and model != pod.model_name:
                raise ApiError(f"The model `{model}` does not exist.", "model", 404)

        def _client_gone(self) -> bool:
            """Whether the client closed its connection (readable, but at EOF or reset)."""
            sock = self.connection
            try:
                readable, _, _ = select.select([sock], [], [], 0)
                return bool(readable) and not sock.recv(1, socket.MSG_PEEK)
            except OSError:
                return True

        def _generate(self, body: dict[str, Any], chat: bool) -> None:
            self._check_model(body)
            g = _Generation.parse(body, chat, pod.engine.max_tokens)
            tokens, reason = generate(g.prompt, g.max_tokens, g.ignore_eos)
            pending = pod.submit(len(g.prompt), len(tokens), reason)
            assert pending is not None, "prompt + max_tokens fits: checked by parse"
            prefix, kind = ("chatcmpl", "chat.completion") if chat else ("cmpl", "text_completion")
            head = {"id": f"{prefix}-{pod.engine.name}-{pending.request.rid}",
                    "object": f"{kind}.chunk" if chat and g.stream else kind,
                    "created": int(time.time()), "model": pod.model_name}  # fmt: skip
            if g.stream:
                self._stream(g, head, pending, tokens, reason)
                return
            while not pending.done.wait(_POLL_S):
                if self._client_gone():
                    pod.abort(pending)
                    self.close_connection = True
                    return
            out = tokens[: pending.request.generated]
            self._json(200, g.response(head, out, "migrated" if pending.migrated else reason))

        def _stream(
            self,
            g: _Generation,
            head: dict[str, Any],
            pending: _Pending,
            tokens: list[int],
            reason: str,
        ) -> None:
            """Server-sent events, one token per chunk, each written when the simulated engine
            produces the token; a failed write or a closed connection aborts the request."""
            sent = 0
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while not (pending.done.is_set() and sent >= pending.request.generated):
                    generated = pod.wait_tokens(pending, sent, _POLL_S)
                    if generated == sent and self._client_gone():
                        raise ConnectionAbortedError
                    events = []
                    for k in range(sent, generated):
                        last = reason if k == len(tokens) - 1 else None
                        events += g.chunks(head, tokens[k : k + 1], last, k == 0)
                    self._send_events(events)
                    sent = generated
                events = g.chunks(head, [], "migrated", sent == 0) if pending.migrated else []
                if g.include_usage:
                    events.append({**head, "choices": [], "usage": g.usage(sent)})
                self._send_events([*events, "[DONE]"], last=True)
            except OSError:
                pod.abort(pending)
                self.close_connection = True

        def _send_events(self, events: list[Any], last: bool = False) -> None:
            """Server-sent events, each its own chunk of `Transfer-Encoding: chunked`, in one
            write (a stream that fell behind catches up in one system call); `last` ends the
            body. Compact JSON, as vLLM's."""
            out = []
            for event in events:
                data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
                line = f"data: {data}\n\n".encode()
                out.append(b"%x\r\n%s\r\n" % (len(line), line))
            if last:
                out.append(b"0\r\n\r\n")
            self.wfile.write(b"".join(out))

        def _tokenize(self, body: dict[str, Any]) -> None:
            self._check_model(body)
            if "messages" in body:
                ids = chat_prompt(body["messages"], bool(body.get("add_generation_prompt", True)))
            elif isinstance(body.get("prompt"), str):
                ids = tokenize(body["prompt"])
            else:
                raise ApiError("give `prompt` (a string) or `messages`", "prompt")
            strs = [token_str(t) for t in ids] if body.get("return_token_strs") else None
            self._json(200, {"count": len(ids), "max_model_len": pod.engine.max_tokens,
                             "tokens": ids, "token_strs": strs})  # fmt: skip

        def _detokenize(self, body: dict[str, Any]) -> None:
            self._check_model(body)
            ids = body.get("tokens")
            if not isinstance(ids, list):
                raise ApiError("`tokens` must be a list of token ids", "tokens")
            self._json(200, {"prompt": detokenize(_check_ids(ids, "tokens"))})

        def _migrate_out(self, body: dict[str, Any]) -> None:
            try:
                rid = int(body["id"])
            except (KeyError, TypeError, ValueError) as err:
                raise ApiError("`id` must be a request id", "id") from err
            out = pod.migrate_out(rid)
            if out is None:
                self._json(404, {"error": f"request {rid} is not on this pod"})
            else:
                self._json(200, out)

        def _migrate_in(self, body: dict[str, Any]) -> None:
            try:
                args = (int(body["prompt_tokens"]), int(body["output_tokens"]),
                        int(body.get("generated_tokens", 0)))  # fmt: skip
            except (KeyError, TypeError, ValueError) as err:
                raise ApiError("`prompt_tokens` and `output_tokens` must be integers") from err
            if min(args[:2]) < 1:
                raise ApiError("`prompt_tokens` and `output_tokens` must be >= 1")
            rid = pod.migrate_in(*args, body.get("kv", "transfer") == "transfer")
            if rid is None:
                self._json(409, {"error": "the request does not fit on this pod"})
            else:
                self._json(200, {"id": rid})

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
