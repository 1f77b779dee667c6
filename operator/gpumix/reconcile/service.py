"""One service's pass of the planner loop: plan, choose what to apply, and say why in status.

A failed or infeasible replan never touches what runs: the decision then applies nothing and the
status keeps the last good allocation, with conditions naming the problem.
"""

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpumix.api import (
    Baseline,
    ConditionStatus,
    GPUPool,
    GPUProfile,
    LLMService,
    LLMServiceStatus,
    PoolAllocation,
    WorkloadUsed,
)
from gpumix.plan import (
    AllocationInstance,
    Plan,
    SolverError,
    UnservableBucketError,
    plan_allocation,
    solve,
)
from gpumix.problem import PoolChoice, build_problem
from gpumix.reconcile import rollout
from gpumix.reconcile.conditions import remove_condition, set_condition

COST_TOLERANCE = 1e-6


class Running(BaseModel):
    """What runs now for one service, read off its Deployments."""

    model_config = ConfigDict(frozen=True)

    replicas: dict[str, int] = {}
    ready: dict[str, int] = {}
    gpus_per_replica: dict[str, int] = {}

    def gpus(self) -> dict[str, int]:
        """GPUs per pool these Deployments hold (or will, once scheduled)."""
        return {p: n * self.gpus_per_replica.get(p, 1) for p, n in self.replicas.items()}


class EventSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class ServiceDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    apply: dict[str, int] | None
    """Replicas per pool to apply now (make-before-break staged); None leaves everything as is."""
    delete: list[str] = []
    """Pools whose Deployment is no longer needed."""
    target: dict[str, int] | None = None
    choices: dict[str, PoolChoice] = {}
    shares: dict[str, list[list[float]]] = {}
    status: LLMServiceStatus
    events: list[EventSpec] = []
    held_gpus: dict[str, int] = {}
    """GPUs per pool this service holds or is about to: later services plan around them."""


@functools.lru_cache(maxsize=256)
def _plan(instance_json: str, time_limit_s: float) -> Plan:
    """Plans are pure functions of the instance; the loop reruns on every pod event, so cache."""
    return plan_allocation(
        AllocationInstance.model_validate_json(instance_json), time_limit_s=time_limit_s
    )


@functools.lru_cache(maxsize=256)
def _sticky_cost(instance_json: str, time_limit_s: float) -> tuple[dict[str, int], float] | None:
    allocation = solve(
        AllocationInstance.model_validate_json(instance_json), time_limit_s=time_limit_s
    )
    return None if allocation is None else (dict(allocation.counts), allocation.cost_per_hour)


def _capped(instance: AllocationInstance, caps: dict[str, int]) -> AllocationInstance:
    gpus = [
        g.model_copy(
            update={"max_count": min(caps.get(g.name, 0), g.max_count or caps.get(g.name, 0))}
        )
        for g in instance.gpus
    ]
    return instance.model_copy(update={"gpus": gpus})


def _change_summary(old: dict[str, int], new: dict[str, int]) -> str:
    pools = sorted(set(old) | set(new))
    return ", ".join(
        f"{p} {old.get(p, 0)}→{new.get(p, 0)}" for p in pools if old.get(p, 0) != new.get(p, 0)
    )


