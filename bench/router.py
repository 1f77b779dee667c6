"""Benchmark: the gpumix router's overhead — `gpumix route` against the engine directly.

One run on one machine. Every proxy figure is measured like for like against a direct baseline in
the same run: the same engine process, the same request bodies and arrival times (seeded Poisson),
the same run length, direct and proxy blocks alternating so that the machine's noise falls on both.

1. **Routing decision** (in process, no I/O): ``RoutingCore.route`` + ``finish`` (and a
   ``progress`` per request, as the proxy calls per chunk) of 100k requests on a realistic table:
   10 input × 6 output buckets (Mélange's edges), 4 pools of 4 pods (16), ``max_inflight`` 256,
   512 requests kept in flight, prompt and output lengths log-uniform. Each call timed alone.
2. **Added TTFT** at 300 req/s open loop (Poisson) on one proxy process: TTFT = from just before
   the client sends to the read that returns the first SSE ``data:`` event, direct vs through the
   proxy; both distributions, and proxy − direct at p50 and p99: pooled over 6 blocks of 3 s per
   side (direct and proxy alternating, each block's arrivals replayed on both), and the median
   over blocks of each block's difference (robust to a block disturbed by another job). The
   proxy's own ``gpumix_router_added_ttft_seconds`` (from its /metrics) is shown next to it.
   A third side, the same router started without ``--migratable`` (streams relayed raw, no
   :class:`~gpumix.route.relay.Relay`), takes its turn in every block on the same arrivals (the
   three sides' order rotates per block): the migratable relay's added TTFT, per-chunk delay
   and router CPU per request are divided by the raw relay's (the cost of a movable stream).
3. **Per-chunk delay**: the engine stamps every chunk with ``time.monotonic()`` (CLOCK_MONOTONIC,
   one clock for all processes on Linux) just before writing it; the client subtracts it from its
   own ``time.monotonic()`` on receipt. Chunks after the first, same run as (2); proxy − direct
   at p50 and p99, pooled and median over blocks.
4. **Highest sustained rate**: offered rate stepped up (default 100 … 3200 req/s, 4 tokens 5 ms
   apart), each step 4 s per side; a step is sustained when ≥ 99% of the offered requests
   complete intact within the step (+1 s drain), p99 TTFT ≤ ``--ttft-bound-ms`` (50) and the load
   generator kept to the schedule (its lateness p99 ≤ the same bound: otherwise the client, not
   the system, set the rate). A failed step is run again, up to twice (the VM is shared; same
   arrivals), and fails only if all three attempts do; a side stops at its first failed step.
5. **Concurrent streams**: 2,000 streams opened over 4 s (evenly spaced), each 20 tokens 0.5 s
   apart (~10 s), all open at once for ~6 s; intact = HTTP 200, every token in order, the last
   with ``finish_reason``, ``[DONE]``, no error event. Direct first, then through the proxy.
6. **Migration blackout** (issue #16): two ``gpumix sim serve`` pods (Llama-2-7B on A10G at
   ``--migration-speed`` 1, so a prefill takes the roofline's time, 33 ms for 64 tokens to 0.5 s
   for 2,048) behind a third router (its own free ``--admin-port``). N streams (8 quick, 24),
   prompts of 64–2,048 token IDs (geometric steps, shuffled), ``ignore_eos``; each is opened alone
   (the client learns its request id from ``/admin/inflight``) and, once the client has 8–24 of
   its tokens plus a random share of one token gap, moved to the other pod with ``POST
   /admin/migrate``; 32 tokens follow. Client side: the **blackout** is the longest gap between
   consecutive tokens that ends between the move request and its answer (A's events are held
   from the move; B's first token is written before the answer). Target side: the **prefill** is
   the router's ``prefill_s`` (continuation sent → its first event: B's re-prefill of prompt +
   generated tokens, including any wait behind B's other prefills); the roofline's
   ``prefill_s(prompt + generated)`` is shown beside it. Target: blackout ≤ prefill + 50 ms. The
   router's own share is blackout − prefill − (move request − last token before it). The same
   requests unmoved, all at once, come first: every moved answer must carry the same text.

**Why a stub engine.** This measures the proxy, not the engine. `gpumix sim serve` (a threading
HTTP server) saturates long before the proxy does, so the engine here is a minimal aiohttp server
in its own process (this script re-invoked with ``--engine-server``): POST /v1/completions
streaming SSE chunks as vLLM formats them (``id``, ``object: "text_completion"``, ``created``,
``model``, ``choices[{index, text, logprobs, finish_reason, stop_reason}]``, ``usage``, plus the
bench's ``sent`` stamp), then ``data: [DONE]``; ``max_tokens`` chunks, ``stub_interval_s`` apart
(a request field the proxy forwards untouched); GET /v1/models and /health. The first chunk is sent
at once (no prefill), so TTFT is transport and relay only. One process listens on one port per
pod of the table (16; listen backlog 2048, uvicorn's default, which vLLM's server runs on); the
direct baseline spreads requests round-robin over those ports.

**The router** runs as users run it, ``gpumix route --routing-file … --engine POOL=URL ×16 --bind
127.0.0.1 --port P --admin-port A --migratable --log-format plain --max-inflight-per-pod 1024``
(``--migratable``, as for a service whose KV loop moves streams through it: the costlier relay;
1024, not the default 256, so that 2,000 streams are not shed by policy: shedding is not
overhead), on the table of (1).
Prompts are token-ID lists (32–800 tokens: input buckets 1–5), so the router needs no /tokenize.
It runs on its default loop (``asyncio.run``; the run reports whether uvloop was loaded in it).

**Load generator**: one aiohttp client (``TCPConnector(limit=0)``) in this process; the engine and
the client use uvloop when it is installed, else asyncio. Both ``gc.freeze()`` their start-up
heap (a full collection of it would pause them for ~50 ms: noise on both sides); the proxy is
left as it ships. Per step the CPU used by the proxy, the engine, the client and the whole
machine (/proc/stat; ``others`` = other jobs on the VM) and the machine's listen-queue overflows
and SYN retransmissions (/proc/net/netstat) are recorded, so a saturated generator, engine or
machine is visible. RLIMIT_NOFILE soft is raised to the hard limit at start. All subprocesses are
stopped on exit, also on error (and die with this process: PR_SET_PDEATHSIG).

Usage: ``.venv/bin/python bench/router.py [--json] [--quick] [--rate 300] [--rates 100,200,...]
[--ttft-bound-ms 50] [--streams 2000] [--migrations 24] [--migration-speed 1] [--seed 0]``.
``--quick``: a < 60 s smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import importlib
import importlib.util
import itertools
import json
import math
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import numpy as np
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import Roofline
from gpumix.route import PoolFullError, RoutingCore, RoutingTable, histogram_prior
from gpumix.route.cli import until_signalled

ROOT = Path(__file__).resolve().parents[1]

INPUT_EDGES = [1, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384]
OUTPUT_EDGES = [1, 64, 128, 256, 512, 1024, 2048]
POOLS = ("l4", "a10g", "a100-80gb", "h100")
PODS_PER_POOL = 4
PROMPT_LENGTHS = (32, 100, 200, 400, 800)
DEFAULT_RATES = (100, 200, 400, 600, 800, 1200, 1600, 2400, 3200)

ANCHORS = {
    "decision": "llm-d scheduler: 0.1-0.2 ms p50",
    "added_ttft": "LiteLLM: +2 ms p50 / +13 ms p99 at ~290 req/s per pod",
    "streams": "vLLM production-stack router: fails past 1k concurrent requests",
}
TARGETS = {
    "decision_p99_ms": 0.5,
    "added_ttft_p50_ms": 3.0,
    "added_ttft_p99_ms": 15.0,
    "ttft_rate": 300.0,
    "added_chunk_p50_ms": 0.2,
    "streams": 2000,
}

_HEADERS = {"Content-Type": "application/json"}
_TICK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


# ---- event loop -------------------------------------------------------------------------------


def _loop_name() -> str:
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop when it is installed, else on asyncio's default loop."""
    if _loop_name() == "uvloop":
        uvloop = importlib.import_module("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


# ---- the stub engine (its own process) --------------------------------------------------------

_stub_ids = itertools.count()


async def _stub_completions(request: web.Request) -> web.StreamResponse:
    body = json.loads(await request.read())
    n = max(1, int(body.get("max_tokens") or 16))
    interval = float(body.get("stub_interval_s") or 0.0)
    rid, created = next(_stub_ids), int(time.time())
    if not body.get("stream"):
        return web.json_response(
            {
                "id": f"cmpl-{rid}",
                "object": "text_completion",
                "created": created,
                "model": "stub",
                "choices": [
                    {
                        "index": 0,
                        "text": "".join(f" t{k}" for k in range(n)),
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
            }
        )
    head = (
        b'data: {"id":"cmpl-%d","object":"text_completion","created":%d,"model":"stub",'
        b'"choices":[{"index":0,"text":" t' % (rid, created)
    )
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    try:
        for k in range(n):
            if k and interval:
                await asyncio.sleep(interval)
            finish = b'"length"' if k == n - 1 else b"null"
            tail = b'%d","logprobs":null,"finish_reason":%s,"stop_reason":null}],"usage":null,'
            await response.write(head + tail % (k, finish) + b'"sent":%.7f}\n\n' % time.monotonic())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away: stop generating, as vLLM aborts
    return response


async def _stub_models(_: web.Request) -> web.Response:
    return web.json_response(
        {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "bench"}]}
    )


async def _stub_health(_: web.Request) -> web.Response:
    return web.Response(text="")


async def _serve_stub(ports: Sequence[int]) -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", _stub_completions)
    app.router.add_get("/v1/models", _stub_models)
    app.router.add_get("/health", _stub_health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for port in ports:
        await web.TCPSite(runner, "127.0.0.1", port, backlog=2048).start()
    gc.collect()
    gc.freeze()  # the stub's start-up heap out of every collection: fewer engine pauses
    await until_signalled(runner)


# ---- the routing table ------------------------------------------------------------------------


def routing_document() -> dict[str, Any]:
    """A realistic plan: 10 × 6 buckets, 4 pools of 4 pods; bigger buckets on bigger GPUs, each
    bucket split 60/40 between two neighbouring pools (the largest all on H100); a histogram that
    falls with length."""
    rows, cols = len(INPUT_EDGES) - 1, len(OUTPUT_EDGES) - 1
    share = {p: [[0.0] * cols for _ in range(rows)] for p in POOLS}
    for i in range(rows):
        for j in range(cols):
            first = min(len(POOLS) - 1, (i + j) // 4)
            second = min(len(POOLS) - 1, first + 1)
            if first == second:
                share[POOLS[first]][i][j] = 1.0
            else:
                share[POOLS[first]][i][j] = 0.6
                share[POOLS[second]][i][j] = 0.4
    histogram = [[1.0 / ((1 + i) * (1 + j)) for j in range(cols)] for i in range(rows)]
    return {
        "inputEdges": INPUT_EDGES,
        "outputEdges": OUTPUT_EDGES,
        "pools": {p: {"replicas": PODS_PER_POOL, "share": share[p]} for p in POOLS},
        "histogram": histogram,
    }


def pod_names() -> dict[str, list[str]]:
    return {p: [f"{p}-{k}" for k in range(PODS_PER_POOL)] for p in POOLS}


# ---- statistics -------------------------------------------------------------------------------


def dist_ms(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """n, p50, p99, mean and max of ``seconds``, in milliseconds."""
    if not seconds:
        return {"n": 0, "p50": None, "p99": None, "mean": None, "max": None}
    arr = np.asarray(seconds, dtype=float) * 1e3
    return {
        "n": len(arr),
        "p50": round(float(np.percentile(arr, 50)), 4),
        "p99": round(float(np.percentile(arr, 99)), 4),
        "mean": round(float(arr.mean()), 4),
        "max": round(float(arr.max()), 4),
    }


def _diff(proxy: dict[str, Any], direct: dict[str, Any], key: str) -> float | None:
    if proxy.get(key) is None or direct.get(key) is None:
        return None
    return round(float(proxy[key]) - float(direct[key]), 4)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


# ---- 1. routing decision ----------------------------------------------------------------------


def bench_decision(n: int, seed: int, window: int = 512) -> dict[str, Any]:
    table = RoutingTable.model_validate(routing_document())
    prior = histogram_prior(table.output_edges, table.traffic())
    core = RoutingCore(table, pod_names(), prior, max_inflight=256)
    rng = np.random.default_rng(seed)
    warm = 2000
    total = n + warm
    prompts = np.exp(rng.uniform(0.0, math.log(16000), total)).astype(int).tolist()
    outputs = np.exp(rng.uniform(0.0, math.log(2000), total)).astype(int).tolist()
    capped = rng.random(total) < 0.5
    max_tokens = [min(4096, 2 * o) if c else None for o, c in zip(outputs, capped, strict=True)]
    rids = [f"r{k}" for k in range(total)]
    route_ns: list[int] = []
    finish_ns: list[int] = []
    progress_ns: list[int] = []
    shed = 0
    inflight: deque[tuple[str, int]] = deque()
    clock = time.perf_counter_ns
    for k in range(total):
        rid = rids[k]
        t0 = clock()
        try:
            core.route(rid, prompts[k], max_tokens[k])
        except PoolFullError:
            shed += 1
            continue
        t1 = clock()
        inflight.append((rid, outputs[k]))
        if len(inflight) > window:
            old, out = inflight.popleft()
            t2 = clock()
            core.progress(old, out // 2)
            t3 = clock()
            core.finish(old, out)
            t4 = clock()
            if k >= warm:
                progress_ns.append(t3 - t2)
                finish_ns.append(t4 - t3)
        if k >= warm:
            route_ns.append(t1 - t0)
    route = np.asarray(route_ns) / 1e9
    finish = np.asarray(finish_ns) / 1e9
    m = min(len(route), len(finish))
    both = route[-m:] + finish[-m:]
    return {
        "requests": len(route_ns),
        "in_flight": window,
        "shed": shed,
        "route_ms": dist_ms(route.tolist()),
        "finish_ms": dist_ms(finish.tolist()),
        "route_plus_finish_ms": dist_ms(both.tolist()),
        "progress_ms": dist_ms((np.asarray(progress_ns) / 1e9).tolist()),
    }


# ---- CPU meters -------------------------------------------------------------------------------


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine() -> tuple[float, float]:
    """Busy and total CPU seconds of the whole machine (all cores) since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    return (total - values[3] - values[4]) / _TICK, total / _TICK


_TCP_COUNTERS = ("ListenOverflows", "ListenDrops", "TCPSynRetrans")


def _tcpext() -> dict[str, int]:
    """Machine-wide TCP counters: SYNs dropped at a full listen queue, SYNs sent again."""
    try:
        header, values = (
            line.split()
            for line in Path("/proc/net/netstat").read_text().splitlines()
            if line.startswith("TcpExt:")
        )
    except (OSError, ValueError):
        return {}
    row = dict(zip(header[1:], values[1:], strict=True))
    return {k: int(row[k]) for k in _TCP_COUNTERS if k in row}


class Meter:
    """CPU used by the proxy, the engine, this process and the machine over an interval, and
    the machine's TCP listen-queue overflows and SYN retransmissions."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float] = {}
        self._tcp: dict[str, int] = {}
        self._t = 0.0
        self.tcp: dict[str, int] = {}

    def _read(self) -> dict[str, float]:
        busy, total = _machine()
        out = {name: _proc_cpu(pid) for name, pid in self.pids.items()}
        out["client"] = _self_cpu()
        out["busy"], out["total"] = busy, total
        return out

    def start(self) -> None:
        self._start = self._read()
        self._tcp = _tcpext()
        self._t = time.monotonic()

    def stop(self) -> dict[str, float]:
        """Cores used (1.0 = one core busy) per process, ``machine`` (all cores busy), and
        ``others`` (the machine minus the three: other jobs on the VM)."""
        end = self._read()
        tcp = _tcpext()
        self.tcp = {k: tcp[k] - self._tcp.get(k, 0) for k in tcp}
        wall = max(time.monotonic() - self._t, 1e-9)
        cores = {name: (end[name] - self._start[name]) / wall for name in [*self.pids, "client"]}
        share = (end["busy"] - self._start["busy"]) / max(end["total"] - self._start["total"], 1e-9)
        cores["machine"] = share * (os.cpu_count() or 1)
        cores["others"] = max(0.0, cores["machine"] - sum(cores[n] for n in [*self.pids, "client"]))
        return {k: round(v, 2) for k, v in cores.items()}


# ---- the load generator -----------------------------------------------------------------------


@dataclass
class Record:
    """What one side (direct or proxy) saw over one run of arrivals."""

    offered: int = 0
    completed: int = 0
    ttft: list[float] = field(default_factory=list)
    chunk: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    open: int = 0
    peak: int = 0
    wall: float = 0.0
    sending_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    tcp: Counter[str] = field(default_factory=Counter)

    def merge(self, other: Record) -> None:
        self.offered += other.offered
        self.completed += other.completed
        self.ttft += other.ttft
        self.chunk += other.chunk
        self.lag += other.lag
        self.failures.update(other.failures)
        self.peak = max(self.peak, other.peak)
        self.wall += other.wall
        self.sending_s += other.sending_s
        self.tcp.update(other.tcp)

    def summary(self) -> dict[str, Any]:
        return {
            "offered": self.offered,
            "completed": self.completed,
            "completed_share": round(self.completed / self.offered, 4) if self.offered else None,
            "sent_rate": round(self.offered / self.sending_s, 1) if self.sending_s else None,
            "ttft_ms": dist_ms(self.ttft),
            "chunk_ms": dist_ms(self.chunk),
            "generator_lateness_ms": dist_ms(self.lag),
            "failures": dict(self.failures),
            "peak_open_streams": self.peak,
            "cpu_cores": self.cpu,
            "tcp_machine_wide": dict(self.tcp),
        }


async def _one(
    session: aiohttp.ClientSession, url: str, body: bytes, *, expect: int, due: float, rec: Record
) -> None:
    """One streamed request; intact when every token arrives in order and then [DONE]."""
    start = time.monotonic()
    rec.lag.append(start - due)
    seen, done, bad, opened = 0, False, "", False
    latencies: list[float] = []
    try:
        async with session.post(url, data=body, headers=_HEADERS) as response:
            if response.status != 200:
                await response.read()
                rec.failures[f"http-{response.status}"] += 1
                return
            buf = b""
            async for data in response.content.iter_any():
                now = time.monotonic()
                buf += data
                if b"\n\n" not in buf:
                    continue
                *events, buf = buf.split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data:"):
                        continue
                    payload = event[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    if not opened:
                        opened = True
                        rec.ttft.append(now - start)
                        rec.open += 1
                        rec.peak = max(rec.peak, rec.open)
                    chunk = json.loads(payload)
                    choices = chunk.get("choices") or [{}]
                    if "error" in chunk or choices[0].get("text") != f" t{seen}":
                        bad = bad or "corrupt"
                    if seen:
                        latencies.append(now - chunk["sent"])
                    seen += 1
                    if seen == expect and choices[0].get("finish_reason") is None:
                        bad = bad or "no-finish-reason"
    except asyncio.CancelledError:
        rec.failures["unfinished"] += 1
        raise
    except (aiohttp.ClientError, OSError, ValueError, KeyError) as err:
        rec.failures[type(err).__name__] += 1
        return
    finally:
        if opened:
            rec.open -= 1
        rec.chunk += latencies
    if bad:
        rec.failures[bad] += 1
    elif seen != expect or not done:
        rec.failures["truncated"] += 1
    else:
        rec.completed += 1


async def offer(
    session: aiohttp.ClientSession,
    url: Callable[[int], str],
    *,
    arrivals: Sequence[float],
    bodies: Sequence[bytes],
    expect: int,
    drain_s: float,
    meter: Meter,
) -> Record:
    """Open loop: request k starts at ``arrivals[k]`` (s) whatever the earlier ones are doing.
    Requests not done ``drain_s`` after the last arrival are cancelled and count as unfinished."""
    rec = Record(offered=len(arrivals))
    tasks: set[asyncio.Task[None]] = set()
    meter.start()
    t0 = time.monotonic() + 0.02
    for k, at in enumerate(arrivals):
        due = t0 + at
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        body = bodies[k % len(bodies)]
        task = asyncio.create_task(_one(session, url(k), body, expect=expect, due=due, rec=rec))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    rec.sending_s = time.monotonic() - t0
    deadline = t0 + (arrivals[-1] if arrivals else 0.0) + drain_s
    if tasks:
        _, pending = await asyncio.wait(set(tasks), timeout=max(0.0, deadline - time.monotonic()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    rec.wall = time.monotonic() - t0
    rec.cpu = meter.stop()
    rec.tcp = Counter(meter.tcp)
    return rec


def poisson(rng: np.random.Generator, rate: float, seconds: float) -> list[float]:
    gaps = rng.exponential(1.0 / rate, int(rate * seconds * 1.5) + 10)
    times = np.cumsum(gaps)
    return [float(t) for t in times[times < seconds]]


def make_bodies(
    rng: np.random.Generator, tokens: int, interval_s: float, count: int = 64
) -> list[bytes]:
    """Completion requests with token-ID prompts (lengths from PROMPT_LENGTHS)."""
    bodies = []
    for length in rng.choice(PROMPT_LENGTHS, size=count):
        prompt = rng.integers(1, 32000, int(length)).tolist()
        body = {
            "model": "stub",
            "prompt": prompt,
            "max_tokens": tokens,
            "stream": True,
            "stub_interval_s": interval_s,
        }
        bodies.append(json.dumps(body, separators=(",", ":")).encode())
    return bodies


# ---- subprocesses -----------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Children:
    """The engine and proxy processes; :meth:`stop` ends them (TERM, then KILL)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (only calls prctl)
        )
        log.close()
        self.procs[name] = proc
        return proc

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.workdir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _wait_ready(
    session: aiohttp.ClientSession, children: Children, name: str, url: str, timeout: float
) -> None:
    proc = children.procs[name]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{children.log_tail(name)}")
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url) as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError(
        f"{name} not ready at {url} after {timeout:.0f} s:\n{children.log_tail(name)}"
    )


def _proxy_loop(pid: int) -> str:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    return "uvloop" if "uvloop" in maps else "asyncio (default selector loop)"


async def _scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The proxy's counters and histogram sums/buckets, flattened to ``name{labels}`` → value."""
    async with session.get(url) as response:
        text = await response.text()
    flat: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            flat[f"{sample.name}{{{labels}}}"] = float(sample.value)
    return flat


def _histogram_delta(
    before: dict[str, float], after: dict[str, float], name: str
) -> dict[str, float | None]:
    """Mean, and the bucket bounds holding p50 and p99, of a histogram between two scrapes."""
    count = after.get(f"{name}_count{{}}", 0.0) - before.get(f"{name}_count{{}}", 0.0)
    total = after.get(f"{name}_sum{{}}", 0.0) - before.get(f"{name}_sum{{}}", 0.0)
    buckets = []
    for key, value in after.items():
        if key.startswith(f"{name}_bucket{{le="):
            le = float(key[len(name) + 11 : -1])
            buckets.append((le, value - before.get(key, 0.0)))
    buckets.sort()

    def bound(q: float) -> float | None:
        for le, cum in buckets:
            if count and cum >= q * count:
                return round(le * 1e3, 3) if math.isfinite(le) else None
        return None

    return {
        "n": count,
        "mean_ms": round(total / count * 1e3, 4) if count else None,
        "p50_le_ms": bound(0.5),
        "p99_le_ms": bound(0.99),
    }


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _raise_nofile() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ---- the run ----------------------------------------------------------------------------------


@dataclass
class Config:
    quick: bool
    seed: int
    decisions: int
    rate: float
    blocks: int
    block_s: float
    ttft_tokens: int
    ttft_interval_s: float
    rates: list[float]
    step_s: float
    step_tokens: int
    step_interval_s: float
    ttft_bound_ms: float
    streams: int
    stream_tokens: int
    stream_interval_s: float
    ramp_s: float
    max_inflight: int
    migrations: int
    migration_speed: float


def _config(args: argparse.Namespace) -> Config:
    quick = bool(args.quick)
    rates = [float(r) for r in args.rates.split(",")] if args.rates else None
    return Config(
        quick=quick,
        seed=args.seed,
        decisions=args.decisions or (10_000 if quick else 100_000),
        rate=args.rate,
        blocks=1 if quick else 6,
        block_s=2.0 if quick else 3.0,
        ttft_tokens=8,
        ttft_interval_s=0.02,
        rates=rates or ([100.0, 400.0] if quick else [float(r) for r in DEFAULT_RATES]),
        step_s=1.5 if quick else 4.0,
        step_tokens=4,
        step_interval_s=0.005,
        ttft_bound_ms=args.ttft_bound_ms,
        streams=args.streams or (200 if quick else 2000),
        stream_tokens=5 if quick else 20,
        stream_interval_s=0.2 if quick else 0.5,
        ramp_s=1.0 if quick else 4.0,
        max_inflight=1024,
        migrations=args.migrations or (8 if quick else 24),
        migration_speed=args.migration_speed,
    )


@dataclass
class Rig:
    session: aiohttp.ClientSession
    engine_urls: list[str]
    proxy_url: str
    raw_url: str
    """A second router on the same engines without ``--migratable``: streams relayed raw."""
    meter: Meter

    def url(self, side: str) -> Callable[[int], str]:
        if side in ("proxy", "raw"):
            target = (self.proxy_url if side == "proxy" else self.raw_url) + "/v1/completions"
            return lambda _: target
        urls = [u + "/v1/completions" for u in self.engine_urls]
        return lambda k: urls[k % len(urls)]

    async def offer(
        self,
        side: str,
        arrivals: Sequence[float],
        bodies: Sequence[bytes],
        *,
        expect: int,
        drain_s: float,
    ) -> Record:
        return await offer(
            self.session,
            self.url(side),
            arrivals=arrivals,
            bodies=bodies,
            expect=expect,
            drain_s=drain_s,
            meter=self.meter,
        )


TTFT_SIDES = ("direct", "proxy", "raw")
"""The engine directly, the router with ``--migratable`` (migratable relay), the router
without it (raw relay)."""
ROUTER_OF = {"proxy": "proxy", "raw": "raw"}
"""The Meter's name of each side's router process."""


def _sides() -> Iterator[str]:
    """The sides' order per block, rotated by one each block so that each goes first in turn."""
    for k in itertools.count():
        r = k % len(TTFT_SIDES)
        yield from TTFT_SIDES[r:] + TTFT_SIDES[:r]


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


async def phase_ttft(rig: Rig, cfg: Config) -> dict[str, Any]:
    rng = np.random.default_rng(cfg.seed + 1)
    bodies = make_bodies(rng, cfg.ttft_tokens, cfg.ttft_interval_s)
    drain = cfg.ttft_tokens * cfg.ttft_interval_s + 1.0
    total = {side: Record() for side in TTFT_SIDES}
    cpu: dict[str, list[dict[str, float]]] = {side: [] for side in TTFT_SIDES}
    router_cpu_s = dict.fromkeys(ROUTER_OF, 0.0)
    blocks = []
    order = _sides()
    before = await _scrape(rig.session, rig.proxy_url + "/metrics")
    for b in range(cfg.blocks):
        arrivals = poisson(rng, cfg.rate, cfg.block_s)  # the same arrivals for both sides
        row: dict[str, Any] = {"block": b}
        for _ in TTFT_SIDES:
            side = next(order)
            rec = await rig.offer(side, arrivals, bodies, expect=cfg.ttft_tokens, drain_s=drain)
            total[side].merge(rec)
            cpu[side].append(rec.cpu)
            if side in ROUTER_OF:
                router_cpu_s[side] += rec.cpu.get(ROUTER_OF[side], 0.0) * rec.wall
            row[side] = {
                "ttft_ms": dist_ms(rec.ttft),
                "chunk_ms": dist_ms(rec.chunk),
                "ttft_p50_ms": dist_ms(rec.ttft)["p50"],
                "ttft_p99_ms": dist_ms(rec.ttft)["p99"],
                "chunk_p50_ms": dist_ms(rec.chunk)["p50"],
                "completed": rec.completed,
                "offered": rec.offered,
                "cpu_cores": rec.cpu,
            }
            await asyncio.sleep(0.3)
        for name, key, q in (
            ("added_ttft_p50_ms", "ttft", "p50"),
            ("added_ttft_p99_ms", "ttft", "p99"),
            ("added_chunk_p50_ms", "chunk", "p50"),
            ("added_chunk_p99_ms", "chunk", "p99"),
        ):
            row[name] = _diff(row["proxy"][f"{key}_ms"], row["direct"][f"{key}_ms"], q)
            row[f"{name}_raw"] = _diff(row["raw"][f"{key}_ms"], row["direct"][f"{key}_ms"], q)
        for side in TTFT_SIDES:
            row[side] = {k: v for k, v in row[side].items() if k not in ("ttft_ms", "chunk_ms")}
        blocks.append(row)
        print(
            f"  block {b}: {len(arrivals)} requests/side; TTFT p50/p99 ms direct "
            f"{_fmt(row['direct']['ttft_p50_ms'], 3)}/{_fmt(row['direct']['ttft_p99_ms'], 3)}"
            f", proxy {_fmt(row['proxy']['ttft_p50_ms'], 3)}/"
            f"{_fmt(row['proxy']['ttft_p99_ms'], 3)}; chunk p50 direct "
            f"{_fmt(row['direct']['chunk_p50_ms'], 3)}, proxy "
            f"{_fmt(row['proxy']['chunk_p50_ms'], 3)}"
            f"; raw relay TTFT {_fmt(row['raw']['ttft_p50_ms'], 3)}/"
            f"{_fmt(row['raw']['ttft_p99_ms'], 3)}, chunk p50 {_fmt(row['raw']['chunk_p50_ms'], 3)}"
            f"; cores used by other jobs: direct {row['direct']['cpu_cores']['others']:.2f}, proxy "
            f"{row['proxy']['cpu_cores']['others']:.2f}; router process: migratable "
            f"{row['proxy']['cpu_cores']['proxy']:.2f}, raw {row['raw']['cpu_cores']['raw']:.2f}",
            flush=True,
        )
    after = await _scrape(rig.session, rig.proxy_url + "/metrics")
    out: dict[str, Any] = {"rate": cfg.rate, "seconds_per_side": cfg.blocks * cfg.block_s}
    for side, rec in total.items():
        rec.cpu = {k: round(float(np.mean([c[k] for c in cpu[side]])), 2) for k in cpu[side][0]}
        out[side] = rec.summary()
    d = out["direct"]
    for side, suffix in (("proxy", ""), ("raw", "_raw")):
        p = out[side]
        for key in ("ttft", "chunk"):
            added: dict[str, float | None] = {
                q: _diff(p[f"{key}_ms"], d[f"{key}_ms"], q) for q in ("p50", "p99", "mean")
            }
            for q in ("p50", "p99"):  # robust to one block disturbed by another job
                per_block = [r[f"added_{key}_{q}_ms{suffix}"] for r in blocks]
                known = [x for x in per_block if x is not None]
                added[f"{q}_median_of_blocks"] = (
                    round(float(np.median(known)), 4) if known else None
                )
            out[f"added_{key}_ms{suffix}"] = added
    cpu_ms = {
        side: round(1e3 * router_cpu_s[side] / total[side].offered, 4)
        if total[side].offered
        else None
        for side in ROUTER_OF
    }
    out["relay_vs_raw"] = _relay_vs_raw(out, cpu_ms)
    out["proxy_self_reported"] = {
        "added_ttft": _histogram_delta(before, after, "gpumix_router_added_ttft_seconds"),
        "decision": _histogram_delta(before, after, "gpumix_router_decision_seconds"),
    }
    out["blocks"] = blocks
    return out


def _relay_vs_raw(out: dict[str, Any], cpu_ms: dict[str, float | None]) -> dict[str, Any]:
    """The migratable relay's overhead against the raw relay's, same inputs, same run: added
    (over direct) TTFT and per-chunk delay, router CPU per request, and their ratios."""
    mig = {"ttft": out["added_ttft_ms"], "chunk": out["added_chunk_ms"]}
    raw = {"ttft": out["added_ttft_ms_raw"], "chunk": out["added_chunk_ms_raw"]}
    res: dict[str, Any] = {
        "router_cpu_ms_per_request": {"migratable": cpu_ms["proxy"], "raw": cpu_ms["raw"]},
        "router_cpu_ratio": _ratio(cpu_ms["proxy"], cpu_ms["raw"]),
    }
    for key in ("ttft", "chunk"):
        for q in ("p50", "p99", "p50_median_of_blocks"):
            res[f"added_{key}_{q}_ms"] = {"migratable": mig[key][q], "raw": raw[key][q]}
            res[f"added_{key}_{q}_ratio"] = _ratio(mig[key][q], raw[key][q])
    return res


def _verdict(rec: Record, bound_ms: float) -> tuple[bool, list[str]]:
    why = []
    share = rec.completed / rec.offered if rec.offered else 0.0
    if share < 0.99:
        why.append(f"completed {share:.1%}")
    p99 = dist_ms(rec.ttft)["p99"]
    if p99 is None or p99 > bound_ms:
        why.append(f"p99 TTFT {_fmt(p99, 1)} ms")
    lag = dist_ms(rec.lag)["p99"]
    if lag is not None and lag > bound_ms:
        why.append(f"generator late p99 {lag:.1f} ms")
    return not why, why


async def phase_rates(rig: Rig, cfg: Config) -> dict[str, Any]:
    rng = np.random.default_rng(cfg.seed + 2)
    bodies = make_bodies(rng, cfg.step_tokens, cfg.step_interval_s)
    drain = cfg.step_tokens * cfg.step_interval_s + 1.0
    alive = {"direct": True, "proxy": True}
    best: dict[str, float | None] = {"direct": None, "proxy": None}
    steps = []
    for rate in cfg.rates:
        if not any(alive.values()):
            break
        arrivals = poisson(rng, rate, cfg.step_s)
        row: dict[str, Any] = {"rate": rate, "offered": len(arrivals)}
        for side in ("direct", "proxy"):
            if not alive[side]:
                continue
            attempts = []
            for attempt in range(3):  # a failed step is run again (twice): the VM is shared
                rec = await rig.offer(side, arrivals, bodies, expect=cfg.step_tokens, drain_s=drain)
                ok, why = _verdict(rec, cfg.ttft_bound_ms)
                s = rec.summary()
                attempts.append(
                    {
                        "sustained": ok,
                        "why_not": why,
                        "completed_share": s["completed_share"],
                        "sent_rate": s["sent_rate"],
                        "ttft_ms": s["ttft_ms"],
                        "generator_lateness_p99_ms": s["generator_lateness_ms"]["p99"],
                        "failures": s["failures"],
                        "cpu_cores": s["cpu_cores"],
                        "tcp_machine_wide": s["tcp_machine_wide"],
                    }
                )
                c, tcp = s["cpu_cores"], s["tcp_machine_wide"]
                print(
                    f"  {rate:6.0f} req/s {side:6s}{' (again)' if attempt else ''}: "
                    f"{'ok  ' if ok else 'FAIL'} completed {s['completed_share']:.1%}, TTFT "
                    f"p50/p99 {_fmt(s['ttft_ms']['p50'], 2)}/{_fmt(s['ttft_ms']['p99'], 2)} ms, "
                    f"late p99 {_fmt(s['generator_lateness_ms']['p99'], 1)} ms; cores: proxy "
                    f"{c.get('proxy', 0):.2f} engine {c.get('engine', 0):.2f} client "
                    f"{c.get('client', 0):.2f} machine {c.get('machine', 0):.2f}"
                    + (f"; listen overflows {tcp['ListenOverflows']}" if tcp.get("ListenOverflows")
                       else "")
                    + (f"  ({'; '.join(why)})" if why else ""),
                    flush=True,
                )  # fmt: skip
                await asyncio.sleep(0.5)
                if ok:
                    break
            row[side] = next((a for a in attempts if a["sustained"]), attempts[-1]) | {
                "attempts": len(attempts)
            }
            if len(attempts) > 1:
                row[side]["first_attempt"] = attempts[0]
            if row[side]["sustained"]:
                best[side] = rate
            else:
                alive[side] = False
        if "direct" in row and "proxy" in row:
            row["added_ttft_ms"] = {
                q: _diff(row["proxy"]["ttft_ms"], row["direct"]["ttft_ms"], q)
                for q in ("p50", "p99")
            }
        steps.append(row)
    return {
        "criterion": f">= 99% completed intact within the step (+1 s), p99 TTFT <= "
        f"{cfg.ttft_bound_ms:g} ms, generator lateness p99 <= {cfg.ttft_bound_ms:g} ms; "
        "a failed step is run up to twice more",
        "step_s": cfg.step_s,
        "stream": f"{cfg.step_tokens} tokens, {cfg.step_interval_s * 1e3:g} ms apart",
        "max_sustained_direct": best["direct"],
        "max_sustained_proxy": best["proxy"],
        "proxy_vs_direct": (
            round(best["proxy"] / best["direct"], 3) if best["proxy"] and best["direct"] else None
        ),
        "direct_capped_by_top_step": best["direct"] == cfg.rates[-1],
        "steps": steps,
    }


async def phase_streams(rig: Rig, cfg: Config) -> dict[str, Any]:
    rng = np.random.default_rng(cfg.seed + 3)
    bodies = make_bodies(rng, cfg.stream_tokens, cfg.stream_interval_s)
    arrivals = [k * cfg.ramp_s / cfg.streams for k in range(cfg.streams)]
    hold = cfg.stream_tokens * cfg.stream_interval_s
    out: dict[str, Any] = {
        "streams": cfg.streams,
        "opened_over_s": cfg.ramp_s,
        "stream": f"{cfg.stream_tokens} tokens, {cfg.stream_interval_s:g} s apart",
    }
    for side in ("direct", "proxy"):
        rec = await rig.offer(side, arrivals, bodies, expect=cfg.stream_tokens, drain_s=hold + 10.0)
        s = rec.summary()
        out[side] = {
            "intact": rec.completed,
            "peak_open_streams": rec.peak,
            "failures": s["failures"],
            "ttft_ms": s["ttft_ms"],
            "chunk_ms": s["chunk_ms"],
            "cpu_cores": s["cpu_cores"],
        }
        print(
            f"  {side:6s}: {rec.completed}/{cfg.streams} intact, peak {rec.peak} open at once, "
            f"TTFT p99 {_fmt(s['ttft_ms']['p99'])} ms, chunk p50/p99 "
            f"{_fmt(s['chunk_ms']['p50'], 3)}/{_fmt(s['chunk_ms']['p99'], 3)} ms"
            + (f", failures {s['failures']}" if s["failures"] else ""),
            flush=True,
        )
        await asyncio.sleep(1.0)
    return out


# ---- 6. migration blackout --------------------------------------------------------------------

SIM_MODEL = "meta-llama/Llama-2-7b-hf"
SIM_GPU = "a10g"
SIM_NAME = "llama"
MIGRATION_SLACK_MS = 50.0
"""Issue #16's target: blackout ≤ the target's prefill + 50 ms."""
MIGRATION_PROMPTS = (64, 2048)
"""Prompt lengths (tokens), geometric steps between the two."""
MIGRATION_AT = (8, 24)
"""A stream is moved once the client has this many tokens (uniform between the two)."""
MIGRATION_AFTER = 32
"""Tokens each stream still generates after its move."""


@dataclass
class MovedStream:
    """One stream of the migration phase as its client saw it."""

    prompt: list[int]
    at: int
    max_tokens: int
    phase: float = 0.0
    """When, as a share of the last gap between tokens, after the ``at``-th token the move is
    asked for: the KV loop's moves fall anywhere between two tokens."""
    arrivals: list[float] = field(default_factory=list)
    text: str = ""
    finish: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    rid: str = ""
    source: str = ""
    move_sent: float | None = None
    move_answered: float | None = None
    answer: dict[str, Any] = field(default_factory=dict)
    status: int = 0
    error: str = ""

    def body(self) -> bytes:
        return json.dumps({
            "model": SIM_NAME, "prompt": self.prompt, "max_tokens": self.max_tokens,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True},
        }).encode()  # fmt: skip

    def see(self, line: bytes) -> None:
        text = line.strip()
        if not text.startswith(b"data:") or text == b"data: [DONE]":
            return
        obj = json.loads(text[5:])
        self.ids.add(obj.get("id", ""))
        for choice in obj.get("choices") or ():
            self.arrivals.append(time.perf_counter())
            self.text += choice.get("text") or ""
            if choice.get("finish_reason"):
                self.finish.append(choice["finish_reason"])

    def gap(self) -> tuple[float, int] | None:
        """The client-visible blackout and the number of tokens before it: the longest gap
        between consecutive tokens that ends between the move request and its answer (A's
        events are held from the move on and B's first token is written before the answer, so
        the gap that spans the move is the one in that window; the others are decode steps)."""
        if self.move_sent is None or self.move_answered is None:
            return None
        window = [
            (self.arrivals[k] - self.arrivals[k - 1], k)
            for k in range(1, len(self.arrivals))
            if self.move_sent <= self.arrivals[k] <= self.move_answered + 0.005
        ]
        return max(window) if window else None


async def _sim_urls(children: Children, count: int, timeout: float = 60.0) -> list[str]:
    """The pod URLs `gpumix sim serve` prints, one JSON line per pod."""
    proc = children.procs["sim"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        urls = []
        for line in (children.workdir / "sim.log").read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                urls.append(json.loads(line)["url"])
        if len(urls) >= count:
            return urls[:count]
        if proc.poll() is not None:
            raise RuntimeError(f"sim exited with {proc.returncode}:\n{children.log_tail('sim')}")
        await asyncio.sleep(0.1)
    raise RuntimeError(f"sim printed no pod URLs in {timeout:.0f} s:\n{children.log_tail('sim')}")


async def _stream(
    session: aiohttp.ClientSession, url: str, st: MovedStream, opened: asyncio.Event | None
) -> None:
    """Read ``st``'s answer to the end; ``opened`` is set at its first token."""
    try:
        async with session.post(url, data=st.body(), headers=_HEADERS) as response:
            st.status = response.status
            async for line in response.content:
                st.see(line)
                if opened is not None and st.arrivals:
                    opened.set()
                    opened = None
    except (aiohttp.ClientError, OSError, ValueError) as err:
        st.error = type(err).__name__
    finally:
        if opened is not None:
            opened.set()


async def _inflight(session: aiohttp.ClientSession, admin: str) -> dict[str, str]:
    """Request id → pod, from the router's admin API."""
    async with session.get(admin + "/admin/inflight") as response:
        listing = await response.json()
    return {r["id"]: pod for pod, e in listing["pods"].items() for r in e["requests"]}


async def _move_when_due(
    session: aiohttp.ClientSession, admin: str, st: MovedStream, pods: Sequence[str]
) -> None:
    while len(st.arrivals) < st.at and not st.finish and not st.error:
        await asyncio.sleep(0.001)
    if st.finish or st.error:
        return
    if len(st.arrivals) >= 2:
        await asyncio.sleep(st.phase * (st.arrivals[-1] - st.arrivals[-2]))
    target = next(p for p in pods if p != st.source)
    st.move_sent = time.perf_counter()
    async with session.post(admin + "/admin/migrate", json={"id": st.rid, "to": target}) as resp:
        st.status, st.answer = resp.status, await resp.json()
    st.move_answered = time.perf_counter()


async def _moved_run(
    session: aiohttp.ClientSession,
    url: str,
    admin: str,
    streams: list[MovedStream],
    pods: Sequence[str],
) -> None:
    """Open the streams one after the other (each found in the router's ledger once its first
    token arrived, so the client knows its request id) and move each mid-answer."""
    tasks = []
    for st in streams:
        before = set(await _inflight(session, admin))
        opened = asyncio.Event()
        tasks.append(asyncio.create_task(_stream(session, url, st, opened)))
        await opened.wait()
        new = {rid: pod for rid, pod in (await _inflight(session, admin)).items()
               if rid not in before}  # fmt: skip
        if len(new) != 1:
            st.error = f"found {len(new)} new requests in the ledger"
            continue
        ((st.rid, st.source),) = new.items()
        tasks.append(asyncio.create_task(_move_when_due(session, admin, st, pods)))
    await asyncio.gather(*tasks)


def _migration_streams(cfg: Config) -> list[MovedStream]:
    rng = np.random.default_rng(cfg.seed + 6)
    n = cfg.migrations
    lengths = np.geomspace(*MIGRATION_PROMPTS, n).astype(int)
    rng.shuffle(lengths)
    out = []
    for length in lengths:
        at = int(rng.integers(MIGRATION_AT[0], MIGRATION_AT[1] + 1))
        prompt = rng.integers(3, 32000, int(length)).tolist()  # 2 is EOS
        out.append(MovedStream(prompt=prompt, at=at, max_tokens=at + MIGRATION_AFTER,
                               phase=float(rng.uniform())))  # fmt: skip
    return out


async def phase_migration(
    session: aiohttp.ClientSession, children: Children, cfg: Config
) -> dict[str, Any]:
    """Recompute migration through the router between two `gpumix sim serve` pods: the client's
    blackout against the target's prefill, and moved answers against unmoved ones."""
    gpumix = str(Path(sys.executable).with_name("gpumix"))
    children.start("sim", [gpumix, "sim", "serve", "--model", SIM_MODEL, "--served-name",
                           SIM_NAME, "--pods", f"{SIM_GPU}=2", "--speed",
                           str(cfg.migration_speed)])  # fmt: skip
    engines = await _sim_urls(children, 2)
    port, admin_port = _free_ports(2)
    routing = children.workdir / "routing-migration.json"
    table = {"inputEdges": [1, 8192], "outputEdges": [1, 4096],
             "pools": {SIM_GPU: {"replicas": 2, "share": [[1.0]]}}}  # fmt: skip
    routing.write_text(json.dumps(table))
    children.start("router-migration", [
        gpumix, "route", "--routing-file", str(routing), "--bind", "127.0.0.1", "--port",
        str(port), "--admin-port", str(admin_port), "--migratable", "--log-format", "plain",
        *(f for u in engines for f in ("--engine", f"{SIM_GPU}={u}")),
    ])  # fmt: skip
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    await _wait_ready(session, children, "router-migration", url + "/ready", 60.0)
    pods = [f"{SIM_GPU}-{k}" for k in range(len(engines))]
    completions = url + "/v1/completions"

    warm = MovedStream(prompt=[5, 6, 7], at=0, max_tokens=4)
    await _stream(session, completions, warm, None)
    # The unmoved run: the same requests, all at once.
    reference = _migration_streams(cfg)
    await asyncio.gather(*(_stream(session, completions, st, None) for st in reference))
    before = await _scrape(session, url + "/metrics")
    moved = _migration_streams(cfg)
    await _moved_run(session, completions, admin, moved, pods)
    after = await _scrape(session, url + "/metrics")

    roof = Roofline(gpu_type(SIM_GPU), model_shape(SIM_MODEL))
    rows = []
    for ref, st in zip(reference, moved, strict=True):
        found = st.gap()
        answer = st.answer
        row: dict[str, Any] = {
            "prompt_tokens": len(st.prompt),
            "moved_at_token": st.at,
            "outcome": answer.get("outcome") or st.error or "not-moved",
            "exact": bool(st.text) and st.text == ref.text and ref.finish == ["length"],
            "one_stream": len(st.ids) == 1 and st.finish == ["length"],
        }
        if found is not None and answer.get("outcome") == "migrated":
            gap, before_gap = found
            prefill = float(answer["prefill_s"])
            assert st.move_sent is not None
            phase = max(0.0, st.move_sent - st.arrivals[before_gap - 1])
            row |= {
                "tokens_before_move": before_gap,
                "blackout_ms": round(gap * 1e3, 3),
                "router_blackout_ms": round(float(answer["blackout_s"]) * 1e3, 3),
                "prefill_ms": round(prefill * 1e3, 3),
                "model_prefill_ms": round(
                    roof.prefill_s(len(st.prompt) + before_gap) / cfg.migration_speed * 1e3, 3
                ),
                "blackout_minus_prefill_ms": round((gap - prefill) * 1e3, 3),
                "phase_ms": round(phase * 1e3, 3),
                "router_added_ms": round((gap - prefill - phase) * 1e3, 3),
                "met": gap - prefill <= MIGRATION_SLACK_MS / 1e3,
            }
        rows.append(row)
    return _migration_summary(rows, before, after, cfg)


def _migration_summary(
    rows: list[dict[str, Any]], before: dict[str, float], after: dict[str, float], cfg: Config
) -> dict[str, Any]:
    done = [r for r in rows if "blackout_ms" in r]

    def dist(key: str) -> dict[str, float | int | None]:
        return dist_ms([r[key] / 1e3 for r in done])

    out: dict[str, Any] = {
        "streams": len(rows),
        "engines": f"gpumix sim serve --model {SIM_MODEL} --pods {SIM_GPU}=2 "
        f"--speed {cfg.migration_speed:g}",
        "prompt_tokens": list(MIGRATION_PROMPTS),
        "moved_at_token": list(MIGRATION_AT),
        "tokens_after_move": MIGRATION_AFTER,
        "outcomes": dict(Counter(r["outcome"] for r in rows)),
        "migrated": len(done),
        "blackout_ms": dist("blackout_ms"),
        "prefill_ms": dist("prefill_ms"),
        "blackout_minus_prefill_ms": dist_ms([r["blackout_minus_prefill_ms"] / 1e3 for r in done]),
        "phase_ms": dist("phase_ms"),
        "router_added_ms": dist_ms([r["router_added_ms"] / 1e3 for r in done]),
        "router_blackout_ms": dist("router_blackout_ms"),
        "model_prefill_ms": dist("model_prefill_ms"),
        "target": f"blackout <= prefill + {MIGRATION_SLACK_MS:g} ms",
        "target_met": sum(bool(r["met"]) for r in done),
        "exact": sum(r["exact"] for r in rows),
        "one_stream": sum(r["one_stream"] for r in rows),
        "router_self_reported": {
            "blackout": _histogram_delta(before, after, "gpumix_router_migration_blackout_seconds"),
            "prefill": _histogram_delta(before, after, "gpumix_router_migration_prefill_seconds"),
        },
        "rows": rows,
    }
    b, p, d = out["blackout_ms"], out["prefill_ms"], out["blackout_minus_prefill_ms"]
    print(
        f"  {len(done)}/{len(rows)} migrated ({out['outcomes']}); blackout p50/p99 "
        f"{_fmt(b['p50'], 1)}/{_fmt(b['p99'], 1)} ms, target prefill p50/p99 "
        f"{_fmt(p['p50'], 1)}/{_fmt(p['p99'], 1)} ms, blackout − prefill p50/p99 "
        f"{_fmt(d['p50'], 1)}/{_fmt(d['p99'], 1)} ms (of which the router's own p50/p99 "
        f"{_fmt(out['router_added_ms']['p50'], 1)}/{_fmt(out['router_added_ms']['p99'], 1)} ms"
        f"); ≤ prefill + {MIGRATION_SLACK_MS:g} ms: "
        f"{out['target_met']}/{len(done)}; text as unmoved: {out['exact']}/{len(rows)}",
        flush=True,
    )
    return out


async def run_bench(cfg: Config, children: Children, summary: dict[str, Any]) -> None:
    n_pods = len(POOLS) * PODS_PER_POOL
    ports = _free_ports(n_pods + 3)
    engine_ports, proxy_port, admin_port = ports[:n_pods], ports[n_pods], ports[n_pods + 1]
    raw_port = ports[n_pods + 2]
    routing = children.workdir / "routing.json"
    routing.write_text(json.dumps(routing_document()))
    engine = children.start(
        "engine",
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--engine-server",
            "--ports",
            ",".join(map(str, engine_ports)),
        ],
    )
    engine_urls = [f"http://127.0.0.1:{p}" for p in engine_ports]
    pods = pod_names()
    argv = [
        str(Path(sys.executable).with_name("gpumix")),
        "route",
        "--routing-file",
        str(routing),
        "--bind",
        "127.0.0.1",
        "--port",
        str(proxy_port),
        "--admin-port",
        str(admin_port),
        "--migratable",
        "--log-format",
        "plain",
        "--max-inflight-per-pod",
        str(cfg.max_inflight),
    ]
    for k, (pool, _) in enumerate((p, n) for p in POOLS for n in pods[p]):
        argv += ["--engine", f"{pool}={engine_urls[k]}"]
    proxy = children.start("proxy", argv)
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    # The same router with the migratable relay off: the like-for-like baseline of its cost.
    raw_argv = list(argv)
    raw_argv[raw_argv.index("--port") + 1] = str(raw_port)
    raw_argv[raw_argv.index("--admin-port") + 1] = "0"
    raw_argv.remove("--migratable")
    raw = children.start("raw", raw_argv)
    raw_url = f"http://127.0.0.1:{raw_port}"
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for url in engine_urls:
            await _wait_ready(session, children, "engine", url + "/health", 30.0)
        await _wait_ready(session, children, "proxy", proxy_url + "/ready", 60.0)
        await _wait_ready(session, children, "raw", raw_url + "/ready", 60.0)
        summary["machine"]["proxy_loop"] = _proxy_loop(proxy.pid)
        meter = Meter({"proxy": proxy.pid, "raw": raw.pid, "engine": engine.pid})
        rig = Rig(session, engine_urls, proxy_url, raw_url, meter)

        # warm-up: connections, lazy imports, the predictor's first observations
        rng = np.random.default_rng(cfg.seed)
        warm_bodies = make_bodies(rng, 4, 0.005, count=16)
        for side in TTFT_SIDES:
            rec = await rig.offer(side, poisson(rng, 100, 1.0), warm_bodies, expect=4, drain_s=2.0)
            if rec.completed < rec.offered:
                raise RuntimeError(
                    f"warm-up {side}: {rec.completed}/{rec.offered} intact, {dict(rec.failures)}"
                    f"\n{children.log_tail('proxy')}"
                )

        # The load generator's start-up heap (numpy, gpumix, aiohttp) out of every collection:
        # a full collection of it pauses this loop for ~50 ms, noise on both sides.
        gc.collect()
        gc.freeze()
        print(
            f"\n2+3. TTFT and per-chunk delay at {cfg.rate:g} req/s (Poisson), {cfg.blocks} "
            f"block(s) × {cfg.block_s:g} s per side (direct, router, router without --migratable),"
            f" {cfg.ttft_tokens} tokens {cfg.ttft_interval_s * 1e3:g} ms apart",
            flush=True,
        )
        summary["ttft"] = await phase_ttft(rig, cfg)
        print(f"\n4. Highest sustained rate (bound {cfg.ttft_bound_ms:g} ms)", flush=True)
        summary["max_rate"] = await phase_rates(rig, cfg)
        print(
            f"\n5. {cfg.streams} concurrent streams (opened over {cfg.ramp_s:g} s, "
            f"{cfg.stream_tokens} tokens {cfg.stream_interval_s:g} s apart)",
            flush=True,
        )
        summary["streams"] = await phase_streams(rig, cfg)
        after = await _scrape(session, proxy_url + "/metrics")
        summary["proxy_counters"] = {
            k: v
            for k, v in after.items()
            if k.startswith(
                ("gpumix_router_responses_total", "gpumix_router_retries", "gpumix_router_shed")
            )
            and "_created" not in k
        }
        print(
            f"\n6. Migration: {cfg.migrations} streams moved mid-answer between two simulated "
            f"{SIM_GPU} pods ({SIM_MODEL}, --speed {cfg.migration_speed:g})",
            flush=True,
        )
        summary["migration"] = await phase_migration(session, children, cfg)


def _report(summary: dict[str, Any]) -> None:
    dec, tt, mr, st = (summary[k] for k in ("decision", "ttft", "max_rate", "streams"))
    rr = tt["relay_vs_raw"]
    cpu = rr["router_cpu_ms_per_request"]
    mg = summary["migration"]
    d, p = tt["direct"], tt["proxy"]
    self_rep = tt["proxy_self_reported"]["added_ttft"]
    print("\nSummary (proxy − direct measured in the same run)")
    print(f"  {'figure':44s} {'measured':>30s}   target / anchor")
    rows = [
        (
            "decision route+finish p50 / p99 (ms)",
            f"{_fmt(dec['route_plus_finish_ms']['p50'], 4)} / "
            f"{_fmt(dec['route_plus_finish_ms']['p99'], 4)}",
            f"≤ {TARGETS['decision_p99_ms']} p99 / {ANCHORS['decision']}",
        ),
        (
            f"TTFT direct p50 / p99 at {tt['rate']:g} req/s (ms)",
            f"{_fmt(d['ttft_ms']['p50'], 3)} / {_fmt(d['ttft_ms']['p99'], 3)}",
            "",
        ),
        (
            "TTFT through proxy p50 / p99 (ms)",
            f"{_fmt(p['ttft_ms']['p50'], 3)} / {_fmt(p['ttft_ms']['p99'], 3)}",
            "",
        ),
        (
            "added TTFT p50 / p99 (ms)",
            f"{_fmt(tt['added_ttft_ms']['p50'], 3)} / {_fmt(tt['added_ttft_ms']['p99'], 3)}",
            f"≤ {TARGETS['added_ttft_p50_ms']:g} / ≤ {TARGETS['added_ttft_p99_ms']:g}; "
            f"{ANCHORS['added_ttft']}",
        ),
        (
            "  median over blocks of the difference",
            f"{_fmt(tt['added_ttft_ms']['p50_median_of_blocks'], 3)} / "
            f"{_fmt(tt['added_ttft_ms']['p99_median_of_blocks'], 3)}",
            "",
        ),
        (
            "  proxy's own added-TTFT metric, mean (ms)",
            _fmt(self_rep["mean_ms"], 3),
            "",
        ),
        (
            "per-chunk latency direct / proxy p50 (ms)",
            f"{_fmt(d['chunk_ms']['p50'], 3)} / {_fmt(p['chunk_ms']['p50'], 3)}",
            "",
        ),
        (
            "added per-chunk delay p50 / p99 (ms)",
            f"{_fmt(tt['added_chunk_ms']['p50'], 3)} / {_fmt(tt['added_chunk_ms']['p99'], 3)}",
            f"≤ {TARGETS['added_chunk_p50_ms']:g} (p50)",
        ),
        (
            "  median over blocks of the difference",
            f"{_fmt(tt['added_chunk_ms']['p50_median_of_blocks'], 3)} / "
            f"{_fmt(tt['added_chunk_ms']['p99_median_of_blocks'], 3)}",
            "",
        ),
        (
            "raw relay (no --migratable): added TTFT p50 / p99",
            f"{_fmt(tt['added_ttft_ms_raw']['p50'], 3)} / "
            f"{_fmt(tt['added_ttft_ms_raw']['p99'], 3)}",
            "same arrivals, same run",
        ),
        (
            "  added per-chunk delay p50 / p99 (ms)",
            f"{_fmt(tt['added_chunk_ms_raw']['p50'], 3)} / "
            f"{_fmt(tt['added_chunk_ms_raw']['p99'], 3)}",
            "",
        ),
        (
            "migratable ÷ raw: added TTFT p50 / chunk p50",
            f"{_fmt(rr['added_ttft_p50_ratio'], 2)} / {_fmt(rr['added_chunk_p50_ratio'], 2)}",
            "medians of blocks: "
            f"{_fmt(rr['added_ttft_p50_median_of_blocks_ratio'], 2)} / "
            f"{_fmt(rr['added_chunk_p50_median_of_blocks_ratio'], 2)}",
        ),
        (
            "  router CPU per request migratable / raw (ms)",
            f"{_fmt(cpu['migratable'], 3)} / {_fmt(cpu['raw'], 3)}",
            f"ratio {_fmt(rr['router_cpu_ratio'], 2)}",
        ),
        (
            "highest sustained rate direct / proxy",
            f"{_fmt(mr['max_sustained_direct'], 0)} / {_fmt(mr['max_sustained_proxy'], 0)}",
            "req/s",
        ),
        (
            "concurrent streams intact direct / proxy",
            f"{st['direct']['intact']} / {st['proxy']['intact']} of {st['streams']}",
            f"{TARGETS['streams']}; {ANCHORS['streams']}",
        ),
        (
            "migration blackout p50 / p99 (ms)",
            f"{_fmt(mg['blackout_ms']['p50'], 1)} / {_fmt(mg['blackout_ms']['p99'], 1)}",
            f"{mg['migrated']} of {mg['streams']} streams moved",
        ),
        (
            "  target's prefill p50 / p99 (ms)",
            f"{_fmt(mg['prefill_ms']['p50'], 1)} / {_fmt(mg['prefill_ms']['p99'], 1)}",
            f"roofline alone: {_fmt(mg['model_prefill_ms']['p50'], 1)} / "
            f"{_fmt(mg['model_prefill_ms']['p99'], 1)}",
        ),
        (
            "  blackout − prefill p50 / p99 (ms)",
            f"{_fmt(mg['blackout_minus_prefill_ms']['p50'], 1)} / "
            f"{_fmt(mg['blackout_minus_prefill_ms']['p99'], 1)}",
            f"≤ {MIGRATION_SLACK_MS:g}: {mg['target_met']} of {mg['migrated']}",
        ),
        (
            "  … less the wait for A's next token (ms)",
            f"{_fmt(mg['router_added_ms']['p50'], 1)} / {_fmt(mg['router_added_ms']['p99'], 1)}",
            "the router's own share",
        ),
        (
            "  moved answers equal to unmoved ones",
            f"{mg['exact']} of {mg['streams']}",
            f"one id, one finish: {mg['one_stream']}",
        ),
    ]
    for name, value, note in rows:
        print(f"  {name:44s} {value:>30s}   {note}")
    print("  targets met: " + ", ".join(f"{k} {v}" for k, v in summary["targets_met"].items()))


def _targets_met(summary: dict[str, Any]) -> dict[str, bool | None]:
    tt = summary["ttft"]

    def le(value: float | None, bound: float) -> bool | None:
        return None if value is None else value <= bound

    return {
        "decision_p99": le(
            summary["decision"]["route_plus_finish_ms"]["p99"], TARGETS["decision_p99_ms"]
        ),
        "added_ttft_p50": le(tt["added_ttft_ms"]["p50"], TARGETS["added_ttft_p50_ms"]),
        "added_ttft_p99": le(tt["added_ttft_ms"]["p99"], TARGETS["added_ttft_p99_ms"]),
        "ttft_rate": tt["rate"] >= TARGETS["ttft_rate"],
        "added_chunk_p50": le(tt["added_chunk_ms"]["p50"], TARGETS["added_chunk_p50_ms"]),
        "streams": summary["streams"]["proxy"]["intact"] >= TARGETS["streams"],
        "migration_blackout": summary["migration"]["migrated"] > 0
        and summary["migration"]["target_met"] == summary["migration"]["migrated"],
        "migration_exact": summary["migration"]["exact"] == summary["migration"]["streams"],
    }


def _on_signal(signum: int, _: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--quick", action="store_true", help="short smoke run (< 60 s)")
    parser.add_argument("--rate", type=float, default=300.0, help="req/s for TTFT and chunks")
    parser.add_argument("--rates", help="comma-separated req/s steps for the highest rate")
    parser.add_argument("--ttft-bound-ms", type=float, default=50.0)
    parser.add_argument("--streams", type=int, default=None, help="concurrent streams (2000)")
    parser.add_argument("--decisions", type=int, default=None, help="routing decisions (100k)")
    parser.add_argument("--migrations", type=int, default=None, help="streams moved (24)")
    parser.add_argument(
        "--migration-speed", type=float, default=1.0, help="simulated engines' --speed (1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine_server:
        _run(_serve_stub([int(p) for p in args.ports.split(",")]))
        return 0

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    t0 = time.monotonic()
    cfg = _config(args)
    nofile = _raise_nofile()
    summary: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "aiohttp": aiohttp.__version__,
            "client_loop": _loop_name(),
            "engine_loop": _loop_name(),
            "load_generator": "one aiohttp client in the bench process",
            "nofile": list(nofile),
            "loadavg_start": _loadavg(),
        },
        "config": dict(vars(cfg)),
        "anchors": ANCHORS,
        "targets": TARGETS,
    }
    print(
        f"gpumix router bench: {os.cpu_count()} CPUs, load average "
        f"{summary['machine']['loadavg_start']}"
        f", client/engine loop {_loop_name()}, RLIMIT_NOFILE {nofile[0]}"
    )
    print(f"\n1. Routing decision: {cfg.decisions:,} requests in process", flush=True)
    dec = bench_decision(cfg.decisions, cfg.seed)
    summary["decision"] = dec
    print(
        f"  route p50/p99 {_fmt(dec['route_ms']['p50'], 4)}/{_fmt(dec['route_ms']['p99'], 4)} ms"
        f", finish {_fmt(dec['finish_ms']['p50'], 4)}/{_fmt(dec['finish_ms']['p99'], 4)} ms, "
        f"route+finish {_fmt(dec['route_plus_finish_ms']['p50'], 4)}/"
        f"{_fmt(dec['route_plus_finish_ms']['p99'], 4)} ms, progress "
        f"{_fmt(dec['progress_ms']['p50'], 4)}/{_fmt(dec['progress_ms']['p99'], 4)} ms",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="gpumix-router-bench-") as tmp:
        children = Children(Path(tmp))
        try:
            _run(run_bench(cfg, children, summary))
        finally:
            children.stop()
    summary["machine"]["loadavg_end"] = _loadavg()
    summary["run_s"] = round(time.monotonic() - t0, 1)
    summary["targets_met"] = _targets_met(summary)
    _report(summary)
    print(f"  run time {summary['run_s']:.0f} s; load average now {_loadavg()}")
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
