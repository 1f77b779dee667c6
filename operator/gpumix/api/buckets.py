"""Request-size buckets: the (input, output) token-length grid of Mélange §5.4.1."""

import itertools
from typing import Annotated, Any, Self

from pydantic import Field, JsonValue, model_validator

from gpumix.api.base import ApiModel

MAX_EDGES = 33
"""Edges per axis (32 buckets): bounds the CEL cost of the shape rules and the size of the ILP."""

Edge = Annotated[int, Field(ge=0)]

_EDGES_CEL: list[JsonValue] = [
    {
        "rule": "self.isSorted() && self.all(x, size(self.filter(y, y == x)) == 1)",
        "message": "edges must be strictly increasing",
    }
]


def _edges_field(axis: str) -> Any:
    return Field(
        min_length=2,
        max_length=MAX_EDGES,
        description=f"{axis}-length bucket boundaries in tokens, strictly increasing.",
        json_schema_extra={"x-kubernetes-validations": _EDGES_CEL},
    )


class BucketGrid(ApiModel):
    """Bucket (i, j) holds requests with input length in [inputEdges[i], inputEdges[i+1]) and
    output length in [outputEdges[j], outputEdges[j+1])."""

    input_edges: list[Edge] = _edges_field("Input")
    output_edges: list[Edge] = _edges_field("Output")

    @model_validator(mode="after")
    def _check_edges(self) -> Self:
        for name, edges in (("inputEdges", self.input_edges), ("outputEdges", self.output_edges)):
            if edges[0] < 0 or any(a >= b for a, b in itertools.pairwise(edges)):
                raise ValueError(f"{name}: must be >= 0 and strictly increasing, got {edges}")
        return self

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.input_edges) - 1, len(self.output_edges) - 1

    def bucket_label(self, i: int, j: int) -> str:
        """Human-readable token ranges of bucket (i, j), used in every error about a bucket."""
        ie, oe = self.input_edges, self.output_edges
        return f"input {ie[i]}–{ie[i + 1]} / output {oe[j]}–{oe[j + 1]} tokens"


def check_matrix(name: str, matrix: list[list[float]], shape: tuple[int, int]) -> None:
    """Raise a ValueError naming `name` when `matrix` is not `shape` or has negative entries."""
    rows, cols = shape
    if len(matrix) != rows:
        raise ValueError(f"{name}: has {len(matrix)} rows but inputEdges define {rows} buckets")
    for i, row in enumerate(matrix):
        if len(row) != cols:
            raise ValueError(
                f"{name}[{i}]: has {len(row)} columns but outputEdges define {cols} buckets"
            )
        if any(v < 0 for v in row):
            raise ValueError(f"{name}[{i}]: values must be >= 0, got {row}")


def matrix_shape_cel(field: str) -> list[JsonValue]:
    """CEL rules that make the apiserver reject `field` when its shape does not match the edges."""
    return [
        {
            "rule": f"size(self.{field}) == size(self.inputEdges) - 1",
            "message": f"{field} must have one row per input bucket (size(inputEdges) - 1 rows)",
            "fieldPath": f".{field}",
        },
        {
            "rule": f"self.{field}.all(row, size(row) == size(self.outputEdges) - 1)",
            "message": (
                f"every row of {field} must have one value per output bucket "
                "(size(outputEdges) - 1 columns)"
            ),
            "fieldPath": f".{field}",
        },
    ]


MAX_CELL = 1e12
"""Largest value of a per-bucket matrix (a request count, a share, a MaxTput in req/s): far above
any real one, and low enough that sums and products of a whole grid stay finite."""

Row = Annotated[list[Annotated[float, Field(ge=0, le=MAX_CELL)]], Field(max_length=MAX_EDGES - 1)]
"""One row of a per-bucket matrix: a non-negative value per output bucket."""


def matrix_field(description: str) -> Any:
    return Field(min_length=1, max_length=MAX_EDGES - 1, description=description)
