"""The endpoint picker: the routing core behind Envoy's external processing (ext_proc) protocol,
for clusters that already run a Gateway API Inference Extension gateway (GIE's endpoint picker
protocol, ``docs/proposals/004-endpoint-picker-protocol``).

Envoy opens one ext_proc stream per HTTP request. The picker reads the request body (the
protocol's ``FULL_DUPLEX_STREAMED`` mode, or ``BUFFERED``), counts the prompt's tokens as the
router does, lets the routing core pick pool and pod, and answers with the header
``x-gateway-destination-endpoint`` (and the same value as ``envoy.lb`` dynamic metadata): the
picked pod, then the pods the router would retry on, in order, so a gateway whose retry policy
walks that list recovers from a pod that refuses. The response passes through the same stream,
which is how the picker learns which pod served (the protocol's
``x-gateway-destination-endpoint-served``, or Envoy's ``upstream.address`` attribute), counts
the answer's tokens, and releases the request from the ledger when the stream ends, completed or
not, so the ledger holds what is really in flight.

**Routing only.** The gateway, not the picker, holds the client connection and relays the answer,
so a request cannot move to another pod mid-answer: there is no MELL migration on this path
(routing mode ``Router`` has it).

The picker keeps the router's state, watches, metrics and tokenizer (:class:`Picker` is a
:class:`~gpumix.route.proxy.Proxy` that answers ext_proc instead of relaying HTTP), so both
interfaces route by the same code and export the same ``gpumix_router_*`` metrics.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import grpc
from aiohttp import web
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from gpumix.route.body import max_tokens_of, prompt_tokens_given
from gpumix.route.core import Decision, PoolFullError, RoutingCore
from gpumix.route.engines import Engines
from gpumix.route.proxy import BYTES_PER_TOKEN, MAX_ATTEMPTS, Proxy
from gpumix.route.stream import RECENT_BYTES, count_events, usage_tokens

log = logging.getLogger("gpumix.route")

DESTINATION = "x-gateway-destination-endpoint"
"""Header and ``envoy.lb`` metadata key of the picked endpoints, ``ip:port[,ip:port...]``."""
SERVED = "x-gateway-destination-endpoint-served"
"""``envoy.lb`` metadata key in which the data plane reports the endpoint that answered."""
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET = "x-gateway-destination-endpoint-subset"
"""Endpoints the data plane allows for this request (absent: every pod of the pool)."""
EXT_PROC_ATTRIBUTES = "envoy.filters.http.ext_proc"
UPSTREAM_ADDRESS = "upstream.address"
"""The Envoy attribute naming the upstream that answered (``response_attributes``): what a plain
Envoy, which does not report ``x-gateway-destination-endpoint-served``, can send instead."""
BODY_CHUNK = 64 * 1024
"""Largest request-body message sent back in FULL_DUPLEX_STREAMED mode."""
HEALTH_READY = ("", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor")
"""gRPC health services that are SERVING only once the picker can route (the protocol's names);
``liveness`` is SERVING while the process answers."""

_Mode = processing_mode_pb2.ProcessingMode
_DUPLEX = _Mode.FULL_DUPLEX_STREAMED
_BUFFERED = _Mode.BUFFERED


def endpoint(url: str) -> str:
    """``ip:port`` of an engine's base URL (IPv6 stays in brackets), as the protocol writes it."""
    return urlsplit(url).netloc


def pick(
    core: RoutingCore,
    rid: str,
    prompt: int,
    max_tokens: int | None,
    *,
    attempts: int,
    ineligible: Collection[str] = (),
) -> list[Decision]:
    """The pod ``rid`` goes to, then up to ``attempts - 1`` pods to fall back on, in the order
    the router retries (the same pool first, then the bucket's other pools by share); empty
    when no pod is eligible. ``rid`` stays in flight on the first: the data plane reports the
    one that served (:meth:`Exchange.served`). Raises :class:`PoolFullError` as
    :meth:`RoutingCore.route` does."""
    first = core.route(rid, prompt, max_tokens, exclude=ineligible)
    if first is None:
        return []
    picks = [first]
    while len(picks) < attempts:
        tried = [*ineligible, *(d.pod for d in picks)]
        fallback = core.route(rid, prompt, max_tokens, exclude=tried)
        if fallback is None:
            break
        picks.append(fallback)
    if len(picks) > 1:
        core.ledger.move(rid, first.pod, first.pool)
    return picks


def subset_hint(request: Any) -> list[str] | None:
    """The endpoints the data plane restricts this request to (a list or one comma-separated
    string); None when it sets no restriction."""
    fields = request.metadata_context.filter_metadata
    if SUBSET_NAMESPACE not in fields or SUBSET not in fields[SUBSET_NAMESPACE].fields:
        return None
    value = fields[SUBSET_NAMESPACE].fields[SUBSET]
    parts = (
        [v.string_value for v in value.list_value.values]
        if value.HasField("list_value")
        else [value.string_value]
    )
    return [e.strip() for part in parts for e in part.split(",") if e.strip()]


def served_endpoint(request: Any) -> str | None:
    """Which endpoint answered: the protocol's ``envoy.lb`` metadata, else Envoy's attribute."""
    lb = request.metadata_context.filter_metadata
    if LB_NAMESPACE in lb and SERVED in lb[LB_NAMESPACE].fields:
        return str(lb[LB_NAMESPACE].fields[SERVED].string_value) or None
    attributes = request.attributes
    if EXT_PROC_ATTRIBUTES in attributes:
        value = attributes[EXT_PROC_ATTRIBUTES].fields.get(UPSTREAM_ADDRESS)
        if value is not None and value.string_value:
            return str(value.string_value)
    return None


def _header(headers: Any, name: str) -> str | None:
    for h in headers.headers:
        if h.key == name:
            return h.raw_value.decode() if h.raw_value else str(h.value)
    return None


def _set_headers(pairs: Mapping[str, str]) -> Any:
    return pb.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode()),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
            for k, v in pairs.items()
        ]
    )


