"""The validator rejects each kind of broken allocation (it must not rubber-stamp)."""

from __future__ import annotations

from typing import Any

import pytest
from plan_helpers import instance

from gpumix.plan import Allocation, solve, validate_allocation

INST = instance(
    [[2.0, 0.0], [1.0, 3.0]],
    {"small": (1.0, [[4.0, 4.0], [2.0, 0.0]]), "big": (3.0, [[8.0, 8.0], [6.0, 5.0]])},
    slice_factor=4,
)


@pytest.fixture(scope="module")
def good() -> Allocation:
    allocation = solve(INST)
    assert allocation is not None
    return allocation


def broken(allocation: Allocation, **changes: Any) -> Allocation:
    return allocation.model_copy(update=changes, deep=True)


def test_solver_answer_is_valid(good: Allocation) -> None:
    assert validate_allocation(INST, good) == []


def test_missing_type(good: Allocation) -> None:
    counts = {"small": good.counts["small"]}
    assert "counts covers" in validate_allocation(INST, broken(good, counts=counts))[0]


def test_too_few_gpus_for_the_load(good: Allocation) -> None:
    counts = dict.fromkeys(good.counts, 0)
    problems = validate_allocation(INST, broken(good, counts=counts, cost_per_hour=0.0))
    assert any("exceeds 0 units" in p for p in problems)


def test_cost_mismatch(good: Allocation) -> None:
    problems = validate_allocation(INST, broken(good, cost_per_hour=good.cost_per_hour - 1))
    assert any("cost_per_hour" in p for p in problems)


def test_bucket_not_fully_assigned(good: Allocation) -> None:
    share = {name: [[0.0, 0.0], [0.0, 0.0]] for name in good.share}
    problems = validate_allocation(INST, broken(good, share=share))
    assert any("shares sum to 0.0, not 1.0" in p for p in problems)
    assert any("reported load" in p for p in problems)


def test_traffic_on_a_type_that_cannot_serve_it(good: Allocation) -> None:
    share = {"small": [[1.0, 0.0], [1.0, 1.0]], "big": [[0.0, 0.0], [0.0, 0.0]]}
    problems = validate_allocation(INST, broken(good, share=share))
    assert any(
        "small bucket (1, 1): traffic routed to a type with MaxTput 0" in p for p in problems
    )


def test_fractional_slice_and_disallowed_type(good: Allocation) -> None:
    share = {"small": [[0.3, 0.0], [0.0, 0.0]], "big": [[0.7, 0.0], [1.0, 1.0]]}
    problems = validate_allocation(INST, broken(good, share=share), allowed=["big"])
    assert any("not whole 1/4 slices" in p for p in problems)
    assert any("small bucket (0, 0): type not allowed" in p for p in problems)


def test_over_availability_cap(good: Allocation) -> None:
    capped = INST.model_copy(
        update={"gpus": [INST.gpus[0], INST.gpus[1].model_copy(update={"max_count": 0})]}
    )
    if good.counts["big"] == 0:
        pytest.fail("fixture expected to use the big type")
    assert any("exceed max_count 0" in p for p in validate_allocation(capped, good))


def test_objective_mismatch(good: Allocation) -> None:
    result = good.result.model_copy(update={"objective": good.cost_per_hour + 0.5})
    problems = validate_allocation(INST, broken(good, result=result))
    assert any("solver objective" in p for p in problems)
