"""One service's pass of the planner loop: plan, choose what to apply, and say why in status.

A failed or infeasible replan never touches what runs: the decision then applies nothing and the
status keeps the last good allocation, with conditions naming the problem.

The plan applied is simulated as the router will route it (:func:`gpumix.attainment.predict`,
as `gpumix plan` does offline), and condition SLOAtRisk says when its predicted attainment is
below the service's target, and how many rounds of MaxTput derating the planner spent on it
(the loop that derates and solves again is the cluster pass's: :mod:`gpumix.reconcile.cluster`).
"""

import hashlib
import json
import logging
import weakref
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from gpumix.api import (
    Baseline,
    ConditionStatus,
    GPUPool,
    GPUProfile,
    LLMService,
    LLMServiceStatus,
    PoolAllocation,
    PoolShare,
    WorkloadUsed,
)
from gpumix.api.llmservice import DeratingStatus
from gpumix.attainment import KV_HEADROOM, PredictedAttainment, alone_hint, derated, predict
from gpumix.digestcache import DigestCache
from gpumix.plan import (
    Allocation,
    AllocationInstance,
    SolverError,
    SolveResult,
    UnservableBucketError,
    solve,
)
from gpumix.plan.joint import ServiceAllocation
from gpumix.problem import PoolChoice, ServiceProblem, option_key
from gpumix.profiles.models import UnknownModelError
from gpumix.profiles.shape import ModelShape
from gpumix.reconcile import rollout
from gpumix.reconcile.conditions import condition, remove_condition, set_condition
from gpumix.reconcile.kvmigration import reductions
from gpumix.reconcile.modelshape import unknown_model_message
from gpumix.reconcile.pacing import LABEL, PacingInput, pace
from gpumix.reconcile.rollout import summary

COST_TOLERANCE = 1e-6
SLO_AT_RISK = "SLOAtRisk"
UNSCHEDULABLE = "Unschedulable"
"""Ready's reason while pods of the plan wait for the scheduler, which cannot place them."""
PREDICTIONS_KEPT = 4096
"""Predictions cached (by digest of their inputs): several per service of a 500-service fleet.
With fewer entries than services a pass evicts what the next one needs and every pass
simulates every service again (500 keys read in the same order each pass all miss a FIFO of 256)."""
BASELINES_KEPT = 4096
"""Single-type baselines cached (:func:`_baselines`), for the same reason."""
HOT_KEPT = 1024
"""Predictions and baselines kept unpacked besides (a few KB each): every pass reads one of
each per service, and at 500 services unpacking them took 0.3 s of a 3 s pass."""

log = logging.getLogger("gpumix.planner")
_predictions: DigestCache[PredictedAttainment | str] = DigestCache(PREDICTIONS_KEPT, HOT_KEPT)


class Running(BaseModel):
    """What runs now for one service, read off its Deployments."""

    model_config = ConfigDict(frozen=True)

    replicas: dict[str, int] = {}
    ready: dict[str, int] = {}
    gpus_per_replica: dict[str, int] = {}
    names: dict[str, str] = {}
    """Option → the Deployment's name (what to delete when the option is dropped)."""
    unschedulable: dict[str, str] = {}
    """Option → its pods the scheduler could not place, and why (`gpumix.reconcile.digest`)."""

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
    shape: ModelShape | None = None
    """The model's shape the plan was made with (its config.json's, else the built-in one):
    the pods are rendered with it (``--max-model-len``). None: a model gpumix has no shape of."""


class SingleType(NamedTuple):
    """What status reports of a single-type baseline (its traffic split is not kept: at 50
    services the baselines' allocations were 20 MB of the planner's caches)."""

    replicas: int | None
    cost_per_hour: float


_baselines_kept: DigestCache[dict[str, SingleType | None]] = DigestCache(BASELINES_KEPT, HOT_KEPT)


def _baselines(instance_json: str, time_limit_s: float) -> dict[str, SingleType | None]:
    """Mélange §6.1's single-type baselines, one per option; pure, so cached across passes
    (by a digest of the instance, not its 7 KB of JSON: :class:`gpumix.digestcache.DigestCache`)."""

    def solved() -> dict[str, SingleType | None]:
        instance = AllocationInstance.model_validate_json(instance_json)
        uncapped = instance.model_copy(
            update={"gpus": [g.model_copy(update={"max_count": None}) for g in instance.gpus]}
        )
        out: dict[str, SingleType | None] = {}
        for gpu in uncapped.gpus:
            try:
                base = solve(uncapped, time_limit_s=time_limit_s, only=gpu.name)
            except (UnservableBucketError, SolverError):
                base = None
            out[gpu.name] = (
                None if base is None else SingleType(base.counts.get(gpu.name), base.cost_per_hour)
            )
        return out

    return _baselines_kept.get(f"{time_limit_s!r}\0{instance_json}", solved)


