"""Batch services in the planner pass: reserve own replicas only for what `servedBy`'s spare
capacity cannot finish before the deadline (SageServe §3.3: batch work has a deadline of hours,
not a latency SLO; §6.2–6.3: it is served from interactive endpoints below 60% utilisation).

The routing of individual batch requests is not here; the planner only sizes capacity. Spare
capacity is read off `servedBy`'s `status.allocation` — the plan in force, made in an earlier
pass — so the joint solve stays single-pass (one pass late when `servedBy` replans).
"""

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpumix.api import BatchStatus, ConditionStatus, LLMService, LLMServiceStatus
from gpumix.api.workload import Workload
from gpumix.observe.batch import BatchJob, reserve_for_batch, spare_rate
from gpumix.problem import ServiceProblem, option_key
from gpumix.reconcile.conditions import condition, remove_condition, set_condition
from gpumix.reconcile.scaling import observed
from gpumix.reconcile.service import EventSpec, ServiceDecision
from gpumix.reconcile.workload import ServiceObservation, round_up

CONDITION_TYPE = "DeadlineOnTrack"
RATE_EPSILON = 1e-6
"""Req/s below which a backlog is taken not to drain (drain time = backlog / this)."""


class ServedByProblem(BaseModel):
    """Why `servedBy` lends no spare capacity (the service is then planned without it)."""

    model_config = ConfigDict(frozen=True)

    reason: str
    message: str


class BatchPlan(BaseModel):
    """One batch service's reservation this pass, decided before the joint solve."""

    model_config = ConfigDict(frozen=True)

    status: BatchStatus
    """`drainSeconds` is filled in after the solve (it depends on what the plan serves)."""
    workload: Workload
    """The workload the service's own replicas are planned for (rate = the reserved rate)."""
    served_by_problem: ServedByProblem | None = None


def capacity_per_replica(histogram: list[list[float]], max_tput: list[list[float]]) -> float:
    """One replica's req/s for a request mix at the SLO (Mélange §5: 1 / Σ_b h_b / MaxTput_b,
    h normalised); 0 when a bucket of the mix cannot be served on it."""
    total = sum(map(sum, histogram))
    load = 0.0
    for h_row, t_row in zip(histogram, max_tput, strict=True):
        for h, tput in zip(h_row, t_row, strict=True):
            if h > 0:
                if tput <= 0:
                    return 0.0
                load += h / total / tput
    return 1.0 / load if load > 0 else 0.0


def backlog(service: LLMService, observation: ServiceObservation | None) -> float:
    """`spec.batch.backlogRequests` plus the requests waiting in the pods observed this pass."""
    assert service.spec.batch is not None
    queued = service.spec.batch.backlog_requests or 0.0
    obs = observed(observation)
    if obs is not None:
        queued += sum(p.waiting or 0.0 for p in obs.pods)
    return queued


def _served_by(
    service: LLMService, services: list[dict[str, Any]]
) -> tuple[LLMServiceStatus | None, ServedByProblem | None]:
    """`servedBy`'s status when it may lend capacity (same namespace, Interactive, same model)."""
    assert service.spec.batch is not None and service.spec.batch.served_by is not None
    name = service.spec.batch.served_by
    namespace = service.metadata.get("namespace", "")
    field = f"spec.batch.servedBy names {name!r}"
    body = next(
        (
            b
            for b in services
            if b.get("metadata", {}).get("namespace", "") == namespace
            and b.get("metadata", {}).get("name") == name
        ),
        None,
    )
    if body is None:
        message = f"{field}, but namespace {namespace!r} has no such LLMService: create it or fix"
        return None, ServedByProblem(reason="ServedByNotFound", message=message + " servedBy")
    try:
        other = LLMService.model_validate({**body, "status": None})
    except ValidationError:
        message = f"{field}, whose spec is invalid: fix its spec or servedBy"
        return None, ServedByProblem(reason="ServedByNotFound", message=message)
    if other.spec.priority != "Interactive":
        message = f"{field}, which has priority {other.spec.priority}: name an Interactive one"
        return None, ServedByProblem(reason="ServedByNotInteractive", message=message)
    if other.spec.model.name != service.spec.model.name:
        message = (
            f"{field}, which serves {other.spec.model.name!r}, not {service.spec.model.name!r}: "
            "name an LLMService serving the same model"
        )
        return None, ServedByProblem(reason="ServedByOtherModel", message=message)
    try:
        return LLMServiceStatus.model_validate(body.get("status") or {}), None
    except ValidationError:
        return LLMServiceStatus(), None  # an unreadable status lends nothing until rewritten


