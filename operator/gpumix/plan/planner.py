"""Entry points: :func:`solve` one allocation, :func:`plan_allocation` for a mix plus baselines.

Mélange §5.4 for the allocation, §6.1 for the baselines ("Mélange's ILP formulation, but
restrict the solver to a single GPU type").
"""

from __future__ import annotations

from gpumix.plan import aggregated, paper, routable
from gpumix.plan.errors import (
    InvalidAllocationError,
    SolverError,
    UnservableBucketError,
    check_servable,
)
from gpumix.plan.instance import AllocationInstance, Formulation
from gpumix.plan.model import Model
from gpumix.plan.result import Allocation, Plan, SolveResult, SolverName
from gpumix.plan.solvers import run
from gpumix.plan.validate import validate_allocation

_BUILDERS = {
    Formulation.AGGREGATED: aggregated.build,
    Formulation.PAPER: paper.build,
    Formulation.ROUTABLE: routable.build,
}


def solve(
    instance: AllocationInstance,
    formulation: Formulation = Formulation.AGGREGATED,
    *,
    solver: SolverName = "highs",
    time_limit_s: float = 30.0,
    only: str | None = None,
) -> Allocation | None:
    """Cheapest allocation meeting the SLO, or ``None`` if the instance is infeasible.

    ``only`` restricts the solve to one GPU type (a §6.1 baseline). Raises
    :class:`UnservableBucketError` before building any model when a bucket with traffic
    has no allowed type with MaxTput > 0, :class:`SolverError` when the solver stops
    without a solution (time limit, crash), and :class:`InvalidAllocationError` if the
    answer fails :func:`validate_allocation` (a bug, never expected).
    """
    candidates = list(range(len(instance.gpus))) if only is None else [instance.gpu_index(only)]
    allowed = [k for k in candidates if instance.usable(k)]
    check_servable(instance, allowed)

    if not instance.buckets_with_traffic():
        result = SolveResult(
            status="optimal",
            solver=solver,
            objective=0.0,
            gap=0.0,
            seconds=0.0,
            message="no traffic: nothing to allocate",
        )
        allocation = _empty(instance, result)
    else:
        model = _BUILDERS[formulation](instance, allowed)
        result = run(model.problem, solver, time_limit_s)
        if result.status == "infeasible":
            return None
        if result.status not in ("optimal", "feasible"):
            raise SolverError(result)
        allocation = _read(instance, model, result)

    problems = validate_allocation(
        instance, allocation, [instance.gpus[k].name for k in candidates]
    )
    if problems:
        raise InvalidAllocationError(problems)
    return allocation


def plan_allocation(
    instance: AllocationInstance,
    formulation: Formulation = Formulation.AGGREGATED,
    *,
    solver: SolverName = "highs",
    time_limit_s: float = 30.0,
) -> Plan:
    """The mix plus one single-type baseline per GPU type, and the savings against each."""
    allocation = solve(instance, formulation, solver=solver, time_limit_s=time_limit_s)
    baselines: dict[str, Allocation | None] = {}
    for gpu in instance.gpus:
        try:
            baselines[gpu.name] = solve(
                instance, formulation, solver=solver, time_limit_s=time_limit_s, only=gpu.name
            )
        except UnservableBucketError:
            baselines[gpu.name] = None
    savings = {name: _savings(allocation, base) for name, base in baselines.items()}
    return Plan(
        allocation=allocation, baselines=baselines, savings=savings, formulation=formulation
    )


def _savings(mix: Allocation | None, baseline: Allocation | None) -> float | None:
    if mix is None or baseline is None:
        return None
    if baseline.cost_per_hour == 0:
        return 0.0  # no traffic: both cost nothing, nothing saved
    return 1.0 - mix.cost_per_hour / baseline.cost_per_hour


def _empty(instance: AllocationInstance, result: SolveResult) -> Allocation:
    rows, cols = instance.shape
    names = [g.name for g in instance.gpus]
    return Allocation(
        counts=dict.fromkeys(names, 0),
        share={n: [[0.0] * cols for _ in range(rows)] for n in names},
        load=dict.fromkeys(names, 0.0),
        cost_per_hour=0.0,
        result=result,
    )


def _read(instance: AllocationInstance, model: Model, result: SolveResult) -> Allocation:
    """Round the solver's (tolerance-fuzzy) integers and turn slice counts into shares."""
    empty = _empty(instance, result)
    counts = dict(empty.counts)
    share = empty.share
    load = dict(empty.load)
    for k, var in model.counts.items():
        counts[instance.gpus[k].name] = round(var.value() or 0.0)
    for (bucket, k), variables in model.placement.items():
        slices = sum(round(v.value() or 0.0) for v in variables)
        if slices == 0:
            continue
        name = instance.gpus[k].name
        share[name][bucket[0]][bucket[1]] = slices / instance.slice_factor
        slice_load = instance.slice_load(k, bucket)
        assert slice_load is not None, "placement only holds servable (bucket, type) pairs"
        load[name] += slices * slice_load
    cost = sum(counts[g.name] * g.cost_per_hour for g in instance.gpus)
    return Allocation(counts=counts, share=share, load=load, cost_per_hour=cost, result=result)
