"""Decomposition of the joint min-cost plan by contention (#19, "where the joint ILP does not
scale").

Services are coupled only through the pools' GPUs and the cluster budget (Coral §4.3's
availability constraint; Mélange §5.4's ILP is per service). Dropping the coupling leaves one
small Mélange problem per service, and the sum of their optima is a lower bound on the joint
optimum. When their union fits the pools it *is* the joint optimum (the common case:
:func:`gpumix.plan.joint.solve._separately`). When it does not, most services still do not
care: only those whose own plans use an overflowing pool compete. :func:`contended` names them,
they are solved jointly in the whole pools (:func:`restricted`), and the others keep their own
optimum. If the contended plan plus the others' overflows another pool, the services using that
pool join the contended set and the joint solve repeats, until the union fits (or every service
contends: then the full joint solve is the only one).

The bound (:func:`bound`) is valid whatever the contended set: in any joint plan each
uncontended service costs at least its own optimum, and the contended services' part is a plan
of the contended services alone in the whole pools, which costs at least that solve's bound.
When the union fits, the plan reaches that bound up to the solves' gaps, so a decomposed plan
is optimal to the same gap as the full solve.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpumix.plan.joint.instance import JointInstance, ServiceDemand
from gpumix.plan.joint.result import JointAllocation, ServiceAllocation

MONEY_TOL = 1e-9


def usage(service: ServiceDemand, alloc: ServiceAllocation) -> dict[str, int]:
    """GPUs the service's plan takes per pool."""
    out: dict[str, int] = {}
    for option in service.options:
        count = alloc.counts.get(option.name, 0)
        if count:
            out[option.pool] = out.get(option.pool, 0) + count * option.gpus_per_replica
    return out


def overflowing(instance: JointInstance, allocs: Mapping[str, ServiceAllocation]) -> set[str]:
    """The pools the services' plans, put together, take more GPUs of than they have."""
    used: dict[str, int] = {}
    for service in instance.services:
        for pool, gpus in usage(service, allocs[service.name]).items():
            used[pool] = used.get(pool, 0) + gpus
    return {p.name for p in instance.pools if p.gpus is not None and used.get(p.name, 0) > p.gpus}


def fits(instance: JointInstance, allocs: Mapping[str, ServiceAllocation]) -> bool:
    """Whether the plans fit every pool and the cluster budget together."""
    if overflowing(instance, allocs):
        return False
    budget = instance.budget_per_hour
    cost = sum(allocs[s.name].cost_per_hour for s in instance.services)
    return budget is None or cost <= budget + MONEY_TOL


def contended(
    instance: JointInstance, allocs: Mapping[str, ServiceAllocation], already: set[int]
) -> set[int]:
    """``already`` and every service (by index) whose plan uses a pool the plans overflow."""
    over = overflowing(instance, allocs)
    return already | {
        i
        for i, service in enumerate(instance.services)
        if over & usage(service, allocs[service.name]).keys()
    }


def restricted(instance: JointInstance, members: set[int]) -> JointInstance:
    """The contended services alone, in the whole pools, every one served in full."""
    return instance.model_copy(update={
        "services": [instance.services[i] for i in sorted(members)],
        "budget_per_hour": None,
        "allow_partial": False,
    })  # fmt: skip


def lower(plan: JointAllocation) -> float:
    """A lower bound on the objective (cost plus churn penalty) of ``plan``'s instance: its
    objective less its reported relative gap (0 without a gap from a search that stopped)."""
    objective = plan.cost_per_hour + plan.churn_cost
    gap = plan.result.gap
    if gap is None:
        return objective if plan.result.status == "optimal" else 0.0
    return objective * (1 - min(1.0, max(0.0, gap)))


def bound(
    instance: JointInstance, own: list[JointAllocation], members: set[int], joint: JointAllocation
) -> float:
    """A lower bound on the joint optimum: the uncontended services' own optima (each less
    its gap) plus the bound of the contended services' joint solve in the whole pools."""
    outside = sum(lower(own[i]) for i in range(len(instance.services)) if i not in members)
    return outside + lower(joint)
