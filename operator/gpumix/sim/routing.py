"""Routing requests across a service's pods.

- `MelangeRouter`: Mélange's load balancer (App. A.2). Per input bucket it keeps the running mean
  of the output lengths seen so far, uses it as the new request's output estimate to find its
  bucket, and picks a pod by weighted random choice. A pod's weight is its GPU type's weight for
  the bucket divided among the type's pods; the weights are the plan's `share` (the fraction of
  the bucket's traffic the ILP put on each type) or, as the paper words it, MaxTput per type.
  `oracle=True` uses the true output length (what a perfect output predictor would do).
- `RoundRobin` and `LeastLoaded` (fewest requests on the pod, then lowest KV usage).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Mapping, Sequence
from typing import Protocol

from gpumix.sim.engine import Engine
from gpumix.sim.request import Request

Matrix = Sequence[Sequence[float]]


class Router(Protocol):
    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        """Index of the pod that gets `r`."""
        ...

    def observe(self, r: Request) -> None:
        """A request finished (its output length is now known)."""
        ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        k = self._next % len(pods)
        self._next += 1
        return k

    def observe(self, r: Request) -> None:
        return None


class LeastLoaded:
    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        best, key = 0, (1 << 62, 2.0)
        for k, pod in enumerate(pods):
            candidate = (pod.load, pod.kv_usage)
            if candidate < key:
                best, key = k, candidate
        return best

    def observe(self, r: Request) -> None:
        return None


class MelangeRouter:
    """App. A.2: size-aware weighted random selection with output-length estimates."""

    def __init__(
        self,
        pod_types: Sequence[str],
        weights: Mapping[str, Matrix],
        input_edges: Sequence[int],
        output_edges: Sequence[int],
        *,
        prior_output: Sequence[float] | None = None,
        seed: int = 0,
        oracle: bool = False,
    ) -> None:
        """`oracle=True` routes on the request's true output length instead of the estimate
        (an upper bound on what output-length prediction could buy)."""
        self.oracle = oracle
        self.input_edges = list(input_edges)
        self.output_edges = list(output_edges)
        rows, cols = len(input_edges) - 1, len(output_edges) - 1
        per_type = {t: pod_types.count(t) for t in set(pod_types)}
        self._weights: list[list[list[float]]] = [
            [
                [(weights[t][i][j] / per_type[t]) if t in weights else 0.0 for t in pod_types]
                for j in range(cols)
            ]
            for i in range(rows)
        ]
        self._cum: dict[tuple[int, int], list[float]] = {}
        mid = [(a + b) / 2 for a, b in itertools.pairwise(output_edges)]
        default = sum(mid) / len(mid)
        self._sum = [0.0] * rows
        self._count = [0] * rows
        self._prior = list(prior_output) if prior_output is not None else [default] * rows
        self._rng = random.Random(seed)
        self._n = len(pod_types)

    def bucket(self, prompt: int, output: int | None = None) -> tuple[int, int]:
        i = min(max(bisect.bisect_right(self.input_edges, prompt) - 1, 0), len(self._sum) - 1)
        if output is not None:
            est: float = output
        elif self._count[i]:
            est = self._sum[i] / self._count[i]
        else:
            est = self._prior[i]
        j = bisect.bisect_right(self.output_edges, est) - 1
        return i, min(max(j, 0), len(self.output_edges) - 2)

    def _cumulative(self, i: int, j: int) -> list[float]:
        cum = self._cum.get((i, j))
        if cum is None:
            w = self._weights[i][j]
            if sum(w) <= 0:  # the plan put no traffic here: use the row, else every pod
                w = [sum(col) for col in zip(*self._weights[i], strict=True)]
            if sum(w) <= 0:
                w = [1.0] * self._n
            cum = list(itertools.accumulate(w))
            self._cum[(i, j)] = cum
        return cum

    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        cum = self._cumulative(*self.bucket(r.prompt, r.output if self.oracle else None))
        k = bisect.bisect_right(cum, self._rng.random() * cum[-1])
        return min(k, self._n - 1)

    def observe(self, r: Request) -> None:
        i = min(max(bisect.bisect_right(self.input_edges, r.prompt) - 1, 0), len(self._sum) - 1)
        self._sum[i] += r.output
        self._count[i] += 1