Baselines = dict[str, SingleType | None]
_baselines_seen: dict[int, tuple[tuple[tuple[str, float], ...] | None, float, Baselines]] = {}
"""By a live problem instance's id (dropped as the instance goes): the factors and time limit
its baselines were last found for, and them (:func:`_baselines_of`)."""


def _baselines_of(
    instance: AllocationInstance, factors: dict[str, float] | None, time_limit_s: float
) -> Baselines:
    """:func:`_baselines` of ``instance`` derated by ``factors`` (``None``: as it is). A pass
    reuses each unchanged service's problem (`gpumix.reconcile.cluster._PreparedLastPass`),
    and the baselines of one with the same factors are found again by its identity, not by
    serialising and hashing its instance: at 500 services that was some 6 % of every pass's
    planning (live 500 × 5,000, py-spy)."""
    key = id(instance)
    facts = None if factors is None else tuple(sorted(factors.items()))
    seen = _baselines_seen.get(key)
    if seen is not None and seen[:2] == (facts, time_limit_s):
        return seen[2]
    planned_at = instance if factors is None else derated(instance, factors)
    found = _baselines(planned_at.model_dump_json(), time_limit_s)
    if seen is None:  # an id is reused only once its instance is gone, and its entry with it
        weakref.finalize(instance, _baselines_seen.pop, key, None)
    _baselines_seen[key] = (facts, time_limit_s, found)
    return found


_specs_of: list[tuple[list[GPUPool], list[GPUProfile], str]] = []
"""The last pools and profiles lists :func:`_specs_digest` saw, held, with their digest."""


def _specs_digest(pools: list[GPUPool], profiles: list[GPUProfile]) -> str:
    """A digest of every pool's and profile's spec. A pass hands each service's prediction
    the same two lists, and serialising some forty profiles took 3 ms a call: 13 s of a
    500-service pass with nine derating rounds. So it is computed once per pair of lists
    (by identity: the pair is held here, so neither id can be reused while it is)."""
    if _specs_of and _specs_of[0][0] is pools and _specs_of[0][1] is profiles:
        return _specs_of[0][2]
    specs = [
        {p.name: p.spec.model_dump(mode="json") for p in pools},
        {p.name: p.spec.model_dump(mode="json") for p in profiles},
    ]
    digest = hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()
    _specs_of[:] = [(pools, profiles, digest)]
    return digest


def predicted_attainment(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    allocation: Allocation,
    shape: ModelShape | None = None,
) -> PredictedAttainment | str:
    """:func:`gpumix.attainment.predict` of ``allocation`` on pods of the model's ``shape``
    (default: the built-in one of its name), or why it failed (logged; a model without a shape
    cannot be simulated, :func:`gpumix.reconcile.modelshape.unknown_model_message`). Cached by
    a digest of what the simulation reads (the service's spec, the shape, every pool's and
    profile's spec, the replicas and shares), so a plan is simulated once (0.2–0.8 s), not on
    every pass; failures too, so each is logged once.
    """
    inputs = [
        service.spec.model_dump(mode="json"),
        None if shape is None else shape.model_dump(mode="json"),
        _specs_digest(pools, profiles),
        allocation.model_dump(mode="json", include={"counts", "share"}),
    ]

    def simulated() -> PredictedAttainment | str:
        try:
            return predict(service, pools, profiles, allocation, shape=shape)
        except UnknownModelError:  # not a failure: the user has a field to set
            log.info("%s: no shape for model %r; not predicted", service.name,
                     service.spec.model.name)  # fmt: skip
            return unknown_model_message(service.spec.model.name)
        except Exception as err:  # the plan is applied all the same, unpredicted
            log.warning("%s: predicting attainment failed", service.name, exc_info=True)
            return f"{type(err).__name__}: {err}"

    return _predictions.get(json.dumps(inputs, sort_keys=True), simulated)


