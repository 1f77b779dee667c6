"""Recompute migration on stock vLLM: a stream is continued on another pod from token IDs.

To move request r from pod A to pod B, the router sends B the prompt's token IDs followed by the
IDs A generated, as a token-ID prompt on ``/v1/completions``, with the length cap reduced by what
was generated, and relays B's tokens to the client as if A had sent them (same response id,
format and usage). vLLM's ``return_token_ids`` gives the IDs, so text is never re-tokenized (a
re-tokenized continuation can differ from what was generated; see vllm-ascend #13466). Prefix
caching aside, B re-prefills prompt + generated: MELL §V's token (computation-bound) migration.

What cannot be continued exactly is refused, with a reason the router counts: sampling state
that a new request does not carry (a ``seed``, whose generator restarts; presence/frequency
penalties, which count only generated tokens, and these would become prompt tokens), outputs
shaped by state outside the tokens (``n > 1``, ``best_of``, logprobs, ``echo``, ``suffix``, tool
calls, structured output), and a stop string that may span the boundary (the text so far ends
with a proper prefix of one: B would not see the first part).

The continuation's cap is what is left of the first leg's: the request's own, else vLLM's default
(``get_max_tokens`` in ``vllm/entrypoints/utils.py``): 16 tokens for completions; for chat the
rest of the context, ``max_model_len`` − prompt, with the first pod's ``max_model_len`` (from its
``/v1/models``; a chat whose first pod's is unknown is refused, ``no-max-tokens``). A generation
config's ``max_new_tokens`` (the model's ``generation_config.json``, or the server's
``--override-generation-config``, which also caps every request) lowers vLLM's default; no
endpoint shows it, so the router assumes there is none (else a moved answer runs past it). All
pure: the proxy does the I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from gpumix.route.body import max_tokens_of

CARRIED = (
    "model",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "length_penalty",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "user",
    "priority",
)
"""Request fields that mean the same on the continuation (vLLM's ``SamplingParams`` fields the
OpenAI server reads from a completions and a chat request alike)."""

REFUSED_FIELDS = {
    "seed": "seed",
    "logprobs": "logprobs",
    "top_logprobs": "logprobs",
    "prompt_logprobs": "logprobs",
    "echo": "echo",
    "suffix": "suffix",
    "tools": "tools",
    "functions": "tools",
    "response_format": "structured-output",
    "guided_json": "structured-output",
    "guided_regex": "structured-output",
    "guided_choice": "structured-output",
    "guided_grammar": "structured-output",
    "structured_outputs": "structured-output",
}
"""Fields that, set to anything but their neutral value, make an exact continuation impossible,
with the reason counted."""


def _neutral(key: str, value: Any) -> bool:
    if value is None or value is False:
        return True
    if key == "response_format":
        return isinstance(value, Mapping) and value.get("type") == "text"
    return key in ("logprobs", "top_logprobs", "prompt_logprobs") and value == 0


def refusal(body: Mapping[str, Any], chat: bool) -> str | None:
    """Why this request cannot be continued exactly on another pod (a short reason, a metric
    label), or None when it can."""
    if not body.get("stream"):
        return "not-streamed"
    if body.get("n", 1) not in (1, None) or body.get("best_of", 1) not in (1, None):
        return "n"
    for key, reason in REFUSED_FIELDS.items():
        if key in body and not _neutral(key, body[key]):
            return reason
    if any(body.get(k) not in (None, 0, 0.0) for k in ("presence_penalty", "frequency_penalty")):
        return "penalties"
    prompt = body.get("prompt")
    if not chat and isinstance(prompt, list) and not all(map(isinstance, prompt, repeat(int))):
        return "batch-prompt"
    return None


def stop_strings(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list):
        return tuple(s for s in stop if isinstance(s, str) and s)
    return ()


def spans_stop(text: str, stops: Sequence[str]) -> bool:
    """Whether ``text`` ends with a proper prefix of a stop string: a stop string could then
    span the boundary, and the continuation would not see its first part."""
    return any(text.endswith(stop[:k]) for stop in stops for k in range(1, len(stop)))


DEFAULT_COMPLETION_TOKENS = 16
"""vLLM's completions default for ``max_tokens``."""


def max_model_len_of(models: Any) -> int | None:
    """The context length in an engine's ``/v1/models`` answer: vLLM puts its ``max_model_len``
    on each base model's card (a LoRA adapter's card has none)."""
    cards = models.get("data") if isinstance(models, Mapping) else None
    for card in cards if isinstance(cards, list) else ():
        length = card.get("max_model_len") if isinstance(card, Mapping) else None
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            return length
    return None


