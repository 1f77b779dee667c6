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
    LLMService,
    LLMServiceStatus,
    PoolAllocation,
    PoolShare,
    WorkloadUsed,
)
from gpumix.plan import (
    Allocation,
    AllocationInstance,
    SolverError,
    UnservableBucketError,
    solve,
)
from gpumix.plan.joint import ServiceAllocation
from gpumix.problem import PoolChoice, ServiceProblem, option_key
from gpumix.reconcile import rollout
from gpumix.reconcile.conditions import remove_condition, set_condition
from gpumix.reconcile.kvmigration import reductions
from gpumix.reconcile.pacing import LABEL, PacingInput, pace
from gpumix.reconcile.rollout import summary

COST_TOLERANCE = 1e-6


class Running(BaseModel):
    """What runs now for one service, read off its Deployments."""

    model_config = ConfigDict(frozen=True)

    replicas: dict[str, int] = {}
    ready: dict[str, int] = {}
    gpus_per_replica: dict[str, int] = {}
    names: dict[str, str] = {}
    """Option → the Deployment's name (what to delete when the option is dropped)."""

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
    """Deployments (names) no longer needed."""
    target: dict[str, int] | None = None
    choices: dict[str, PoolChoice] = {}
    shares: dict[str, list[list[float]]] = {}
    status: LLMServiceStatus
    events: list[EventSpec] = []
    held_gpus: dict[str, int] = {}
    """GPUs per option this service holds or is about to (planner input for kept services)."""


@functools.lru_cache(maxsize=256)
def _baselines(instance_json: str, time_limit_s: float) -> dict[str, Allocation | None]:
    """Mélange §6.1's single-type baselines, one per option; pure, so cached across passes."""
    instance = AllocationInstance.model_validate_json(instance_json)
    uncapped = instance.model_copy(
        update={"gpus": [g.model_copy(update={"max_count": None}) for g in instance.gpus]}
    )
    out: dict[str, Allocation | None] = {}
    for gpu in uncapped.gpus:
        try:
            out[gpu.name] = solve(uncapped, time_limit_s=time_limit_s, only=gpu.name)
        except (UnservableBucketError, SolverError):
            out[gpu.name] = None
    return out


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


def decide_planned(
    service: LLMService,
    *,
    generation: int | None,
    problem: ServiceProblem,
    allocation: ServiceAllocation,
    planned_rate: float,
    running: Running,
    previous: LLMServiceStatus | None,
    conflicts: dict[str, str],
    pool_gpus: dict[str, int | None],
    solve_seconds: float,
    now: str,
    time_limit_s: float = 30.0,
    pacing: PacingInput | None = None,
) -> ServiceDecision:
    """Turn this service's part of the joint plan into what to apply now and its status;
    `pacing` (SageServe §6.5.1, `gpumix.reconcile.pacing`) may hold the replicas short of (or,
    LT-UA, past) the plan's target for now."""
    spec = service.spec
    excluded = "; ".join(f"{p}: {why}" for p, why in problem.excluded.items())
    assert problem.instance is not None
    target = {p: allocation.counts.get(p, 0) for p in problem.choices}
    for option in conflicts:
        target[option] = running.replicas.get(option, 0)  # an autoscaler owns these replicas
    # The target is an upper bound: the KV scheduler may run fewer (gpumix.reconcile.kvmigration).
    kv_status = previous.kv_scheduler if previous else None
    kv_removed = {
        p: n
        for p, n in reductions(spec.kv_migration, kv_status, target).items()
        if p not in conflicts
    }
    run_target = {p: n - kv_removed.get(p, 0) for p, n in target.items()}
    note = f"; the KV scheduler runs {summary(run_target)}" if kv_removed else ""
    pacing_status = None
    if pacing is not None:
        paced, pacing_status = pace(
            pacing, run_target, running.replicas, previous.pacing if previous else None
        )
        paced = {p: run_target[p] if p in conflicts else n for p, n in paced.items()}
        if paced != run_target:
            note += f"; pacing ({LABEL[pacing.mode]}) runs {summary(paced)} for now"
        run_target = paced
    cost = sum(n * problem.choices[p].gpus_per_replica * problem.choices[p].price_per_gpu_hour
               for p, n in target.items())  # fmt: skip
    staged = rollout.stage(running.replicas, run_target, running.ready)
    apply = {p: n for p, n in staged.items() if n > 0 and p not in conflicts}
    delete = sorted(
        running.names.get(p, p) for p, n in staged.items() if n == 0 and p in running.replicas
    )
    baselines = _baselines(problem.instance.model_dump_json(), time_limit_s)
    status = _status(
        service,
        baselines=baselines,
        choices=problem.choices,
        target=target,
        cost=cost,
        running=running,
        previous=previous,
        conflicts=conflicts,
        excluded=excluded,
        generation=generation,
        now=now,
        solve_seconds=solve_seconds,
        allocation_result=allocation,
        planned_rate=planned_rate,
        pool_gpus=pool_gpus,
        applied=run_target,
        note=note,
    ).model_copy(update={"pacing": pacing_status})
    events = []
    old = {
        a_key(a.pool, a.gpus_per_replica): a.replicas
        for a in (previous.allocation if previous else [])
    }
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
    if allocation.short:
        message = status_message_unserved(allocation)
        seen = previous is not None and previous.unserved_reason == status.unserved_reason
        if not seen:
            events.append(EventSpec(type="Warning", reason="InsufficientCapacity", message=message))
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


