"""What the router reads from an OpenAI request body, and the errors it answers with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def max_tokens_of(body: Mapping[str, Any]) -> int | None:
    """The answer's length cap, in the field the request uses (chat's newer name first)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def prompt_tokens_given(body: Mapping[str, Any]) -> int | None:
    """The prompt's length when it is token IDs (one list, or a batch of lists); else None."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return sum(len(p) for p in prompt)
    return None


def error_body(message: str, code: int, kind: str, param: str | None = None) -> dict[str, Any]:
    """An error as vLLM's OpenAI server answers one."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
