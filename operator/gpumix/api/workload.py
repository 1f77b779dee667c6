"""A service's workload: Mélange §5.1's request rate × 2-D histogram of (input, output) lengths."""

from typing import Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gpumix.api.buckets import BucketGrid, Row, check_matrix, matrix_field, matrix_shape_cel

MAX_REQUEST_RATE = 1e6
"""Requests per second a workload may ask for. A million is far beyond any one service; at 1e100
req/s the joint ILP (which plans every service together) failed for all of them, and already at
1e4 req/s a single service takes every GPU of the test cluster."""


class Workload(BucketGrid):
    """What the service must carry. `Static` plans for the numbers here; `Prometheus` observes
    the rate and histogram from vLLM's metrics (`gpumix run --prometheus-url`) and, when nothing
    can be observed, plans with the last good observation (at most an hour old), else with these
    numbers — never with zero."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *matrix_shape_cel("histogram"),
                {
                    "rule": "self.histogram.exists(row, row.exists(v, v > 0.0))",
                    "message": "histogram: at least one bucket must have a positive share",
                    "fieldPath": ".histogram",
                },
            ]
        }
    )

    source: Literal["Static", "Prometheus"] = "Static"
    request_rate: float = Field(
        ge=0,
        le=MAX_REQUEST_RATE,
        description="Requests per second across all buckets (at most a million).",
    )
    histogram: list[Row] = matrix_field(
        "One row per input bucket, one column per output bucket: non-negative shares of "
        "requests, normalised by their sum (counts or fractions both work)."
    )
    over_provision: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description="Head-room as a fraction of the rate (0.1 plans for 10% more), Mélange §6.3.",
    )
    slice_factor: int = Field(
        default=8, ge=1, le=64, description="Slices per bucket in the ILP, Mélange §5.4.1."
    )

    @model_validator(mode="after")
    def _check_histogram(self) -> Self:
        check_matrix("histogram", self.histogram, self.shape)
        if sum(map(sum, self.histogram)) <= 0:
            raise ValueError("histogram: at least one bucket must have a positive share")
        return self

    def bucket_rates(self) -> list[list[float]]:
        """Req/s per bucket that the allocator must place, over-provisioning included."""
        # Shares first (each <= 1): rate / total overflows when every positive cell is denormal.
        total = sum(map(sum, self.histogram))
        rate = self.request_rate * (1.0 + self.over_provision)
        return [[rate * (w / total) for w in row] for row in self.histogram]
