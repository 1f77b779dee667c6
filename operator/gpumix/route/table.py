"""The routing table: what the plan asks the router to do, as the operator publishes it.

It is the ``routing.json`` document of the ``<service>-routing`` ConfigMap
(:func:`gpumix.render.routing.routing_document`): the workload's bucket edges and, per pool with
replicas, the fraction of each (input, output) bucket's traffic the plan gives that pool
(Mélange §5.4's split, App. A.2's weights). The simulator builds the same table from a plan, so
what it predicts is what the router executes.
"""

from __future__ import annotations

import bisect

from pydantic import BaseModel, ConfigDict, Field, model_validator

Matrix = list[list[float]]


class PoolRoute(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    replicas: int = Field(ge=0)
    share: Matrix
    """Fraction of each bucket's traffic for this pool (rows: input buckets)."""
    deployment: str = ""
    gpu_type: str = Field(default="", alias="gpuType")


class RoutingTable(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    input_edges: list[int] = Field(alias="inputEdges", min_length=2)
    output_edges: list[int] = Field(alias="outputEdges", min_length=2)
    pools: dict[str, PoolRoute]
    histogram: Matrix | None = None
    """The planned workload's (input, output) histogram: the output predictor's prior."""

    @model_validator(mode="after")
    def _shapes(self) -> RoutingTable:
        rows, cols = self.shape
        for name, pool in self.pools.items():
            if len(pool.share) != rows or any(len(row) != cols for row in pool.share):
                raise ValueError(f"pools.{name}.share is not {rows}x{cols}, the bucket grid")
        hist = self.histogram
        if hist is not None and (len(hist) != rows or any(len(row) != cols for row in hist)):
            raise ValueError(f"histogram is not {rows}x{cols}, the bucket grid")
        return self

    @classmethod
    def from_plan(
        cls,
        input_edges: list[int],
        output_edges: list[int],
        shares: dict[str, Matrix],
        replicas: dict[str, int],
    ) -> RoutingTable:
        """The table of a plan's split (pools without replicas left out), as the operator's
        routing document carries it."""
        return cls(
            input_edges=input_edges,
            output_edges=output_edges,
            pools={
                name: PoolRoute(replicas=n, share=shares[name])
                for name, n in replicas.items()
                if n > 0 and name in shares
            },
        )

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.input_edges) - 1, len(self.output_edges) - 1

    def traffic(self) -> Matrix:
        """The histogram, or every bucket alike when the document has none."""
        rows, cols = self.shape
        return self.histogram or [[1.0] * cols for _ in range(rows)]

    def input_bucket(self, tokens: float) -> int:
        """The input bucket of a prompt; lengths outside the grid go to the nearest edge bucket."""
        return _bucket(self.input_edges, tokens)

    def output_bucket(self, tokens: float) -> int:
        return _bucket(self.output_edges, tokens)


def _bucket(edges: list[int], tokens: float) -> int:
    return min(max(bisect.bisect_right(edges, tokens) - 1, 0), len(edges) - 2)
