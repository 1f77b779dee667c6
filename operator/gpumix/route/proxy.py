"""The gpumix router: an OpenAI-compatible streaming reverse proxy that sends every request where
the plan says (the routing core, :mod:`gpumix.route.core`).

Per request: count the prompt's tokens (token-ID prompts directly, text with an engine's
``/tokenize``), let the core pick pool and pod, and relay the engine's answer. A stream is relayed
chunk by chunk as it arrives, never buffered. Until the first byte reaches the client nothing is
committed, so a pod that refuses the connection, answers 5xx or drops the request before its first
chunk is retried on another pod; after it, a failure ends the stream with an error event as vLLM's
server does. A client that disconnects cancels its handler, which closes the engine connection, and
vLLM aborts a request whose connection closes. When every pod of the planned pool holds its
in-flight limit, the router answers 429 rather than queue where the plan has no room.

With ``migration`` on (``gpumix route --migratable``: the service's ``kvMigration`` goes through
the router), streams that can be continued exactly (:func:`gpumix.route.continuation.refusal`)
are relayed by a :class:`~gpumix.route.relay.Relay`, which can move them to another pod
mid-answer (a chat without a cap takes the rest of its first pod's context, which the router asks
each pod's ``/v1/models`` for once); off, every stream is relayed as it comes (no event is
parsed). The admin app (its own port, not behind the Service) lists what is in flight per pod,
either way, and takes moves: the MELL KV loop's way to migrate on stock vLLM (issue #16); without
migration it refuses every move (reason ``migration-off``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from gpumix.route.body import error_body, max_tokens_of, prompt_tokens_given
from gpumix.route.continuation import (
    Progress,
    max_model_len_of,
    refusal,
    request_with_token_ids,
)
from gpumix.route.core import Decision, PoolFullError, RoutingCore
from gpumix.route.engines import Engines
from gpumix.route.predict import histogram_prior
from gpumix.route.relay import Leg, MoveResult, Relay
from gpumix.route.stream import DONE, RECENT_BYTES, count_events, usage_tokens
from gpumix.route.table import RoutingTable

log = logging.getLogger("gpumix.route")

MAX_ATTEMPTS = 3
"""Pods one request may be tried on before its first byte (the first and two retries)."""
BYTES_PER_TOKEN = 4
"""Prompt-length estimate when no engine can tokenize (about 4 bytes per token in English BPE)."""

MOVE_TIMEOUT_S = 60.0
"""How long a move request waits for the target's first token before answering 'pending'."""
ENGINE_TIMEOUT_S = 300.0
"""Longest an engine may send nothing (``--engine-timeout``): above any wait for a first token
in an engine's queue that a plan meeting its SLO allows, below forever."""
QUICK = aiohttp.ClientTimeout(total=5.0)
"""``/tokenize`` and ``/v1/models``: small answers, and a request waits for them."""

_FAST = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.5)
_SLOW = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class RouterMetrics:
    """The router's Prometheus metrics (prometheus-client), on ``/metrics``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.completed = Counter(
            "gpumix_router_completed_requests",
            "Requests answered in full, by input and output bucket (each label is the bucket's "
            "lower edge in tokens): the workload's joint (input, output) histogram.",
            ["input_from", "output_from"],
            registry=registry,
        )
        self.responses = Counter(
            "gpumix_router_responses",
            "Responses by HTTP status code.",
            ["code"],
            registry=registry,
        )
        self.decision = Histogram(
            "gpumix_router_decision_seconds",
            "Time the routing core takes to pick a pool and pod.",
            buckets=_FAST,
            registry=registry,
        )
        self.added_ttft = Histogram(
            "gpumix_router_added_ttft_seconds",
            "Time the router adds before the first byte: request read, tokenization, routing, "
            "connection and relay of the first chunk.",
            buckets=_FAST,
            registry=registry,
        )
        self.retries = Counter(
            "gpumix_router_retries",
            "Requests sent to another pod because one failed before answering.",
            ["reason"],
            registry=registry,
        )
        self.shed = Counter(
            "gpumix_router_shed_requests",
            "Requests answered 429 because every pod of their pool was at its in-flight limit.",
            ["pool"],
            registry=registry,
        )
        self.tokenize_fallbacks = Counter(
            "gpumix_router_tokenize_fallbacks",
            "Prompts whose length was estimated from their bytes because no engine tokenized.",
            registry=registry,
        )
        self.migrations = Counter(
            "gpumix_router_migrations",
            "Move requests by outcome: migrated, refused (see the refusals counter), failed "
            "(the target failed before its first token; the source carried on) or finished "
            "(the answer ended first).",
            ["outcome"],
            registry=registry,
        )
        self.refusals = Counter(
            "gpumix_router_migration_refusals",
            "Move requests refused, by why the stream cannot be continued exactly elsewhere.",
            ["reason"],
            registry=registry,
        )
        self.blackout = Histogram(
            "gpumix_router_migration_blackout_seconds",
            "Client-visible gap of a migration: last event before it to the target's first.",
            buckets=_SLOW,
            registry=registry,
        )
        self.migration_prefill = Histogram(
            "gpumix_router_migration_prefill_seconds",
            "Continuation request to its first event on the target: its re-prefill.",
            buckets=_SLOW,
            registry=registry,
        )


class _Inflight(Collector):
    """``gpumix_router_inflight_requests`` read from the ledger at scrape time, so a request
    that migrates is counted on the pod it runs on."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "gpumix_router_inflight_requests",
            "Requests in flight through this router replica, per engine pod.",
            labels=["pool", "pod"],
        )
        core = self.proxy.core
        if core is not None:
            for (pool, pod), n in sorted(core.ledger.per_pod().items()):
                gauge.add_metric([pool, pod], n)
        yield gauge