def served_allocation(
    problem: ServiceProblem,
    allocation: ServiceAllocation,
    *,
    running: Running,
    conflicts: dict[str, str],
    solve: SolveResult,
) -> Allocation:
    """This service's part of the joint plan as it will serve: replicas per option (those an
    autoscaler owns as they run), the traffic shares of the options with replicas, and $/h."""
    target = {p: allocation.counts.get(p, 0) for p in problem.choices}
    for option in conflicts:
        target[option] = running.replicas.get(option, 0)  # an autoscaler owns these replicas
    cost = sum(n * problem.choices[p].gpus_per_replica * problem.choices[p].price_per_gpu_hour
               for p, n in target.items())  # fmt: skip
    shares = {p: allocation.share.get(p, []) for p in target if target[p]}
    return Allocation(
        counts=target, share=shares, load=allocation.load, cost_per_hour=cost, result=solve
    )


def predict_served(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    served: Allocation,
    shape: ModelShape | None = None,
) -> PredictedAttainment | str | None:
    """:func:`predicted_attainment` of ``served``; ``None`` without traffic (nothing to
    simulate)."""
    if service.spec.workload.request_rate <= 0:
        return None
    return predicted_attainment(service, pools, profiles, served, shape)


def _derating_note(derating: DeratingStatus | None) -> str:
    if derating is None:
        return ""
    more = "; the search goes on next pass" if derating.searching else ""
    if not derating.options:
        return f" ({more[2:]})" if more else ""
    factors = ", ".join(f"{o.option} ×{o.factor:.3g}" for o in derating.options)
    if not derating.rounds:  # the factors a rate change carried over, as they were
        return f" (MaxTput derated: {factors}{more})"
    rounds = "1 round" if derating.rounds == 1 else f"{derating.rounds} rounds"
    return f" (MaxTput derated in {rounds}: {factors}{more})"


