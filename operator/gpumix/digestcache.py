"""A least-recently-used cache keyed by a digest of a text (a model's JSON).

The planner caches pure functions of large inputs: one service's instance (about 7 KB of JSON),
the whole fleet's (about 3 MB at 500 services). ``functools.lru_cache`` would keep every text as
its key; this keeps 32 bytes instead, and counts hits and misses for the benchmarks and tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class DigestCache(Generic[V]):
    """At most ``size`` values; the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._values: dict[bytes, V] = {}

    def get(self, text: str, make: Callable[[], V]) -> V:
        """The value kept for ``text``, else ``make()`` (kept)."""
        key = hashlib.blake2b(text.encode(), digest_size=32).digest()
        if key in self._values:
            self.hits += 1
            value = self._values[key] = self._values.pop(key)
            return value
        self.misses += 1
        value = make()
        if len(self._values) >= self.size:
            del self._values[next(iter(self._values))]
        self._values[key] = value
        return value

    def clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)
