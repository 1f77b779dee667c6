"""A split a router can execute: one integer per (input row, type).

Mélange's ILP (§5.4.3) may send a bucket's traffic to one type and the next output bucket of the
same prompt length to another. A router cannot follow that: it sees the prompt, not the length
of the answer, and App. A.2's running-mean estimate puts every request of an input row in the same
output bucket, so types planned for the row's long answers get almost none of the traffic and
the others overload. Here ``y[i, k] ∈ {0..S}`` slices of *every* bucket of input row ``i`` go to
type ``k``; a type that cannot serve one of the row's buckets within the SLO takes none of the
row. Capacity (3) and the objective (1) are Mélange's, and a row with a bucket too small for (3)
to see gets ``y[i, k] ≤ S·B_k`` (:func:`gpumix.plan.model.add_bought_only`); the optimum
can only be dearer than the aggregated one (a restriction of it), and what it plans is what
:mod:`gpumix.route` does.
"""

from __future__ import annotations

import pulp

from gpumix.plan.instance import AllocationInstance, Bucket
from gpumix.plan.model import Model, Placement, build_model, servable_types

Row = tuple[list[Bucket], list[int]]
"""An input row's buckets with traffic, and the types that may take the row."""


def build(instance: AllocationInstance, allowed: list[int]) -> Model:
    """Build the routable ILP over the GPU types ``allowed`` (indices into ``instance.gpus``)."""
    return build_model("gpumix_routable", instance, allowed, _add_row_slices)


def rows(instance: AllocationInstance, allowed: list[int]) -> dict[int, Row]:
    """Each input row with traffic: its buckets with traffic, and the ``allowed`` types that
    serve every one of them (the only types that may take the row)."""
    buckets_of: dict[int, list[Bucket]] = {}
    for bucket in instance.buckets_with_traffic():
        buckets_of.setdefault(bucket[0], []).append(bucket)
    out: dict[int, Row] = {}
    for i, buckets in buckets_of.items():
        types = set(allowed)
        for bucket in buckets:
            types &= set(servable_types(instance, bucket, allowed))
        out[i] = (buckets, sorted(types))
    return out


def _add_row_slices(
    problem: pulp.LpProblem, instance: AllocationInstance, allowed: list[int]
) -> Placement:
    """``y[i, k]`` per input row, with ``Σ_k y[i, k] = S``; every bucket of the row places
    ``y[i, k]`` slices on ``k``."""
    placement: Placement = {}
    for i, (buckets, types) in rows(instance, allowed).items():
        row = []
        for k in types:
            var = problem.add_variable(
                f"y_i{i}_t{k}", lowBound=0, upBound=instance.slice_factor, cat=pulp.LpInteger
            )
            row.append(var)
            for bucket in buckets:
                placement[bucket, k] = [var]
        problem += pulp.lpSum(row) == instance.slice_factor, f"assign_i{i}"
    return placement
