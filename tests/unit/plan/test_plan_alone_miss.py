"""The opt-in budget for requests that miss the SLO even alone (`alone_miss_budget`)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from plan_helpers import instance, instances

from gpumix.attainment import least_alone_miss
from gpumix.plan import Allocation, AllocationInstance, Formulation, solve, validate_allocation
from proptest import budget

QUICK = budget(40)
FORMULATIONS = list(Formulation)


@st.composite
def with_misses(draw: st.DrawFn) -> AllocationInstance:
    """A random instance whose every type misses a random share (in eighths) of each bucket."""
    inst = draw(instances())
    rows, cols = inst.shape
    share = st.integers(0, 8).map(lambda x: x / 8)
    matrix = st.lists(st.lists(share, min_size=cols, max_size=cols), min_size=rows, max_size=rows)
    gpus = [g.model_copy(update={"alone_miss": draw(matrix)}) for g in inst.gpus]
    return inst.model_copy(update={"gpus": gpus})


def placed_misses(inst: AllocationInstance, alloc: Allocation) -> float:
    """Share of all requests placed where they miss alone, from the shares (not the ILP)."""
    rows, cols = inst.shape
    missed = sum(
        alloc.share[g.name][i][j] * inst.rates[i][j] * (g.alone_miss or [[0.0] * cols])[i][j]
        for g in inst.gpus
        for i in range(rows)
        for j in range(cols)
    )
    return missed / sum(map(sum, inst.rates))


@QUICK
@given(with_misses(), st.sampled_from(FORMULATIONS))
def test_without_a_budget_alone_misses_leave_melanges_optimum_alone(
    inst: AllocationInstance, formulation: Formulation
) -> None:
    plain = inst.model_copy(
        update={"gpus": [g.model_copy(update={"alone_miss": None}) for g in inst.gpus]}
    )
    ours, theirs = solve(inst, formulation), solve(plain, formulation)
    assert (ours is None) == (theirs is None)
    if ours is not None and theirs is not None:
        assert ours.cost_per_hour == pytest.approx(theirs.cost_per_hour, abs=1e-6)


@QUICK
@given(with_misses(), st.sampled_from(FORMULATIONS), st.floats(0, 1))
def test_a_plan_exists_exactly_when_the_budget_covers_the_least_alone_miss_and_keeps_to_it(
    inst: AllocationInstance, formulation: Formulation, share: float
) -> None:
    """`least_alone_miss` is the exact floor (no availability caps here): at it the budget
    leaves a plan, just below it none; a plan keeps to its budget and costs no less."""
    assume(sum(map(sum, inst.rates)) > 0)
    least = least_alone_miss(inst, formulation, list(range(len(inst.gpus))))

    def within(b: float) -> Allocation | None:
        return solve(inst.model_copy(update={"alone_miss_budget": b}), formulation)

    assert within(least) is not None
    if least > 1e-4:  # a step well above the solver's feasibility tolerance (~1e-7)
        assert within(least - 1e-4) is None
    alloc, free = within(share), solve(inst, formulation)
    assert free is not None
    if share < least - 1e-4:
        assert alloc is None
    elif share >= least:
        assert alloc is not None
    if alloc is not None:
        assert placed_misses(inst, alloc) <= share + 1e-6
        assert alloc.cost_per_hour >= free.cost_per_hour - 1e-6


def test_a_type_takes_a_bucket_it_cannot_serve_alone_only_within_the_budget() -> None:
    """The cheap type serves bucket (0, 1) at load but misses half its requests alone (a long
    prompt, few output tokens): with no budget it is kept off that bucket, with enough it gets
    it, and the validator flags a plan that overspends."""
    inst = instance([[4.0, 1.0]], {"cheap": (1.0, [[4.0, 4.0]]), "fast": (3.0, [[4.0, 4.0]])})
    cheap = inst.gpus[0].model_copy(update={"alone_miss": [[0.0, 0.5]]})
    inst = inst.model_copy(update={"gpus": [cheap, inst.gpus[1]]})
    free = solve(inst)
    assert free is not None and free.counts == {"cheap": 2, "fast": 0}
    strict = inst.model_copy(update={"alone_miss_budget": 0.0})
    alloc = solve(strict)
    assert alloc is not None and alloc.counts == {"cheap": 1, "fast": 1}
    assert alloc.share == {"cheap": [[1.0, 0.0]], "fast": [[0.0, 1.0]]}
    enough = solve(inst.model_copy(update={"alone_miss_budget": 0.5 * 1.0 / 5.0}))
    assert enough is not None and enough.counts == free.counts
    (problem,) = validate_allocation(strict, free)
    assert "miss even alone exceed the budget 0" in problem


def test_alone_misses_must_match_the_grid() -> None:
    inst = instance([[1.0, 1.0]], {"a": (1.0, [[1.0, 1.0]])})
    bad = inst.gpus[0].model_copy(update={"alone_miss": [[0.0]]})
    with pytest.raises(ValueError, match=r"gpus\[0\].alone_miss \(a\) has shape 1x1"):
        AllocationInstance.model_validate({**inst.model_dump(), "gpus": [bad.model_dump()]})
