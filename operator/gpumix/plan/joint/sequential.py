"""The baseline the joint plan replaces: services planned one at a time, oldest first.

Each service gets the cheapest plan that serves it in full within what the pools (and the
cluster budget) have left after the services before it (:func:`gpumix.plan.joint.inturn.in_turn`)
— what the operator did before the joint planner — so a later service may find nothing left
(Coral §2.2, Fig. 2). Here each service's plan is a whole :func:`solve_joint`, split balanced.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpumix.plan.joint.instance import JointInstance
from gpumix.plan.joint.inturn import in_turn
from gpumix.plan.joint.result import JointAllocation, ServiceAllocation
from gpumix.plan.joint.solve import solve_joint
from gpumix.plan.result import SolverName


class SequentialPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    services: dict[str, ServiceAllocation | None]
    """``None``: the service did not fit in what was left."""
    seconds: float

    @property
    def cost_per_hour(self) -> float:
        return sum(a.cost_per_hour for a in self.services.values() if a is not None)

    @property
    def served(self) -> int:
        return sum(a is not None for a in self.services.values())


def solve_sequential(
    instance: JointInstance,
    *,
    solver: SolverName = "highs",
    time_limit_s: float = 30.0,
    gap_rel: float = 0.0,
) -> SequentialPlan:
    def solve_one(alone: JointInstance) -> JointAllocation | None:
        return solve_joint(alone, solver=solver, time_limit_s=time_limit_s, gap_rel=gap_rel)

    planned = in_turn(instance, solve_one)
    return SequentialPlan(
        services={s.name: None if p is None else p.services[s.name] for s, p in planned},
        seconds=sum(p.result.seconds for _, p in planned if p is not None),
    )
