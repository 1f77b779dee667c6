"""Routing requests across a service's pods.

- `PlanRouter`: the routing core (`gpumix.route`) that the gpumix router runs, driving simulated
  pods, so a simulated plan is routed exactly as the deployed one: the plan's split per bucket,
  output lengths predicted as Mélange App. A.2 does (or known, `oracle=True`), the pod with the
  fewest tokens in flight.
- `RoundRobin` (what a plain Kubernetes Service does) and `LeastLoaded` (fewest requests on the
  pod, then lowest KV usage), for comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpumix.route import RoutingCore, RoutingTable
from gpumix.sim.engine import Engine
from gpumix.sim.request import Request


class Router(Protocol):
    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        """Index of the pod that gets `r`."""
        ...

    def observe(self, r: Request) -> None:
        """A request finished (its output length is now known)."""
        ...

    def dropped(self, r: Request) -> None:
        """A pod refused a request (it can never fit there)."""
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

    def dropped(self, r: Request) -> None:
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

    def dropped(self, r: Request) -> None:
        return None


class PlanRouter:
    """The routing core over simulated pods; `pool_of[k]` is the pool of `pods[k]`."""

    def __init__(
        self,
        table: RoutingTable,
        pods: Sequence[Engine],
        pool_of: Sequence[str],
        prior_output: Sequence[float],
        *,
        oracle: bool = False,
    ) -> None:
        by_pool: dict[str, list[str]] = {}
        for pod, pool in zip(pods, pool_of, strict=True):
            by_pool.setdefault(pool, []).append(pod.name)
        self.core = RoutingCore(table, by_pool, prior_output)
        self.oracle = oracle
        self._index = {pod.name: k for k, pod in enumerate(pods)}
        self._inflight: dict[int, Request] = {}

    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        # The proxy counts tokens as they stream; the simulator's requests carry the count.
        for rid, inflight in self._inflight.items():
            self.core.progress(str(rid), inflight.generated)
        decision = self.core.route(
            str(r.rid), r.prompt, predicted_output=float(r.output) if self.oracle else None
        )
        if decision is None:
            raise ValueError("the plan routes to no simulated pod")
        self._inflight[r.rid] = r
        return self._index[decision.pod]

    def observe(self, r: Request) -> None:
        self._inflight.pop(r.rid, None)
        self.core.finish(str(r.rid), r.output)

    def dropped(self, r: Request) -> None:
        self._inflight.pop(r.rid, None)
        self.core.finish(str(r.rid), None)
