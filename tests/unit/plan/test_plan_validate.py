"""The validator finds each kind of violation it checks, and only that one (it must not
rubber-stamp, nor bury a fault under follow-on complaints).

Every case starts from a plan written by hand (not the solver's, which `solve` has validated
already), breaks one property and keeps the rest consistent: loads and cost are recomputed for
the altered shares and counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from plan_helpers import instance

from gpumix.plan import Allocation, AllocationInstance, SolveResult, validate_allocation
from gpumix.plan.validate import INTEGRALITY_TOL

INST = instance(
    [[2.0, 0.0], [1.0, 3.0]],
    {"small": (1.0, [[4.0, 4.0], [2.0, 0.0]]), "big": (3.0, [[8.0, 8.0], [6.0, 5.0]])},
    slice_factor=4,
)
"""Bucket (0, 1) has no traffic; only ``big`` serves (1, 1)."""

Share = dict[str, list[list[float]]]
SPLIT: Share = {"small": [[0.25, 0.0], [0.25, 0.0]], "big": [[0.75, 0.0], [0.75, 1.0]]}
ALL_BIG: Share = {"small": [[0.0, 0.0], [0.0, 0.0]], "big": [[1.0, 0.0], [1.0, 1.0]]}


def plan(share: Share, counts: dict[str, int], inst: AllocationInstance = INST) -> Allocation:
    """An allocation whose loads, cost and objective agree with ``share`` and ``counts``."""
    load = dict.fromkeys(share, 0.0)
    for k, gpu in enumerate(inst.gpus):
        for i, row in enumerate(share.get(gpu.name, [])):
            for j, fraction in enumerate(row):
                slice_load = inst.slice_load(k, (i, j))
                if fraction and slice_load is not None:
                    load[gpu.name] += fraction * inst.slice_factor * slice_load
    cost = sum(n * inst.gpus[inst.gpu_index(name)].cost_per_hour for name, n in counts.items())
    result = SolveResult(status="optimal", solver="highs", objective=cost, gap=0.0, seconds=0.0)
    return Allocation(counts=counts, share=share, load=load, cost_per_hour=cost, result=result)


GOOD = plan(SPLIT, {"small": 1, "big": 1})


def altered(share: Share, **cells: float) -> Share:
    """``share`` with ``type_i_j=value`` cells replaced."""
    out = {name: [list(row) for row in rows] for name, rows in share.items()}
    for key, value in cells.items():
        name, i, j = key.split("_")
        out[name][int(i)][int(j)] = value
    return out


def test_a_valid_plan_passes() -> None:
    assert validate_allocation(INST, GOOD) == []
    assert validate_allocation(INST, plan(ALL_BIG, {"small": 0, "big": 2})) == []


def _capped() -> AllocationInstance:
    big = INST.gpus[1].model_copy(update={"max_count": 0})
    return INST.model_copy(update={"gpus": [INST.gpus[0], big]})


Case = Callable[[], tuple[AllocationInstance, Allocation, list[str] | None]]
CASES: dict[str, tuple[Case, str]] = {
    "type missing from counts": (
        lambda: (INST, GOOD.model_copy(update={"counts": {"small": 1}}), None),
        "counts covers ['small'], expected ['big', 'small']",
    ),
    "type missing from share": (
        lambda: (INST, GOOD.model_copy(update={"share": {"big": SPLIT["big"]}}), None),
        "share covers ['big'], expected ['big', 'small']",
    ),
    "negative count": (
        lambda: (INST, plan(ALL_BIG, {"small": -1, "big": 2}), None),
        "small: negative count -1",
    ),
    "over max_count": (
        lambda: (_capped(), GOOD, None),
        "big: 1 units exceed max_count 0",
    ),
    "share of the wrong shape": (
        lambda: (INST, plan({**ALL_BIG, "small": [[0.0]]}, {"small": 0, "big": 2}), None),
        "small: share is not 2x2",
    ),
    "negative share": (
        lambda: (
            INST,
            plan(altered(SPLIT, small_0_0=-0.25, big_0_0=1.25), {"small": 1, "big": 2}),
            None,
        ),
        "small bucket (0, 0): negative share -0.25",
    ),
    "type not allowed": (
        lambda: (INST, GOOD, ["big"]),
        "small bucket (0, 0): type not allowed in this solve",
    ),
    "part of a slice": (
        lambda: (
            INST,
            plan(altered(SPLIT, small_0_0=0.3, big_0_0=0.7), {"small": 1, "big": 1}),
            None,
        ),
        "small bucket (0, 0): share 0.3 is not whole 1/4 slices",
    ),
    "traffic where MaxTput is 0": (
        lambda: (
            INST,
            plan(altered(SPLIT, small_1_1=0.25, big_1_1=0.75), {"small": 1, "big": 1}),
            None,
        ),
        "small bucket (1, 1): traffic routed to a type with MaxTput 0",
    ),
    "reported load wrong": (
        lambda: (
            INST,
            GOOD.model_copy(update={"load": {"small": 0.5, "big": GOOD.load["big"]}}),
            None,
        ),
        "small: reported load 0.5 != 0.25",
    ),
    "load above the units": (
        lambda: (INST, plan(ALL_BIG, {"small": 0, "big": 1}), None),
        "big: load 1.01666667 exceeds 1 units",
    ),
    "bucket not fully assigned": (
        lambda: (INST, plan(altered(SPLIT, big_1_0=0.5), {"small": 1, "big": 1}), None),
        "bucket (1, 0): 0.75 of its 1 req/s on types with units",
    ),
    "traffic on a bucket without any": (
        lambda: (INST, plan(altered(SPLIT, big_0_1=0.25), {"small": 1, "big": 1}), None),
        "bucket (0, 1) has no traffic, shares sum to 0.25",
    ),
    "cost wrong": (
        lambda: (INST, GOOD.model_copy(update={"cost_per_hour": 5.0}), None),
        "cost_per_hour 5.0 != Σ counts·cost = 4.0",
    ),
    "objective wrong": (
        lambda: (
            INST,
            GOOD.model_copy(update={"result": GOOD.result.model_copy(update={"objective": 4.5})}),
            None,
        ),
        "solver objective 4.5 != cost of rounded counts 4.0",
    ),
}
"""Each kind of violation :func:`validate_allocation` checks (the alone-miss budget is in
``test_plan_alone_miss``, a bucket left on a type with no unit in ``test_plan_tiny_rates``)."""


@pytest.mark.parametrize("case", list(CASES))
def test_the_validator_reports_exactly_the_violation(case: str) -> None:
    build, expected = CASES[case]
    inst, allocation, allowed = build()
    problems = validate_allocation(inst, allocation, allowed)
    assert problems, case
    assert problems[0] == expected
    assert {_kind(p) for p in problems} == {_kind(expected)}, problems  # nothing else


def _kind(problem: str) -> str:
    """A problem without what it names: ``"small bucket (0, 0): share 0.3 is not whole 1/4
    slices"`` → ``"share # is not whole #/# slices"`` (the other share of that bucket, 0.7, is
    the same kind)."""
    return re.sub(r"-?[\d.]+", "#", problem.rsplit(": ", 1)[-1])


def test_a_bucket_on_a_type_with_no_unit_is_not_assigned() -> None:
    """Shares sum to 1, but part of bucket (1, 0) sits on ``small``, which has no unit."""
    share = altered(ALL_BIG, small_1_0=0.25, big_1_0=0.75)
    problems = validate_allocation(INST, plan(share, {"small": 0, "big": 2}))
    assert problems == [
        "small: load 0.125 exceeds 0 units",
        "bucket (1, 0): 0.75 of its 1 req/s on types with units (small (0 units) holds 0.25)",
    ]


def test_the_load_tolerance_grows_with_the_units() -> None:
    """Solver tolerances are relative to a row: 4000 units may carry 4000.002 (half a
    millionth over), one unit may not carry 1.00001."""
    inst = instance([[1000.0]], {"g": (1.0, [[0.25]])})
    assert validate_allocation(inst, plan({"g": [[1.0]]}, {"g": 4000}, inst)) == []
    over = instance([[1000.0005]], {"g": (1.0, [[0.25]])})
    assert validate_allocation(over, plan({"g": [[1.0]]}, {"g": 4000}, over)) == []
    one = instance([[0.2500025]], {"g": (1.0, [[0.25]])})
    assert validate_allocation(one, plan({"g": [[1.0]]}, {"g": 1}, one)) == [
        "g: load 1.00001 exceeds 1 units"
    ]


def test_the_objective_may_carry_counts_within_the_integrality_tolerance() -> None:
    """HiGHS accepts a count of 0.999999 as 1 (a100-80gb×1 read 3.6699961 for a rounded cost of
    3.67 among 16 options): each count may be that far off at its option's price, unused options
    included, however cheap the plan; no further."""
    inst = instance([[1.0]], {"cheap": (1.0, [[4.0]]), "dear": (100.0, [[4.0]])})
    cheap = plan({"cheap": [[1.0]], "dear": [[0.0]]}, {"cheap": 1, "dear": 0}, inst)
    slack = INTEGRALITY_TOL * 101
    for off, ok in ((0.9 * slack, True), (2 * slack, False)):
        result = cheap.result.model_copy(update={"objective": cheap.cost_per_hour - off})
        problems = validate_allocation(inst, cheap.model_copy(update={"result": result}))
        assert (problems == []) is ok, (off, problems)
