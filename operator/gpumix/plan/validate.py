"""Solver-independent check of an allocation against its instance (CP-SAT Primer style).

Every answer the MIP solver gives is re-checked here with plain arithmetic, so a modelling
bug or a solver tolerance surprise surfaces as a failed check rather than an SLO breach.
"""

from __future__ import annotations

import math

from gpumix.plan.instance import AllocationInstance
from gpumix.plan.result import Allocation

LOAD_CHECK_TOL = 1e-6
"""Load may exceed the count by this much: solver feasibility tolerances are ~1e-7."""


def validate_allocation(
    instance: AllocationInstance, allocation: Allocation, allowed: list[str] | None = None
) -> list[str]:
    """Return every violated property (empty list = valid).

    Checks: counts cover every type, are non-negative and within ``max_count``; only
    ``allowed`` types are used; each bucket with traffic is fully assigned in whole slices
    (§5.4.1) and only to types with MaxTput > 0; load per type (recomputed, §5.4.2) matches
    the reported load and fits in the units bought; requests placed where they miss even alone
    stay within ``alone_miss_budget`` when set; cost and objective equal ``Σ counts·c``.
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
        if not math.isclose(load, allocation.load[gpu.name], rel_tol=1e-9, abs_tol=1e-9):
            problems.append(f"{gpu.name}: reported load {allocation.load[gpu.name]} != {load}")
        if load > count + LOAD_CHECK_TOL:
            problems.append(f"{gpu.name}: load {load:.9g} exceeds {count} units")

    for i in range(rows):
        for j in range(cols):
            expected = 1.0 if instance.rates[i][j] > 0 else 0.0
            if not math.isclose(totals[i][j], expected, abs_tol=1e-9):
                problems.append(f"bucket ({i}, {j}): shares sum to {totals[i][j]}, not {expected}")

    budget = instance.alone_miss_budget
    if budget is not None:
        total = sum(map(sum, instance.rates))
        missed = sum(
            allocation.share[g.name][i][j] * s_factor * instance.alone_miss_rate(k, (i, j))
            for k, g in enumerate(instance.gpus)
            for i in range(rows)
            for j in range(cols)
        )
        if missed > (budget + LOAD_CHECK_TOL) * total:
            problems.append(
                f"{missed:.9g} req/s placed where they miss even alone exceed the budget "
                f"{budget:g} of {total:.9g} req/s"
            )

    cost = sum(allocation.counts[g.name] * g.cost_per_hour for g in instance.gpus)
    if not math.isclose(allocation.cost_per_hour, cost, rel_tol=1e-9, abs_tol=1e-9):
        problems.append(f"cost_per_hour {allocation.cost_per_hour} != Σ counts·cost = {cost}")
    objective = allocation.result.objective
    if objective is not None and not math.isclose(objective, cost, rel_tol=1e-6, abs_tol=1e-6):
        problems.append(f"solver objective {objective} != cost of rounded counts {cost}")
    return problems
