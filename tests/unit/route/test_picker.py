"""The endpoint picker's own decisions, without Envoy: the fallback list, what it reads from
ext_proc messages, and whole ext_proc exchanges driven message by message (no engine is called:
the prompts are token IDs). Through a real Envoy: test_picker_envoy.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2

from gpumix.route.core import PoolFullError, RoutingCore
from gpumix.route.picker import (
    DESTINATION,
    HealthService,
    Picker,
    destination,
    echo_body,
    endpoint,
    pick,
    served_endpoint,
    subset_hint,
)
from gpumix.route.table import RoutingTable

TABLE = RoutingTable.model_validate({
    "inputEdges": [1, 64, 4096],
    "outputEdges": [1, 4096],
    "pools": {
        "small": {"replicas": 2, "share": [[0.75], [0.0]]},
        "large": {"replicas": 1, "share": [[0.25], [1.0]]},
    },
})  # fmt: skip
ENGINES = {
    "small": {"s0": "http://10.0.0.1:8000", "s1": "http://10.0.0.2:8000"},
    "large": {"l0": "http://10.0.0.3:8000"},
}
_Mode = processing_mode_pb2.ProcessingMode


def _core(max_inflight: int | None = None) -> RoutingCore:
    pods = {pool: list(names) for pool, names in ENGINES.items()}
    return RoutingCore(TABLE, pods, [8.0, 8.0], max_inflight=max_inflight)


def test_the_fallback_list_is_the_routers_retry_order_and_the_request_stays_on_the_first() -> None:
    core = _core()
    picks = pick(core, "r", 10, None, attempts=3)
    assert [(d.pool, d.pod) for d in picks] == [("small", "s0"), ("small", "s1"), ("large", "l0")]
    flight = core.ledger.get("r")
    assert flight is not None and (flight.pool, flight.pod) == ("small", "s0")
    assert core.ledger.requests("s1") == core.ledger.requests("l0") == 0
    assert [d.pod for d in pick(core, "r2", 10, None, attempts=2)] == ["s1", "s0"]


def test_ineligible_pods_are_never_picked_and_none_left_is_an_empty_list() -> None:
    core = _core()
    assert [d.pod for d in pick(core, "r", 10, None, attempts=3, ineligible=["s0", "l0"])] == ["s1"]
    assert pick(core, "q", 10, None, attempts=3, ineligible=["s0", "s1", "l0"]) == []
    assert core.ledger.get("q") is None


def test_a_full_pool_sheds_as_the_router_does() -> None:
    core = _core(max_inflight=1)
    pick(core, "a", 500, None, attempts=3)
    with pytest.raises(PoolFullError):
        pick(core, "b", 500, None, attempts=3)


def test_endpoints_are_written_ip_port() -> None:
    assert endpoint("http://10.0.0.1:8000") == "10.0.0.1:8000"
    assert endpoint("http://[fd00::1]:8000/") == "[fd00::1]:8000"


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(values)
    return s


def test_the_subset_hint_is_read_as_a_list_or_a_comma_separated_string() -> None:
    assert subset_hint(pb.ProcessingRequest()) is None
    for value in (["10.0.0.1:8000", "10.0.0.2:8000"], "10.0.0.1:8000, 10.0.0.2:8000"):
        request = pb.ProcessingRequest()
        hint = _struct({"x-gateway-destination-endpoint-subset": value})
        request.metadata_context.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
        assert subset_hint(request) == ["10.0.0.1:8000", "10.0.0.2:8000"]


def test_the_served_endpoint_comes_from_the_protocols_metadata_else_envoys_attribute() -> None:
    request = pb.ProcessingRequest()
    assert served_endpoint(request) is None
    request.attributes["envoy.filters.http.ext_proc"].CopyFrom(
        _struct({"upstream.address": "10.0.0.2:8000"})
    )
    assert served_endpoint(request) == "10.0.0.2:8000"
    request.metadata_context.filter_metadata["envoy.lb"].CopyFrom(
        _struct({"x-gateway-destination-endpoint-served": "10.0.0.3:8000"})
    )
    assert served_endpoint(request) == "10.0.0.3:8000"


def test_the_destination_header_and_metadata_carry_the_same_list_and_overwrite() -> None:
    for answer, common in (
        (destination(["a:1", "b:2"], in_body=False), "request_headers"),
        (destination(["a:1", "b:2"], in_body=True), "request_body"),
    ):
        (option,) = getattr(answer, common).response.header_mutation.set_headers
        assert (option.header.key, option.header.raw_value) == (DESTINATION, b"a:1,b:2")
        assert option.append_action == base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
        lb = answer.dynamic_metadata.fields["envoy.lb"].struct_value
        assert lb.fields[DESTINATION].string_value == "a:1,b:2"


def test_a_body_is_sent_back_in_chunks_with_end_of_stream_on_the_last() -> None:
    body = bytes(range(256)) * 600  # 150 KiB: three chunks
    answers = echo_body(body, eos=True, request=True)
    parts = [a.request_body.response.body_mutation.streamed_response for a in answers]
    assert b"".join(p.body for p in parts) == body
    assert [p.end_of_stream for p in parts] == [False, False, True]
    (empty,) = echo_body(b"", eos=False, request=False)
    assert empty.response_body.response.body_mutation.streamed_response.body == b""


# ---- whole exchanges --------------------------------------------------------------------------


def _picker(max_inflight: int | None = None) -> Picker:
    picker = Picker(max_inflight=max_inflight)
    picker.set_table(TABLE)
    picker.set_engines(ENGINES)
    return picker


def _headers(pairs: dict[str, str], *, eos: bool = False) -> Any:
    return pb.HttpHeaders(
        headers=base_pb2.HeaderMap(
            headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
        ),
        end_of_stream=eos,
    )


def _request(prompt: int, mode: int = _Mode.FULL_DUPLEX_STREAMED) -> list[Any]:
    body = json.dumps({"model": "m", "prompt": list(range(prompt)), "max_tokens": 4}).encode()
    config = pb.ProtocolConfiguration(request_body_mode=mode, response_body_mode=mode)
    return [
        pb.ProcessingRequest(
            request_headers=_headers({":method": "POST", ":path": "/v1/completions"}),
            protocol_config=config,
        ),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body[:20])),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body[20:], end_of_stream=True)),
    ]


def _sse_answer(served: str) -> list[Any]:
    events = (
        b"".join(b'data: {"choices":[{"text":"w"}]}\n\n' for _ in range(3)) + b"data: [DONE]\n\n"
    )
    headers = pb.ProcessingRequest(
        response_headers=_headers({":status": "200", "content-type": "text/event-stream"})
    )
    headers.attributes["envoy.filters.http.ext_proc"].CopyFrom(
        _struct({"upstream.address": served})
    )
    return [
        headers,
        pb.ProcessingRequest(response_body=pb.HttpBody(body=events[:40])),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=events[40:], end_of_stream=True)),
    ]


async def _exchange(picker: Picker, messages: list[Any]) -> list[Any]:
    async def feed() -> AsyncIterator[Any]:
        for m in messages:
            yield m

    return [answer async for answer in picker.process(feed())]


def _metric(picker: Picker, name: str, labels: dict[str, str] | None = None) -> float:
    value = picker.metrics.registry.get_sample_value(name, labels or {})
    return value or 0.0


def test_a_duplex_exchange_routes_follows_the_fallback_taken_and_ends_in_the_histogram() -> None:
    picker = _picker()
    answers = asyncio.run(_exchange(picker, _request(10) + _sse_answer("10.0.0.2:8000")))
    kinds = [a.WhichOneof("response") for a in answers]
    # Nothing until the body is whole; then the destination, the body, and one answer per
    # response message (the body sent back, as FULL_DUPLEX_STREAMED needs).
    assert (
        kinds == ["request_headers", "request_body"] + ["response_headers"] + ["response_body"] * 2
    )
    mutation = answers[0].request_headers.response.header_mutation.set_headers
    assert mutation[0].header.raw_value == b"10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000"
    sent = answers[1].request_body.response.body_mutation.streamed_response
    assert json.loads(sent.body)["prompt"] == list(range(10)) and sent.end_of_stream
    served = {
        h.header.key: h.header.raw_value
        for h in answers[2].response_headers.response.header_mutation.set_headers
    }
    assert served == {"x-gpumix-pool": b"small", "x-gpumix-pod": b"s1"}  # the fallback
    assert _metric(picker, "gpumix_router_retries_total", {"reason": "fallback"}) == 1
    completed = {"input_from": "1", "output_from": "1"}
    assert _metric(picker, "gpumix_router_completed_requests_total", completed) == 1
    assert picker.core is not None and len(picker.core.ledger) == 0


def test_a_buffered_exchange_puts_the_destination_on_the_body_answer() -> None:
    picker = _picker()
    answers = asyncio.run(_exchange(picker, _request(100, _Mode.BUFFERED)))
    kinds = [a.WhichOneof("response") for a in answers]
    assert kinds == ["request_headers", "request_body", "request_body"]
    (option,) = answers[2].request_body.response.header_mutation.set_headers
    assert option.header.raw_value == b"10.0.0.3:8000,10.0.0.1:8000,10.0.0.2:8000"


def test_an_aborted_exchange_leaves_the_ledger() -> None:
    picker = _picker()
    asyncio.run(_exchange(picker, _request(10)))  # the stream ends with no answer
    assert picker.core is not None and len(picker.core.ledger) == 0
    assert _metric(picker, "gpumix_router_completed_requests_total",
                   {"input_from": "1", "output_from": "1"}) == 0  # fmt: skip


def test_no_plan_answers_503_and_a_full_pool_429() -> None:
    (answer,) = asyncio.run(_exchange(Picker(), _request(10)))
    assert answer.immediate_response.status.code == 503
    picker = _picker(max_inflight=1)

    async def two_at_once() -> list[Any]:
        first = picker.process(_aiter(_request(500)))
        held = [a async for a in _take(first, 2)]  # in flight: the stream stays open
        return held + await _exchange(picker, _request(500))

    *_, shed = asyncio.run(two_at_once())
    assert shed.immediate_response.status.code == 429
    assert _metric(picker, "gpumix_router_shed_requests_total", {"pool": "large"}) == 1


async def _aiter(messages: list[Any]) -> AsyncIterator[Any]:
    for m in messages:
        yield m
    await asyncio.Event().wait()  # Envoy keeps the stream open while the request runs


async def _take(answers: AsyncIterator[Any], n: int) -> AsyncIterator[Any]:
    for _ in range(n):
        yield await anext(answers)


def test_grpc_health_follows_readiness_under_the_protocols_service_names() -> None:
    picker = Picker()
    health = HealthService(picker)

    def check(service: str) -> int:
        request = health_pb2.HealthCheckRequest(service=service)
        return asyncio.run(health.Check(request, None)).status  # type: ignore[arg-type]

    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    assert check("liveness") == serving
    assert check("readiness") == check("envoy.service.ext_proc.v3.ExternalProcessor") == not_serving
    picker.set_table(TABLE)
    picker.set_engines(ENGINES)
    assert check("readiness") == check("") == serving