def immediate(code: int, message: str, headers: Mapping[str, str] | None = None) -> Any:
    """The protocol's answer when no endpoint is picked: 503 (no ready pod) or 429 (shed)."""
    body = json.dumps({"error": {"message": message, "code": code}}).encode()
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=code),
            headers=_set_headers({"content-type": "application/json", **(headers or {})}),
            body=body,
            details=message,
        )
    )


def destination(endpoints: Iterable[str], *, in_body: bool) -> Any:
    """The picked endpoints as the header (same value as the ``envoy.lb`` metadata, as the
    protocol requires), on the request-headers answer, or on the body answer in BUFFERED mode
    (the only mode in which a body answer may still change the request's headers)."""
    value = ",".join(endpoints)
    common = pb.CommonResponse(header_mutation=_set_headers({DESTINATION: value}))
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION: value}})
    if in_body:
        return pb.ProcessingResponse(
            request_body=pb.BodyResponse(response=common), dynamic_metadata=metadata
        )
    return pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=common), dynamic_metadata=metadata
    )


def echo_body(body: bytes, *, eos: bool, request: bool) -> list[Any]:
    """A body sent back unchanged as FULL_DUPLEX_STREAMED answers (``BODY_CHUNK`` at most each),
    the last carrying ``eos``; a request body's or a response body's."""
    chunks = [body[k : k + BODY_CHUNK] for k in range(0, len(body), BODY_CHUNK)] or [b""]
    out = []
    for n, chunk in enumerate(chunks):
        last = eos and n == len(chunks) - 1
        streamed = pb.StreamedBodyResponse(body=chunk, end_of_stream=last)
        answer = pb.BodyResponse(
            response=pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=streamed))
        )
        out.append(
            pb.ProcessingResponse(request_body=answer)
            if request
            else pb.ProcessingResponse(response_body=answer)
        )
    return out


@dataclass
class Exchange:
    """One HTTP request's ext_proc stream, as far as the picker has seen it."""

    rid: str
    request_mode: int = _DUPLEX
    response_mode: int = _DUPLEX
    body: bytearray = field(default_factory=bytearray)
    picks: list[Decision] = field(default_factory=list)
    decided: bool = False
    status: str = ""
    events: int = 0
    done: bool = False
    tail: bytes = b""
    recent: bytes = b""
    streaming: bool = False
    ended: bool = False
    hint: list[str] | None = None


