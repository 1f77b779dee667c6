"""Solver adapter: status mapping, gap, and the HiGHS -> CBC fallback."""

from __future__ import annotations

import pulp
import pytest

from gpumix.plan import solvers
from gpumix.plan.result import SolverName


def knapsack(capacity: float) -> pulp.LpProblem:
    """min 2x + 3y s.t. x + y >= capacity, x <= 1, y integer."""
    problem = pulp.LpProblem("t", pulp.LpMinimize)
    x = problem.add_variable("x", lowBound=0, upBound=1, cat=pulp.LpInteger)
    y = problem.add_variable("y", lowBound=0, upBound=2, cat=pulp.LpInteger)
    problem += 2 * x + 3 * y
    problem += x + y >= capacity, "demand"
    return problem


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_optimal(solver: SolverName) -> None:
    result = solvers.run(knapsack(2), solver, 10.0)
    assert result.status == "optimal"
    assert result.solver == solver
    assert result.objective == pytest.approx(5.0)
    assert result.seconds >= 0
    if solver == "highs":
        assert result.gap == pytest.approx(0.0)
    else:
        assert result.gap is None


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_infeasible(solver: SolverName) -> None:
    result = solvers.run(knapsack(4), solver, 10.0)
    assert result.status == "infeasible"
    assert result.objective is None


def test_integer_infeasible_but_lp_feasible() -> None:
    # x + y = 2.5 with integers: the LP relaxation is feasible, the ILP is not.
    solver: SolverName
    for solver in ("highs", "cbc"):
        problem = knapsack(0)
        x, y = problem.variables()
        problem += x + y == 2.5, "half"
        assert solvers.run(problem, solver, 10.0).status == "infeasible", solver


def test_falls_back_to_cbc_when_highs_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solvers, "highs_available", lambda: False)
    result = solvers.run(knapsack(2), "highs", 10.0)
    assert result.solver == "cbc"
    assert result.status == "optimal"
    assert result.message.startswith("highspy unavailable")


def test_falls_back_to_cbc_when_highs_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, lp: pulp.LpProblem) -> None:
        raise pulp.PulpSolverError("boom")

    monkeypatch.setattr(pulp.HiGHS, "actualSolve", broken)
    result = solvers.run(knapsack(2), "highs", 10.0)
    assert result.solver == "cbc"
    assert result.status == "optimal"
    assert result.objective == pytest.approx(5.0)
    assert "HiGHS failed (boom)" in result.message


def test_highs_is_available_here() -> None:
    assert solvers.highs_available()


def _benders_master() -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    """The Benders master of issue #13's counterexample after its first routing cuts."""
    problem = pulp.LpProblem("master", pulp.LpMinimize)
    y = [problem.add_variable(f"y{o}", lowBound=0, cat=pulp.LpInteger) for o in range(3)]
    a = [problem.add_variable(f"a{o}", lowBound=0) for o in range(3)]
    problem += pulp.lpSum([0.5 * y[0], y[1], 0.5 * y[2], 5e-5 * a[0], 1e-4 * a[1], 5e-5 * a[2]])
    for o, running in enumerate([0, 1, 2]):
        problem += a[o] - y[o] >= -running
    problem += y[0] + y[1] + y[2] >= 0.5
    problem += y[0] + y[1] + 0.5 * y[2] >= 0.5
    problem += 0.5 * y[0] + y[1] + 0.5 * y[2] >= 0.5
    problem += 0.5 * y[0] + y[1] + 0.125 * y[2] >= 0.3125
    return problem, y


def test_the_values_of_a_mip_started_solve_are_the_optimum_reported() -> None:
    """highspy 1.16 reports the optimum it found (0.50005, one y0 replica) but hands back the
    MIP start's values (one y1 replica, 1.0); the adapter must return the optimum's values."""
    problem, y = _benders_master()
    result = solvers.run(problem, "highs", 10.0, start={"y1": 1.0})
    assert result.status == "optimal"
    assert result.objective == pytest.approx(0.50005)
    assert [v.value() for v in y] == pytest.approx([1.0, 0.0, 0.0])