@dataclass
class Progress:
    """What the router has relayed of one stream: enough to continue it anywhere."""

    chat: bool
    body: Mapping[str, Any]
    client_ids: bool
    """The client asked for ``return_token_ids`` itself: keep the IDs in what it sees."""
    include_usage: bool
    prompt_ids: list[int] = field(default_factory=list)
    generated_ids: list[int] = field(default_factory=list)
    text: str = ""
    """The end of the answer's text: as long as the longest stop string (all that
    :func:`spans_stop` reads), empty without stop strings."""
    head: dict[str, Any] = field(default_factory=dict)
    """``id``, ``object``, ``created`` and ``model`` of the client's stream."""
    prior: int = 0
    """Tokens generated by earlier legs (before the current pod)."""
    max_model_len: int | None = None
    """The first pod's context length: a chat without a cap may take the rest of it."""
    stops: tuple[str, ...] = field(init=False)
    """The request's stop strings."""

    def __post_init__(self) -> None:
        self.stops = stop_strings(self.body)

    def add_text(self, piece: str) -> None:
        keep = max((len(s) for s in self.stops), default=0)
        if keep:
            self.text = (self.text + piece)[-keep:]

    def remaining(self) -> int | None:
        """Tokens the answer may still take: its cap as the first pod set it (the request's,
        else vLLM's default: 16 for completions, ``max_model_len`` − prompt for chat) less
        what was generated; None for a chat whose first pod's length is unknown."""
        cap = max_tokens_of(self.body)
        if cap is None and not self.chat:
            cap = DEFAULT_COMPLETION_TOKENS
        elif cap is None:
            if self.max_model_len is None:
                return None
            cap = self.max_model_len - len(self.prompt_ids)
        return cap - len(self.generated_ids)

    def refusal(self) -> str | None:
        """Why what was relayed so far cannot be continued exactly, or None."""
        if not self.prompt_ids:
            return "no-token-ids"
        remaining = self.remaining()
        if remaining is None:
            return "no-max-tokens"
        if remaining <= 0:
            return "finishing"
        if spans_stop(self.text, self.stops):
            return "stop-string-boundary"
        return None


def continuation_body(progress: Progress) -> dict[str, Any]:
    """The ``/v1/completions`` request that continues the stream on another pod (one that
    :meth:`Progress.refusal` lets go), its cap explicit."""
    remaining = progress.remaining()
    assert remaining is not None, "Progress.refusal refuses a stream of unknown length"
    body = {k: progress.body[k] for k in CARRIED if k in progress.body}
    body.update(
        prompt=progress.prompt_ids + progress.generated_ids,
        max_tokens=remaining,
        stream=True,
        stream_options={"include_usage": True},
        return_token_ids=True,
    )
    min_tokens = progress.body.get("min_tokens")
    if isinstance(min_tokens, int) and min_tokens > 0:
        body["min_tokens"] = max(0, min_tokens - len(progress.generated_ids))
    return body