class _EngineFailedError(Exception):
    """An engine failed before its first byte reached the client: the request may go elsewhere."""


def _error(
    message: str, code: int, kind: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(error_body(message, code, kind), status=code, headers=headers)


def _estimate(body: Mapping[str, Any]) -> int:
    text = json.dumps(body.get("messages") if "messages" in body else body.get("prompt", ""))
    return max(1, len(text.encode()) // BYTES_PER_TOKEN)


class Proxy:
    """The router's state (plan, engines, routing core) and its HTTP handlers.

    The plan and the engine pods arrive through :meth:`set_table` and :meth:`set_engines` (the
    watchers of :mod:`gpumix.route.watch`, or a static configuration); a change applies to the
    next request, and requests in flight stay where they are."""

    def __init__(
        self,
        *,
        max_inflight: int | None = None,
        migration: bool = False,
        engine_timeout_s: float = ENGINE_TIMEOUT_S,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.max_inflight = max_inflight
        self.migration = migration
        self.engine_timeout_s = engine_timeout_s
        self.metrics = RouterMetrics(registry or CollectorRegistry())
        self.metrics.registry.register(_Inflight(self))
        self.relays: dict[str, Relay] = {}
        """Streams in flight that can move, by request id."""
        self.unmovable: dict[str, str] = {}
        """Other requests in flight: why each cannot move."""
        self.table: RoutingTable | None = None
        self.engines: Engines = {}
        self.urls: dict[str, str] = {}
        self.max_model_lens: dict[str, int] = {}
        """Each pod's context length, once learnt (:meth:`_max_model_len`)."""
        self.core: RoutingCore | None = None
        self._ids = itertools.count()
        self._session: aiohttp.ClientSession | None = None

    # ---- plan and engines -------------------------------------------------------------------

    def set_table(self, table: RoutingTable) -> None:
        if table == self.table:
            return
        self.table = table
        self._rebuild()
        # Every bucket of the grid exists from the start, at 0: Prometheus's increase() cannot
        # count a series' first completions if the series appears with them.
        for lo_in in table.input_edges[:-1]:
            for lo_out in table.output_edges[:-1]:
                self.metrics.completed.labels(str(lo_in), str(lo_out))
        log.info("routing table", extra={"pools": sorted(table.pools), "grid": table.shape})

    def set_engines(self, engines: Engines) -> None:
        if engines == self.engines:
            return
        self.engines = {pool: dict(pods) for pool, pods in engines.items()}
        self.urls = {pod: url for pods in engines.values() for pod, url in pods.items()}
        self.max_model_lens = {p: n for p, n in self.max_model_lens.items() if p in self.urls}
        self._rebuild()
        log.info("engines", extra={"pods": {p: sorted(pods) for p, pods in engines.items()}})

    def _rebuild(self) -> None:
        table = self.table
        if table is None:
            return
        pods = {pool: list(names) for pool, names in self.engines.items()}
        if self.core is None:
            prior = histogram_prior(table.output_edges, table.traffic())
            self.core = RoutingCore(table, pods, prior, max_inflight=self.max_inflight)
        else:
            self.core.update(table, pods)

    def ready(self) -> str | None:
        """Why the router cannot route yet (no table, no routable engine), or None."""
        if self.table is None:
            return "no routing table yet"
        if self.core is None or not self.core.pods:
            return "no ready engine pod in a pool of the plan"
        return None

    # ---- HTTP -------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/completions", self.forward)
        app.router.add_post("/v1/chat/completions", self.forward)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.readiness)
        app.router.add_get("/metrics", self.prometheus)
        app.cleanup_ctx.append(self._client)
        return app

    def admin_app(self) -> web.Application:
        """What the KV loop talks to: on a port of its own, which the Service does not expose."""
        app = web.Application()
        app.router.add_get("/admin/inflight", self.inflight)
        app.router.add_post("/admin/migrate", self.move)
        return app

    async def _client(self, _: web.Application) -> Any:
        # One pool of keep-alive connections to the engines; no total timeout (streams last as
        # long as the answer), a bounded connect so a dead pod is retried quickly, and a bound
        # on silence so a hung engine (accepting, never answering) cannot hold a request for
        # good: before the first byte the request goes elsewhere, after it the stream ends.
        timeout = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=self.engine_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
        self._session = aiohttp.ClientSession(
            timeout=timeout, connector=connector, auto_decompress=False
        )
        yield
        await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the app's cleanup context opens the session"
        return self._session

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readiness(self, _: web.Request) -> web.Response:
        reason = self.ready()
        if reason is None:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not ready", "reason": reason}, status=503)

    async def prometheus(self, _: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def models(self, _: web.Request) -> web.StreamResponse:
        for url in sorted(self.urls.values()):
            try:
                async with self.session.get(url + "/v1/models", timeout=QUICK) as upstream:
                    body = await upstream.read()
                    return web.Response(
                        body=body, status=upstream.status, content_type="application/json"
                    )
            except aiohttp.ClientError:
                continue
        return _error("no engine answered /v1/models", 503, "ServiceUnavailableError")

    async def inflight(self, _: web.Request) -> web.Response:
        """Every request in flight through this replica, per pod of the plan: the ledger the KV
        loop schedules from (tokens as the router has relayed them), and whether each can move."""
        core = self.core
        pods: dict[str, dict[str, Any]] = {}
        if core is not None:
            for pool, names in sorted(core.pods.items()):
                for pod in names:
                    pods[pod] = {"pool": pool, "requests": []}
            for rid, flight in sorted(core.ledger.items()):
                entry = pods.setdefault(flight.pod, {"pool": flight.pool, "requests": []})
                relay = self.relays.get(rid)
                why = relay.refusal() if relay else self.unmovable.get(rid, "not-streaming-yet")
                entry["requests"].append({
                    "id": rid,
                    "prompt_tokens": flight.prompt,
                    "generated_tokens": flight.generated,
                    "kv_tokens": flight.tokens,
                    "max_tokens": flight.max_tokens,
                    "movable": why is None,
                    "refusal": why,
                })  # fmt: skip
        return web.json_response({"pods": pods})

    async def move(self, request: web.Request) -> web.Response:
        """``{"id", "to"}``: continue request ``id`` on pod ``to``. 200 when it moved, 409 when it
        cannot (the reason), 502 when the target failed (the request stays where it was), 504
        when the target has not answered within ``MOVE_TIMEOUT_S`` (the move goes on)."""
        try:
            body = await request.json()
            rid, pod = body["id"], body["to"]
            if not isinstance(rid, str) or not isinstance(pod, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return _error('the body must be {"id": str, "to": str}', 400, "BadRequestError")
        core = self.core
        pool = next((p for p, names in core.pods.items() if pod in names), None) if core else None
        if pool is None:
            return _error(f"pod {pod!r} is not a ready pod of the plan", 400, "BadRequestError")
        flight = core.ledger.get(rid) if core else None
        if flight is None:
            return _error(f"request {rid!r} is not in flight here", 404, "NotFoundError")
        relay = self.relays.get(rid)
        if relay is None:
            result = MoveResult("refused", flight.pod, pod, self.unmovable.get(rid, "not-ready"))
        else:
            try:
                result = await asyncio.wait_for(
                    asyncio.shield(relay.request_move(pod, pool)), MOVE_TIMEOUT_S
                )
            except TimeoutError:
                return web.json_response({"outcome": "pending", "from": flight.pod, "to": pod},
                                         status=504)  # fmt: skip
        self.metrics.migrations.labels(result.outcome).inc()
        if result.outcome == "refused" and result.reason:
            self.metrics.refusals.labels(result.reason).inc()
        if result.outcome == "migrated":
            self.metrics.blackout.observe(result.blackout_s or 0.0)
            self.metrics.migration_prefill.observe(result.prefill_s or 0.0)
        log.info("move", extra={"request": rid, **result.body()})
        status = {"migrated": 200, "failed": 502}.get(result.outcome, 409)
        return web.json_response(result.body(), status=status)

    async def forward(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return self._count(_error("the request body is not JSON", 400, "BadRequestError"))
        if not isinstance(body, dict):
            return self._count(
                _error("the request body must be a JSON object", 400, "BadRequestError")
            )
        reason = self.ready()
        if reason is not None:
            return self._count(_error(reason, 503, "ServiceUnavailableError"))
        prompt = prompt_tokens_given(body)
        if prompt is None:
            prompt = await self._tokenize(body)
        rid = f"r{next(self._ids)}"
        chat = request.path.endswith("/chat/completions")
        why = refusal(body, chat) if self.migration else "migration-off"
        progress = None
        if why is None:
            options = body.get("stream_options") or {}
            progress = Progress(
                chat=chat,
                body=body,
                client_ids=bool(body.get("return_token_ids")),
                include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
            )
            raw = request_with_token_ids(raw, body)
        else:
            self.unmovable[rid] = why
        try:
            return await self._relay(
                request=request, rid=rid, raw=raw, body=body, progress=progress, prompt=prompt,
                start=start,
            )  # fmt: skip
        finally:
            self.unmovable.pop(rid, None)
            core = self.core
            if core is not None and core.ledger.get(rid) is not None:
                core.finish(rid, None)

    async def _relay(
        self,
        *,
        request: web.Request,
        rid: str,
        raw: bytes,
        body: dict[str, Any],
        progress: Progress | None,
        prompt: int,
        start: float,
    ) -> web.StreamResponse:
        core = self.core
        assert core is not None
        exclude: list[str] = []
        max_tokens = max_tokens_of(body)
        headers = {"Content-Type": "application/json"}
        if auth := request.headers.get("Authorization"):
            headers["Authorization"] = auth
        while True:
            began = time.perf_counter()
            try:
                decision = core.route(rid, prompt, max_tokens, exclude=exclude)
            except PoolFullError as full:
                self.metrics.shed.labels(full.pool).inc()
                return self._count(_error(str(full), 429, "TooManyRequests", {"Retry-After": "1"}))
            self.metrics.decision.observe(time.perf_counter() - began)
            if decision is None:
                return self._count(
                    _error("no engine pod left to try", 503, "ServiceUnavailableError")
                )
            try:
                return await self._attempt(
                    request=request,
                    rid=rid,
                    raw=raw,
                    headers=headers,
                    decision=decision,
                    progress=progress,
                    start=start,
                )
            except _EngineFailedError as failed:
                exclude.append(decision.pod)
                self.metrics.retries.labels(str(failed)).inc()
                log.warning(
                    "retrying elsewhere",
                    extra={"request": rid, "pod": decision.pod, "reason": str(failed)},
                )
                if len(exclude) >= MAX_ATTEMPTS:
                    return self._count(_error(f"engines failed: {failed}", 502, "BadGatewayError"))

    async def _attempt(
        self,
        *,
        request: web.Request,
        rid: str,
        raw: bytes,
        headers: dict[str, str],
        decision: Decision,
        progress: Progress | None,
        start: float,
    ) -> web.StreamResponse:
        core = self.core
        assert core is not None
        url = self.urls[decision.pod] + request.path
        sent = time.perf_counter()
        try:
            upstream = await self.session.post(url, data=raw, headers=headers)
        except (TimeoutError, aiohttp.ClientConnectionError) as err:
            raise _EngineFailedError(type(err).__name__) from err
        try:
            if upstream.status >= 500:
                raise _EngineFailedError(f"http-{upstream.status}")
            try:
                first = await upstream.content.readany()
            except (TimeoutError, aiohttp.ClientError) as err:
                raise _EngineFailedError(type(err).__name__) from err
            if not first:
                raise _EngineFailedError("empty-answer")
            received = time.perf_counter()
            extra = {"x-gpumix-pool": decision.pool, "x-gpumix-pod": decision.pod}
            content_type = upstream.headers.get("Content-Type", "application/json")
            if not content_type.startswith("text/event-stream"):
                rest = await upstream.read()
                answer = first + rest
                out = web.Response(
                    body=answer,
                    status=upstream.status,
                    headers={**extra, "Content-Type": content_type},
                )
                if upstream.status == 200:
                    self._completed(rid, usage_tokens(answer))
                self.metrics.added_ttft.observe(sent - start)
                return self._count(out)
            response = web.StreamResponse(
                status=upstream.status,
                headers={**extra, "Content-Type": content_type, "Cache-Control": "no-cache"},
            )
            await response.prepare(request)
            if progress is not None and upstream.status == 200:
                self.metrics.added_ttft.observe(sent - start + time.perf_counter() - received)
                if progress.chat and max_tokens_of(progress.body) is None:  # capped: not needed
                    progress.max_model_len = await self._max_model_len(decision.pod)
                leg = Leg(pod=decision.pod, pool=decision.pool, upstream=upstream, sent=sent)
                relay = Relay(rid=rid, progress=progress, response=response, core=core,
                              session=self.session, urls=self.urls, headers=headers)  # fmt: skip
                self.relays[rid] = relay
                try:
                    done = await relay.run(leg, first)
                finally:
                    del self.relays[rid]
                tokens = len(progress.generated_ids)
                return await self._end_stream(
                    response,
                    rid=rid,
                    pod=relay.current.pod if relay.current else decision.pod,
                    done=done,
                    tokens=tokens,
                    status="200",
                )
            await response.write(first)
            self.metrics.added_ttft.observe(sent - start + time.perf_counter() - received)
            events, done, tail = count_events(first, b"")
            recent = first[-RECENT_BYTES:]
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                    n, finished, tail = count_events(chunk, tail)
                    events += n
                    done = done or finished
                    recent = (recent + chunk)[-RECENT_BYTES:]
                    core.progress(rid, events)
            except (TimeoutError, aiohttp.ClientError) as err:
                log.warning(
                    "engine failed mid-stream",
                    extra={"request": rid, "pod": decision.pod, "error": type(err).__name__},
                )
            tokens = usage_tokens(recent) or events
            return await self._end_stream(
                response,
                rid=rid,
                pod=decision.pod,
                done=done,
                tokens=tokens,
                status=str(upstream.status),
            )
        finally:
            # Back to the pool when read to the end; otherwise (client gone, engine failed) the
            # connection closes, which is how vLLM learns to abort the request.
            upstream.release()

    async def _end_stream(
        self,
        response: web.StreamResponse,
        *,
        rid: str,
        pod: str,
        done: bool,
        tokens: int,
        status: str,
    ) -> web.StreamResponse:
        """Close a stream: counted when it ended with ``[DONE]``, else an error event (as vLLM's
        server ends a stream it cannot finish) and ``[DONE]``."""
        if done:
            self._completed(rid, tokens)
            self.metrics.responses.labels(status).inc()
        else:
            message = f"engine {pod} stopped before the answer ended"
            error = json.dumps(error_body(message, 502, "BadGatewayError")).encode()
            await response.write(b"data: " + error + b"\n\n" + DONE + b"\n\n")
            self.metrics.responses.labels("502").inc()
        await response.write_eof()
        return response

    def _completed(self, rid: str, output_tokens: int | None) -> None:
        core = self.core
        assert core is not None
        flight = core.ledger.get(rid)
        if flight is None or output_tokens is None:
            return
        table = core.table
        i = table.input_bucket(flight.prompt)
        j = table.output_bucket(output_tokens)
        self.metrics.completed.labels(str(table.input_edges[i]), str(table.output_edges[j])).inc()
        core.finish(rid, output_tokens)

    def _count(self, response: web.Response) -> web.Response:
        self.metrics.responses.labels(str(response.status)).inc()
        return response

    async def _max_model_len(self, pod: str) -> int | None:
        """``pod``'s context length, from its ``/v1/models``: asked until it answers, then
        kept (a pod's engine arguments never change); None while unknown."""
        known = self.max_model_lens.get(pod)
        if known is not None:
            return known
        try:
            async with self.session.get(self.urls[pod] + "/v1/models", timeout=QUICK) as answer:
                models = await answer.json() if answer.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return None
        known = max_model_len_of(models)
        if known is not None:
            self.max_model_lens[pod] = known
        return known

    async def _tokenize(self, body: dict[str, Any]) -> int:
        """The prompt's token count from an engine's ``/tokenize`` (the least busy pod: all serve
        the same model); from its bytes if none answers."""
        core = self.core
        assert core is not None
        query: dict[str, Any] = {"model": body.get("model")}
        if "messages" in body:
            query["messages"] = body["messages"]
        else:
            query["prompt"] = body.get("prompt", "")
        for pod in sorted(self.urls, key=lambda p: (core.ledger.requests(p), p))[:2]:
            try:
                async with self.session.post(
                    self.urls[pod] + "/tokenize", json=query, timeout=QUICK
                ) as answer:
                    if answer.status == 200:
                        count = (await answer.json()).get("count")
                        if isinstance(count, int):
                            return count
            except (TimeoutError, aiohttp.ClientError, ValueError):
                continue
        self.metrics.tokenize_fallbacks.inc()
        return _estimate(body)
