"""Errors raised by the planner, each carrying the data a status message needs."""

from __future__ import annotations

from gpumix.plan.instance import AllocationInstance, Bucket
from gpumix.plan.result import SolveResult


class UnservableBucketError(ValueError):
    """A bucket with traffic that no allowed GPU type can serve within the SLO.

    Raised before any model is built: the ILP would be infeasible, and a planner that
    silently dropped the bucket (or bought absurd GPU counts) would break the SLO instead.
    """

    def __init__(self, instance: AllocationInstance, bucket: Bucket) -> None:
        self.bucket = bucket
        self.label = instance.bucket_label(bucket)
        self.rate = instance.rates[bucket[0]][bucket[1]]
        self.slo_label = instance.slo_label
        within = f" within {self.slo_label}" if self.slo_label else ""
        super().__init__(
            f"bucket {self.label} ({self.rate:g} req/s) cannot be served by any allowed "
            f"GPU type{within}"
        )


class SolverError(RuntimeError):
    """The solver ended without a usable answer (time limit before any solution, or a crash).

    Distinct from infeasibility, which is a proven property of the instance and is
    reported as ``None`` rather than an exception.
    """

    def __init__(self, result: SolveResult) -> None:
        self.result = result
        super().__init__(f"{result.solver}: {result.status}: {result.message}".rstrip(": "))


class InvalidAllocationError(AssertionError):
    """The validator rejected a solver answer; this is a bug in the model, never user error."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("solver returned an invalid allocation: " + "; ".join(problems))


def check_servable(instance: AllocationInstance, allowed: list[int]) -> None:
    """Raise :class:`UnservableBucketError` for the first bucket no allowed type can take."""
    for bucket in instance.buckets_with_traffic():
        if all(instance.slice_load(k, bucket) is None for k in allowed):
            raise UnservableBucketError(instance, bucket)
