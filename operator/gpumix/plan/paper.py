"""Mélange §5.4.3 verbatim: one binary ``A[slice, type]`` per slice, the benchmark baseline.

Kept to check (in tests) that :mod:`gpumix.plan.aggregated` reaches the same optimum and to
measure (in ``bench/solver.py``) what the aggregation buys. Slices of zero-rate buckets are
left out here too, so the comparison is not padded with trivial variables. Like every
formulation it also gets :func:`gpumix.plan.model.add_bought_only` for buckets whose load is
too small for (3) to see (``Σ_s A[s, j] ≤ S·B_j``): (3) implies it in exact arithmetic, not
within solver tolerances.
"""

from __future__ import annotations

import pulp

from gpumix.plan.instance import AllocationInstance
from gpumix.plan.model import Model, Placement, build_model, servable_types


def build(instance: AllocationInstance, allowed: list[int]) -> Model:
    """Build the per-slice ILP over the GPU types ``allowed`` (indices into ``instance.gpus``)."""
    return build_model("gpumix_paper", instance, allowed, _add_slice_assignment)


def _add_slice_assignment(
    problem: pulp.LpProblem, instance: AllocationInstance, allowed: list[int]
) -> Placement:
    """Binaries ``A[s, j]`` (4) and constraint (2): each slice goes to exactly one type."""
    placement: Placement = {}
    for bucket in instance.buckets_with_traffic():
        i, j = bucket
        types = servable_types(instance, bucket, allowed)
        for k in types:
            placement[bucket, k] = []
        for s in range(instance.slice_factor):
            row = []
            for k in types:
                var = problem.add_variable(f"a_i{i}_o{j}_s{s}_t{k}", cat=pulp.LpBinary)
                placement[bucket, k].append(var)
                row.append(var)
            problem += pulp.lpSum(row) == 1, f"assign_i{i}_o{j}_s{s}"
    return placement
