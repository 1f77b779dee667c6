"""The plan's traffic split, executed request by request.

Mélange App. A.2 picks a GPU type at random with the plan's weights. A random split drifts: over
a minute a pool can get noticeably more than its share, and the plan has no head-room for that.
Here each bucket keeps a count per pool and sends the next request to the pool furthest below its
share (largest deficit, as smooth weighted round-robin does). After n requests of a bucket no pool
is a whole request ahead of its share of n (the deficits sum to one, so the one picked is never
negative), and none lags it by two (a property test; ≤ 1.2 measured) — the split the ILP costed,
at any horizon.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpumix.route.table import RoutingTable


class BucketSplit:
    """Per-bucket largest-remainder apportionment over the pools that can take traffic now."""

    def __init__(self, table: RoutingTable, pools: Iterable[str]) -> None:
        available = [p for p in sorted(pools) if p in table.pools]
        self.table = table
        self._pools = available
        self._weights: dict[tuple[int, int], list[float]] = {}
        self._counts: dict[tuple[int, int], list[int]] = {}

    @property
    def pools(self) -> list[str]:
        return list(self._pools)

    def weights(self, i: int, j: int) -> list[float]:
        """The bucket's shares over the available pools; when the plan gives the bucket no
        traffic (or only to unavailable pools), the input row's, else the pools' replicas."""
        cached = self._weights.get((i, j))
        if cached is not None:
            return cached
        routes = [self.table.pools[p] for p in self._pools]
        w = [r.share[i][j] for r in routes]
        if sum(w) <= 0:
            w = [sum(r.share[i]) for r in routes]
        if sum(w) <= 0:
            w = [float(r.replicas) for r in routes]
        total = sum(w)
        w = [x / total for x in w] if total > 0 else [0.0] * len(w)
        self._weights[i, j] = w
        return w

    def next_pool(self, i: int, j: int) -> str | None:
        """The pool for the next request of bucket (i, j); None when no pool is available."""
        weights = self.weights(i, j)
        if not any(weights):
            return None
        counts = self._counts.setdefault((i, j), [0] * len(weights))
        n = sum(counts) + 1
        k = max(range(len(weights)), key=lambda p: (weights[p] * n - counts[p], weights[p]))
        counts[k] += 1
        return self._pools[k]
