"""Services planned in turn, oldest first, each in what the ones before it left (Coral §2.2,
Fig. 2): what the operator did before the joint planner, and so the floor the joint search must
not do worse than (:func:`gpumix.plan.joint.solve.solve_joint` keeps this plan when its search
stops at the time limit on a dearer one)."""

from __future__ import annotations

from collections.abc import Callable

from gpumix.plan.joint.instance import JointInstance, PoolLimit, ServiceDemand
from gpumix.plan.joint.result import JointAllocation

SolveOne = Callable[[JointInstance], JointAllocation | None]
"""The cheapest plan serving one service's instance in full, ``None`` when none fits."""


def in_turn(
    instance: JointInstance, solve_one: SolveOne
) -> list[tuple[ServiceDemand, JointAllocation | None]]:
    """Each service with its plan in what the pools (and the cluster budget) have left after
    the services before it; ``None`` for a service that no longer fits or cannot be served."""
    left = {p.name: p.gpus for p in instance.pools}
    budget = instance.budget_per_hour
    out: list[tuple[ServiceDemand, JointAllocation | None]] = []
    for service in instance.services:
        if service.unservable():
            out.append((service, None))
            continue
        alone = instance.model_copy(update={
            "services": [service],
            "pools": [PoolLimit(name=n, gpus=g) for n, g in left.items()],
            "budget_per_hour": budget,
            "allow_partial": False,
        })  # fmt: skip
        plan = solve_one(alone)
        out.append((service, plan))
        if plan is None:
            continue
        alloc = plan.services[service.name]
        for option in service.options:
            gpus = left[option.pool]
            if gpus is not None:
                left[option.pool] = gpus - alloc.counts[option.name] * option.gpus_per_replica
        if budget is not None:
            budget -= alloc.cost_per_hour
    return out
