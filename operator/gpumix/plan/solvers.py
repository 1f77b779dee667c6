"""Run a PuLP problem on HiGHS (in-process, default) or CBC and map the outcome explicitly.

HiGHS is used through highspy, so no files and no subprocess; CBC is the fallback when
highspy is missing or HiGHS errors. Both are asked for a proven optimum (relative gap 0):
costs are what the operator compares across plans, and a 1e-4 default gap could pick a
measurably dearer mix.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import pulp

from gpumix.plan.result import SolveResult, SolverName, SolveStatus


def highs_available() -> bool:
    """PuLP's check: whether highspy imports (a CBC-only install still plans, just slower)."""
    available = bool(pulp.HiGHS(msg=False).available())
    if available:
        _silence_banner()
    return available


@functools.cache
def _silence_banner() -> None:
    """HiGHS writes its banner to file descriptor 1 when the first ``Highs`` object of a process
    is made, whatever ``output_flag`` says later, so ``--output json`` would not be JSON; on
    stderr it was two stray lines in every `gpumix plan` and in the operator's JSON logs. Make
    that first object here with descriptor 1 pointed at the null device (every HiGHS path calls
    :func:`highs_available` first)."""
    import highspy  # noqa: PLC0415 - optional until HiGHS is in use

    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def run(
    problem: pulp.LpProblem,
    solver: SolverName,
    time_limit_s: float,
    gap_rel: float = 0.0,
    *,
    highs_options: dict[str, bool | int | float | str] | None = None,
    start: dict[str, float] | None = None,
) -> SolveResult:
    """Solve ``problem`` in place; fall back from HiGHS to CBC when HiGHS can't answer.

    ``gap_rel`` is the relative MIP gap at which the solver may stop (0 = proven optimum);
    ``highs_options`` are passed to HiGHS as they are; ``start`` (variable name → value) is a
    MIP start for HiGHS (both ignored by CBC).
    """
    if solver == "highs":
        if not highs_available():
            result = _run_cbc(problem, time_limit_s, gap_rel)
            return result.model_copy(update={"message": _join("highspy unavailable", result)})
        result = _run_highs(problem, time_limit_s, gap_rel, highs_options or {}, start)
        if result.status != "error":
            return result
        fallback = _run_cbc(problem, time_limit_s, gap_rel)
        note = f"HiGHS failed ({result.message or 'error'}); fell back to CBC"
        return fallback.model_copy(update={"message": _join(note, fallback)})
    return _run_cbc(problem, time_limit_s, gap_rel)


def _join(note: str, result: SolveResult) -> str:
    return f"{note}; {result.message}" if result.message else note


def _run_highs(
    problem: pulp.LpProblem,
    time_limit_s: float,
    gap_rel: float,
    options: dict[str, bool | int | float | str],
    mip_start: dict[str, float] | None = None,
) -> SolveResult:
    start = time.perf_counter()
    try:
        highs = _StartedHiGHS(msg=False, timeLimit=time_limit_s, gapRel=gap_rel, **options)
        highs.mip_start = mip_start
        problem.solve(highs)
    except pulp.PulpSolverError as exc:
        return _result("highs", "error", objective=None, gap=None, start=start, message=str(exc))
    from highspy import HighsModelStatus  # noqa: PLC0415 - optional until HiGHS is in use

    highs = problem.solverModel
    if mip_start and _returned_the_start(highs):
        # HiGHS 1.16 can report the better objective it found while handing back the start's
        # values; a caller acting on those values would act on a solution HiGHS did not mean.
        left = time_limit_s - (time.perf_counter() - start)
        result = _run_highs(problem, max(left, 0.0), gap_rel, options)
        note = "HiGHS returned its MIP start, not the solution it reported; re-solved without it"
        return result.model_copy(update={"message": f"{note}; {result.message}"})
    model_status = highs.getModelStatus()
    info = highs.getInfo()
    description = highs.modelStatusToString(model_status)
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    status: SolveStatus
    if model_status == HighsModelStatus.kOptimal:
        status = "optimal"
    elif model_status in (HighsModelStatus.kInfeasible, HighsModelStatus.kUnboundedOrInfeasible):
        # Every variable is bounded below and costs are positive, so never unbounded.
        status = "infeasible"
    elif model_status in (
        HighsModelStatus.kTimeLimit,
        HighsModelStatus.kIterationLimit,
        HighsModelStatus.kInterrupt,
        HighsModelStatus.kSolutionLimit,
    ):
        status = "feasible" if has_solution else "time_limit_no_solution"
    else:
        status = "error"
    objective = _objective(problem) if status in ("optimal", "feasible") else None
    gap = float(info.mip_gap) if objective is not None and math.isfinite(info.mip_gap) else None
    return _result("highs", status, objective=objective, gap=gap, start=start, message=description)


