"""The routing core: one decision procedure for the simulator and the proxy.

For each request: classify it (input bucket from its prompt length; output bucket from the
predicted output length, :mod:`gpumix.route.predict`), pick the pool the plan's split sends that
bucket to next (:mod:`gpumix.route.split`), then the pod of that pool with the fewest tokens in
flight (ties: fewer requests, then name), and record it in the ledger. Pure and synchronous: the
caller does the I/O and reports tokens and completions back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from gpumix.route.ledger import Flight, Ledger
from gpumix.route.predict import OutputPredictor, histogram_prior
from gpumix.route.split import BucketSplit
from gpumix.route.table import RoutingTable


class Decision(NamedTuple):
    pool: str
    pod: str
    input_bucket: int
    output_bucket: int
    predicted_output: float


class PoolFullError(Exception):
    """Every ready pod of the pool the plan picked holds its queue limit of requests: the caller
    sheds the request (HTTP 429) rather than queue it where the plan has no room."""

    def __init__(self, pool: str) -> None:
        super().__init__(f"every pod of pool {pool!r} is at its in-flight limit")
        self.pool = pool


class RoutingCore:
    def __init__(
        self,
        table: RoutingTable,
        pods: Mapping[str, Sequence[str]],
        prior_output: Sequence[float],
        max_inflight: int | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        """``pods``: the ready pods of each pool, by name; ``prior_output``: the predictor's
        estimate per input bucket before any request has finished; ``max_inflight``: requests a
        pod may hold before its pool sheds (None: no limit, as the simulator runs); ``ledger``:
        where tokens in flight are counted (default: as :meth:`progress` reports them)."""
        if len(prior_output) != table.shape[0]:
            raise ValueError("prior_output needs one value per input bucket")
        self.predictor = OutputPredictor(prior_output)
        self.ledger = ledger if ledger is not None else Ledger()
        self.max_inflight = max_inflight
        self.table = table
        self.pods: dict[str, list[str]] = {}
        self.split = BucketSplit(table, [])
        self.update(table, pods)

    def update(self, table: RoutingTable, pods: Mapping[str, Sequence[str]]) -> None:
        """A new plan or new pods: later requests follow them; requests in flight stay where
        they are, and what the predictor learned is kept while the input grid is unchanged
        (on a new one it starts again from the table's histogram)."""
        if table.input_edges != self.table.input_edges:
            self.predictor = OutputPredictor(histogram_prior(table.output_edges, table.traffic()))
        self.table = table
        self.pods = {p: sorted(names) for p, names in pods.items() if names and p in table.pools}
        self.split = BucketSplit(table, self.pods)

    def route(
        self,
        rid: str,
        prompt_tokens: int,
        max_tokens: int | None = None,
        *,
        predicted_output: float | None = None,
        exclude: Collection[str] = (),
    ) -> Decision | None:
        """Where ``rid`` goes (and it is now in flight there); None when no pod is ready.
        ``predicted_output`` overrides the prediction (the simulator's oracle router).

        ``exclude``: pods that already failed this request before answering (the proxy's
        retry). The first pool's other pods come first, then the other pools in the order of the
        bucket's split; a retry is not counted in the split again and never sheds. Raises
        :class:`PoolFullError` when every pod of the planned pool is at ``max_inflight``."""
        i = self.table.input_bucket(prompt_tokens)
        if predicted_output is None:
            predicted_output = self.predictor.predict(i, max_tokens)
        j = self.table.output_bucket(predicted_output)
        ledger = self.ledger
        retried = ledger.get(rid) if exclude else None
        pool = retried.pool if retried is not None else self.split.next_pool(i, j)
        if pool is None:
            return None
        candidates = [p for p in self.pods.get(pool, ()) if p not in exclude]
        if not exclude and self.max_inflight is not None:
            candidates = [p for p in candidates if ledger.requests(p) < self.max_inflight]
            if not candidates:
                raise PoolFullError(pool)
        if not candidates:
            pool, candidates = self._fallback(i, j, exclude)
            if not candidates:
                return None
        pod = min(candidates, key=lambda p: (ledger.tokens(p), ledger.requests(p), p))
        if retried is not None:
            ledger.remove(rid)
        flight = Flight(
            pod=pod,
            prompt=prompt_tokens,
            predicted_output=predicted_output,
            pool=pool,
            max_tokens=max_tokens,
        )
        ledger.add(rid, flight)
        return Decision(pool, pod, i, j, predicted_output)

    def _fallback(self, i: int, j: int, exclude: Collection[str]) -> tuple[str, list[str]]:
        """The first pool, by the bucket's planned share, with a pod not in ``exclude``."""
        pools = self.split.pools
        weights = self.split.weights(i, j)
        for _, pool in sorted(zip(weights, pools, strict=True), key=lambda wp: -wp[0]):
            left = [p for p in self.pods[pool] if p not in exclude]
            if left:
                return pool, left
        return "", []

    def progress(self, rid: str, generated: int) -> None:
        self.ledger.progress(rid, generated)

    def finish(self, rid: str, output_tokens: int | None) -> None:
        """``rid`` is done: it leaves the ledger, and a completed answer (``output_tokens``;
        None for a failed or aborted one) teaches the predictor."""
        flight = self.ledger.remove(rid)
        if flight is not None and output_tokens is not None:
            self.predictor.observe(self.table.input_bucket(flight.prompt), output_tokens)
