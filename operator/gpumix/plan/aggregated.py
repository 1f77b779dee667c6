"""Our default formulation: one integer per (bucket, type) instead of one binary per slice.

Why it has the same optimum as §5.4.3: the ``S`` slices of a bucket are identical (same rate
``r/S``, same load on every type, §5.4.1–5.4.2), so a paper assignment ``A`` matters only
through ``n[b, j] = Σ_{s ∈ b} A[s, j]``. Constraint (2) summed over a bucket's slices gives
``Σ_j n[b, j] = S``; capacity (3), the objective (1) and the rows keeping slices on bought
types (:func:`gpumix.plan.model.add_bought_only`) depend on ``A`` only through ``n``.
Conversely any integer ``n`` with ``Σ_j n[b, j] = S`` expands to a valid ``A`` (first
``n[b, 1]`` slices to type 1, the next ``n[b, 2]`` to type 2, ...). The two feasible sets
therefore project onto the same set of count vectors ``B``, hence the same optimal cost.

The difference is size and symmetry: ``S·|types|`` binaries per bucket become ``|types|``
integers, and the ``S!``-fold permutations of identical slices that branch-and-bound would
otherwise explore disappear.
"""

from __future__ import annotations

import pulp

from gpumix.plan.instance import AllocationInstance
from gpumix.plan.model import Model, Placement, build_model, servable_types


def build(instance: AllocationInstance, allowed: list[int]) -> Model:
    """Build the aggregated ILP over the GPU types ``allowed`` (indices into ``instance.gpus``)."""
    return build_model("gpumix_aggregated", instance, allowed, _add_slice_counts)


def _add_slice_counts(
    problem: pulp.LpProblem, instance: AllocationInstance, allowed: list[int]
) -> Placement:
    """``n[b, j] ∈ {0..S}`` and the aggregated form of (2): ``Σ_j n[b, j] = S``, in slice
    counts of the bucket (§5.4.1), never rates, so a 1e-8 req/s bucket is as well
    conditioned as a 100 req/s one."""
    placement: Placement = {}
    for bucket in instance.buckets_with_traffic():
        i, j = bucket
        row = []
        for k in servable_types(instance, bucket, allowed):
            var = problem.add_variable(
                f"n_i{i}_o{j}_t{k}", lowBound=0, upBound=instance.slice_factor, cat=pulp.LpInteger
            )
            placement[bucket, k] = [var]
            row.append(var)
        problem += pulp.lpSum(row) == instance.slice_factor, f"assign_i{i}_o{j}"
    return placement
