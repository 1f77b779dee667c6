"""The pure half of recompute migration (gpumix.route.continuation): what can be continued
exactly, and how."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpumix.route.continuation import (
    Progress,
    continuation_body,
    first_leg_event,
    for_client,
    max_model_len_of,
    observe,
    parse_event,
    refusal,
    request_with_token_ids,
    spans_stop,
    with_token_ids,
)

STREAM = {"model": "m", "prompt": [5, 6, 7], "max_tokens": 10, "stream": True}


@pytest.mark.parametrize(
    ("extra", "chat", "reason"),
    [
        ({}, False, None),
        ({"stream": False}, False, "not-streamed"),
        ({"n": 2}, False, "n"),
        ({"best_of": 3}, False, "n"),
        ({"seed": 1}, False, "seed"),
        ({"logprobs": 2}, False, "logprobs"),
        ({"logprobs": 0}, False, None),
        ({"top_logprobs": 5}, True, "logprobs"),
        ({"echo": True}, False, "echo"),
        ({"suffix": "x"}, False, "suffix"),
        ({"tools": [{"type": "function"}]}, True, "tools"),
        ({"response_format": {"type": "json_object"}}, True, "structured-output"),
        ({"response_format": {"type": "text"}}, True, None),
        ({"guided_json": {}}, False, "structured-output"),
        ({"presence_penalty": 0.5}, False, "penalties"),
        ({"frequency_penalty": 0.0}, False, None),
        ({"repetition_penalty": 1.2}, False, None),  # counts prompt and output alike
        ({"max_tokens": None}, True, None),  # its cap comes with its pod: Progress.refusal
        ({"max_tokens": None, "max_completion_tokens": 9}, True, None),
        ({"prompt": ["a", "b"]}, False, "batch-prompt"),
        ({"prompt": "some text"}, False, None),
    ],
)
def test_what_cannot_be_continued_exactly_is_refused(
    extra: dict[str, Any], chat: bool, reason: str | None
) -> None:
    assert refusal({**STREAM, **extra}, chat) == reason


@pytest.mark.parametrize(
    ("text", "stops", "spans"),
    [
        (" w1 w2", ["w3 w4"], False),
        (" w1 w2", ["w2 w3"], True),
        (" w1 w2", [" w2 w3"], True),
        (" w1 w", ["w9"], True),
        (" w1 w", [], False),
        (" w1 w2", ["x1", "w5 w6"], False),
    ],
)
def test_a_stop_string_that_may_span_the_boundary_is_seen(
    text: str, stops: list[str], spans: bool
) -> None:
    assert spans_stop(text, stops) is spans


def progress(**body: Any) -> Progress:
    p = Progress(chat=False, body={**STREAM, **body}, client_ids=False, include_usage=True)
    p.prompt_ids, p.generated_ids = [5, 6, 7], [40, 41, 42, 43]
    p.head = {"id": "cmpl-a", "object": "text_completion", "created": 1, "model": "m"}
    return p


def test_the_continuation_asks_for_what_is_left_from_token_ids() -> None:
    body = continuation_body(
        progress(min_tokens=6, temperature=0.0, stop=["x"], echo=False, user="u", messages=[])
    )
    assert body["prompt"] == [5, 6, 7, 40, 41, 42, 43]
    assert body["max_tokens"] == 6 and body["min_tokens"] == 2
    assert body["temperature"] == 0.0 and body["stop"] == ["x"] and body["user"] == "u"
    assert body["return_token_ids"] is True and body["stream_options"] == {"include_usage": True}
    assert "messages" not in body and "echo" not in body


@pytest.mark.parametrize(
    ("chat", "cap", "max_model_len", "remaining", "reason"),
    [
        (False, {}, None, 16 - 4, None),  # vLLM's completions default
        (False, {"max_tokens": 4}, None, 0, "finishing"),
        (True, {"max_completion_tokens": 9}, None, 9 - 4, None),
        (True, {}, 100, 100 - 3 - 4, None),  # vLLM's chat default: the rest of the context
        (True, {}, 7, 0, "finishing"),
        (True, {}, None, None, "no-max-tokens"),  # the first pod's context is unknown
    ],
)
def test_what_is_left_is_the_first_pods_cap_less_what_was_generated(
    chat: bool, cap: dict[str, int], max_model_len: int | None, remaining: int | None,
    reason: str | None,
) -> None:  # fmt: skip
    p = progress(**{"max_tokens": None, **cap})
    p.chat, p.max_model_len = chat, max_model_len
    assert (p.remaining(), p.refusal()) == (remaining, reason)
    if reason is None:
        assert continuation_body(p)["max_tokens"] == remaining


def test_a_chat_without_a_cap_continues_with_the_rest_of_the_context() -> None:
    p = progress(max_tokens=None, messages=[{"role": "user", "content": "hi"}])
    p.chat, p.max_model_len = True, 4096
    body = continuation_body(p)
    assert body["prompt"] == [5, 6, 7, 40, 41, 42, 43]
    assert len(body["prompt"]) + body["max_tokens"] == 4096  # what the first pod would stop at


def test_a_stream_is_continued_only_once_it_has_its_ids_and_not_inside_a_stop_string() -> None:
    p = progress(stop=["w2 w3"])
    p.prompt_ids = []
    assert p.refusal() == "no-token-ids"
    p.prompt_ids, p.text = [5, 6, 7], " w1 w2"
    assert p.refusal() == "stop-string-boundary"


@pytest.mark.parametrize(
    ("models", "length"),
    [
        ({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]},
         4096),
        ({"data": [{"id": "lora", "root": "/a"}, {"id": "m", "max_model_len": 2048}]}, 2048),
        ({"data": [{"id": "m", "object": "model"}]}, None),  # an engine that does not say
        ({"data": [{"id": "m", "max_model_len": None}]}, None),
        ({"data": "x"}, None),
        (None, None),
    ],
)  # fmt: skip
def test_the_context_length_is_read_from_the_model_cards(models: Any, length: int | None) -> None:
    assert max_model_len_of(models) == length


def test_the_first_leg_asks_for_ids_and_usage_and_keeps_the_clients_options() -> None:
    body = with_token_ids({**STREAM, "stream_options": {"continuous_usage_stats": False}})
    assert body["return_token_ids"] is True
    assert body["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}


def test_usage_of_a_continued_answer_counts_every_leg_and_the_clients_prompt() -> None:
    p = progress()
    p.prior = 4
    usage = {"prompt_tokens": 7, "completion_tokens": 6, "total_tokens": 13}
    shown = for_client(p, {"id": "cmpl-b", "choices": [], "usage": usage}, first_leg=False)
    totals = {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
    assert shown == {**p.head, "choices": [], "usage": totals}
    p.include_usage = False
    assert for_client(p, {"id": "cmpl-b", "choices": [], "usage": usage}, False) is None


def test_a_chat_continuation_is_shown_as_chat_deltas_under_the_clients_id() -> None:
    p = progress()
    p.chat = True
    p.head = {"id": "chatcmpl-a", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    event = {"id": "cmpl-b", "object": "text_completion", "created": 2, "model": "m",
             "choices": [{"index": 0, "text": " w9", "token_ids": [9], "finish_reason": None,
                          "prompt_token_ids": [5, 6, 7, 40]}]}  # fmt: skip
    assert for_client(p, event, first_leg=False) == {
        **p.head,
        "choices": [{"index": 0, "delta": {"content": " w9"}, "logprobs": None,
                     "finish_reason": None}],
    }  # fmt: skip


def _completion(k: int, text: str, ids: list[int], **more: Any) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None,
              "stop_reason": None, "token_ids": ids, "prompt_token_ids": None}  # fmt: skip
    choice.update(more)
    return {"id": "cmpl-a", "object": "text_completion", "created": 1, "model": "m",
            "choices": [choice], "usage": None}  # fmt: skip


def _chat(k: int, text: str, ids: list[int], **more: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None,
              "token_ids": ids}  # fmt: skip
    choice.update(more)
    return {"id": "chatcmpl-a", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [choice], "usage": None, "prompt_token_ids": None}  # fmt: skip


def _answer(chat: bool) -> list[dict[str, Any]]:
    """A vLLM stream with ``return_token_ids`` and usage: first chunk with the prompt's IDs, text
    that JSON escapes, several IDs in one chunk, an empty finish, the usage chunk."""
    make = _chat if chat else _completion
    first = make(0, "" if chat else " He", [] if chat else [9])
    if chat:
        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        first["prompt_token_ids"] = [5, 6, 7]
    else:
        first["choices"][0]["prompt_token_ids"] = [5, 6, 7]
    usage = {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    head = {k: first[k] for k in ("id", "object", "created", "model")}
    return [
        first,
        make(1, ' "quoted" \\ é', [10]),
        make(2, "\n\u2028 ok", [11, 12, 13]),
        make(3, "", [], finish_reason="length"),
        {**head, "choices": [], "usage": usage},
    ]


def _sse(obj: dict[str, Any], spaced: bool) -> bytes:
    text = json.dumps(obj) if spaced else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return b"data: " + text.encode() + b"\n\n"


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("client_ids", [False, True], ids=["no-ids", "ids"])
@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "usage"])
@pytest.mark.parametrize("stop", [None, ["ok!", "e"]], ids=["no-stop", "stop"])
@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "spaced"])
def test_first_leg_events_edited_as_bytes_are_what_the_full_parse_gives(
    chat: bool, client_ids: bool, include_usage: bool, stop: list[str] | None, spaced: bool
) -> None:
    body = {**STREAM, "stop": stop}
    full, edited = (Progress(chat=chat, body=body, client_ids=client_ids,
                             include_usage=include_usage) for _ in range(2))  # fmt: skip
    for k, obj in enumerate(_answer(chat)):
        event = _sse(obj, spaced)
        parsed = parse_event(event)
        assert parsed is not None
        observe(full, parsed, True)
        expected = for_client(full, parsed, True)
        fast = first_leg_event(edited, event) if k else None
        if fast is None:  # the first event, and the usage chunk, are parsed in full
            observe(edited, parsed, True)
            shown = for_client(edited, parsed, True)
        else:
            shown = parse_event(fast)
        assert shown == expected
        assert (fast is None) == (k in (0, 4))  # the bytes edited for every chunk of text
        assert fast is None or fast.startswith(b"data: ")
    assert edited.generated_ids == full.generated_ids == [9, 10, 11, 12, 13][chat:]
    assert edited.prompt_ids == full.prompt_ids == [5, 6, 7]
    assert edited.text == full.text
    assert edited.text == ("\u2028 ok"[-3:] if stop else "")


def test_events_the_bytes_cannot_be_edited_safely_get_the_full_parse() -> None:
    p = Progress(chat=False, body=STREAM, client_ids=False, include_usage=True)
    p.head = {"id": "cmpl-a"}
    first_member = b'data: {"token_ids":[1],"choices":[{"index":0,"text":"x"}]}\n\n'
    prompt = b'data: {"id":"a","choices":[{"index":0,"text":"x","prompt_token_ids":[1]}]}\n\n'
    usage = b'data: {"id":"a","choices":[{"index":0,"text":"x"}],"usage":{"total_tokens":1}}\n\n'
    error = b'data: {"error":{"message":"boom","code":500}}\n\n'
    for event in (first_member, prompt, usage, error):
        assert first_leg_event(p, event) is None
    assert p.generated_ids == []
    quoted = b'data: {"id":"a","choices":[{"index":0,"text":"\\"usage\\":{","token_ids":[4]}]}\n\n'
    assert (
        first_leg_event(p, quoted)
        == b'data: {"id":"a","choices":[{"index":0,"text":"\\"usage\\":{"}]}\n\n'
    )
    assert p.generated_ids == [4]


def test_the_first_leg_request_gets_its_fields_without_being_encoded_again() -> None:
    raw = b'{"model": "m", "prompt": [1, 2], "stream": true}\n'
    out = request_with_token_ids(raw, json.loads(raw))
    assert out.startswith(b'{"model": "m", "prompt": [1, 2], "stream": true,')
    assert json.loads(out) == with_token_ids(json.loads(raw))
    for raw in (b'{"stream": true, "stream_options": {"a": 1}}',
                b'{"stream": true, "return_token_ids": false}',
                '{"stream": true}'.encode("utf-16-be")):  # fmt: skip
        assert json.loads(request_with_token_ids(raw, json.loads(raw))) == with_token_ids(
            json.loads(raw)
        )
