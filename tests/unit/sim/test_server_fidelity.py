"""The live server replays the offline simulator. The same requests, streamed over HTTP at their
arrival times (sped up), get their first token and finish when `cluster.run` gives them, with the
same queueing, prefill pauses and recompute preemptions, even when a busy CPU wakes the engine
thread late. The e2e router test reads live pods against what the planner predicts from the
offline engine, so a drift here would mislead it.

The offline replay takes the arrival times the live pods stamped, so the engine's timeline must
match exactly; the client gets each token later only by the time a thread takes to write it. (A
client comparing its TPOT with the offline engine's must count as `Request.tpot` does, Mélange's
latency ÷ output tokens with the queueing; the gap between chunks is `Request.itl`, far kinder.)"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest
from sim_helpers import pods, poisson, simulate, tiny_pod

from gpumix.sim.engine import Engine
from gpumix.sim.request import Request
from gpumix.sim.server import PodServer, RealtimePod

SPEED = 15.0
DELIVERY_S = 0.15
"""Median simulated seconds from a token to its chunk at the client: 10 wall ms at `SPEED`, where
a stream that waited for its next poll would lag 0.1 wall s."""
PODS: list[Callable[[], Engine]] = [lambda: pods("a10g")[0], tiny_pod]
"""An a10g that queues and a small L4 that preempts; request k goes to pod k mod 2."""


def stream(server: PodServer, prompt: int, output: int, stamps: dict[str, list[float]]) -> None:
    """A streamed completion; when each chunk came, on the pod's clock, under the response id."""
    host, port = server.url.removeprefix("http://").split(":")
    body = {"prompt": [7] * prompt, "max_tokens": output, "ignore_eos": True, "stream": True}
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body))
        for line in conn.getresponse():
            if line.startswith(b"data: {"):
                rid = json.loads(line[6:])["id"].removeprefix("cmpl-")
                stamps.setdefault(rid, []).append(server.pod.now())
    finally:
        conn.close()


def replay_live(workload: list[Request]) -> list[tuple[list[float], Request]]:
    """Each request streamed to its pod at its arrival; when its client got each token and the
    live pod's own record of it."""
    finished: dict[str, Request] = {}
    engines = [make() for make in PODS]
    for e in engines:

        def done(r: Request, pod: str = e.name) -> None:
            finished[f"{pod}-{r.rid}"] = r

        e.on_finish.append(done)
    stamps: list[dict[str, list[float]]] = [{} for _ in workload]
    with ExitStack() as stack:
        servers = [stack.enter_context(PodServer(RealtimePod(e, "m", SPEED))) for e in engines]
        threads = []
        t0 = time.monotonic()
        for r, mine in zip(workload, stamps, strict=True):
            time.sleep(max(0.0, t0 + r.arrival / SPEED - time.monotonic()))
            args = (servers[r.rid % len(PODS)], r.prompt, r.output, mine)
            threads.append(threading.Thread(target=stream, args=args))
            threads[-1].start()
        for t in threads:
            t.join(60)
    return [(chunks, finished[rid]) for mine in stamps for rid, chunks in mine.items()]


def replay_offline(workload: list[Request], live: list[Request]) -> list[Request]:
    """The same requests through the offline engine, each pod on its own at the arrival times
    its live twin stamped (its own clock)."""
    out: dict[int, Request] = {}
    for k, make in enumerate(PODS):
        pairs = zip(workload, live, strict=True)
        mine = [Request(r.rid, got.arrival, r.prompt, r.output) for r, got in pairs
                if r.rid % len(PODS) == k]  # fmt: skip
        simulate([make()], sorted(mine, key=lambda r: r.arrival))
        out |= {r.rid: r for r in mine}
    return [out[r.rid] for r in workload]


def workload() -> list[Request]:
    return poisson(2.0, 40, seed=1, prompt=(100, 1200), output=(10, 300))


def assert_same_timeline(live: list[Request], offline: list[Request]) -> None:
    for got, want in zip(live, offline, strict=True):
        assert (got.prompt, got.output) == (want.prompt, want.output)
        assert got.first_token == pytest.approx(want.first_token)
        assert got.finish == pytest.approx(want.finish)
        assert got.preemptions == want.preemptions
    assert sum(r.preemptions for r in offline) > 0, "the workload exercises preemption"


@contextmanager
def busy_cpu() -> Iterator[None]:
    """Another thread taking the GIL whenever it can, so the pods' threads wake late."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    hog = threading.Thread(target=spin, daemon=True)
    hog.start()
    try:
        yield
    finally:
        stop.set()
        hog.join()


def test_live_pods_reproduce_the_offline_engine_request_by_request() -> None:
    """Each request's first token, finish and preemptions, live as offline; its client gets the
    first and last token when the engine makes them."""
    requests = workload()
    replayed = replay_live(requests)
    live = [got for _, got in replayed]
    assert_same_timeline(live, replay_offline(requests, live))
    lags = []
    for chunks, got in replayed:
        assert got.first_token is not None and got.finish is not None
        assert len(chunks) == got.output, "one chunk per token, `max_tokens` of them"
        lags += [chunks[0] - got.first_token, chunks[-1] - got.finish]
    assert min(lags) >= 0, "no token before the engine makes it"
    assert statistics.median(lags) <= DELIVERY_S


def test_a_busy_cpu_delays_tokens_but_not_the_simulated_timeline() -> None:
    """The pods' threads wake late; the steps still start at the previous step's end and an
    arrival after a step's end cuts the next step, as offline."""
    requests = workload()
    with busy_cpu():
        live = [got for _, got in replay_live(requests)]
    assert_same_timeline(live, replay_offline(requests, live))
