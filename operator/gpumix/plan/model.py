"""Parts shared by the ILP formulations: the count vector ``B``, objective (1), capacity (3),
and, opt-in, a budget for requests that miss the SLO even alone.

Mélange §5.4.3. The formulations differ only in how they encode "every slice goes to
exactly one type" (constraint (2)); see :mod:`gpumix.plan.aggregated` and
:mod:`gpumix.plan.paper`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulp

from gpumix.plan.instance import AllocationInstance, Bucket

LOAD_TOL = 1e-9
"""Slack on constraint (3). Slice loads are floats; without it a sum that is exactly an
integer in real arithmetic but rounds one ulp above it could force one GPU too many."""

Placement = dict[tuple[Bucket, int], list[pulp.LpVariable]]
"""(bucket, gpu index) -> variables whose sum is the number of the bucket's slices on it."""


@dataclass(frozen=True)
class Model:
    """A built PuLP problem plus the handles needed to read an allocation back."""

    problem: pulp.LpProblem
    counts: dict[int, pulp.LpVariable]
    placement: Placement


def add_counts(
    problem: pulp.LpProblem, instance: AllocationInstance, allowed: list[int]
) -> dict[int, pulp.LpVariable]:
    """``B_j ∈ Z≥0`` (5), bounded by the type's availability cap when it has one."""
    return {
        k: problem.add_variable(
            f"count_t{k}", lowBound=0, upBound=instance.gpus[k].max_count, cat=pulp.LpInteger
        )
        for k in allowed
    }


def add_cost_objective(
    problem: pulp.LpProblem, instance: AllocationInstance, counts: dict[int, pulp.LpVariable]
) -> None:
    """Objective (1): minimise ``Σ_j B_j c_j``."""
    problem += pulp.lpSum(instance.gpus[k].cost_per_hour * var for k, var in counts.items())


def add_capacity(
    problem: pulp.LpProblem,
    instance: AllocationInstance,
    counts: dict[int, pulp.LpVariable],
    placement: Placement,
) -> None:
    """Constraint (3): the load placed on each type fits in the units bought (capacity 1 each)."""
    for k, count in counts.items():
        terms: list[pulp.LpAffineExpression] = []
        for (bucket, gpu), variables in placement.items():
            if gpu != k:
                continue
            load = instance.slice_load(k, bucket)
            assert load is not None, "placement only holds servable (bucket, type) pairs"
            terms.extend(load * var for var in variables)
        problem += pulp.lpSum(terms) - count <= LOAD_TOL, f"capacity_t{k}"


def add_alone_miss_budget(
    problem: pulp.LpProblem, instance: AllocationInstance, placement: Placement
) -> None:
    """With :attr:`AllocationInstance.alone_miss_budget` set: requests placed where they miss
    the SLO even alone stay within it (capacity cannot recover them; ours, not Mélange's)."""
    budget = instance.alone_miss_budget
    if budget is None:
        return
    total = sum(map(sum, instance.rates))
    terms = [
        instance.alone_miss_rate(k, bucket) * var
        for (bucket, k), variables in placement.items()
        for var in variables
    ]
    problem += pulp.lpSum(terms) <= (budget + LOAD_TOL) * total, "alone_miss_budget"


def servable_types(instance: AllocationInstance, bucket: Bucket, allowed: list[int]) -> list[int]:
    """Types that may take slices of ``bucket``: MaxTput 0 means the SLO can't be met there."""
    return [k for k in allowed if instance.slice_load(k, bucket) is not None]


def build_model(
    name: str,
    instance: AllocationInstance,
    allowed: list[int],
    add_placement: Callable[[pulp.LpProblem, AllocationInstance, list[int]], Placement],
) -> Model:
    """Objective (1), counts (5) and capacity (3) around a formulation's encoding of (2)."""
    problem = pulp.LpProblem(name, pulp.LpMinimize)
    counts = add_counts(problem, instance, allowed)
    add_cost_objective(problem, instance, counts)
    placement = add_placement(problem, instance, allowed)
    add_capacity(problem, instance, counts, placement)
    add_alone_miss_budget(problem, instance, placement)
    return Model(problem=problem, counts=counts, placement=placement)
