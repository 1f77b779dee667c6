"""Solver output models: an explicit solve result (linopy-style), an allocation, and a plan.

An :class:`Allocation` is Mélange's decision vector ``B`` (§5.4.3) plus the per-bucket
traffic split, which the load balancer turns into routing weights (App. A.2).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpumix.plan.instance import Formulation

SolveStatus = Literal["optimal", "feasible", "infeasible", "time_limit_no_solution", "error"]
SolverName = Literal["highs", "cbc"]


class SolveResult(BaseModel):
    """What the MIP solver reported, mapped explicitly rather than left as a string to parse."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: SolveStatus
    solver: SolverName
    objective: float | None
    gap: float | None
    """Relative MIP gap when the solver exposes it (HiGHS does, CBC via PuLP does not)."""
    seconds: float
    message: str = ""


class Allocation(BaseModel):
    """GPUs to buy and how each bucket's traffic is split across them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    counts: dict[str, int]
    """Units per GPU type; every type of the instance is present (0 allowed)."""
    share: dict[str, list[list[float]]]
    """Fraction of each bucket's traffic routed to each type; sums to 1 per bucket with traffic."""
    load: dict[str, float]
    """Summed §5.4.2 load assigned to each type; never above its count."""
    cost_per_hour: float
    result: SolveResult


class Plan(BaseModel):
    """The cheapest mix plus the single-type baselines of Mélange §6.1 it is compared with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allocation: Allocation | None
    """``None`` when the instance is infeasible (e.g. under availability caps)."""
    baselines: dict[str, Allocation | None]
    """Same ILP restricted to one type; ``None`` if that type alone cannot serve the workload."""
    savings: dict[str, float | None]
    """``1 - cost / baseline cost`` per type; ``None`` when either side has no allocation."""
    formulation: Formulation
