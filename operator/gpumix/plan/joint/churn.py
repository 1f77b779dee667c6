"""Churn awareness (Coral §4.3): what a newly added replica costs, and the scale-down deadband.

Two mechanisms, both pure:

- the *initialisation penalty* in the objective (:func:`gpumix.plan.joint.model.add_churn`):
  a replica above what runs costs ``λ × its $/h`` once, Coral's ``λ`` being the ratio of a
  replica's startup and model-load time to how long a plan stays in force. A different mix must
  then save more than the penalty to be worth moving to; equal-cost mixes never move;
- a *deadband* on the demand the planner plans for (:func:`planned_rate`): growth is planned for
  at once (capacity is needed now), but a fall within ``tolerance`` of the rate last planned for
  keeps that rate, so demand wiggles do not remove replicas only to add them back a minute
  later (the scale-down counterpart of the penalty, like the HPA's 10% tolerance).

The penalty's reference, the replicas that run, moves as a plan rolls out, and with it the
instance. While it moves only towards the plan, the plan stays at least as good against every
other plan as when it was solved (:func:`toward`), so it is kept (:func:`rebased`) instead of
solving the fleet again after every rollout (#19).
"""

from __future__ import annotations

from gpumix.plan.joint.instance import JointInstance, ServiceDemand
from gpumix.plan.joint.result import JointAllocation

DEFAULT_CHURN_PENALTY = 0.5
"""λ: 10 minutes of node startup, image pull and model load over a 20-minute planning horizon."""

DEFAULT_TOLERANCE = 0.1
"""Relative fall in demand that is absorbed before replicas are removed."""


def planned_rate(actual: float, previous: float | None, tolerance: float) -> float:
    """The request rate to plan for now, given the rate the plan in force was made for."""
    if previous is None or actual > previous:
        return actual
    if actual >= previous * (1.0 - tolerance):
        return previous
    return actual


def charged(service: ServiceDemand, counts: dict[str, int]) -> tuple[int, int, float]:
    """Replicas ``counts`` adds above what runs and removes below it, and the penalty of those
    added (pinned options pay none)."""
    added = sum(max(0, counts[o.name] - o.running) for o in service.options)
    removed = sum(max(0, o.running - counts[o.name]) for o in service.options)
    penalty = sum(
        max(service.churn_penalty, 0.0) * o.cost_per_hour * max(0, counts[o.name] - o.running)
        for o in service.options
        if o.fixed is None
    )
    return added, removed, penalty


RunningCounts = list[list[int]]
"""Running replicas per service and option, in the instance's order."""


def running(instance: JointInstance) -> RunningCounts:
    return [[o.running for o in s.options] for s in instance.services]


def without_running(instance: JointInstance) -> str:
    """The instance's JSON without its running replicas: what stays the same while a plan
    rolls out."""
    return instance.model_dump_json(exclude={"services": {"__all__": _OPTIONS_RUNNING}})


def service_without_running(service: ServiceDemand) -> str:
    """:func:`without_running` of one service."""
    return service.model_dump_json(exclude=_OPTIONS_RUNNING)


_OPTIONS_RUNNING = {"options": {"__all__": {"running"}}}


def toward(before: RunningCounts, plan: JointAllocation, instance: JointInstance) -> bool:
    """Whether each option's running count in ``instance`` lies between ``before`` (what ran
    when ``plan`` was solved) and ``plan``'s count, both included.

    The penalty of ``x`` replicas over ``r`` running is ``λ·c·max(0, x − r)`` per option. When
    ``r`` grows by ``δ`` towards the plan's count, the plan's penalty falls by ``λ·c·δ``, the
    most any plan's can; when it falls towards it, the plan's stays 0 and no plan's falls. So
    the plan's objective falls by at least as much as any other's: it loses nothing against
    any of them, and a bound on the optimum falls by the plan's saving at most."""
    for service, was in zip(instance.services, before, strict=True):
        counts = plan.services[service.name].counts
        for option, r0 in zip(service.options, was, strict=True):
            n = counts.get(option.name, 0)
            if not min(r0, n) <= option.running <= max(r0, n):
                return False
    return True


def rebased(plan: JointAllocation, instance: JointInstance) -> JointAllocation:
    """``plan`` with its replicas added and removed, and its penalty, counted against what runs
    in ``instance`` (:func:`toward` says when it is still the plan to keep); its gap stays as
    wide in $/h as when it was solved."""
    services = {}
    churn = 0.0
    for service in instance.services:
        alloc = plan.services[service.name]
        added, removed, penalty = charged(service, alloc.counts)
        services[service.name] = alloc.model_copy(update={"added": added, "removed": removed})
        churn += penalty
    result = plan.result
    objective = None if result.objective is None else result.objective - (plan.churn_cost - churn)
    gap = result.gap
    if gap is not None and result.objective and objective:
        gap = gap * result.objective / objective
    note = "kept: only the running replicas moved towards it"
    message = result.message if result.message.endswith(note) else f"{result.message}; {note}"
    kept = result.model_copy(
        update={"objective": objective, "gap": gap, "seconds": 0.0, "message": message}
    )
    return plan.model_copy(update={"services": services, "churn_cost": churn, "result": kept})
