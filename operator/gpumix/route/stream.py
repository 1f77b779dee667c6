"""Reading an engine's answer as it streams by: how many tokens (SSE events) went past and how
many the usage chunk says, without parsing every event (the plain relay's per-chunk cost)."""

import json

DONE = b"data: [DONE]"
EVENT = b"data:"
RECENT_BYTES = 8192
"""Bytes of a stream's end kept to read the usage chunk from."""


def count_events(chunk: bytes, tail: bytes) -> tuple[int, bool, bytes]:
    """SSE events that start in ``chunk`` (``tail``: the previous chunk's last bytes, so an
    event marker split across two chunks counts once), whether ``[DONE]`` arrived, and the new
    tail. One event is one token as vLLM streams (no speculative decoding); the usage chunk,
    when present, gives the exact count instead."""
    data = tail + chunk
    n = data.count(EVENT) - tail.count(EVENT)
    done = DONE in data and DONE not in tail
    return n - done, done, data[-(len(DONE) - 1) :]


def usage_tokens(answer: bytes) -> int | None:
    """``usage.completion_tokens`` of a JSON answer, or of the last SSE event that carries it."""
    for part in reversed(answer.split(b"\n\n")):
        text = part.strip()
        if text.startswith(EVENT):
            text = text[len(EVENT) :].strip()
        if not text.startswith(b"{") or b"completion_tokens" not in text:
            continue
        try:
            usage = json.loads(text).get("usage") or {}
        except ValueError:
            continue
        tokens = usage.get("completion_tokens")
        if isinstance(tokens, int):
            return tokens
    return None
