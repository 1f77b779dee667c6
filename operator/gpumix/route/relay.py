"""A streamed answer the router can move to another pod while it streams (issue #16).

One :class:`Relay` per migratable stream. Each leg (the first pod, then each pod it moved to) has
a reader task that puts the engine's chunks on one queue; the relay takes them off, frames SSE
events, learns the token IDs (:mod:`gpumix.route.continuation`) and writes the client's events.
A move request arrives on the same queue, so it is handled between two events, never inside one.

A move is make-before-break. The continuation goes to B while A keeps streaming; A's events are
held back from the client from that moment, since B regenerates them. B's first event commits the
move: A's connection closes (vLLM aborts the request and frees its KV blocks), the held events are
dropped, and B's events follow under the client's id. If B fails before its first event, the held
events are released and A carries on; if A finishes first, B is closed and A's end is released;
if A fails, B carries on. The client sees one stream whose only trace of the move is a gap (the
*blackout*: from the last event before the move to B's first, about B's prefill of prompt +
generated tokens). The readers do not wait for the client: chunks queue in memory, a few hundred
bytes per token, bounded by the answer's length.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from aiohttp import web

from gpumix.route.continuation import (
    Progress,
    continuation_body,
    encode,
    for_client,
    observe,
    parse_event,
    spans_stop,
    stop_strings,
)
from gpumix.route.core import RoutingCore

log = logging.getLogger("gpumix.route")

DONE = b"data: [DONE]"
Outcome = Literal["migrated", "refused", "failed", "finished"]


@dataclass(frozen=True)
class MoveResult:
    """What became of one move request (the admin endpoint's answer)."""

    outcome: Outcome
    source: str
    target: str
    reason: str | None = None
    blackout_s: float | None = None
    """Client-visible gap: from the last event before the move to the target's first."""
    prefill_s: float | None = None
    """From the continuation's request to its first event: the target's prefill."""

    def body(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "from": self.source,
            "to": self.target,
            "reason": self.reason,
            "blackout_s": self.blackout_s,
            "prefill_s": self.prefill_s,
        }


class _LegFailedError(Exception):
    pass


@dataclass(eq=False)
class Leg:
    """One pod's part of the answer."""

    pod: str
    pool: str
    upstream: aiohttp.ClientResponse | None = None
    reader: asyncio.Task[None] | None = None
    tail: bytes = b""
    sent: float = field(default_factory=time.perf_counter)

    def frame(self, chunk: bytes) -> list[bytes]:
        """Complete SSE events (with their blank line) in ``tail + chunk``; keeps the rest."""
        data = self.tail + chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self.tail = data
            return []
        self.tail = data[cut + 2 :]
        return [e + b"\n\n" for e in data[:cut].split(b"\n\n") if e.strip()]

    def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
        if self.upstream is not None:
            self.upstream.close()  # the engine sees the connection close and aborts


Item = tuple[Leg | None, str, Any]


class Relay:
    """The client side of one streamed answer and the legs that produce it."""

    def __init__(
        self,
        *,
        rid: str,
        progress: Progress,
        response: web.StreamResponse,
        core: RoutingCore,
        session: aiohttp.ClientSession,
        urls: dict[str, str],
        headers: dict[str, str],
    ) -> None:
        self.rid, self.progress, self.response = rid, progress, response
        self.core, self.session, self.urls, self.headers = core, session, urls, headers
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self.first: Leg | None = None
        self.current: Leg | None = None
        self.target: Leg | None = None
        self.pending: asyncio.Future[MoveResult] | None = None
        self.held: list[bytes] = []
        self.done = False
        self.last_write = time.perf_counter()
        self.move = ("", "")
        """(source, target) pods of the move under way."""

    # ---- the stream ------------------------------------------------------------------------

    async def run(self, first_leg: Leg, first: bytes) -> bool:
        """Relay until the answer ends; True when it ended with ``[DONE]``."""
        self.first = self.current = first_leg
        self._read(first_leg, first=first)
        try:
            while not self.done:
                leg, kind, payload = await self.queue.get()
                if kind == "move":
                    self._begin(*payload)
                    continue
                if leg is self.current:
                    going = await self._from_current(leg, kind, payload)
                elif leg is not None and leg is self.target:
                    going = await self._from_target(leg, kind, payload)
                else:
                    continue  # a leg already left behind
                if not going:
                    break
            return self.done
        finally:
            for leg in (self.current, self.target):
                if leg is not None:
                    leg.close()
            self._settle("finished", "the answer ended")

    async def _from_current(self, leg: Leg, kind: str, payload: Any) -> bool:
        """Handle an item of the current leg; False when the stream has nothing more to give."""
        if kind == "data":
            events = leg.frame(payload)
            if self.target is not None:
                self.held += events  # the target regenerates these
            else:
                await self._write(events, leg)
            return True
        if self.target is None:
            return False  # ended or failed with no move under way
        if kind == "error":
            self.held.clear()  # the target carries on from where the move began
            self.current = None
            return True
        # Finished while the target prefilled: the target is not needed.
        target = self.target
        self.target = None
        target.close()
        self._settle("finished", "the answer ended during the move")
        held, self.held = self.held, []
        await self._write(held, leg)
        return False

    async def _from_target(self, leg: Leg, kind: str, payload: Any) -> bool:
        """Handle an item of the move's target; False when nothing streams any more."""
        if kind == "data":
            source = self.current
            if source is not None:
                source.close()
            self.held.clear()
            self.current, self.target = leg, None
            self.progress.prior = len(self.progress.generated_ids)
            self.core.ledger.move(self.rid, leg.pod, leg.pool)
            prefill = time.perf_counter() - leg.sent
            gap = time.perf_counter() - self.last_write
            await self._write(leg.frame(payload), leg)
            self._settle("migrated", None, blackout=gap, prefill=prefill)
            return True
        # The target failed before its first event: back to the source, if it still streams.
        self.target = None
        leg.close()
        self._settle("failed", str(payload))
        held, self.held = self.held, []
        if self.current is None:
            return False
        await self._write(held, self.current)
        return True

    async def _write(self, events: list[bytes], leg: Leg) -> None:
        first_leg = leg is self.first
        out: list[bytes] = []
        for event in events:
            if event.startswith(DONE):
                self.done = True
                out.append(event)
                continue
            obj = parse_event(event)
            if obj is None or ("choices" not in obj and "usage" not in obj):
                out.append(event)  # an error event, a comment: as the engine wrote it
                continue
            observe(self.progress, obj, first_leg)
            shown = for_client(self.progress, obj, first_leg)
            if shown is not None:
                out.append(encode(shown))
        if out:
            await self.response.write(b"".join(out))
            self.last_write = time.perf_counter()
        self.core.progress(self.rid, len(self.progress.generated_ids))

    # ---- legs ------------------------------------------------------------------------------

    def _read(self, leg: Leg, *, first: bytes = b"", body: dict[str, Any] | None = None) -> None:
        leg.reader = asyncio.create_task(self._pump(leg, first, body))

    async def _pump(self, leg: Leg, first: bytes, body: dict[str, Any] | None) -> None:
        """Put the leg's chunks on the queue (after sending ``body``, for a continuation)."""
        try:
            if body is not None:
                url = self.urls[leg.pod] + "/v1/completions"
                leg.upstream = await self.session.post(url, json=body, headers=self.headers)
                if leg.upstream.status != 200:
                    raise _LegFailedError(f"http-{leg.upstream.status}")
            assert leg.upstream is not None
            if first:
                self.queue.put_nowait((leg, "data", first))
            async for chunk in leg.upstream.content.iter_any():
                self.queue.put_nowait((leg, "data", chunk))
            self.queue.put_nowait((leg, "end", None))
        except (TimeoutError, aiohttp.ClientError, _LegFailedError) as err:
            self.queue.put_nowait((leg, "error", str(err) or type(err).__name__))

    # ---- moves -----------------------------------------------------------------------------

    def refusal(self, pod: str | None = None) -> str | None:
        """Why the stream cannot move now (to ``pod``), or None."""
        p = self.progress
        if self.done:
            return "finished"
        if self.target is not None:
            return "migrating"
        if self.current is None:
            return "source-failed"
        if pod is not None and pod == self.current.pod:
            return "same-pod"
        if not p.prompt_ids:
            return "no-token-ids"
        if p.remaining() <= 0:
            return "finishing"
        if spans_stop(p.text, stop_strings(p.body)):
            return "stop-string-boundary"
        return None

    def request_move(self, pod: str, pool: str) -> asyncio.Future[MoveResult]:
        future: asyncio.Future[MoveResult] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((None, "move", (pod, pool, future)))
        return future

    def _begin(self, pod: str, pool: str, future: asyncio.Future[MoveResult]) -> None:
        source = self.current.pod if self.current is not None else ""
        reason = self.refusal(pod)
        if reason is not None:
            future.set_result(MoveResult("refused", source, pod, reason))
            return
        self.pending = future
        self.move = (source, pod)
        self.target = Leg(pod=pod, pool=pool)
        self._read(self.target, body=continuation_body(self.progress))
        log.info("migrating", extra={"request": self.rid, "from": source, "to": pod})

    def _settle(
        self,
        outcome: Outcome,
        reason: str | None,
        *,
        blackout: float | None = None,
        prefill: float | None = None,
    ) -> None:
        """Answer the move under way, if any."""
        future, self.pending = self.pending, None
        if future is not None and not future.done():
            source, target = self.move
            future.set_result(MoveResult(outcome, source, target, reason, blackout, prefill))