def _keep(
    *,
    previous: LLMServiceStatus | None,
    running: Running,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> ServiceDecision:
    """Planning failed: leave the Deployments alone, keep the last good plan in status."""
    prev = previous or LLMServiceStatus()
    conds = set_condition(
        prev.conditions,
        "Ready",
        ConditionStatus.FALSE,
        reason,
        message,
        generation=generation,
        now=now,
    )
    conds = set_condition(
        conds, "Planned", ConditionStatus.FALSE, reason, message, generation=generation, now=now
    )
    serving = any(running.replicas.values())
    conds = set_condition(
        conds,
        "Degraded",
        ConditionStatus.TRUE if serving else ConditionStatus.FALSE,
        "KeepingLastPlan" if serving else "NothingRunning",
        "the last good allocation keeps serving" if serving else "no replicas are running",
        generation=generation,
        now=now,
    )
    status = prev.model_copy(update={"conditions": conds, "observed_generation": generation})
    events = [EventSpec(type="Warning", reason=reason, message=message)]
    if prev.conditions and any(
        c.type == "Planned" and c.reason == reason and c.message == message for c in prev.conditions
    ):
        events = []  # already reported; don't repeat the event every pass
    return ServiceDecision(apply=None, status=status, events=events, held_gpus=running.gpus())


def decide_service(
    service: LLMService,
    *,
    generation: int | None,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    available_gpus: dict[str, int],
    running: Running,
    previous: LLMServiceStatus | None,
    conflicts: dict[str, str],
    now: str,
    time_limit_s: float = 30.0,
) -> ServiceDecision:
    spec = service.spec
    problem = build_problem(service, pools, profiles, available_gpus)
    excluded = "; ".join(f"{p}: {why}" for p, why in problem.excluded.items())

    def keep(reason: str, message: str) -> ServiceDecision:
        return _keep(
            previous=previous,
            running=running,
            reason=reason,
            message=message,
            generation=generation,
            now=now,
        )

    if problem.instance is None:
        return keep("NoUsablePool", f"no GPU pool can serve this service ({excluded})")
    instance = problem.instance
    try:
        plan = _plan(instance.model_dump_json(), time_limit_s)
    except UnservableBucketError as err:
        return keep("Unservable", str(err) + (f" (pools left out: {excluded})" if excluded else ""))
    except SolverError as err:
        return keep("SolverFailed", f"the ILP solver stopped without a plan: {err}")
    if plan.allocation is None:
        uncapped = instance.model_copy(
            update={"gpus": [g.model_copy(update={"max_count": None}) for g in instance.gpus]}
        )
        needs = _plan(uncapped.model_dump_json(), time_limit_s).allocation
        need_txt = ", ".join(f"{n}×{c}" for n, c in (needs.counts if needs else {}).items() if c)
        free = ", ".join(f"{g.name} {g.max_count}" for g in instance.gpus)
        return keep(
            "InsufficientCapacity",
            f"the cheapest plan needs {need_txt or 'more GPUs than exist'} replicas but only "
            f"{free} replicas are free for this service",
        )
    allocation = plan.allocation
    counts, cost = dict(allocation.counts), allocation.cost_per_hour
    current = {p: n for p, n in running.replicas.items() if p in problem.choices}
    if any(current.values()):
        sticky = _sticky_cost(_capped(instance, current).model_dump_json(), time_limit_s)
        if sticky is not None and sticky[1] <= cost + COST_TOLERANCE:
            counts, cost = sticky  # as cheap as the optimum without moving a replica
    target = {p: counts.get(p, 0) for p in problem.choices}
    for pool in conflicts:
        target[pool] = running.replicas.get(pool, 0)  # an autoscaler owns these replicas
    staged = rollout.stage(running.replicas, target, running.ready)
    apply = {p: n for p, n in staged.items() if n > 0 and p not in conflicts}
    delete = sorted(p for p, n in staged.items() if n == 0 and p in running.replicas)

    status = _status(
        service,
        plan=plan,
        choices=problem.choices,
        target=target,
        cost=cost,
        running=running,
        previous=previous,
        conflicts=conflicts,
        excluded=excluded,
        generation=generation,
        now=now,
    )
    events = []
    old = {a.pool: a.replicas for a in (previous.allocation if previous else [])}
    if old != {p: n for p, n in target.items() if n} and (old or any(target.values())):
        old_rate = previous.workload.request_rate if previous and previous.workload else None
        rate = (
            f"rate {old_rate:g}→{spec.workload.request_rate:g} req/s"
            if old_rate is not None
            else f"rate {spec.workload.request_rate:g} req/s"
        )
        events.append(
            EventSpec(
                type="Normal",
                reason="PlanChanged",
                message=f"{_change_summary(old, target)}: {rate}, {cost:.2f} $/h",
            )
        )
    held = running.gpus()
    for p, n in staged.items():
        held[p] = max(held.get(p, 0), n * problem.choices[p].gpus_per_replica)
    return ServiceDecision(
        apply=apply,
        delete=delete,
        target=target,
        choices=problem.choices,
        shares={p: allocation.share.get(p, []) for p in target if target[p]},
        status=status,
        events=events,
        held_gpus=held,
    )


def _status(
    service: LLMService,
    *,
    plan: Plan,
    choices: dict[str, PoolChoice],
    target: dict[str, int],
    cost: float,
    running: Running,
    previous: LLMServiceStatus | None,
    conflicts: dict[str, str],
    excluded: str,
    generation: int | None,
    now: str,
) -> LLMServiceStatus:
    wl = service.spec.workload
    assert plan.allocation is not None
    baselines = []
    for pool, base in plan.baselines.items():
        replicas = base.counts.get(pool) if base else None
        baselines.append(
            Baseline(
                gpu_type=choices[pool].gpu_type,
                replicas=replicas,
                cost_per_hour=round(base.cost_per_hour, 4) if base else None,
            )
        )
    feasible = [b.cost_per_hour for b in plan.baselines.values() if b is not None]
    cheapest: float = min(feasible, default=0.0)
    savings = round(100 * (1 - cost / cheapest), 1) if cheapest > 0 else None
    allocation = [
        PoolAllocation(
            pool=p,
            gpu_type=choices[p].gpu_type,
            replicas=n,
            gpus_per_replica=choices[p].gpus_per_replica,
            cost_per_hour=round(n * choices[p].gpus_per_replica * choices[p].price_per_gpu_hour, 4),
        )
        for p, n in sorted(target.items())
        if n
    ]
    conds = list(previous.conditions) if previous else []
    waiting = [
        f"{p} {running.ready.get(p, 0)}/{n} ready"
        for p, n in sorted(target.items())
        if running.ready.get(p, 0) != n and p not in conflicts
    ]

    def setc(type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        nonlocal conds
        conds = set_condition(conds, type_, status, reason, message, generation=generation, now=now)

    left_out = f"; pools left out: {excluded}" if excluded else ""
    setc("Planned", ConditionStatus.TRUE, "PlanComputed",
         f"{_summary(target)} for {cost:.2f} $/h{left_out}")  # fmt: skip
    if waiting:
        setc("Ready", ConditionStatus.FALSE, "RollingOut", "waiting for " + ", ".join(waiting))
    else:
        setc("Ready", ConditionStatus.TRUE, "Serving", f"{_summary(target)} serving")
    setc("Degraded", ConditionStatus.FALSE, "AsPlanned", "")
    if conflicts:
        text = "; ".join(f"{p}: {who}" for p, who in sorted(conflicts.items()))
        setc(
            "ConflictingAutoscaler",
            ConditionStatus.TRUE,
            "AutoscalerTargetsDeployment",
            f"leaving replicas to the autoscaler ({text})",
        )
    else:
        conds = remove_condition(conds, "ConflictingAutoscaler")
    return LLMServiceStatus(
        observed_generation=generation,
        conditions=conds,
        allocation=allocation,
        cost_per_hour=round(cost, 4),
        baselines=baselines,
        savings_percent=savings,
        solve_seconds=(
            previous.solve_seconds  # the plan in force was solved then; rewriting churns status
            if previous is not None and previous.allocation == allocation
            else round(plan.allocation.result.seconds, 4)
        ),
        workload=WorkloadUsed(
            source="Static", request_rate=wl.request_rate, over_provision=wl.over_provision
        ),
        replicas_summary=_summary(target),
    )


def _summary(target: dict[str, int]) -> str:
    return ",".join(f"{p}={n}" for p, n in sorted(target.items()) if n) or "none"
