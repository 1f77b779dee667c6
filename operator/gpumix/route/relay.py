"""A streamed answer the router can move to another pod while it streams (issue #16).

One :class:`Relay` per migratable stream. Each leg (the first pod, then each pod it moved to) is
read by one task, which handles every chunk as it arrives: frames SSE events, learns the token
IDs (:mod:`gpumix.route.continuation`) and writes the client's events. The first leg's task is
the request handler's own, so a stream that never moves costs no task and no queue; its events
are edited as bytes (:func:`~gpumix.route.continuation.first_leg_event`), parsed in full only
when they carry something to rewrite. A move request is taken between two events, never inside
one: the event loop runs one task at a time, and a chunk's events are learnt before they are
written.

A move is make-before-break. The continuation goes to B while A keeps streaming; A's events are
held back from the client from that moment, since B regenerates them. B's first event commits the
move: A's connection closes (vLLM aborts the request and frees its KV blocks), the held events are
dropped, and B's events follow under the client's id. If B fails before its first event, the held
events are released and A carries on; if A finishes first, B is closed and A's end is released;
if A fails, B carries on. The client sees one stream whose only trace of the move is a gap (the
*blackout*: from the last event before the move to B's first, about B's prefill of prompt +
generated tokens). A leg is read as fast as the client takes its events (held events excepted:
a few hundred bytes per token of the move's prefill).
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
    first_leg_event,
    for_client,
    observe,
    parse_event,
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
    """The task that follows a continuation (the first leg is followed by the handler's)."""
    tail: bytes = b""
    sent: float = field(default_factory=time.perf_counter)

    def frame(self, chunk: bytes) -> list[bytes]:
        """Complete SSE events (with their blank line) in ``tail + chunk``; keeps the rest."""
        data = self.tail + chunk if self.tail else chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self.tail = data
            return []
        self.tail = data[cut + 2 :]
        if cut + 2 == len(data) and data.find(b"\n\n") == cut:
            return [data] if data.strip() else []  # one event, the common chunk
        return [e + b"\n\n" for e in data[:cut].split(b"\n\n") if e.strip()]

    def close(self) -> None:
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()
        if self.upstream is not None:
            # Read to its end, the connection is back in the pool already; else the engine sees
            # it close and aborts.
            self.upstream.close()


class Relay:
    """The client side of one streamed answer and the legs that produce it.

    Each leg's chunks are handled by the task that reads them, as they arrive: the first leg's
    by the request handler (:meth:`run`), a continuation's by a task of its own. The event loop
    runs one at a time and a chunk's events are learnt from before its write, so a move begins
    between two events; only the current leg writes, and a leg left behind stops reading."""

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
        self.first: Leg | None = None
        self.current: Leg | None = None
        self.target: Leg | None = None
        self.pending: asyncio.Future[MoveResult] | None = None
        self.held: list[bytes] = []
        self.done = False
        self.over: asyncio.Future[None] | None = None
        """Set when nothing streams any more (the answer ended, or every leg failed)."""
        self.last_write = time.perf_counter()
        self.move = ("", "")
        """(source, target) pods of the move under way."""

    # ---- the stream ------------------------------------------------------------------------

    async def run(self, first_leg: Leg, first: bytes) -> bool:
        """Relay until the answer ends; True when it ended with ``[DONE]``."""
        self.first = self.current = first_leg
        self.over = asyncio.get_running_loop().create_future()
        try:
            await self._follow(first_leg, first)
            if not self.over.done():
                await self.over  # a continuation streams on
            return self.done
        finally:
            self._stop()
            for leg in (self.current, self.target):
                if leg is not None:
                    leg.close()
            self._settle("finished", "the answer ended")

    def _stop(self) -> None:
        if self.over is not None and not self.over.done():
            self.over.set_result(None)

    async def _follow(
        self, leg: Leg, first: bytes = b"", body: dict[str, Any] | None = None
    ) -> None:
        """Read one leg to its end (after sending ``body``, for a continuation), handling each
        chunk as it comes, until the leg is left behind."""
        try:
            if body is not None:
                url = self.urls[leg.pod] + "/v1/completions"
                leg.upstream = await self.session.post(url, json=body, headers=self.headers)
                if leg.upstream.status != 200:
                    raise _LegFailedError(f"http-{leg.upstream.status}")
            assert leg.upstream is not None
            if first and not await self._data(leg, first):
                return
            async for chunk in leg.upstream.content.iter_any():
                if not await self._data(leg, chunk):
                    return
            await self._end(leg, None)
        except (TimeoutError, aiohttp.ClientError, _LegFailedError) as err:
            await self._end(leg, str(err) or type(err).__name__)

    async def _continue(self, leg: Leg, body: dict[str, Any]) -> None:
        """A continuation's task: a write to the client that fails ends the handler with it."""
        try:
            await self._follow(leg, body=body)
        except Exception as err:
            if self.over is not None and not self.over.done():
                self.over.set_exception(err)

    async def _data(self, leg: Leg, chunk: bytes) -> bool:
        """Handle a chunk of ``leg``; False when the leg has been left behind."""
        if leg is self.current:
            events = leg.frame(chunk)
            if self.target is not None:
                self.held += events  # the target regenerates these
            else:
                await self._write(events, leg)
            return True
        if leg is not self.target:
            return False
        # The target's first event commits the move.
        source = self.current
        if source is not None:
            source.close()
        self.held.clear()
        self.current, self.target = leg, None
        self.progress.prior = len(self.progress.generated_ids)
        self.core.ledger.move(self.rid, leg.pod, leg.pool)
        prefill = time.perf_counter() - leg.sent
        gap = time.perf_counter() - self.last_write
        await self._write(leg.frame(chunk), leg)
        self._settle("migrated", None, blackout=gap, prefill=prefill)
        return True

    async def _end(self, leg: Leg, error: str | None) -> None:
        """``leg`` ended (``error``: failed); whatever streams carries on."""
        if leg is self.current:
            if self.target is None:
                self._stop()  # ended or failed with no move under way
                return
            if error is not None:
                self.held.clear()  # the target carries on from where the move began
                self.current = None
                return
            # Finished while the target prefilled: the target is not needed.
            target = self.target
            self.target = None
            target.close()
            self._settle("finished", "the answer ended during the move")
            held, self.held = self.held, []
            await self._write(held, leg)
            self._stop()
            return
        if leg is not self.target:
            return  # a leg already left behind
        # The target failed before its first event: back to the source, if it still streams.
        self.target = None
        leg.close()
        self._settle("failed", error or "ended before its first event")
        held, self.held = self.held, []
        if self.current is None:
            self._stop()
            return
        await self._write(held, self.current)

    async def _write(self, events: list[bytes], leg: Leg) -> None:
        p = self.progress
        first_leg = leg is self.first
        out: list[bytes] = []
        for event in events:
            if event.startswith(DONE):
                self.done = True
                out.append(event)
                continue
            if first_leg and p.head:
                shown = first_leg_event(p, event)
                if shown is not None:
                    out.append(shown)
                    continue
            obj = parse_event(event)
            if obj is None or ("choices" not in obj and "usage" not in obj):
                out.append(event)  # an error event, a comment: as the engine wrote it
                continue
            observe(p, obj, first_leg)
            client = for_client(p, obj, first_leg)
            if client is not None:
                out.append(encode(client))
        if out:
            await self.response.write(b"".join(out))
            self.last_write = time.perf_counter()
        self.core.progress(self.rid, len(p.generated_ids))

    # ---- moves -----------------------------------------------------------------------------

    def refusal(self, pod: str | None = None) -> str | None:
        """Why the stream cannot move now (to ``pod``), or None."""
        if self.done:
            return "finished"
        if self.target is not None:
            return "migrating"
        if self.current is None:
            return "source-failed"
        if pod is not None and pod == self.current.pod:
            return "same-pod"
        return self.progress.refusal()

    def request_move(self, pod: str, pool: str) -> asyncio.Future[MoveResult]:
        """Begin moving the stream to ``pod``: the continuation goes out now (between two
        events: nothing of the stream is handled meanwhile); the future is the move's outcome."""
        future: asyncio.Future[MoveResult] = asyncio.get_running_loop().create_future()
        source = self.current.pod if self.current is not None else ""
        reason = self.refusal(pod)
        if reason is not None:
            future.set_result(MoveResult("refused", source, pod, reason))
            return future
        self.pending = future
        self.move = (source, pod)
        target = self.target = Leg(pod=pod, pool=pool)
        body = continuation_body(self.progress)
        target.reader = asyncio.create_task(self._continue(target, body))
        log.info("migrating", extra={"request": self.rid, "from": source, "to": pod})
        return future

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
