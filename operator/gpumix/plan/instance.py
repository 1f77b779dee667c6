"""Solver input: the GPU types on offer and the request-rate histogram to place on them.

The shapes follow Mélange (Griggs et al. 2024): a workload is a 2-D histogram of request
rates over (input length, output length) buckets (§5.1), and each GPU type carries its
profiled ``MaxTput(G, s, SLO)`` per bucket (§5.3). Load and slicing are §5.4.1–5.4.2.
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

Bucket = tuple[int, int]
"""(input bucket index, output bucket index)."""

NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Matrix = list[list[NonNegFloat]]


class Formulation(StrEnum):
    """Which ILP encodes the allocation problem. ``aggregated`` and ``paper`` are Mélange's
    and have the same optimum; ``routable`` restricts the split to what a router can execute."""

    AGGREGATED = "aggregated"
    """One integer per (bucket, type): how many of the bucket's slices go there (ours)."""
    PAPER = "paper"
    """One binary per (slice, type), §5.4.3 verbatim; kept as the benchmark baseline."""
    ROUTABLE = "routable"
    """One integer per (input row, type): every output bucket of a row is split alike, since
    a router sees the prompt but not how long the answer will be (:mod:`gpumix.plan.routable`)."""


def _check_rectangular(matrix: Matrix, what: str) -> Matrix:
    if not matrix or not matrix[0]:
        raise ValueError(f"{what} must have at least one input and one output bucket")
    width = len(matrix[0])
    for i, row in enumerate(matrix):
        if len(row) != width:
            raise ValueError(f"{what} row {i} has {len(row)} columns, expected {width}")
    return matrix


class GPUOption(BaseModel):
    """One GPU type (or replica configuration) the allocator may buy units of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    cost_per_hour: float = Field(gt=0, allow_inf_nan=False)
    max_tput: Matrix
    """``[input bucket][output bucket]`` MaxTput in req/s at the SLO (§5.3); 0 = cannot serve."""
    max_count: int | None = Field(default=None, ge=0)
    """Availability cap in units; ``None`` = unlimited."""
    alone_miss: list[list[Annotated[float, Field(ge=0, le=1)]]] | None = None
    """``[input bucket][output bucket]`` share of the bucket's requests that miss the SLO even
    alone on an idle unit (no capacity recovers them); ``None``: not known. Only counted under
    :attr:`AllocationInstance.alone_miss_budget`."""

    @field_validator("max_tput", "alone_miss")
    @classmethod
    def _rectangular(cls, value: Matrix | None, info: ValidationInfo) -> Matrix | None:
        return None if value is None else _check_rectangular(value, str(info.field_name))


class AllocationInstance(BaseModel):
    """Everything the ILP needs; rates already include over-provisioning (§6.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rates: Matrix
    """req/s per ``[input bucket][output bucket]``."""
    gpus: list[GPUOption] = Field(min_length=1)
    slice_factor: int = Field(default=8, ge=1)
    """Slices per bucket (§5.4.1): finer packing at the price of a bigger model."""
    input_edges: list[int] | None = None
    """Token edges of the input buckets (len = rows + 1); only used in error messages."""
    output_edges: list[int] | None = None
    slo_label: str = ""
    """Human-readable SLO, e.g. ``"TPOT 40 ms"``; only used in error messages."""
    alone_miss_budget: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    """Largest share of all requests the plan may place where they miss the SLO even alone
    (:attr:`GPUOption.alone_miss`). ``None``: no such constraint, Mélange's ILP as it is.
    Capacity cannot bring those requests back, so a plan to an attainment target must bound
    them up front."""

    @field_validator("rates")
    @classmethod
    def _rectangular(cls, value: Matrix) -> Matrix:
        return _check_rectangular(value, "rates")

    @field_validator("gpus")
    @classmethod
    def _unique_names(cls, value: list[GPUOption]) -> list[GPUOption]:
        names = [g.name for g in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"gpus names must be unique; duplicated: {', '.join(duplicates)}")
        return value

    @model_validator(mode="after")
    def _shapes_agree(self) -> AllocationInstance:
        shape = self.shape
        for k, gpu in enumerate(self.gpus):
            for field, matrix in (("max_tput", gpu.max_tput), ("alone_miss", gpu.alone_miss)):
                got = None if matrix is None else (len(matrix), len(matrix[0]))
                if got is not None and got != shape:
                    raise ValueError(
                        f"gpus[{k}].{field} ({gpu.name}) has shape {got[0]}x{got[1]}, "
                        f"but rates is {shape[0]}x{shape[1]}"
                    )
        for field, edges, size in (
            ("input_edges", self.input_edges, shape[0]),
            ("output_edges", self.output_edges, shape[1]),
        ):
            if edges is None:
                continue
            if len(edges) != size + 1:
                raise ValueError(f"{field} needs {size + 1} edges for {size} buckets")
            if any(b <= a for a, b in itertools.pairwise(edges)):
                raise ValueError(f"{field} must be strictly increasing")
        return self

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rates), len(self.rates[0])

    def gpu_index(self, name: str) -> int:
        for k, gpu in enumerate(self.gpus):
            if gpu.name == name:
                return k
        raise ValueError(f"unknown GPU type {name!r}; known: {[g.name for g in self.gpus]}")

    def buckets_with_traffic(self) -> list[Bucket]:
        """Buckets the ILP must place, in row-major order (zero-rate buckets need no GPU)."""
        return [
            (i, j) for i, row in enumerate(self.rates) for j, rate in enumerate(row) if rate > 0
        ]

    def slice_load(self, gpu: int, bucket: Bucket) -> float | None:
        """Load of one slice of ``bucket`` on GPU type ``gpu`` (§5.4.2), ``None`` if it can't.

        One slice carries ``rate / S`` req/s (§5.4.1) and its load is that rate over MaxTput;
        computed as a single division so every formulation uses bit-identical coefficients.
        """
        i, j = bucket
        tput = self.gpus[gpu].max_tput[i][j]
        if tput <= 0:
            return None
        return self.rates[i][j] / (self.slice_factor * tput)

    def alone_miss_rate(self, gpu: int, bucket: Bucket) -> float:
        """Req/s of one slice of ``bucket`` that miss the SLO even alone on type ``gpu``."""
        i, j = bucket
        miss = self.gpus[gpu].alone_miss
        return 0.0 if miss is None else self.rates[i][j] * miss[i][j] / self.slice_factor

    def bucket_label(self, bucket: Bucket) -> str:
        """``"input 1000–2000 / output 250–500 tokens"`` when edges are known, else indices."""
        i, j = bucket
        if self.input_edges is None or self.output_edges is None:
            return f"({i}, {j})"
        lo_in, hi_in = self.input_edges[i], self.input_edges[i + 1]
        lo_out, hi_out = self.output_edges[j], self.output_edges[j + 1]
        return f"input {lo_in}–{hi_in} / output {lo_out}–{hi_out} tokens"

    def usable(self, gpu: int) -> bool:
        """A type capped at zero units can never take load, so it is not an allowed choice."""
        return self.gpus[gpu].max_count != 0