def _slo_at_risk(
    predicted: PredictedAttainment | str | None,
    target: float,
    derating: DeratingStatus | None = None,
) -> tuple[ConditionStatus, str, str]:
    """Condition SLOAtRisk: whether the plan fails its promise (``None``: no traffic): its
    predicted attainment is below ``target`` (BelowTarget: the pools that miss it, worst first,
    and the share no capacity would recover), or reaches it only with KV caches past
    ``KV_HEADROOM`` (KVCacheFull); with the derating rounds spent, so a user sees the loop
    ran."""
    if predicted is None:
        return ConditionStatus.FALSE, "NoTraffic", "no requests to predict"
    if isinstance(predicted, str):
        return ConditionStatus.UNKNOWN, "PredictionFailed", f"not predicted: {predicted}"
    head = f"predicted attainment {predicted.met:.2%}"
    note = _derating_note(derating)
    goal = f"the target {100 * target:g}%"
    if predicted.holds(target):
        return ConditionStatus.FALSE, "OnTarget", f"{head} meets {goal}{note}"
    full = predicted.kv_bound()
    worst = sorted(predicted.pools.items(), key=lambda pa: pa[1].met)
    short = [(p, a) for p, a in worst if a.met < target or p in full] or worst[:1]
    pools = "; ".join(
        f"{p}: {a.met:.1%} of its requests meet the SLO at {a.utilisation:.0%} utilisation"
        + (f", its KV cache {a.kv_usage:.0%} full on average" if p in full else "")
        for p, a in short
    )
    if predicted.met >= target:
        headroom = f"(more than {KV_HEADROOM:.0%}: bursts fill it and preempt)"
        message = f"{head} meets {goal} only with KV caches too full to hold it {headroom}: "
        return ConditionStatus.TRUE, "KVCacheFull", message + pools + note
    alone = (
        f"; {predicted.alone:.1%} of all requests miss it even alone on their replica"
        + alone_hint(predicted, target)
        if predicted.alone > 0
        else ""
    )
    message = f"{head} is below {goal}: {pools or 'no replica serves'}{alone}{note}"
    return ConditionStatus.TRUE, "BelowTarget", message


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
    solve: SolveResult,
    predicted: PredictedAttainment | str | None,
    derating: DeratingStatus | None = None,
    now: str,
    time_limit_s: float = 30.0,
    pacing: PacingInput | None = None,
) -> ServiceDecision:
    """Turn this service's part of the joint plan into what to apply now and its status, with
    the plan's ``predicted`` attainment (:func:`predict_served` of :func:`served_allocation`)
    and the ``derating`` the planner applied to reach it; `pacing` (SageServe §6.5.1,
    `gpumix.reconcile.pacing`) may hold the replicas short of (or, LT-UA, past) the plan's
    target for now."""
    spec = service.spec
    excluded = "; ".join(f"{p}: {why}" for p, why in problem.excluded.items())
    assert problem.instance is not None
    served = served_allocation(
        problem, allocation, running=running, conflicts=conflicts, solve=solve
    )
    target, cost, shares = dict(served.counts), served.cost_per_hour, served.share
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
    staged = rollout.stage(running.replicas, run_target, running.ready)
    # A Deployment on a pool that is gone (GPUPool deleted) is not applied again (nothing says
    # how to place it) but left serving until the new replicas are ready, then deleted.
    apply = {
        p: n for p, n in staged.items() if n > 0 and p not in conflicts and p in problem.choices
    }
    delete = sorted(
        running.names.get(p, p) for p, n in staged.items() if n == 0 and p in running.replicas
    )
    # Like for like: the single-type baselines at the capacity the plan was made with.
    baselines = _baselines_of(
        problem.instance, derating.factors() if derating else None, time_limit_s
    )
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
        solve_seconds=solve.seconds,
        allocation_result=allocation,
        planned_rate=planned_rate,
        pool_gpus=pool_gpus,
        applied=run_target,
        note=note,
        predicted=predicted,
        derating=derating,
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
    ready = condition(status.conditions, "Ready")
    was_ready = condition(previous.conditions, "Ready") if previous else None
    newly = was_ready is None or was_ready.reason != UNSCHEDULABLE
    if ready and ready.reason == UNSCHEDULABLE and newly:  # once, not every pass
        events.append(EventSpec(type="Warning", reason=UNSCHEDULABLE, message=ready.message))
    risk = condition(status.conditions, SLO_AT_RISK)
    was = condition(previous.conditions, SLO_AT_RISK) if previous else None
    if risk and risk.status == ConditionStatus.TRUE and not (was and was.status == risk.status):
        events.append(EventSpec(type="Warning", reason=SLO_AT_RISK, message=risk.message))
    held = running.gpus()
    for p, n in staged.items():
        choice = problem.choices.get(p)  # None: a pool that is gone, sized by what runs
        per = choice.gpus_per_replica if choice else running.gpus_per_replica.get(p, 1)
        held[p] = max(held.get(p, 0), n * per)
    return ServiceDecision(
        apply=apply,
        delete=delete,
        target=target,
        choices=problem.choices,
        shares=shares,
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
    baselines: dict[str, SingleType | None],
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
    predicted: PredictedAttainment | str | None,
    derating: DeratingStatus | None = None,
    applied: dict[str, int] | None = None,
    note: str = "",
) -> LLMServiceStatus:
    wl = service.spec.workload
    by_pool = predicted.pools if isinstance(predicted, PredictedAttainment) else {}
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
                replicas=base.replicas if base else None,
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
            predicted_attainment=round(by_pool[p].met, 4) if p in by_pool else None,
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

    # Pods of the plan the scheduler cannot place, while its replicas are short: a surge pod with
    # no room (a template change in a full pool) leaves the old ones serving; the rollout waits.
    stuck = [
        f"{p}: {why}" for p, why in sorted(running.unschedulable.items()) if p in run_target
    ] if waiting else []  # fmt: skip
    left_out = f"; pools left out: {excluded}" if excluded else ""
    setc("Planned", ConditionStatus.TRUE, "PlanComputed",
         f"{summary(target)} for {cost:.2f} $/h{left_out}")  # fmt: skip
    unserved = allocation_result.short
    if unserved:
        setc("Ready", ConditionStatus.FALSE, "InsufficientCapacity",
             status_message_unserved(allocation_result))  # fmt: skip
    elif stuck:
        setc("Ready", ConditionStatus.FALSE, UNSCHEDULABLE,
             "waiting for " + ", ".join(waiting) + "; " + "; ".join(stuck))  # fmt: skip
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
    setc(SLO_AT_RISK, *_slo_at_risk(predicted, service.spec.slo.attainment_target, derating))
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
        predicted_attainment=(
            round(predicted.met, 4) if isinstance(predicted, PredictedAttainment) else None
        ),
        pool_shares=_pool_shares(choices, target, pool_gpus),
        kv_scheduler=previous.kv_scheduler if previous else None,
        derating=derating,
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
