"""A least-recently-used cache keyed by a digest of a text (a model's JSON), holding its values
packed.

The planner caches pure functions of large inputs: one service's instance (about 7 KB of JSON),
the whole fleet's (about 3 MB at 500 services). ``functools.lru_cache`` would keep every text as
its key; this keeps 32 bytes instead, and counts hits and misses for the benchmarks and tests.

The values are kept pickled and zlib-compressed. As objects they were most of a fleet
operator's memory: a plan's traffic split is a grid of floats per option, and at 200 services
the caches held some 5,000 one-service plans, a million lists (``bench/scale.py`` reports the
bytes kept against the same values as objects). A hit on a packed value unpacks a copy, a
few hundred microseconds against a solve or a simulation; the values are frozen models, so a
copy is as good as the original. A pass asks for the same few values many times over (its
derating rounds, the priced search's envelopes), so the ``hot`` most recently used are also
kept as objects and a hit on one unpacks nothing (at 50 services, unpacking every hit made
the pass after a plan was applied 2 s slower).
"""

from __future__ import annotations

import hashlib
import pickle
import zlib
from collections.abc import Callable
from typing import Generic, TypeVar, cast

V = TypeVar("V")

HOT = 256
"""Values kept unpacked besides, the most recently used (a few MB of plans)."""
LEVEL = 1
"""zlib's fastest level: the grids are mostly zeros, which it packs as well as the slower ones."""


def _pack(value: object) -> bytes:
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), LEVEL)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=32).digest()


class DigestCache(Generic[V]):
    """At most ``size`` values; the least recently used goes first."""

    def __init__(self, size: int, hot: int = HOT) -> None:
        self.size, self.hot = size, hot
        self.hits = 0
        self.misses = 0
        self._values: dict[bytes, bytes] = {}
        self._hot: dict[bytes, V] = {}

    def get(self, text: str, make: Callable[[], V]) -> V:
        """The value kept for ``text``, else ``make()`` (kept)."""
        key = _digest(text)
        if key in self._values:
            self.hits += 1
            return self._kept(key)
        self.misses += 1
        value = make()
        self._put(key, value)
        return value

    def peek(self, text: str) -> V | None:
        """The value kept for ``text``, else ``None`` (not counted as a hit or a miss)."""
        key = _digest(text)
        return self._kept(key) if key in self._values else None

    def put(self, text: str, value: V) -> None:
        """Keep ``value`` for ``text``, in place of any value kept for it."""
        key = _digest(text)
        self._values.pop(key, None)
        self._hot.pop(key, None)
        self._put(key, value)

    def _kept(self, key: bytes) -> V:
        self._values[key] = self._values.pop(key)
        if key in self._hot:
            value = self._hot[key] = self._hot.pop(key)
            return value
        return self._warm(key, cast(V, pickle.loads(zlib.decompress(self._values[key]))))

    def _put(self, key: bytes, value: V) -> None:
        if len(self._values) >= self.size:
            oldest = next(iter(self._values))
            del self._values[oldest]
            self._hot.pop(oldest, None)
        self._values[key] = _pack(value)
        self._warm(key, value)

    def _warm(self, key: bytes, value: V) -> V:
        if len(self._hot) >= self.hot:
            del self._hot[next(iter(self._hot))]
        self._hot[key] = value
        return value

    def packed_bytes(self) -> int:
        """What the kept values take, packed (the keys take 32 bytes each)."""
        return sum(len(v) for v in self._values.values())

    def values(self) -> list[V]:
        """Every kept value, unpacked (for measuring what packing saves)."""
        return [cast(V, pickle.loads(zlib.decompress(v))) for v in self._values.values()]

    def clear(self) -> None:
        self._values.clear()
        self._hot.clear()

    def __len__(self) -> int:
        return len(self._values)