def with_token_ids(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client's request as sent to the first pod: with ``return_token_ids`` (so the router
    learns the IDs) and usage in the stream (so it counts tokens exactly)."""
    options = dict(body.get("stream_options") or {})
    options["include_usage"] = True
    return {**body, "return_token_ids": True, "stream_options": options}


def request_with_token_ids(raw: bytes, body: Mapping[str, Any]) -> bytes:
    """:func:`with_token_ids` of the request ``raw`` (whose JSON is ``body``), as bytes: the two
    fields appended to the client's own bytes when it sent neither (the request is not encoded
    again), else the whole body re-encoded."""
    if body and "return_token_ids" not in body and "stream_options" not in body:
        head = raw.strip()
        if head.startswith(b"{") and head.endswith(b"}"):  # UTF-8 (JSON may come in UTF-16)
            return head[:-1] + b',"return_token_ids":true,"stream_options":{"include_usage":true}}'
    return json.dumps(with_token_ids(body)).encode()


def parse_event(event: bytes) -> dict[str, Any] | None:
    """The JSON object of one SSE ``data:`` event, or None (``[DONE]``, comments, non-JSON)."""
    text = event.strip()
    if not text.startswith(b"data:"):
        return None
    payload = text[len(b"data:") :].strip()
    if not payload.startswith(b"{"):
        return None
    try:
        obj = json.loads(payload)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def encode(obj: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def observe(progress: Progress, obj: Mapping[str, Any], first_leg: bool) -> None:
    """Learn from one event of the current leg: the stream's head and prompt IDs (first leg),
    the generated IDs and text."""
    if first_leg and not progress.head:
        progress.head = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
    if first_leg and isinstance(obj.get("prompt_token_ids"), list):
        progress.prompt_ids = list(obj["prompt_token_ids"])  # chat: at the top level
    for choice in obj.get("choices") or ():
        if first_leg and isinstance(choice.get("prompt_token_ids"), list):
            progress.prompt_ids = list(choice["prompt_token_ids"])
        if isinstance(choice.get("token_ids"), list):
            progress.generated_ids += choice["token_ids"]
        # The first leg of a chat streams deltas; every continuation is a completion.
        chat_delta = progress.chat and first_leg
        piece = (choice.get("delta") or {}).get("content") if chat_delta else choice.get("text")
        if isinstance(piece, str):
            progress.add_text(piece)


def for_client(
    progress: Progress, obj: Mapping[str, Any], first_leg: bool
) -> dict[str, Any] | None:
    """One event as the client sees it, or None to drop it: IDs only if it asked for them, a
    usage chunk only if it asked and with every leg counted; a continuation's chunks under the
    client's id and, for chat, in chat's delta format."""
    usage = obj.get("usage")
    if not obj.get("choices") and isinstance(usage, Mapping):
        if not progress.include_usage:
            return None
        if first_leg:
            return dict(obj)
        completion = progress.prior + int(usage.get("completion_tokens") or 0)
        prompt = len(progress.prompt_ids)
        totals = {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}  # fmt: skip
        return {**progress.head, "choices": [], "usage": totals}
    out = dict(obj) if first_leg else {**obj, **progress.head}
    keep_prompt = first_leg and progress.client_ids  # a continuation's prompt is not the client's
    if not keep_prompt:
        out.pop("prompt_token_ids", None)
    choices = []
    for choice in obj.get("choices") or ():
        c = {k: v for k, v in choice.items() if keep_prompt or k != "prompt_token_ids"}
        if progress.chat and not first_leg:
            text = c.get("text") or ""
            c = {
                "index": c.get("index", 0),
                "delta": {"content": text} if text else {},
                "logprobs": None,
                "finish_reason": c.get("finish_reason"),
                **({"token_ids": c["token_ids"]} if "token_ids" in c else {}),
            }
        if not progress.client_ids:
            c.pop("token_ids", None)
        choices.append(c)
    out["choices"] = choices
    if out.get("usage", 0) is None:
        del out["usage"]
    return out


_FIELD = re.compile(rb'"(token_ids|prompt_token_ids|usage)"\s*:\s*(null|\[[0-9,\s]*\])?')
"""A member the router edits in an event, with its value when that is ``null`` or a list of
integers. A match is a member's name: ``"name"`` followed by ``:`` is a key, never inside a
string (where every quote is escaped)."""
_SPACE = b" \t\r\n"
_TEXT = {
    False: re.compile(rb'"text"\s*:\s*"((?:[^"\\]|\\.)*)"'),
    True: re.compile(rb'"content"\s*:\s*"((?:[^"\\]|\\.)*)"'),
}
"""A completion's ``text`` and a chat delta's ``content``: the piece of text an event carries."""


def first_leg_event(progress: Progress, event: bytes) -> bytes | None:
    """:func:`observe` and :func:`for_client` of one event of the first leg after its first,
    done on the event's bytes: the generated IDs learnt from its ``token_ids``, then the IDs
    (unless the client asked for them) and a null ``usage`` cut out; the rest is the engine's
    own bytes. None when the event needs the full parse: a usage chunk, prompt IDs, a member
    the edits cannot cut (the first of its object), or no ``choices``."""
    if b'"choices"' not in event:
        return None
    cuts: list[tuple[int, int]] = []
    ids: list[int] = []
    for m in _FIELD.finditer(event):
        name, value = m.groups()
        start = m.start()
        while start > 0 and event[start - 1] in _SPACE:
            start -= 1
        if value is None or start == 0 or event[start - 1] != 0x2C:  # a comma: "…,name:value"
            return None
        start -= 1
        if name == b"token_ids":
            if value != b"null":
                ids += [int(t) for t in value[1:-1].split(b",") if t.strip()]
            if progress.client_ids:
                continue
        elif value != b"null":
            return None  # a usage object or the prompt's IDs: observed by the full parse
        elif name == b"prompt_token_ids" and progress.client_ids:
            continue
        cuts.append((start, m.end()))
    progress.generated_ids += ids
    if progress.stops:
        text = _TEXT[progress.chat].search(event)
        if text is not None:
            progress.add_text(json.loads(b'"' + text.group(1) + b'"'))
    if not cuts:
        return event
    parts, pos = [], 0
    for start, end in cuts:
        parts.append(event[pos:start])
        pos = end
    parts.append(event[pos:])
    return b"".join(parts)