def _returned_the_start(highs: Any) -> bool:
    """Whether HiGHS's solution values disagree with the objective it reports for them."""
    info = highs.getInfo()
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible
        return False
    lp = highs.getLp()
    at_values = float(lp.offset_) + math.fsum(
        c * x for c, x in zip(lp.col_cost_, highs.getSolution().col_value, strict=True)
    )
    reported = float(info.objective_function_value)
    return abs(at_values - reported) > 1e-6 * max(1.0, abs(reported))


class _StartedHiGHS(pulp.HiGHS):  # type: ignore[misc]
    """PuLP's in-process HiGHS, handing HiGHS a MIP start (PuLP 3.3's ``warmStart`` only
    reaches the ``HiGHS_CMD`` interface)."""

    mip_start: dict[str, float] | None = None

    def callSolver(self, lp: pulp.LpProblem) -> None:  # noqa: N802 - PuLP's name
        if self.mip_start:
            from highspy import HighsSolution  # noqa: PLC0415

            solution = HighsSolution()
            values = [0.0] * lp.solverModel.getNumCol()
            for var in lp.variables():
                values[var.index] = self.mip_start.get(var.name, 0.0)
            solution.col_value = values
            solution.value_valid = True
            lp.solverModel.setSolution(solution)
        super().callSolver(lp)


def _run_cbc(problem: pulp.LpProblem, time_limit_s: float, gap_rel: float) -> SolveResult:
    """CBC runs as a subprocess on MPS/solution files; keep them in a private temp dir.

    PuLP falls back to the working directory when ``TMPDIR`` is unusable, so the directory
    is set explicitly and removed afterwards. The binary is the one PuLP 3.3 bundles
    (``PULP_CBC_CMD``'s); it is driven through ``COIN_CMD`` because constructing
    ``PULP_CBC_CMD`` emits a PuLP-4 DeprecationWarning, which our test config makes fatal.
    """
    start = time.perf_counter()
    tmp_dir = tempfile.mkdtemp(prefix="gpumix-cbc-")
    try:
        cmd = pulp.COIN_CMD(
            path=pulp.PULP_CBC_CMD.pulp_cbc_path,
            msg=False,
            timeLimit=time_limit_s,
            gapRel=gap_rel,
            keepFiles=False,
        )
        cmd.tmpDir = tmp_dir
        problem.solve(cmd)
    except pulp.PulpSolverError as exc:
        return _result("cbc", "error", objective=None, gap=None, start=start, message=str(exc))
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    status: SolveStatus
    if problem.sol_status == pulp.LpSolutionOptimal:
        status = "optimal"
    elif problem.sol_status == pulp.LpSolutionIntegerFeasible:
        status = "feasible"
    elif problem.sol_status == pulp.LpSolutionInfeasible or (
        # "Integer infeasible" reaches PuLP as status Infeasible without a solution status;
        # CBC says the same when stopped early, so only trust it inside the time limit.
        problem.status == pulp.LpStatusInfeasible and time.perf_counter() - start < time_limit_s
    ):
        status = "infeasible"
    elif problem.status == pulp.LpStatusNotSolved:
        # PuLP maps CBC's "Stopped" without a solution here; the only limit we set is time.
        status = "time_limit_no_solution"
    else:
        status = "error"
    objective = _objective(problem) if status in ("optimal", "feasible") else None
    return _result(
        "cbc",
        status,
        objective=objective,
        gap=None,
        start=start,
        message=pulp.LpStatus[problem.status],
    )


def _objective(problem: pulp.LpProblem) -> float:
    value = pulp.value(problem.objective)
    return float(value) if value is not None else 0.0


def _result(
    solver: SolverName,
    status: SolveStatus,
    *,
    objective: float | None,
    gap: float | None,
    start: float,
    message: str,
) -> SolveResult:
    return SolveResult(
        status=status,
        solver=solver,
        objective=objective,
        gap=gap,
        seconds=time.perf_counter() - start,
        message=message,
    )
