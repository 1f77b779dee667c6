"""The pure half of recompute migration (gpumix.route.continuation): what can be continued
exactly, and how."""

from __future__ import annotations

from typing import Any

import pytest

from gpumix.route.continuation import (
    Progress,
    continuation_body,
    for_client,
    refusal,
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
        ({"max_tokens": None}, True, "no-max-tokens"),
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
