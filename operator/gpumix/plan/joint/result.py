"""Output of the joint planner: per service, replicas per option, traffic split and what is left."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpumix.plan.joint.instance import Objective
from gpumix.plan.result import SolveResult

UNSERVED_TOL = 1e-4
"""Unserved fractions below this are solver tolerance, not capacity shortfalls."""


class ServiceAllocation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    counts: dict[str, int]
    """Replicas per option; every option of the service is present (0 allowed)."""
    share: dict[str, list[list[float]]]
    """Fraction of each bucket's traffic routed to each option."""
    unserved: list[list[float]]
    """Fraction of each bucket's traffic no replica takes (0 everywhere when fully served)."""
    load: dict[str, float]
    """Placed load per option in replica units; never above its count."""
    cost_per_hour: float
    total_rate: float
    unserved_rate: float
    """req/s left unserved; ``unserved_rate / total_rate`` is what status reports."""
    added: int
    """Replicas above what runs now, summed over options (what the churn penalty charges)."""
    removed: int
    reasons: list[str] = []
    """Why traffic is unserved or minReplicas is not held: the limits that bind (pools full,
    budgets reached, ...)."""

    @property
    def unserved_fraction(self) -> float:
        return self.unserved_rate / self.total_rate if self.total_rate > 0 else 0.0

    @property
    def short(self) -> bool:
        """Traffic left unserved beyond solver tolerance: the stages fix earlier optima with a
        little slack, so a later stage may leave ~1e-7 of a bucket unplaced."""
        return self.unserved_fraction > UNSERVED_TOL


class JointAllocation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: Objective
    services: dict[str, ServiceAllocation]
    pool_gpus: dict[str, int]
    """GPUs planned per pool over all services."""
    cost_per_hour: float
    churn_cost: float
    """Coral §4.3's initialisation penalty of this plan (in $/h-equivalents)."""
    throughput_scale: float | None = None
    """Max-throughput form: ``α``, the multiple of every demand served (makespan ``1/α``)."""
    result: SolveResult
    """The last solve; ``seconds`` is the sum over all stages."""
    stages: list[SolveResult]
    """Each solve in order: full service, then (if needed) unserved interactive, unserved batch,
    replicas short of minReplicas, then cost; or the LP bound on α, max α, (minReplicas,) then
    cost."""
