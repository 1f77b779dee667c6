"""Solver-independent check of an allocation against its instance (CP-SAT Primer style).

Every answer the MIP solver gives is re-checked here with plain arithmetic, so a modelling
bug or a solver tolerance surprise surfaces as a failed check rather than an SLO breach.
"""

from __future__ import annotations

import math

from gpumix.plan.instance import AllocationInstance
from gpumix.plan.result import Allocation

LOAD_CHECK_TOL = 1e-6
"""Load may exceed the count by this much per unit (and by this much with no unit): solver
tolerances are ~1e-7, and relative to the row, so 4000 units may carry a load of 4000.000001."""
INTEGRALITY_TOL = 1e-6
"""How far from an integer the MIP solvers accept a count (HiGHS's `mip_feasibility_tolerance`,
CBC's `integerTolerance`): the objective may differ from the rounded counts' cost by this much
per unit of each option's price."""
ASSIGN_REL_TOL = 1e-6
"""Share of a bucket's demand that may be missing from (or doubled on) the types with units.
Relative to that bucket's demand, so a bucket of 1e-8 req/s, whose whole load would fit inside
any absolute tolerance, is held to the same standard as one of 100 req/s."""


def validate_allocation(
    instance: AllocationInstance, allocation: Allocation, allowed: list[str] | None = None
) -> list[str]:
    """Return every violated property (empty list = valid).

    Checks: counts cover every type, are non-negative and within ``max_count``; only
    ``allowed`` types are used; shares are non-negative, whole slices (§5.4.1) and only on
    types with MaxTput > 0; each bucket with traffic is fully assigned to types with at least
    one unit, to within ``ASSIGN_REL_TOL`` of that bucket's demand, and a bucket without
    traffic to none; load per type (recomputed, §5.4.2) matches the reported load and fits in
    the units bought; requests placed where they miss even alone stay within
    ``alone_miss_budget`` when set; cost and objective equal ``Σ counts·c`` (objective (1)).
    """
    problems: list[str] = []
    names = [g.name for g in instance.gpus]
    allowed_names = set(names if allowed is None else allowed)
    rows, cols = instance.shape
    s_factor = instance.slice_factor
    for key, what in ((allocation.counts, "counts"), (allocation.share, "share")):
        if sorted(key) != sorted(names):
            problems.append(f"{what} covers {sorted(key)}, expected {sorted(names)}")
    if problems:
        return problems

    totals = [[0.0] * cols for _ in range(rows)]
    bought = [[0.0] * cols for _ in range(rows)]
    unbought: dict[tuple[int, int], list[str]] = {}
    missed = 0.0
    for k, gpu in enumerate(instance.gpus):
        count = allocation.counts[gpu.name]
        share = allocation.share[gpu.name]
        if count < 0:
            problems.append(f"{gpu.name}: negative count {count}")
        if gpu.max_count is not None and count > gpu.max_count:
            problems.append(f"{gpu.name}: {count} units exceed max_count {gpu.max_count}")
        if len(share) != rows or any(len(row) != cols for row in share):
            problems.append(f"{gpu.name}: share is not {rows}x{cols}")
            continue
        load = 0.0
        for i in range(rows):
            for j in range(cols):
                fraction = share[i][j]
                if fraction == 0:
                    continue
                totals[i][j] += fraction
                if count >= 1:
                    bought[i][j] += fraction
                else:
                    unbought.setdefault((i, j), []).append(
                        f"{gpu.name} ({count} units) holds {fraction:g}"
                    )
                where = f"{gpu.name} bucket ({i}, {j})"
                if fraction < 0:
                    problems.append(f"{where}: negative share {fraction}")
                if gpu.name not in allowed_names:
                    problems.append(f"{where}: type not allowed in this solve")
                slices = fraction * s_factor
                if not math.isclose(slices, round(slices), abs_tol=1e-9):
                    problems.append(f"{where}: share {fraction} is not whole 1/{s_factor} slices")
                slice_load = instance.slice_load(k, (i, j))
                if slice_load is None:
                    problems.append(f"{where}: traffic routed to a type with MaxTput 0")
                    continue
                load += fraction * s_factor * slice_load
                missed += fraction * s_factor * instance.alone_miss_rate(k, (i, j))
        if not math.isclose(load, allocation.load[gpu.name], rel_tol=1e-9, abs_tol=1e-9):
            problems.append(f"{gpu.name}: reported load {allocation.load[gpu.name]} != {load}")
        if count >= 0 and load > count + LOAD_CHECK_TOL * max(1, count):
            problems.append(f"{gpu.name}: load {load:.9g} exceeds {count} units")

    problems += _assignment(instance, totals, bought, unbought)

    budget = instance.alone_miss_budget
    if budget is not None:
        total = sum(map(sum, instance.rates))
        if missed > (budget + LOAD_CHECK_TOL) * total:
            problems.append(
                f"{missed:.9g} req/s placed where they miss even alone exceed the budget "
                f"{budget:g} of {total:.9g} req/s"
            )

    cost = sum(allocation.counts[g.name] * g.cost_per_hour for g in instance.gpus)
    if not math.isclose(allocation.cost_per_hour, cost, rel_tol=1e-9, abs_tol=1e-9):
        problems.append(f"cost_per_hour {allocation.cost_per_hour} != Σ counts·cost = {cost}")
    objective = allocation.result.objective
    slack = INTEGRALITY_TOL * sum(g.cost_per_hour for g in instance.gpus)
    if objective is not None and not math.isclose(objective, cost, rel_tol=1e-6, abs_tol=slack):
        problems.append(f"solver objective {objective} != cost of rounded counts {cost}")
    return problems


def _assignment(
    instance: AllocationInstance,
    totals: list[list[float]],
    bought: list[list[float]],
    unbought: dict[tuple[int, int], list[str]],
) -> list[str]:
    """Each bucket with traffic fully on types with units (§5.4.3's constraint (2) as served),
    relative to its own demand; a bucket without traffic on no type."""
    problems: list[str] = []
    for i, row in enumerate(instance.rates):
        for j, rate in enumerate(row):
            if rate == 0:
                if totals[i][j] != 0:
                    problems.append(
                        f"bucket ({i}, {j}) has no traffic, shares sum to {totals[i][j]}"
                    )
                continue
            if abs(bought[i][j] - 1.0) <= ASSIGN_REL_TOL:
                continue
            where = "; ".join(unbought.get((i, j), []))
            problems.append(
                f"bucket ({i}, {j}): {bought[i][j] * rate:.6g} of its {rate:.6g} req/s on types "
                f"with units" + (f" ({where})" if where else "")
            )
    return problems
