"""The baseline the joint plan replaces: services planned one at a time, oldest first.

Each service gets the cheapest plan that serves it in full within what the pools (and the
cluster budget) have left after the services before it — what the operator did before the
joint planner — so a later service may find nothing left (Coral §2.2, Fig. 2).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpumix.plan.joint.instance import JointInstance, PoolLimit
from gpumix.plan.joint.result import ServiceAllocation
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
    instance: JointInstance, *, solver: SolverName = "highs", time_limit_s: float = 30.0
) -> SequentialPlan:
    left = {p.name: p.gpus for p in instance.pools}
    budget = instance.budget_per_hour
    out: dict[str, ServiceAllocation | None] = {}
    seconds = 0.0
    for service in instance.services:
        alone = JointInstance(
            services=[service],
            pools=[PoolLimit(name=n, gpus=g) for n, g in left.items()],
            budget_per_hour=budget,
            allow_partial=False,
        )
        if service.unservable():
            out[service.name] = None
            continue
        plan = solve_joint(alone, solver=solver, time_limit_s=time_limit_s)
        if plan is None:
            out[service.name] = None
            continue
        seconds += plan.result.seconds
        alloc = plan.services[service.name]
        out[service.name] = alloc
        for option in service.options:
            used = alloc.counts[option.name] * option.gpus_per_replica
            gpus = left[option.pool]
            if gpus is not None:
                left[option.pool] = gpus - used
        if budget is not None:
            budget -= alloc.cost_per_hour
    return SequentialPlan(services=out, seconds=seconds)