class Picker(Proxy):
    """The router's state (plan, engines, routing core, metrics, tokenizer) answering Envoy's
    ext_proc streams. Its HTTP app serves only ``/metrics``, ``/health`` and ``/ready``."""

    def __init__(
        self, *, max_inflight: int | None = None, registry: CollectorRegistry | None = None
    ) -> None:
        super().__init__(max_inflight=max_inflight, migration=False, registry=registry)
        self.endpoints: dict[str, tuple[str, str]] = {}
        """``ip:port`` → (pool, pod) of every ready engine pod."""

    def set_engines(self, engines: Engines) -> None:
        super().set_engines(engines)
        self.endpoints = {
            endpoint(url): (pool, pod)
            for pool, pods in engines.items()
            for pod, url in pods.items()
        }

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.readiness)
        app.router.add_get("/metrics", self.prometheus)
        app.cleanup_ctx.append(self._client)  # the tokenizer's engine connections
        return app

    # ---- ext_proc -----------------------------------------------------------------------------

    async def process(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """One ext_proc stream: answers in order; the request leaves the ledger when it ends."""
        x = Exchange(rid=f"p{next(self._ids)}")
        try:
            async for request in requests:
                for answer in await self._step(x, request):
                    yield answer
        finally:
            core = self.core
            if core is not None and core.ledger.get(x.rid) is not None:
                core.finish(x.rid, None)

    async def _step(self, x: Exchange, request: Any) -> list[Any]:
        kind = request.WhichOneof("request")
        if request.HasField("protocol_config"):
            x.request_mode = request.protocol_config.request_body_mode
            x.response_mode = request.protocol_config.response_body_mode
        if kind == "request_headers":
            return await self._request_headers(x, request)
        if kind == "request_body":
            return await self._request_body(x, request.request_body)
        if kind == "request_trailers":
            out = [] if x.decided else await self._decide(x, phase="trailers")
            return [*out, pb.ProcessingResponse(request_trailers=pb.TrailersResponse())]
        if kind == "response_headers":
            return self._response_headers(x, request)
        if kind == "response_body":
            return self._response_body(x, request.response_body)
        self._end(x)
        return [pb.ProcessingResponse(response_trailers=pb.TrailersResponse())]

    async def _request_headers(self, x: Exchange, request: Any) -> list[Any]:
        x.hint = subset_hint(request)
        headers = request.request_headers
        if headers.end_of_stream:  # no body (GET /v1/models): any pod of the plan
            return await self._decide(x, phase="headers")
        if x.request_mode == _DUPLEX:
            return []  # the answer waits for the body
        if x.request_mode == _BUFFERED:
            return [pb.ProcessingResponse(request_headers=pb.HeadersResponse())]
        # A mode that shows no whole body before the headers go: the length from its size.
        length = _header(headers.headers, "content-length")
        size = int(length) if length and length.isdigit() else 0
        return await self._decide(x, phase="headers", prompt=max(1, size // BYTES_PER_TOKEN))

    async def _request_body(self, x: Exchange, body: Any) -> list[Any]:
        eos = body.end_of_stream or body.end_of_stream_without_message
        if x.decided:  # STREAMED and the like: the body passes as it is
            return [pb.ProcessingResponse(request_body=pb.BodyResponse())]
        x.body += body.body
        if not eos:
            if x.request_mode == _DUPLEX:
                return []
            return [pb.ProcessingResponse(request_body=pb.BodyResponse())]
        return await self._decide(x, phase="body")

    async def _decide(self, x: Exchange, *, phase: str, prompt: int = 1) -> list[Any]:
        """Pick, and answer the message of ``phase`` (headers, body, trailers) as the request's
        body mode needs: the destination, then (duplex) the body sent back; or an immediate
        503/429. ``prompt``: the length when there is no body to read it from."""
        x.decided = True
        began = time.perf_counter()
        reason = self.ready()
        if reason is not None:
            return [self._immediate(503, reason)]
        raw = bytes(x.body)
        tokens, max_tokens = await self._prompt(raw) if raw else (prompt, None)
        answer = self._route(x, tokens, max_tokens)
        if answer is not None:
            return [answer]
        in_body = x.request_mode == _BUFFERED and phase == "body"
        echo = x.request_mode == _DUPLEX and phase != "headers"
        endpoints = [endpoint(self.urls[d.pod]) for d in x.picks]
        out = [destination(endpoints, in_body=in_body)]
        if echo:
            out += echo_body(raw, eos=phase == "body", request=True)
        self.metrics.added_ttft.observe(time.perf_counter() - began)
        first = x.picks[0]
        log.debug("picked", extra={"request": x.rid, "pool": first.pool, "pod": first.pod})
        return out

    async def _prompt(self, raw: bytes) -> tuple[int, int | None]:
        """The prompt's tokens and the answer's cap, as the router reads them; a body that is
        not a JSON object is routed by its size (the engine answers it with its own 400)."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return max(1, len(raw) // BYTES_PER_TOKEN), None
        given = prompt_tokens_given(body)
        if given is None:
            given = await self._tokenize(body)
        return given, max_tokens_of(body)

    def _route(self, x: Exchange, prompt: int, max_tokens: int | None) -> Any | None:
        """Fills ``x.picks``; an immediate answer when nothing can be picked."""
        core = self.core
        assert core is not None, "ready() holds a core"
        ineligible: list[str] = []
        if x.hint is not None:
            allowed = set(x.hint)
            ineligible = [pod for url, (_, pod) in self.endpoints.items() if url not in allowed]
        began = time.perf_counter()
        try:
            x.picks = pick(
                core, x.rid, prompt, max_tokens, attempts=MAX_ATTEMPTS, ineligible=ineligible
            )
        except PoolFullError as full:
            self.metrics.shed.labels(full.pool).inc()
            return self._immediate(429, str(full), {"retry-after": "1"})
        self.metrics.decision.observe(time.perf_counter() - began)
        if not x.picks:
            return self._immediate(503, "no eligible engine pod")
        return None

    def _immediate(self, code: int, message: str, headers: Mapping[str, str] | None = None) -> Any:
        self.metrics.responses.labels(str(code)).inc()
        return immediate(code, message, headers)

    def _response_headers(self, x: Exchange, request: Any) -> list[Any]:
        headers = request.response_headers
        x.status = _header(headers.headers, ":status") or ""
        x.streaming = (_header(headers.headers, "content-type") or "").startswith(
            "text/event-stream"
        )
        pool, pod = self._served(x, served_endpoint(request))
        mutation = _set_headers({"x-gpumix-pool": pool, "x-gpumix-pod": pod}) if pod else None
        answer = pb.ProcessingResponse(
            response_headers=pb.HeadersResponse(
                response=pb.CommonResponse(header_mutation=mutation)
            )
        )
        if headers.end_of_stream:
            self._end(x)
        return [answer]

    def _served(self, x: Exchange, served: str | None) -> tuple[str, str]:
        """The pool and pod that answered; the ledger follows a fallback the data plane took."""
        core = self.core
        if not x.picks or core is None:
            return "", ""
        where = self.endpoints.get(served) if served else None
        flight = core.ledger.get(x.rid)
        if where is None or flight is None:
            return x.picks[0].pool, x.picks[0].pod
        pool, pod = where
        if pod != flight.pod:
            core.ledger.move(x.rid, pod, pool)
            self.metrics.retries.labels("fallback").inc()
        return pool, pod

    def _response_body(self, x: Exchange, body: Any) -> list[Any]:
        chunk = bytes(body.body)
        eos = body.end_of_stream or body.end_of_stream_without_message
        n, finished, x.tail = count_events(chunk, x.tail)
        x.events += n
        x.done = x.done or finished
        x.recent = (x.recent + chunk)[-RECENT_BYTES:]
        core = self.core
        if core is not None and x.streaming:
            core.progress(x.rid, x.events)
        if eos:
            self._end(x)
        if x.response_mode == _DUPLEX:
            return echo_body(chunk, eos=eos, request=False)
        return [pb.ProcessingResponse(response_body=pb.BodyResponse())]

    def _end(self, x: Exchange) -> None:
        """The answer is over: a whole 200 teaches the predictor and the joint histogram."""
        if x.ended or not x.status or self.core is None or self.core.ledger.get(x.rid) is None:
            return
        x.ended = True
        self.metrics.responses.labels(x.status).inc()
        if x.status == "200" and (x.done or not x.streaming):
            self._completed(x.rid, usage_tokens(x.recent) or x.events or None)


class ExtProcService(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``envoy.service.ext_proc.v3.ExternalProcessor`` over a :class:`Picker`."""

    def __init__(self, picker: Picker) -> None:
        self.picker = picker

    async def Process(  # noqa: N802 (the gRPC method's name)
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        """An async generator itself: how grpc.aio tells a streaming handler."""
        del context
        async for answer in self.picker.process(request_iterator):
            yield answer


class HealthService(health_pb2_grpc.HealthServicer):
    """gRPC health as the protocol names it, read from the picker's state at each check."""

    def __init__(self, picker: Picker) -> None:
        self.picker = picker

    async def Check(  # noqa: N802 (the gRPC method's name)
        self,
        request: health_pb2.HealthCheckRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse
        if request.service == "liveness":
            return status(status=status.SERVING)
        if request.service not in HEALTH_READY:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        ready = self.picker.ready() is None
        return status(status=status.SERVING if ready else status.NOT_SERVING)


async def start_grpc(picker: Picker, bind: str, port: int) -> grpc.aio.Server:
    """The ext_proc and health services on one gRPC port (h2c, as gateways call it)."""
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(ExtProcService(picker), server)
    health_pb2_grpc.add_HealthServicer_to_server(HealthService(picker), server)
    server.add_insecure_port(f"{bind}:{port}")
    await server.start()
    return server
