"""Moves whose legs race (gpumix.route.relay), in process: the router's app in front of fake
engines whose timing each test sets, the move asked of the relay as the admin endpoint does.

The fake model's next token is a function of the sequence so far, so a continued answer must
carry exactly the tokens of an unmoved one, whatever moment the move begins or settles at."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from gpumix.route.proxy import Proxy
from gpumix.route.relay import MoveResult
from gpumix.route.table import RoutingTable

TABLE = {"inputEdges": [1, 4096], "outputEdges": [1, 4096],
         "pools": {"p": {"replicas": 2, "share": [[1.0]]}}}  # fmt: skip
PROMPT = [5, 6, 7]
OUTPUT = 10


def next_token(sequence: list[int]) -> int:
    return 100 + len(sequence)


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@dataclass
class Leg:
    """How an engine answers a first request (``source``) or a continuation (``target``)."""

    first_delay: float = 0.0
    gap: float = 0.02
    fail_after: int | None = None
    """Tokens sent before the connection drops."""


@dataclass
class Engines:
    source: Leg
    target: Leg
    continuations: list[dict[str, Any]] = field(default_factory=list)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt: list[int] = body["prompt"]
        leg = self.source if prompt == PROMPT else self.target
        if leg is self.target:
            self.continuations.append(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(leg.first_delay)
        sequence = list(prompt)
        for k in range(body["max_tokens"]):
            if k:
                await asyncio.sleep(leg.gap)
            if k == leg.fail_after:
                assert request.transport is not None
                request.transport.abort()
                return response
            token = next_token(sequence)
            sequence.append(token)
            last = k == body["max_tokens"] - 1
            choice = {"index": 0, "text": f" t{token}", "logprobs": None,
                      "finish_reason": "length" if last else None, "stop_reason": None,
                      "token_ids": [token],
                      "prompt_token_ids": prompt if k == 0 else None}  # fmt: skip
            await response.write(sse({"id": f"cmpl-{len(prompt)}", "object": "text_completion",
                                      "created": 1, "model": "m", "choices": [choice],
                                      "usage": None}))  # fmt: skip
        generated = len(sequence) - len(prompt)
        usage = {"prompt_tokens": len(prompt), "completion_tokens": generated,
                 "total_tokens": len(sequence)}  # fmt: skip
        await response.write(sse({"id": f"cmpl-{len(prompt)}", "object": "text_completion",
                                  "created": 1, "model": "m", "choices": [],
                                  "usage": usage}))  # fmt: skip
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


Mover = Callable[[Proxy, list[Any]], Awaitable[MoveResult | None]]


async def _stream(engines: Engines, move_at: int, mover: Mover) -> tuple[list[Any], Any]:
    """One stream through the router, the move asked for after ``move_at`` events: the client's
    events and what became of the move."""
    engine_app = web.Application()
    engine_app.router.add_post("/v1/completions", engines.completions)
    engine, engine_url = await _serve(engine_app)
    proxy = Proxy(migration=True)
    proxy.set_table(RoutingTable.model_validate(TABLE))
    proxy.set_engines({"p": {"p-0": engine_url, "p-1": engine_url}})
    router, router_url = await _serve(proxy.app())
    events: list[Any] = []
    outcome = None
    try:
        async with aiohttp.ClientSession() as client:
            body = {"model": "m", "prompt": PROMPT, "max_tokens": OUTPUT, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            async with client.post(router_url + "/v1/completions", json=body) as answer:
                assert answer.status == 200
                async for line in answer.content:
                    text = line.decode().strip()
                    if not text.startswith("data: "):
                        continue
                    if text == "data: [DONE]":
                        events.append("[DONE]")
                        continue
                    events.append(json.loads(text.removeprefix("data: ")))
                    if len(events) == move_at:
                        outcome = await mover(proxy, events)
    finally:
        await router.cleanup()
        await engine.cleanup()
    return events, outcome


async def _move(proxy: Proxy, _: list[Any]) -> MoveResult:
    [relay] = proxy.relays.values()
    assert relay.current is not None
    other = "p-1" if relay.current.pod == "p-0" else "p-0"
    return await relay.request_move(other, "p")


def _tokens(events: list[Any]) -> list[str]:
    return [c["text"] for e in events if isinstance(e, dict) for c in e["choices"]]


def _check_one_stream(events: list[Any]) -> None:
    assert events[-1] == "[DONE]"
    body = events[:-1]
    assert len({e["id"] for e in body}) == 1
    assert _tokens(events) == [f" t{100 + len(PROMPT) + k}" for k in range(OUTPUT)]
    assert [c["finish_reason"] for e in body for c in e["choices"]][-1] == "length"
    assert body[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": OUTPUT,
                                 "total_tokens": 3 + OUTPUT}  # fmt: skip
    assert all("token_ids" not in c for e in body for c in e["choices"])


def test_a_source_that_finishes_while_the_target_prefills_keeps_the_stream() -> None:
    engines = Engines(source=Leg(gap=0.02), target=Leg(first_delay=2.0))
    events, result = asyncio.run(_stream(engines, OUTPUT - 2, _move))
    assert result is not None and result.outcome == "finished"
    assert len(engines.continuations) == 1
    _check_one_stream(events)


def test_a_source_that_fails_while_the_target_prefills_hands_the_stream_over() -> None:
    engines = Engines(source=Leg(gap=0.05, fail_after=5), target=Leg(first_delay=0.4))
    moves: list[asyncio.Task[MoveResult]] = []

    async def move_later(proxy: Proxy, events: list[Any]) -> None:
        moves.append(asyncio.create_task(_move(proxy, events)))  # the stream reads on

    events, _ = asyncio.run(_stream(engines, 3, move_later))
    [move] = moves
    assert move.result().outcome == "migrated"
    [continuation] = engines.continuations
    assert continuation["prompt"][: len(PROMPT)] == PROMPT
    assert len(continuation["prompt"]) - len(PROMPT) + continuation["max_tokens"] == OUTPUT
    _check_one_stream(events)


def test_a_move_at_once_lands_between_two_events() -> None:
    engines = Engines(source=Leg(gap=0.03), target=Leg(gap=0.0))
    events, result = asyncio.run(_stream(engines, 1, _move))
    assert result is not None and result.outcome == "migrated"
    _check_one_stream(events)