def spare_capacity(service: LLMService, own: ServiceProblem, lender: LLMServiceStatus) -> float:
    """Batch req/s the lender's planned replicas take below `spareThreshold` θ (SageServe §6.2):
    Σ_o max(0, θ·n_o − ℓ_o) × c_o, c_o this service's own capacity per replica on option o.
    Options this service cannot use, or without a planned load, lend nothing."""
    assert service.spec.batch is not None
    if own.instance is None:
        return 0.0
    tables = {gpu.name: gpu.max_tput for gpu in own.instance.gpus}
    histogram = service.spec.workload.histogram
    spare = 0.0
    for a in lender.allocation:
        table = tables.get(option_key(a.pool, a.gpus_per_replica))
        if table is None or a.load is None:
            continue
        c = capacity_per_replica(histogram, table)
        spare += spare_rate(a.replicas, c, a.load * c, service.spec.batch.spare_threshold)
    return spare


def plan_batch(
    service: LLMService,
    own: ServiceProblem,
    services: list[dict[str, Any]],
    observation: ServiceObservation | None,
) -> BatchPlan:
    """The rate the service's own replicas are planned for: max(0, λ + Q/D − spare), EDF's
    reservation (`reserve_for_batch`) for the backlog Q plus the next D seconds of arrivals λ
    due by the deadline D. `own` is the service's problem at its decided workload."""
    batch = service.spec.batch
    assert batch is not None
    arrivals = service.spec.workload.request_rate
    queued = backlog(service, observation)
    lender, problem = (None, None) if batch.served_by is None else _served_by(service, services)
    spare = spare_capacity(service, own, lender) if lender is not None else 0.0
    spare = math.floor(spare * 1000) / 1000  # stable status and plans; never more than computed
    deadline = float(batch.deadline_seconds)
    job = BatchJob(requests=queued + arrivals * deadline, deadline_s=deadline)
    reserved = round_up(reserve_for_batch([job], [spare], deadline).extra_rate)
    status = BatchStatus(
        backlog_requests=round(queued, 3),
        arrival_rate=arrivals,
        deadline_seconds=batch.deadline_seconds,
        served_by=batch.served_by,
        spare_rate=spare,
        reserved_rate=reserved,
    )
    workload = service.spec.workload.model_copy(update={"request_rate": reserved})
    return BatchPlan(status=status, workload=workload, served_by_problem=problem)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:.3g} s"


def annotate_batch(sd: ServiceDecision, plan: BatchPlan | None, *, now: str) -> ServiceDecision:
    """A planned service's `status.batch` and condition `DeadlineOnTrack` (removed for services
    that are not batch): False with `DeadlineAtRisk` when the joint plan leaves part of the
    reserved rate unserved (pool full, budget) so the backlog outlasts the deadline, or with the
    `servedBy` problem. A Warning event when it turns False or changes reason."""
    status = sd.status
    if plan is None:
        conds = remove_condition(status.conditions, CONDITION_TYPE)
        return sd.model_copy(update={"status": status.model_copy(update={"conditions": conds})})
    b = plan.status
    served = b.reserved_rate * (1.0 - (status.unserved_fraction or 0.0))
    net = b.spare_rate + served - b.arrival_rate
    drain = b.backlog_requests / max(net, RATE_EPSILON) if b.backlog_requests > 0 else None
    deadline = _duration(b.deadline_seconds)
    if drain is not None:
        late = drain > b.deadline_seconds * (1 + 1e-6)
        when = f"drains in {_duration(drain)}" if net > RATE_EPSILON else "does not drain"
        head = f"backlog {b.backlog_requests:g} requests {when}"
        head += f", past the deadline of {deadline}" if late else f", deadline {deadline}"
    else:
        late = net < -RATE_EPSILON
        but = "but not all served" if late else f"deadline {deadline}"
        head = f"no backlog, {b.arrival_rate:g} req/s arriving, {but}"
    lent = f"{b.spare_rate:g} req/s from {b.served_by}'s spare capacity" if b.served_by else ""
    lent = lent if plan.served_by_problem is None else "planned without servedBy"
    own = f"{b.reserved_rate:g} req/s reserved"
    if late:
        own += f", {status.unserved_fraction or 0:.0%} of it unserved: {status.unserved_reason}"
    message = head + "; " + ", ".join(p for p in (lent, own) if p)
    if plan.served_by_problem is not None:
        cond_status, reason = ConditionStatus.FALSE, plan.served_by_problem.reason
        message = f"{plan.served_by_problem.message}; {message}"
    elif late:
        cond_status, reason = ConditionStatus.FALSE, "DeadlineAtRisk"
    else:
        cond_status, reason = ConditionStatus.TRUE, "WithinDeadline"
    previous = condition(status.conditions, CONDITION_TYPE)
    conds = set_condition(
        status.conditions, CONDITION_TYPE, cond_status, reason, message,
        generation=status.observed_generation, now=now,
    )  # fmt: skip
    events = list(sd.events)
    if cond_status == ConditionStatus.FALSE and (previous is None or previous.reason != reason):
        events.append(EventSpec(type="Warning", reason=reason, message=message))
    batch = b.model_copy(update={"drain_seconds": None if drain is None else float(round(drain))})
    new_status = status.model_copy(update={"conditions": conds, "batch": batch})
    return sd.model_copy(update={"status": new_status, "events": events})
