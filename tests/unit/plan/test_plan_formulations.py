"""Model builders: sizes, deterministic names, and constraint shapes of the formulations."""

from __future__ import annotations

import pulp
import pytest
from plan_helpers import instance

from gpumix.plan import aggregated, paper, routable
from gpumix.plan.model import LOAD_TOL

# Bucket (0, 1) has no traffic; type "small" cannot serve bucket (1, 1).
INST = instance(
    [[2.0, 0.0], [1.0, 3.0]],
    {"small": (1.0, [[4.0, 4.0], [2.0, 0.0]]), "big": (3.0, [[8.0, 8.0], [6.0, 5.0]])},
    slice_factor=4,
)


def test_aggregated_has_one_integer_per_servable_bucket_type_pair() -> None:
    model = aggregated.build(INST, [0, 1])
    names = sorted(v.name for v in model.problem.variables())
    counts = ["count_t0", "count_t1"]
    slices = ["n_i0_o0_t0", "n_i0_o0_t1", "n_i1_o0_t0", "n_i1_o0_t1", "n_i1_o1_t1"]
    assert names == sorted(counts + slices)
    assert all(v.cat == pulp.LpInteger for v in model.problem.variables())
    assign = model.problem.get_constraint_by_name("assign_i1_o1")
    assert assign.constant == -4  # Σ_j n[b, j] = S
    capacity = model.problem.get_constraint_by_name("capacity_t1")
    # load coefficient of n[b, big] is rate / (S · MaxTput)
    coefficients = {v.name: c for v, c in capacity.items()}
    assert coefficients["n_i1_o1_t1"] == pytest.approx(3.0 / (4 * 5.0))
    assert coefficients["count_t1"] == -1
    assert capacity.constant == -LOAD_TOL


def test_paper_has_one_binary_per_slice_and_type() -> None:
    model = paper.build(INST, [0, 1])
    variables = model.problem.variables()
    binaries = [v for v in variables if v.name.startswith("a_")]
    # 3 buckets with traffic × 4 slices, 2 types each except (1, 1) with only "big".
    assert len(binaries) == (2 + 2 + 1) * 4
    assert all(v.cat == pulp.LpInteger and v.upBound == 1 for v in binaries)
    assert len([c for c in model.problem.constraints() if c.name.startswith("assign_")]) == 12
    assert len(model.placement[(1, 1), 1]) == 4
    assert ((1, 1), 0) not in model.placement


def _row(problem: pulp.LpProblem, name: str) -> dict[str, float]:
    row = problem.get_constraint_by_name(name)
    assert row.sense == pulp.LpConstraintLE and row.constant == 0
    return {v.name: c for v, c in row.items()}


def _bought(problem: pulp.LpProblem) -> list[str]:
    return sorted(c.name for c in problem.constraints() if c.name.startswith("bought_"))


def test_a_tiny_buckets_slices_are_kept_on_bought_types_in_every_formulation() -> None:
    """In slice counts (coefficients 1 and S), never rates; only where capacity (3) cannot see
    the bucket's load (1e-8 req/s here), so other models stay as they were."""
    tiny = INST.model_copy(update={"rates": [[2.0, 1e-8], [1.0, 3.0]]})
    model = aggregated.build(tiny, [0, 1])
    assert _bought(model.problem) == ["bought_n_i0_o1_t0", "bought_n_i0_o1_t1"]
    assert _row(model.problem, "bought_n_i0_o1_t1") == {"n_i0_o1_t1": 1, "count_t1": -4}
    model = paper.build(tiny, [0, 1])
    expected = {f"a_i0_o1_s{s}_t1": 1 for s in range(4)} | {"count_t1": -4}
    assert _row(model.problem, "bought_i0_o1_t1") == expected
    model = routable.build(tiny, [0, 1])  # one row per type that takes input row 0
    assert _bought(model.problem) == ["bought_y_i0_t0", "bought_y_i0_t1"]
    assert _row(model.problem, "bought_y_i0_t0") == {"y_i0_t0": 1, "count_t0": -4}
    for build in (aggregated.build, paper.build, routable.build):
        assert _bought(build(INST, [0, 1]).problem) == []


def test_builds_are_deterministic() -> None:
    for build in (aggregated.build, paper.build):
        first, second = build(INST, [0, 1]), build(INST, [0, 1])
        assert [v.name for v in first.problem.variables()] == [
            v.name for v in second.problem.variables()
        ]
        assert [c.name for c in first.problem.constraints()] == [
            c.name for c in second.problem.constraints()
        ]


def test_restricting_types_drops_their_variables() -> None:
    model = aggregated.build(INST, [1])
    assert set(model.counts) == {1}
    assert all(k == 1 for _, k in model.placement)


def test_availability_cap_bounds_the_count_variable() -> None:
    capped = INST.model_copy(
        update={"gpus": [INST.gpus[0].model_copy(update={"max_count": 2}), INST.gpus[1]]}
    )
    model = aggregated.build(capped, [0, 1])
    assert model.counts[0].upBound == 2
    assert model.counts[1].upBound is None
