"""Parts shared by the ILP formulations: the count vector ``B``, objective (1), capacity (3),
slices only on bought types, and, opt-in, a budget for requests that miss the SLO even alone.

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
integer in real arithmetic but rounds one ulp above it could force one GPU too many. None in a
model with :func:`add_bought_only` rows: beside them, a right-hand side of 1e-9 made HiGHS
1.16's presolve return dearer plans as optimal (20.20 $/h instead of 20.11 for the paper
formulation of a 1e-7 req/s bucket beside a 100 req/s one, found by ``test_plan_tiny_rates``),
and the solver's feasibility tolerance (1e-7) absorbs one ulp as well."""

MIN_CAPACITY_LOAD = 2e-6
"""Least load a slice counts for in capacity (3): twice HiGHS's integrality tolerance (1e-6).
A smaller coefficient next to whole-unit ones is ambiguous to HiGHS's MIP presolve: with a
slice of load 4e-7 beside a bucket of load 40, HiGHS 1.16 reports a plan 10% dearer than one it
had in reach as optimal (reproduced for every load from 5e-9 to 1e-6, never at 1.5e-6 or above).
Profiled workloads have slices of 3e-6 and more: none of ``bench/attainment.py``'s 2616 slice
loads is rounded up (by this or by :data:`MIN_CAPACITY_RATIO`)."""
MIN_CAPACITY_RATIO = 1e-6
"""... and at least this share of the largest slice load in the same row: HiGHS's tolerances
grow with the row, and a load a few ten-millionths of a unit above 2000 or 8000 whole units is
as ambiguous to its presolve as 4e-7 above 40 (in a sweep of 1458 such two-type instances,
plans up to 10% dearer were reported optimal at 1e-7 and 3e-7 of the row, none at 1e-6)."""


def capacity_loads(loads: list[float]) -> list[float]:
    """Slice loads (§5.4.2) as a capacity row counts them: rounded up to
    :data:`MIN_CAPACITY_LOAD` and to :data:`MIN_CAPACITY_RATIO` of the row's largest. Rounding
    up never under-provisions; it adds a few millionths of a unit per tiny bucket at most."""
    floor = max(MIN_CAPACITY_LOAD, MIN_CAPACITY_RATIO * max(loads, default=0.0))
    return [max(load, floor) for load in loads]


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


Loads = dict[tuple[Bucket, int], float]
"""(bucket, gpu index) -> a slice's load as capacity (3) counts it."""


def counted_loads(instance: AllocationInstance, placement: Placement) -> Loads:
    """Each placed (bucket, type) pair's slice load (§5.4.2) as :func:`capacity_loads` counts
    it in its type's row."""
    out: Loads = {}
    for k in sorted({gpu for _, gpu in placement}):
        pairs = [(b, gpu) for b, gpu in placement if gpu == k]
        loads = [instance.slice_load(k, b) for b, _ in pairs]
        assert None not in loads, "placement only holds servable (bucket, type) pairs"
        out.update(zip(pairs, capacity_loads([x for x in loads if x is not None]), strict=True))
    return out


def unseen(instance: AllocationInstance, placement: Placement, loads: Loads) -> Placement:
    """The placement groups (one per variable group) with a slice whose load capacity (3)
    cannot see: :func:`capacity_loads` rounded it up. Keyed by the group's first pair."""
    groups: dict[tuple[str, ...], list[tuple[Bucket, int]]] = {}
    for pair, variables in placement.items():
        groups.setdefault(tuple(v.name for v in variables), []).append(pair)
    return {
        pairs[0]: placement[pairs[0]]
        for pairs in groups.values()
        if any(loads[b, k] != instance.slice_load(k, b) for b, k in pairs)
    }


def add_capacity(
    problem: pulp.LpProblem,
    counts: dict[int, pulp.LpVariable],
    placement: Placement,
    loads: Loads,
    slack: float = LOAD_TOL,
) -> None:
    """Constraint (3): the load placed on each type fits in the units bought (capacity 1 each),
    slice loads as :func:`counted_loads` counts them, with ``slack`` (:data:`LOAD_TOL`)."""
    for k, count in counts.items():
        terms: list[pulp.LpAffineExpression] = []
        for (bucket, gpu), variables in placement.items():
            if gpu == k:
                terms.extend(loads[bucket, gpu] * var for var in variables)
        problem += pulp.lpSum(terms) - count <= slack, f"capacity_t{k}"


def add_bought_only(
    problem: pulp.LpProblem,
    instance: AllocationInstance,
    counts: dict[int, pulp.LpVariable],
    groups: Placement,
) -> None:
    """A bucket's slices go only to types with at least one unit: ``Σ_s A[s, j] ≤ S·B_j``
    (ours), one row per placement group of :func:`unseen` (the routable form's group is a
    whole input row).

    In exact arithmetic (3) implies it (a slice's load ``L > 0`` forces ``B_j ≥ L``, so
    ``B_j ≥ 1``), but not within a solver's tolerances: the §5.4.1 slices of a bucket of 1e-8
    req/s have §5.4.2 loads below HiGHS's feasibility tolerance (1e-7), or below its
    ``small_matrix_value`` (1e-9, dropped from the matrix), and (3) alone lets them sit on a
    type with no unit. This row counts slices of the bucket (coefficients 1 and ``S``), not
    rates, so it holds a 1e-8 req/s bucket as firmly as a 100 req/s one. It is added where
    :func:`capacity_loads` rounds a slice's load up (the load is too small to count as it is);
    everywhere else a slice's load exceeds the solver's integrality tolerance (1e-6) at least
    twofold and (3) already puts a whole unit under it, so the row would only change which of
    equally cheap plans the solver returns (it did, in 7 of ``bench/attainment.py``'s 42 cases).
    """
    for ((i, j), k), variables in groups.items():
        name = f"bought_{variables[0].name}" if len(variables) == 1 else f"bought_i{i}_o{j}_t{k}"
        problem += pulp.lpSum(variables) - instance.slice_factor * counts[k] <= 0, name


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
    """Objective (1), counts (5), capacity (3) and :func:`add_bought_only` around a
    formulation's encoding of (2)."""
    problem = pulp.LpProblem(name, pulp.LpMinimize)
    counts = add_counts(problem, instance, allowed)
    add_cost_objective(problem, instance, counts)
    placement = add_placement(problem, instance, allowed)
    loads = counted_loads(instance, placement)
    tiny = unseen(instance, placement, loads)
    add_capacity(problem, counts, placement, loads, slack=0.0 if tiny else LOAD_TOL)
    add_bought_only(problem, instance, counts, tiny)
    add_alone_miss_budget(problem, instance, placement)
    return Model(problem=problem, counts=counts, placement=placement)
