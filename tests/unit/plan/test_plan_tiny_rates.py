"""No traffic below the solver's tolerance goes missing (single-service planner).

A bucket of 1e-8 req/s has a §5.4.2 load far below HiGHS's feasibility tolerance (1e-7): with
capacity (3) alone, its slices could sit on a type with no unit. Every formulation now ties
such a bucket's slices to bought types in slice counts, and the validator checks each bucket's
assignment relative to that bucket's demand.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from plan_helpers import exact_brute_force_cost, mixed_scale_instances

from gpumix.melange_config import MelangeConfig
from gpumix.plan import (
    Allocation,
    AllocationInstance,
    Formulation,
    SolveResult,
    plan_allocation,
    solve,
    validate_allocation,
)
from gpumix.plan.result import SolverName
from gpumix.plan.validate import LOAD_CHECK_TOL
from proptest import budget

TINY_LONG_INPUTS = {
    "gpu_info": {
        "A10G": {"cost": 1.01, "tputs": [[1.0, 0.4], [0, 0], [0, 0]]},
        "L4": {"cost": 0.70, "tputs": [[0.6, 0.25], [0, 0], [0, 0]]},
        "A100-80GB": {"cost": 3.67, "tputs": [[2.0, 0.8], [0.8, 0.53], [0, 0]]},
        "H100": {"cost": 4.37, "tputs": [[4.0, 2.0], [2.0, 1.2], [30.0, 15.0]]},
    },
    "workload_distribution": [[0.5, 0.2], [0.2, 0.09999976], [2e-7, 4e-8]],
    "total_request_rate": 1,
    "slice_factor": 8,
}
"""The issue's input, Mélange-format: the long-input row carries 2e-7 and 4e-8 of 1 req/s and
only the H100 serves it. The A100 alone would carry the rest at load 0.94 (3.670 $/h), which is
what the aggregated and paper formulations planned, the long inputs left on an H100 never
bought; the optimum is one H100 (4.370 $/h, load 0.41)."""


def tiny_long_inputs(long_inputs: tuple[float, float] = (2e-7, 4e-8)) -> AllocationInstance:
    """The input above, through `gpumix plan --melange-config`'s parser (``long_inputs``: the
    long-input row's fractions of the rate)."""
    config = MelangeConfig.from_json(TINY_LONG_INPUTS)
    distribution = [*config.workload_distribution[:2], list(long_inputs)]
    return config.model_copy(update={"workload_distribution": distribution}).instance()


@pytest.mark.parametrize("solver", ["highs", "cbc"])
@pytest.mark.parametrize("formulation", list(Formulation))
def test_tiny_buckets_only_the_h100_serves_are_planned_on_an_h100(
    formulation: Formulation, solver: SolverName
) -> None:
    plan = plan_allocation(tiny_long_inputs(), formulation, solver=solver)
    assert plan.allocation is not None
    assert plan.allocation.result.status == "optimal"
    assert plan.allocation.counts == {"A10G": 0, "L4": 0, "A100-80GB": 0, "H100": 1}
    assert plan.allocation.cost_per_hour == pytest.approx(4.37)
    assert plan.allocation.share["H100"][2] == [1.0, 1.0]
    assert plan.savings["H100"] == pytest.approx(0.0)  # never cheaper than a feasible baseline


def test_the_plan_that_left_them_out_fails_validation() -> None:
    """The plan the solver used to return: A100×1, the long inputs on an H100 with no unit.
    Its H100 load (9e-9) hides inside any absolute load tolerance; the per-bucket check does not."""
    inst = tiny_long_inputs()
    names = [g.name for g in inst.gpus]
    zero = [[0.0, 0.0] for _ in range(3)]
    share = {n: [list(r) for r in zero] for n in names}
    share["A100-80GB"][:2] = [[1.0, 1.0], [1.0, 1.0]]
    share["H100"][2] = [1.0, 1.0]
    load = dict.fromkeys(names, 0.0)
    for k, name in enumerate(names):
        for i, row in enumerate(share[name]):
            for j, fraction in enumerate(row):
                if fraction:
                    slice_load = inst.slice_load(k, (i, j))
                    assert slice_load is not None
                    load[name] += fraction * inst.slice_factor * slice_load
    assert 0 < load["H100"] < 1e-8
    counts = {"A10G": 0, "L4": 0, "A100-80GB": 1, "H100": 0}
    result = SolveResult(status="optimal", solver="highs", objective=3.67, gap=0.0, seconds=0.0)
    old = Allocation(counts=counts, share=share, load=load, cost_per_hour=3.67, result=result)
    problems = validate_allocation(inst, old)
    assert len(problems) == 2, problems
    assert problems[0].startswith("bucket (2, 0): 0 of its 2e-07 req/s on types with units")
    assert "H100 (0 units) holds 1" in problems[0]
    assert problems[1].startswith("bucket (2, 1): 0 of its 4e-08 req/s on types with units")


QUICK = budget(40)


@QUICK
@given(mixed_scale_instances())
@pytest.mark.parametrize("formulation", list(Formulation))
def test_tiny_and_huge_buckets_side_by_side_cost_the_exact_optimum(
    formulation: Formulation, inst: AllocationInstance
) -> None:
    """Against a brute force in exact rational arithmetic: the optimum neither drops a 1e-9
    req/s bucket nor buys a unit too many for a 9e5 req/s one. A tiny bucket on a type whose
    huge load is a whole number may tip it over by ~1e-10 units: inside the capacity tolerance
    (``LOAD_CHECK_TOL``), so the cost lies between the exact optimum with that slack (still a
    unit for every type that takes traffic) and the exact optimum with tiny slices counted as
    the model rounds them up (``capacity_loads``: up to 1e-6 of the row's largest slice load,
    which tipped a load of 5,333.9985 units over a whole one)."""
    per_row = formulation is Formulation.ROUTABLE
    low = exact_brute_force_cost(inst, per_row=per_row, slack=LOAD_CHECK_TOL)
    high = exact_brute_force_cost(inst, per_row=per_row, rounded=True)
    assert low is not None and high is not None  # gpu0 serves every bucket
    allocation = solve(inst, formulation)
    assert allocation is not None
    assert low - 1e-6 <= allocation.cost_per_hour <= high + 1e-6
