"""Routing requests across a service's pods.

- `PlanRouter`: the routing core (`gpumix.route`) that the gpumix router runs, driving simulated
  pods, so a simulated plan is routed exactly as the deployed one: the plan's split per bucket,
  output lengths predicted as Mélange App. A.2 does (or known, `oracle=True`), the pod with the
  fewest tokens in flight.
- `RoundRobin` (what a plain Kubernetes Service does) and `LeastLoaded` (fewest requests on the
  pod, then lowest KV usage), for comparison.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from gpumix.route import RoutingCore, RoutingTable
from gpumix.route.ledger import Ledger
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


class PodLedger(Ledger):
    """The routing core's ledger over simulated pods. The proxy reports each request's tokens as
    they stream; here a pod's tokens in flight are its requests' prompts (added and removed as
    the core routes and finishes them) plus what the pod generated, less what its requests that
    left had generated. Equal to reporting every request's count before each routing decision,
    without the walk over every request in flight on every arrival (about a third of a
    simulation's time at a hundred requests in flight)."""

    def __init__(self, pods: Sequence[Engine]) -> None:
        super().__init__()
        self._pods = {pod.name: pod for pod in pods}
        self._gone: defaultdict[str, int] = defaultdict(int)

    def tokens(self, pod: str) -> int:
        return super().tokens(pod) + self._pods[pod].generation_tokens - self._gone[pod]

    def left(self, rid: str, generated: int) -> None:
        """``rid`` leaves its pod having generated ``generated`` tokens there (before
        :meth:`remove`)."""
        flight = self.get(rid)
        if flight is not None:
            self._gone[flight.pod] += generated


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
        self.ledger = PodLedger(pods)
        self.core = RoutingCore(table, by_pool, prior_output, ledger=self.ledger)
        self.oracle = oracle
        self._index = {pod.name: k for k, pod in enumerate(pods)}

    def route(self, r: Request, pods: Sequence[Engine], now: float) -> int:
        decision = self.core.route(
            str(r.rid), r.prompt, predicted_output=float(r.output) if self.oracle else None
        )
        if decision is None:
            raise ValueError("the plan routes to no simulated pod")
        return self._index[decision.pod]

    def observe(self, r: Request) -> None:
        self.ledger.left(str(r.rid), r.generated)
        self.core.finish(str(r.rid), r.output)

    def dropped(self, r: Request) -> None:
        self.ledger.left(str(r.rid), r.generated)
        self.core.finish(str(r.rid), None)
