"""The routing core: one decision procedure for the simulator and the proxy.

For each request: classify it (input bucket from its prompt length; output bucket from the
predicted output length, :mod:`gpumix.route.predict`), pick the pool the plan's split sends that
bucket to next (:mod:`gpumix.route.split`), then the pod of that pool with the fewest tokens in
flight (ties: fewer requests, then name), and record it in the ledger. Pure and synchronous: the
caller does the I/O and reports tokens and completions back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


class RoutingCore:
    def __init__(
        self,
        table: RoutingTable,
        pods: Mapping[str, Sequence[str]],
        prior_output: Sequence[float],
    ) -> None:
        """``pods``: the ready pods of each pool, by name; ``prior_output``: the predictor's
        estimate per input bucket before any request has finished."""
        if len(prior_output) != table.shape[0]:
            raise ValueError("prior_output needs one value per input bucket")
        self.predictor = OutputPredictor(prior_output)
        self.ledger = Ledger()
        self.table = table
        self.pods: dict[str, list[str]] = {}
        self.split = BucketSplit(table, [])
        self.update(table, pods)

    def update(self, table: RoutingTable, pods: Mapping[str, Sequence[str]]) -> None:
        """A new plan or new pods: later requests follow them; requests in flight stay where
        they are, and what the predictor learned is kept while the input grid is unchanged
        (on a new one it starts from the output grid's midpoints)."""
        if table.input_edges != self.table.input_edges:
            rows, cols = table.shape
            uniform = [[1.0] * cols for _ in range(rows)]
            self.predictor = OutputPredictor(histogram_prior(table.output_edges, uniform))
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
    ) -> Decision | None:
        """Where ``rid`` goes (and it is now in flight there); None when no pod is ready.
        ``predicted_output`` overrides the prediction (the simulator's oracle router)."""
        i = self.table.input_bucket(prompt_tokens)
        if predicted_output is None:
            predicted_output = self.predictor.predict(i, max_tokens)
        j = self.table.output_bucket(predicted_output)
        pool = self.split.next_pool(i, j)
        if pool is None:
            return None
        ledger = self.ledger
        pod = min(self.pods[pool], key=lambda p: (ledger.tokens(p), ledger.requests(p), p))
        ledger.add(rid, Flight(pod=pod, prompt=prompt_tokens, predicted_output=predicted_output))
        return Decision(pool, pod, i, j, predicted_output)

    def progress(self, rid: str, generated: int) -> None:
        self.ledger.progress(rid, generated)

    def finish(self, rid: str, output_tokens: int | None) -> None:
        """``rid`` is done: it leaves the ledger, and a completed answer (``output_tokens``;
        None for a failed or aborted one) teaches the predictor."""
        flight = self.ledger.remove(rid)
        if flight is not None and output_tokens is not None:
            self.predictor.observe(self.table.input_bucket(flight.prompt), output_tokens)