def a_key(pool: str, gpus_per_replica: int) -> str:
    return option_key(pool, gpus_per_replica)


def status_message_unserved(allocation: ServiceAllocation) -> str:
    return (
        f"serving {100 * (1 - allocation.unserved_fraction):.1f}% of "
        f"{allocation.total_rate:.3g} req/s; {allocation.unserved_rate:.3g} req/s unserved: "
        + "; ".join(allocation.reasons)
    )


def _status(
    service: LLMService,
    *,
    baselines: dict[str, Allocation | None],
    choices: dict[str, PoolChoice],
    target: dict[str, int],
    cost: float,
    running: Running,
    previous: LLMServiceStatus | None,
    conflicts: dict[str, str],
    excluded: str,
    generation: int | None,
    now: str,
    solve_seconds: float,
    allocation_result: ServiceAllocation,
    planned_rate: float,
    pool_gpus: dict[str, int | None],
    applied: dict[str, int] | None = None,
    note: str = "",
) -> LLMServiceStatus:
    wl = service.spec.workload
    base_list = []
    for option, base in baselines.items():
        base_list.append(
            Baseline(
                gpu_type=choices[option].gpu_type
                + (
                    ""
                    if choices[option].gpus_per_replica == 1
                    else f" (tp{choices[option].gpus_per_replica})"
                ),
                replicas=base.counts.get(option) if base else None,
                cost_per_hour=round(base.cost_per_hour, 4) if base else None,
            )
        )
    feasible = [b.cost_per_hour for b in baselines.values() if b is not None]
    cheapest: float = min(feasible, default=0.0)
    savings = round(100 * (1 - cost / cheapest), 1) if cheapest > 0 else None
    allocation = [
        PoolAllocation(
            pool=choices[p].pool,
            gpu_type=choices[p].gpu_type,
            replicas=n,
            gpus_per_replica=choices[p].gpus_per_replica,
            cost_per_hour=round(n * choices[p].gpus_per_replica * choices[p].price_per_gpu_hour, 4),
            load=round(allocation_result.load.get(p, 0.0), 3),
        )
        for p, n in sorted(target.items())
        if n
    ]
    conds = list(previous.conditions) if previous else []
    run_target = applied if applied is not None else target
    waiting = [
        f"{p} {running.ready.get(p, 0)}/{n} ready"
        for p, n in sorted(run_target.items())
        if running.ready.get(p, 0) != n and p not in conflicts
    ]

    def setc(type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        nonlocal conds
        conds = set_condition(conds, type_, status, reason, message, generation=generation, now=now)

    left_out = f"; pools left out: {excluded}" if excluded else ""
    setc("Planned", ConditionStatus.TRUE, "PlanComputed",
         f"{summary(target)} for {cost:.2f} $/h{left_out}")  # fmt: skip
    unserved = allocation_result.short
    if unserved:
        setc("Ready", ConditionStatus.FALSE, "InsufficientCapacity",
             status_message_unserved(allocation_result))  # fmt: skip
    elif waiting:
        setc("Ready", ConditionStatus.FALSE, "RollingOut", "waiting for " + ", ".join(waiting))
    else:
        setc("Ready", ConditionStatus.TRUE, "Serving", f"{summary(target)} serving{note}")
    if unserved:
        setc("Degraded", ConditionStatus.TRUE, "PartiallyServed",
             "; ".join(allocation_result.reasons))  # fmt: skip
    elif allocation_result.reasons:  # all traffic served, the minReplicas floor is not
        setc("Degraded", ConditionStatus.TRUE, "MinReplicasNotReached",
             "; ".join(allocation_result.reasons))  # fmt: skip
    else:
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
        baselines=base_list,
        savings_percent=savings,
        solve_seconds=(
            previous.solve_seconds  # the plan in force was solved then; rewriting churns status
            if previous is not None and previous.allocation == allocation
            else round(solve_seconds, 4)
        ),
        workload=WorkloadUsed(
            source=wl.source,
            request_rate=wl.request_rate,
            over_provision=wl.over_provision,
            planned_request_rate=planned_rate,
        ),
        replicas_summary=summary(target),
        unserved_fraction=round(allocation_result.unserved_fraction, 4) if unserved else None,
        unserved_reason="; ".join(allocation_result.reasons) if unserved else None,
        pool_shares=_pool_shares(choices, target, pool_gpus),
        kv_scheduler=previous.kv_scheduler if previous else None,
    )


def _pool_shares(
    choices: dict[str, PoolChoice], target: dict[str, int], pool_gpus: dict[str, int | None]
) -> list[PoolShare]:
    """GPUs per pool over the service's options, and their share of what the pool offers."""
    gpus: dict[str, int] = {}
    for option, n in target.items():
        if n:
            c = choices[option]
            gpus[c.pool] = gpus.get(c.pool, 0) + n * c.gpus_per_replica
    out = []
    for pool, n in sorted(gpus.items()):
        total = pool_gpus.get(pool)
        percent = round(100 * n / total, 1) if total else None
        out.append(PoolShare(pool=pool, gpus=n, percent=percent))
    return out
