"""One pass of the cluster-wide planner: every GPUPool's status and every LLMService's decision.

All plannable services are solved together in ONE joint ILP (:mod:`gpumix.plan.joint`, Coral
§2.2/§4.3, Jiang §4.3/App. E) over what each pool offers (GPUPool ``availableGPUs``: plannable
minus foreign pods' GPUs, minus what services that cannot be replanned keep holding), within
per-service and cluster budgets; when not everything fits, interactive services are served
first, then batch, then by weight, and each service reports its unserved fraction and why.
Services whose spec is invalid, that no pool can serve, or that have a bucket no option meets the
SLO for keep what runs (and its GPUs), as does one whose decision raises after the joint solve
(the others are then solved again without its GPUs); a solver failure keeps every service's last
plan.

The joint ILP loads each option up to its MaxTput, where the *mean* TPOT equals the SLO (Mélange
§5.3), so a plan can be predicted to miss slo.attainmentTarget by far. The pass therefore closes
the loop `gpumix plan --planner slo` closes offline (:func:`gpumix.attainment.plan_to_target`):
simulate each service's plan, derate the MaxTput of the options whose pools miss the target
(:func:`gpumix.attainment.derate_step`) and solve again, until a plan reaches the search's aim
(:func:`gpumix.attainment.aim`, a standard error above the target), for at most
``DERATING_ROUNDS`` rounds (:func:`_plan_to_targets`), never at the cost of another service's
traffic: the whole joint ILP in each round when every service searches (a first pass), else
each searching service alone in the capacity the others leave, then the fleet once (a
change). The search runs to its end in the pass that starts it (a new spec generation): the
factors it found are kept in status.derating and later passes plan with them and search no
further, so an unchanged cluster is planned the same way pass after pass. Spread over passes,
as it was, every pass of a search changed the plan of services that nothing had changed (20
services: 3-5 plan changes a pass, each a rollout). A generation that changed only the request
rate starts its search from the factors kept (:func:`_carried`).
"""

import copy
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpumix.api import (
    ConditionStatus,
    ForecastStatus,
    GPUPool,
    GPUPoolStatus,
    GPUProfile,
    GPUProfileSpec,
    LLMService,
    LLMServiceStatus,
)
from gpumix.api.llmservice import DeratingStatus, OptionDerating
from gpumix.attainment import (
    MAX_ROUNDS,
    STALL_GAIN,
    PredictedAttainment,
    aim,
    derate_step,
    scaled_grid,
    stalled,
    with_alone_miss_budget,
    with_alone_misses,
    with_instance_alone_miss_budget,
)
from gpumix.digestcache import DigestCache
from gpumix.manifests import describe
from gpumix.observe import ObservedWorkload, WorkloadDecision
from gpumix.plan import Formulation, SolverError, UnservableBucketError, solve
from gpumix.plan.errors import InvalidAllocationError
from gpumix.plan.joint import (
    JointAllocation,
    JointInstance,
    PoolLimit,
    Priority,
    ReplicaOption,
    ServiceAllocation,
    ServiceDemand,
    churn,
    solve_joint,
)
from gpumix.plan.joint.churn import planned_rate
from gpumix.problem import ServiceProblem, build_problem, with_rates
from gpumix.profiles.hfconfig import ModelConfigError
from gpumix.profiles.shape import ModelShape
from gpumix.reconcile.batch import BatchPlan, annotate_batch, plan_batch
from gpumix.reconcile.calibration import calibrate, factor_of, scaled
from gpumix.reconcile.capacity import (
    NodeInfo,
    PodInfo,
    foreign_gpus,
    plannable_gpus,
    pool_nodes,
    pool_status,
)
from gpumix.reconcile.clock import parse_time
from gpumix.reconcile.conditions import condition, set_condition
from gpumix.reconcile.gateway import annotate_gateway
from gpumix.reconcile.kvmigration import planned_targets, reductions
from gpumix.reconcile.modelshape import REASON as MODEL_CONFIG_REASON
from gpumix.reconcile.modelshape import service_shape
from gpumix.reconcile.pods import annotate_pods
from gpumix.reconcile.scaling import observed, pacing_input, with_forecast
from gpumix.reconcile.service import (
    SLO_AT_RISK,
    EventSpec,
    Running,
    ServiceDecision,
    _keep,
    a_key,
    decide_planned,
    predict_served,
    served_allocation,
)
from gpumix.reconcile.workload import (
    ServiceObservation,
    annotate,
    decide,
    remembered,
    with_workload,
)
from gpumix.render import deployment_name
from gpumix.render.names import cache_key

GAP_REL = 0.01
"""Relative MIP gap of the operator's joint solve (the plan's gap is in the solve result)."""
DERATING_ROUNDS = MAX_ROUNDS
"""Rounds the pass that starts a search may spend on services predicted below their target,
each one solve (of the fleet, or of the service alone after a change) plus one simulation per
plan it moved (0.2-0.8 s each; cached by what they read): the offline loop's bound. Later
passes of the same generation spend none."""
SEARCH_TIME_LIMIT_S = 20.0
"""Seconds one service's attainment search may take in a pass (:func:`_search_alone`): the
searches of ``bench/attainment.py`` take 0.4 s (median) to 4.3 s; a longer one ends with the
best plan its rounds found, and status keeps it as the search's outcome."""
SEARCH_SLICE_S = 2.0
"""Seconds the search of a service that already serves may take in the pass that starts it (a
rate change): cut there, the best plan its rounds found so far is applied, and the next pass
searches on (status ``derating.searching``) within ``search_time_limit_s``. A change's pass
takes some 6 s at 500 services before any round, and a round 0.5-3.5 s; searches of 12 rounds
took rate changes to their Deployments in 17-20 s (live 500 × 5,000, #19). A cut costs a
second rollout where the search then finds a better plan."""

log = logging.getLogger("gpumix.planner")

ObjectKey = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""


class Snapshot(BaseModel):
    """What the planner sees: raw bodies of gpumix objects plus digested cluster state."""

    model_config = ConfigDict(frozen=True)

    services: list[dict[str, Any]]
    pools: list[dict[str, Any]]
    profiles: list[dict[str, Any]]
    nodes: list[NodeInfo]
    pods: list[PodInfo]
    running: dict[ObjectKey, Running]
    """(namespace, service) → its Deployments' replicas and ready replicas per pool."""
    autoscalers: dict[ObjectKey, str]
    """(namespace, Deployment name) → the autoscaler that targets it, e.g. 'HPA chat-a10g'."""
    now: str
    time_limit_s: float = 30.0
    search_time_limit_s: float = SEARCH_TIME_LIMIT_S
    """Seconds one service's attainment search may take in a pass (`gpumix run
    --search-time-limit`); see :func:`_search_alone`."""
    search_slice_s: float = SEARCH_SLICE_S
    """Seconds the search of a service that already serves may take in the pass a change
    starts it in (`gpumix run --search-slice`); see :data:`SEARCH_SLICE_S`."""
    budget_per_hour: float | None = None
    """Cluster-wide $/h cap over every service (`gpumix run --budget`)."""
    observations: dict[ObjectKey, ServiceObservation] = {}
    """Services with `source: Prometheus` the operator observed this pass; such a service
    missing here is one it cannot observe (no `--prometheus-url`)."""
    inference_pools_served: bool = True
    """Whether the apiserver serves the InferencePool kind (`gpumix.reconcile.gateway`); looked
    up only while a service asks for routing mode InferencePool."""
    config_maps: dict[ObjectKey, dict[str, Any]] = {}
    """The ConfigMaps services name in spec.model.config (`gpumix.reconcile.modelshape`), by
    (namespace, name); one named but absent here does not exist."""


class InvalidObject(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    key: ObjectKey
    message: str


class ClusterDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    pool_status: dict[str, GPUPoolStatus]
    services: dict[ObjectKey, ServiceDecision]
    invalid: list[InvalidObject] = []
    last_good: dict[ObjectKey, ObservedWorkload] = {}
    """Per observed service, the last good observation to remember for the next pass."""
    inference_pools_served: bool = True
    """The snapshot's: while False, no InferencePool object is applied."""


def _key(body: dict[str, Any]) -> ObjectKey:
    meta = body.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def _status_of(body: dict[str, Any]) -> LLMServiceStatus | None:
    try:
        return LLMServiceStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return None  # a status we cannot read is rebuilt from scratch


def _invalid_service(
    body: dict[str, Any], err: ValidationError, running: Running, now: str
) -> ServiceDecision:
    """InvalidSpec: name the fields, keep whatever runs."""
    meta = body.get("metadata", {})
    previous = _status_of(body) or LLMServiceStatus()
    message = "invalid spec: " + describe(err)
    generation = meta.get("generation")
    conds = previous.conditions
    for type_ in ("Ready", "Planned"):
        conds = set_condition(
            conds, type_, ConditionStatus.FALSE, "InvalidSpec", message,
            generation=generation, now=now,
        )  # fmt: skip
    status = previous.model_copy(update={"conditions": conds, "observed_generation": generation})
    seen = any(c.reason == "InvalidSpec" and c.message == message for c in previous.conditions)
    events = [] if seen else [EventSpec(type="Warning", reason="InvalidSpec", message=message)]
    return ServiceDecision(apply=None, status=status, events=events, held_gpus=running.gpus())


def plan_cluster(snap: Snapshot) -> ClusterDecision:
    invalid: list[InvalidObject] = []
    pools: list[GPUPool] = []
    statuses: dict[str, GPUPoolStatus] = {}
    members: dict[str, list[NodeInfo]] = {}
    """Each pool's nodes, found once a pass (5,000 nodes' labels, read four times a pool, were
    a tenth of a pass at 500 services)."""
    for body in sorted(snap.pools, key=lambda b: _key(b)[1]):
        try:
            pool = GPUPool.model_validate({**body, "status": None})
        except ValidationError as err:
            invalid.append(InvalidObject(kind="GPUPool", key=_key(body), message=describe(err)))
            continue
        old = (body.get("status") or {}).get("conditions") or []
        previous = GPUPoolStatus.model_validate({"conditions": old}).conditions
        members[pool.name] = pool_nodes(pool, snap.nodes)
        statuses[pool.name] = pool_status(
            pool, mine=members[pool.name], pods=snap.pods, previous=previous,
            generation=body.get("metadata", {}).get("generation"), now=snap.now,
        )  # fmt: skip
        pools.append(pool)
    profiles = []
    for body in snap.profiles:
        try:
            profiles.append(GPUProfile.model_validate(body))
        except ValidationError as err:
            invalid.append(InvalidObject(kind="GPUProfile", key=_key(body), message=describe(err)))

    foreign = {p.name: foreign_gpus(members[p.name], snap.pods) for p in pools}
    available = {
        p.name: max(0, plannable_gpus(p, statuses[p.name]) - foreign[p.name]) for p in pools
    }
    per_node = _gpus_per_node(pools, members)
    decisions: dict[ObjectKey, ServiceDecision] = {}
    order = sorted(
        snap.services,
        key=lambda b: (b.get("metadata", {}).get("creationTimestamp", ""), _key(b)),
    )
    plannable: list[_Candidate] = []
    workloads: dict[ObjectKey, WorkloadDecision] = {}
    forecasts: dict[ObjectKey, ForecastStatus | None] = {}
    batches: dict[ObjectKey, BatchPlan] = {}
    _PREPARED.begin(_Fleet(
        pools=pools, profiles=profiles, available=available, per_node=per_node,
        autoscalers=snap.autoscalers, config_maps=snap.config_maps,
    ))  # fmt: skip
    for body in order:
        key = _key(body)
        running = snap.running.get(key, Running())
        generation = body.get("metadata", {}).get("generation")
        observation = snap.observations.get(key)
        prepared = _PREPARED.get(key, body, running, observation)
        if prepared is None:
            try:
                service = LLMService.model_validate({**body, "status": None})
            except ValidationError as err:
                decisions[key] = _invalid_service(body, err, running, snap.now)
                continue
            try:
                prepared = _prepare(
                    service, body, running=running, snap=snap, pools=pools, profiles=profiles,
                    available=available, per_node=per_node,
                )  # fmt: skip
            except Exception as err:  # a gpumix bug on this service's input: plan the others
                log.exception("preparing the plan of a service raised", extra={"service": key})
                decisions[key] = _keep(
                    previous=_status_of(body), running=running, reason=INTERNAL_ERROR,
                    message=_internal_message(err), generation=generation, now=snap.now,
                )  # fmt: skip
                continue
            _PREPARED.put(key, body, running, observation, service=service, prepared=prepared)
        workloads[key], forecasts[key] = prepared.workload, prepared.forecast
        if prepared.batch is not None:
            batches[key] = prepared.batch
        if isinstance(prepared.outcome, ServiceDecision):
            decisions[key] = prepared.outcome
        else:
            plannable.append(prepared.outcome)
    _PREPARED.end({_key(b) for b in order})
    # GPUs held by services that keep their last plan are not available to the joint solve.
    available = _withheld(available, [d.held_gpus for d in decisions.values()])
    joint_decisions, pool_gpus = _plan_jointly(
        plannable, available, forecasts=forecasts, snap=snap, pools=pools, profiles=profiles
    )
    decisions.update(joint_decisions)
    for name, gpus in pool_gpus.items():
        statuses[name] = statuses[name].model_copy(update={"planned_gpus": gpus})
    for p in pools:
        free = max(0, plannable_gpus(p, statuses[p.name]) - foreign[p.name])
        statuses[p.name] = statuses[p.name].model_copy(update={"available_gpus": free})
    planned = {c.key for c in plannable if decisions[c.key].apply is not None}
    for key, wd in workloads.items():
        decisions[key] = annotate(
            decisions[key], wd, planned=key in planned,
            generation=decisions[key].status.observed_generation, now=snap.now,
        )  # fmt: skip
    for key in planned:  # status.batch and DeadlineOnTrack: gpumix.reconcile.batch
        decisions[key] = annotate_batch(decisions[key], batches.get(key), now=snap.now)
    for c in plannable:  # PodsMatchPlan (gpumix.reconcile.pods), InferencePool (.gateway)
        if c.key in planned:
            decisions[c.key] = annotate_pods(decisions[c.key], c.service, pools, now=snap.now)
        decisions[c.key] = annotate_gateway(
            decisions[c.key], c.service, served=snap.inference_pools_served, now=snap.now
        )
    last_good = {k: wd.last_good for k, wd in workloads.items() if wd.last_good is not None}
    return ClusterDecision(
        pool_status=statuses, services=decisions, invalid=invalid, last_good=last_good,
        inference_pools_served=snap.inference_pools_served,
    )  # fmt: skip


INTERNAL_ERROR = "InternalError"
"""Reason of a service whose planning raised: one service's input that trips a gpumix bug keeps
its last plan while every other service is planned (before, the whole pass failed for all)."""


def _internal_message(err: Exception) -> str:
    return (
        f"planning this service failed inside gpumix ({type(err).__name__}: {err}); its last "
        "plan keeps serving and the other services are planned. This is a gpumix bug: please "
        "report it with this service's spec and the operator's log"
    )


def _withheld(available: dict[str, int], held: list[dict[str, int]]) -> dict[str, int]:
    """``available`` less the GPUs per option (``ServiceDecision.held_gpus``) that services
    kept out of the joint solve go on holding, each counted in its option's pool."""
    out = dict(available)
    for gpus_of in held:
        for option, gpus in gpus_of.items():
            pool = option if option in out else re.sub(r"-tp\d+$", "", option)
            if pool in out:
                out[pool] = max(0, out[pool] - gpus)
    return out


def _plan_jointly(
    candidates: list["_Candidate"],
    available: dict[str, int],
    *,
    forecasts: dict[ObjectKey, ForecastStatus | None],
    snap: Snapshot,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
) -> tuple[dict[ObjectKey, ServiceDecision], dict[str, int]]:
    """The candidates' decisions from one joint plan, and the GPUs it places per pool (none
    when no plan is applied). A service whose decision raises keeps its last plan and the GPUs
    that serve it, which the joint plan had counted on for its new share (possibly smaller):
    the others are planned again without those GPUs, or they would be placed on them and
    over-commit the pool."""
    decisions: dict[ObjectKey, ServiceDecision] = {}
    by_name = {p.name: p.spec for p in profiles}
    while candidates:
        try:
            joint = _plan_to_targets(candidates, available, snap, pools, profiles)
        except (SolverError, InvalidAllocationError) as err:
            for c in candidates:
                decisions[c.key] = _keep(
                    previous=c.previous, running=c.running, reason="SolverFailed",
                    message=f"the joint ILP solver stopped without a plan: {err}",
                    generation=c.generation, now=snap.now,
                )  # fmt: skip
            return decisions, {}
        failed: list[ObjectKey] = []
        for c in candidates:
            try:
                decisions[c.key] = _planned(
                    c, joint, forecast=forecasts[c.key], available=available,
                    profiles=by_name, snap=snap,
                )  # fmt: skip
            except Exception as err:  # a gpumix bug on this service: the others apply
                log.exception("deciding a service's plan raised", extra={"service": c.key})
                decisions[c.key] = _keep(
                    previous=c.previous, running=c.running, reason=INTERNAL_ERROR,
                    message=_internal_message(err), generation=c.generation, now=snap.now,
                )  # fmt: skip
                failed.append(c.key)
        if not failed:
            return decisions, joint.plan.pool_gpus
        available = _withheld(available, [decisions[k].held_gpus for k in failed])
        candidates = [c for c in candidates if c.key not in failed]
    return decisions, {}


class _Prepared(BaseModel):
    """One service made ready for the joint solve: its workload and forecast, its batch plan,
    and either its candidate or the decision that keeps it out (what runs stays)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    workload: WorkloadDecision
    forecast: ForecastStatus | None
    batch: BatchPlan | None = None
    outcome: "_Candidate | ServiceDecision"


def _prepare(
    service: LLMService,
    body: dict[str, Any],
    *,
    running: Running,
    snap: Snapshot,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    available: dict[str, int],
    per_node: dict[str, int],
) -> _Prepared:
    """The workload decision, model shape and allocation problem of a valid ``service``."""
    key, generation = _key(body), body.get("metadata", {}).get("generation")
    prev_status = _status_of(body)
    prev_workload = prev_status.workload if prev_status is not None else None
    observation = remembered(snap.observations.get(key), prev_workload, service.spec.workload)
    decision = decide(service.spec.workload, observation, snap.now)
    workload, forecast = with_forecast(service.spec, decision, observation)
    service = with_workload(service, workload.workload)

    def keep(reason: str, message: str, batch: BatchPlan | None = None) -> _Prepared:
        kept = _keep(
            previous=prev_status, running=running, reason=reason, message=message,
            generation=generation, now=snap.now,
        )  # fmt: skip
        return _Prepared(workload=workload, forecast=forecast, batch=batch, outcome=kept)

    try:
        shape = service_shape(service, snap.config_maps)
    except ModelConfigError as err:  # the ConfigMap gives no shape: keep what runs
        return keep(MODEL_CONFIG_REASON, str(err))
    problem = build_problem(service, pools, profiles, available, per_node, shape=shape)
    batch = None
    if service.spec.batch is not None:  # own replicas beyond servedBy's spare: batch.py
        batch = plan_batch(service, problem, snap.services, observation)
        service = with_workload(service, batch.workload)
        problem = with_rates(problem, service.spec.workload)
    prev_cal = prev_status.calibration if prev_status is not None else None
    problem = scaled(problem, factor_of(service.spec.scaling.calibration, prev_cal))
    if problem.instance is not None and shape is not None:  # for the alone-miss budget (an
        # unknown model's plan comes from its GPUProfiles alone)
        filled = with_alone_misses(
            service, pools, profiles, problem.instance, shape, choices=problem.choices
        )
        problem = problem.model_copy(update={"instance": filled})
    excluded = "; ".join(f"{p}: {why}" for p, why in problem.excluded.items())
    reason = _unplannable(problem, excluded)
    if reason is not None:
        return keep(*reason, batch=batch)
    conflicts = {
        option: snap.autoscalers[(key[0], deployment_name(key[1], c.pool, c.gpus_per_replica))]
        for option, c in problem.choices.items()
        if (key[0], deployment_name(key[1], c.pool, c.gpus_per_replica)) in snap.autoscalers
    }
    last = prev_workload.planned_request_rate if prev_workload is not None else None
    spec = service.spec
    rate = planned_rate(
        spec.workload.request_rate, last if running.replicas else None, spec.churn.tolerance
    )
    candidate = _Candidate(
        key=key, service=service, problem=problem, running=running, previous=prev_status,
        conflicts=conflicts, generation=generation, shape=shape, rate=rate,
    )  # fmt: skip
    return _Prepared(
        workload=workload, forecast=forecast, batch=batch,
        outcome=_with_demand(candidate),
    )  # fmt: skip


@dataclass(frozen=True)
class _Fleet:
    """What :func:`_prepare` reads of the cluster besides one service's body, running replicas
    and observation."""

    pools: list[GPUPool]
    profiles: list[GPUProfile]
    available: dict[str, int]
    per_node: dict[str, int]
    autoscalers: dict[ObjectKey, str]
    config_maps: dict[ObjectKey, dict[str, Any]]


@dataclass(frozen=True)
class _Kept:
    body: dict[str, Any]
    running: Running
    observation: ServiceObservation | None
    prepared: _Prepared


class _PreparedLastPass:
    """Each service's :func:`_prepare` of the last pass, given again to a pass whose inputs to
    it are equal: its body (spec and status), running replicas, observation and
    :class:`_Fleet`. A rate change replans one service; preparing all 500 again (validating
    each spec, building its problem and joint demand) was 60 % of every pass (offline: 0.6 s of
    a 1 s pass at 100 services), paid by the change before its own search.

    Kept only for a static workload without ``spec.batch`` that reaches the joint solve:
    nothing else :func:`_prepare` reads then depends on the pass's clock (an observed
    workload's age, a kept decision's condition times) or on other services (batch's spare
    capacity). Equal inputs give an equal result as :func:`_prepare` is pure; comparing them
    (dicts and frozen models, ``==``) costs a fraction of preparing."""

    def __init__(self) -> None:
        self._fleet: _Fleet | None = None
        self._kept: dict[ObjectKey, _Kept] = {}

    def clear(self) -> None:
        self._fleet = None
        self._kept.clear()

    def begin(self, fleet: _Fleet) -> None:
        """A pass starts: what was kept holds only if the fleet's inputs are the same."""
        if fleet != self._fleet:
            self._kept.clear()
        self._fleet = copy.deepcopy(fleet)  # a caller may change its dicts in place

    def get(
        self,
        key: ObjectKey,
        body: dict[str, Any],
        running: Running,
        observation: ServiceObservation | None,
    ) -> _Prepared | None:
        kept = self._kept.get(key)
        if kept is None or (kept.body, kept.running, kept.observation) != (
            body,
            running,
            observation,
        ):
            return None
        return kept.prepared

    def put(
        self,
        key: ObjectKey,
        body: dict[str, Any],
        running: Running,
        observation: ServiceObservation | None,
        *,
        service: LLMService,
        prepared: _Prepared,
    ) -> None:
        spec = service.spec
        if (
            spec.workload.source == "Static"
            and spec.batch is None
            and isinstance(prepared.outcome, _Candidate)
        ):
            self._kept[key] = _Kept(copy.deepcopy(body), running, observation, prepared)
        else:
            self._kept.pop(key, None)

    def end(self, keys: set[ObjectKey]) -> None:
        """Forget the services this pass did not see (deleted)."""
        for key in self._kept.keys() - keys:
            del self._kept[key]


_PREPARED = _PreparedLastPass()


def _with_demand(c: "_Candidate") -> "_Candidate":
    """``c`` with its service in the joint ILP (:attr:`_Candidate.demand`)."""
    demand = with_alone_miss_budget(_base_demand(c), c.service.spec.slo.attainment_target)
    return c.model_copy(update={"demand": demand})


def _planned(
    c: "_Candidate",
    joint: "_Targeted",
    *,
    forecast: ForecastStatus | None,
    available: dict[str, int],
    profiles: dict[str, GPUProfileSpec],
    snap: Snapshot,
) -> ServiceDecision:
    """``c``'s decision under the joint plan, with its forecast and calibration in status."""
    plan, name = joint.plan, _demand_name(c.key)
    observation = snap.observations.get(c.key)
    pacing = pacing_input(c.service.spec, observation, forecast, parse_time(snap.now))
    sd = decide_planned(
        c.service, generation=c.generation, problem=c.problem,
        allocation=plan.services[name], planned_rate=joint.rates[name],
        running=c.running, previous=c.previous, conflicts=c.conflicts,
        pool_gpus=dict(available), solve=plan.result,
        predicted=joint.predicted[c.key], derating=joint.derating[c.key],
        now=snap.now, time_limit_s=snap.time_limit_s, pacing=pacing,
    )  # fmt: skip
    target = sd.target or {}
    calibration = calibrate(
        c.service.spec.scaling.calibration,
        c.previous.calibration if c.previous is not None else None,
        observed(observation), problem=c.problem, profiles=profiles,
        grid=c.service.spec.workload, counts=target,
        share=plan.services[name].share,
        steady=all(c.running.ready.get(o, 0) == n == c.running.replicas.get(o, 0)
                   for o, n in target.items()),
    )  # fmt: skip
    status = sd.status.model_copy(update={"forecast": forecast, "calibration": calibration})
    return sd.model_copy(update={"status": status, "shape": c.shape})


class _Candidate(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    key: ObjectKey
    service: LLMService
    problem: ServiceProblem
    running: Running
    previous: LLMServiceStatus | None
    conflicts: dict[str, str]
    generation: int | None
    shape: ModelShape | None
    """The model's shape (`gpumix.reconcile.modelshape.service_shape`); None: not known."""
    rate: float
    """The request rate planned for (`gpumix.plan.joint.churn.planned_rate`)."""
    demand: ServiceDemand | None = None
    """Its service in the joint ILP at its planned rate, underated and unpinned, with its
    alone-miss budget (:func:`gpumix.attainment.with_alone_miss_budget`): built once a pass
    (:func:`_with_demand`), and each solve's copy only derates and pins it (:func:`_demand`).
    The budget is the same in every solve, as derating keeps which options serve each bucket
    and the planned rate scales every bucket alike. At 500 services, built and budgeted per
    solve, it took 1.7 s of a 3 s steady pass."""


def _demand_name(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}"


def _unplannable(problem: ServiceProblem, excluded: str) -> tuple[str, str] | None:
    """Why a service cannot take part in the joint solve (it then keeps what runs)."""
    if problem.instance is None:
        return "NoUsablePool", f"no GPU pool can serve this service ({excluded})"
    instance = problem.instance
    for bucket in instance.buckets_with_traffic():
        if all(instance.slice_load(k, bucket) is None for k in range(len(instance.gpus))):
            rate = instance.rates[bucket[0]][bucket[1]]
            within = f" within {instance.slo_label}" if instance.slo_label else ""
            message = (
                f"bucket {instance.bucket_label(bucket)} ({rate:g} req/s) cannot be served by "
                f"any allowed GPU type{within}"
            )
            return "Unservable", message + (f" (pools left out: {excluded})" if excluded else "")
    return None


Prediction = PredictedAttainment | str | None
"""A plan's predicted attainment; why it failed; ``None`` without traffic."""


class _Round(BaseModel):
    """One joint solve of the attainment loop and what it predicts for each service."""

    model_config = ConfigDict(frozen=True)

    factors: dict[ObjectKey, dict[str, float]]
    steps: dict[ObjectKey, int]
    """Per service, the derating rounds its factors went through (since its generation)."""
    plan: JointAllocation
    predicted: dict[ObjectKey, Prediction]


class _Targeted(BaseModel):
    """The joint plan to apply, with each service's prediction and derating."""

    model_config = ConfigDict(frozen=True)

    plan: JointAllocation
    rates: dict[str, float]
    predicted: dict[ObjectKey, Prediction]
    derating: dict[ObjectKey, DeratingStatus | None]


def _plan_to_targets(
    candidates: list["_Candidate"],
    available: dict[str, int],
    snap: Snapshot,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
) -> _Targeted:
    """Solve the joint ILP from each service's kept derating, then close the loop
    :func:`gpumix.attainment.plan_to_target` closes offline for the services whose search has
    not ended (their spec generation is new): each alone in the capacity the others leave
    (:func:`_search_alone`), in the first pass as after a change. plan_to_target's
    refinement (giving back derating a step overdid) is left out: on the sample at 1.5-12
    req/s it lowered no plan's cost, and each of its solves would repeat on every pass. A
    first solve that fails raises, as before the loop; a later round that fails, leaves any
    service with more traffic unserved than the first, or raises anything else ends the search
    with the rounds so far: derating may only improve on the first plan."""
    start = {c.key: _kept_derating(c) for c in candidates}
    searching = [c for c in candidates if start[c.key] is None]
    rates = {_demand_name(c.key): c.rate for c in candidates}
    room = dict(available)
    held = {
        c.key: plan for c in candidates
        if start[c.key] is not None and (plan := _kept_on(c, rates[_demand_name(c.key)], room))
    }  # fmt: skip

    demands: dict[DemandKey, ServiceDemand] = {}

    def solved(
        among: list["_Candidate"],
        capacity: dict[str, int],
        budget: float | None,
        step: "Step",
        pinned: Mapping[ObjectKey, Pins] | None = None,
    ) -> _Round:
        factors, steps = step
        pins: dict[ObjectKey, Pins] = {c.key: held[c.key] for c in among if c.key in held}
        pins |= pinned or {}
        instance = _joint_instance(among, capacity, budget, factors, pins or None, demands=demands)
        plan = _solve(instance, snap.time_limit_s)
        assert plan is not None  # partial service is on: never infeasible
        predicted = {
            c.key: predict_served(
                c.service, pools, profiles,
                served_allocation(c.problem, plan.services[_demand_name(c.key)],
                                  running=c.running, conflicts=c.conflicts, solve=plan.result),
                c.shape,
            )
            for c in among
        }  # fmt: skip
        return _Round(factors=factors, steps=steps, plan=plan, predicted=predicted)

    kept = {c.key: start[c.key] or _resumed(c) for c in candidates}
    start_step = {k: f for k, (f, _) in kept.items()}, {k: n for k, (_, n) in kept.items()}
    try:
        first = solved(candidates, available, snap.budget_per_hour, start_step)
    except Exception:
        if not held:
            raise
        log.warning("solving with %d services kept on their plans failed; solving them free",
                    len(held), exc_info=True)  # fmt: skip
        held.clear()
        first = solved(candidates, available, snap.budget_per_hour, start_step)
    final, failed, cut = (first, False, set()) if not DERATING_ROUNDS else _search_alone(
        candidates, searching, first, solved, available=available, budget=snap.budget_per_hour,
        limit_s=snap.search_time_limit_s, slice_s=snap.search_slice_s,
    )  # fmt: skip
    final, pinned = _kept_holding(
        candidates, searching, first, final, solved, available=available,
        budget=snap.budget_per_hour,
    )  # fmt: skip
    # Searched alone, a service's plan was pinned to what its search predicted: kept as well
    # when it holds (one that does not is free to find better).
    alone = [c.key for c in searching if _holds(c, final)]
    still = [c.key for c in candidates if _still_kept(c, rates[_demand_name(c.key)], final)]
    kept_on = set(held) | set(pinned) | set(alone) | set(still)
    if final.factors != first.factors:
        log.info("attainment loop: derating kept: %s",
                 {_demand_name(k): f for k, f in final.factors.items() if f})  # fmt: skip
    # A search ends here when it ran (rounds allowed, none failed, not cut at its slice) on a
    # prediction. Otherwise status keeps only factors a round found, and with none the next
    # pass searches again; a cut one is marked to go on.
    ran = DERATING_ROUNDS > 0 and not failed
    ended = {
        c.key for c in searching
        if ran and c.key not in cut and isinstance(first.predicted[c.key], PredictedAttainment)
    }  # fmt: skip
    derating = {
        c.key: _derating_status(
            c, final, ended=c.key in ended or start[c.key] is not None, searching=c.key in cut,
            kept_at=rates[_demand_name(c.key)] if c.key in kept_on else None,
        )
        for c in candidates
    }  # fmt: skip
    return _Targeted(plan=final.plan, rates=rates, predicted=final.predicted, derating=derating)


Pins = Mapping[str, int | None]
"""A service's replicas per option, fixed for a solve (an option absent: none; ``None``: free)."""

DemandKey = tuple[
    ObjectKey, tuple[tuple[str, float], ...], tuple[tuple[str, int | None], ...] | None
]
"""A service's joint demand in a pass (:func:`_joint_instance`): by service, derating factors
and pins."""

Solve = Callable[
    [list["_Candidate"], dict[str, int], float | None, "Step",
     Mapping[ObjectKey, Pins] | None],
    "_Round",
]  # fmt: skip
"""A joint solve of these candidates in this capacity and budget, with these factors (and
derating rounds) per service and these services' replicas pinned, and its predictions."""


def _search_alone(
    candidates: list["_Candidate"],
    searching: list["_Candidate"],
    first: _Round,
    solved: Solve,
    *,
    available: dict[str, int],
    budget: float | None,
    limit_s: float,
    slice_s: float,
) -> tuple[_Round, bool, set[ObjectKey]]:
    """The search of the services whose generation is new (all of them in a first pass, one
    after a change): each, in turn, derated in at most ``DERATING_ROUNDS`` solves of itself
    alone, in the capacity and budget the others' plans leave it (``first``'s, and the plans
    the services searched before it found), then one joint solve of the fleet with the factors
    found and the searched services' replicas pinned to the plans their searches chose: free,
    that solve placed a service otherwise than any of its rounds (it moved others to make room
    at a lower cost) and, unpredicted there, it missed its target (offline at 200 services:
    92.6%). Joint rounds, which derated every service that missed at once and solved the fleet
    each time, ended every service's search when one was left short and then combined each
    service's best round in a free solve: at 200 services the first pass left 53 predicted
    below target, at 8 and 14 services 2 and 4 (down to 6.6%), where searching alone left none,
    3-4× faster. One service's solve takes milliseconds; the simulations are the same either
    way. The fleet's plan is applied when it serves as much as ``first``; a fleet of one is
    its best round.

    Each service's search stops once it has run ``limit_s`` (checked before each of its
    solves; one that runs over its ILP time limit is not cut), with the rounds so far: a
    service whose every round is a slow solve (fuzzed: a dozen pools, one-service solves of
    7-32 s) held the fleet's pass for two minutes (#19). One that already serves and starts its
    search here stops at ``slice_s`` instead (:data:`SEARCH_SLICE_S`) and is returned as cut:
    the next pass searches on from its best round (:func:`_resumed`; predictions and solves
    are cached, so the rounds it repeats cost little)."""
    plans = {c.key: first.plan.services[_demand_name(c.key)] for c in candidates}
    factors, steps = dict(first.factors), dict(first.steps)
    failed, cut = False, set()
    for c in searching:
        others = [o for o in candidates if o.key != c.key]
        capacity = _withheld(available, [_option_gpus(o, plans[o.key]) for o in others])
        left = None if budget is None else max(
            0.0, budget - sum(plans[o.key].cost_per_hour for o in others)
        )  # fmt: skip
        rounds = [_Round(
            factors={c.key: factors[c.key]}, steps={c.key: steps[c.key]},
            plan=first.plan, predicted={c.key: first.predicted[c.key]},
        )]  # fmt: skip
        sliced = _serves(c) and not _resuming(c)
        budget_s = slice_s if sliced else limit_s
        deadline = time.monotonic() + budget_s
        for _ in range(DERATING_ROUNDS):
            step = _derate([c], rounds[-1])
            if step is None:
                break
            if time.monotonic() >= deadline:
                log.info("attainment loop: %s: search stopped after %d rounds, at its time "
                         "%s (%g s)", _demand_name(c.key), len(rounds) - 1,
                         "slice" if sliced else "limit", budget_s)  # fmt: skip
                if sliced:
                    cut.add(c.key)
                break
            try:
                trial = solved([c], capacity, left, step, None)
            except Exception:  # the plans so far stand; the search is tried again next pass
                log.warning("derating round %d of %s failed; keeping the plans so far",
                            len(rounds), _demand_name(c.key), exc_info=True)  # fmt: skip
                failed = True
                break
            if not _serves_as_much(trial, first):
                break  # capacity ran out: derating further only leaves traffic unserved
            rounds.append(trial)
        best = rounds[_best_round(c, rounds)]
        later = False  # a phase after the rounds ran, and may have stopped at the deadline
        if not _aimed(c, best):
            best = _grown(c, best, first, solved, capacity=capacity, budget=left,
                          deadline=deadline) or best  # fmt: skip
            later = True
        if rounds[-1].steps[c.key] >= SINGLE_TYPE_AFTER:
            best = _single_type(c, best, first, solved, capacity=capacity, budget=left,
                                deadline=deadline) or best  # fmt: skip
            later = True
        if sliced and later and time.monotonic() >= deadline:
            cut.add(c.key)
        factors[c.key], steps[c.key] = best.factors[c.key], best.steps[c.key]
        plans[c.key] = best.plan.services[_demand_name(c.key)]
        if len(rounds) > 1:
            log.info("attainment loop: %s derated alone in %d rounds", _demand_name(c.key),
                     len(rounds) - 1)  # fmt: skip
    if factors == first.factors and all(
        plans[c.key] == first.plan.services[_demand_name(c.key)] for c in searching
    ):
        return first, failed, cut
    if len(candidates) == 1:  # its rounds were solves of the whole fleet
        return best, failed, cut
    try:
        pinned = {c.key: plans[c.key].counts for c in searching}
        final = solved(candidates, available, budget, (factors, steps), pinned)
    except Exception:
        log.warning("solving the fleet with the derating found failed", exc_info=True)
        return first, True, cut
    return (final, failed, cut) if _serves_as_much(final, first) else (first, failed, cut)


GROW_ROUNDS = 3
"""Solves a service whose search ended short of its target may spend on its best plan with
one replica more, pinned, each time of the option whose pool meets the least."""


def _grown(
    c: "_Candidate",
    best: _Round,
    first: _Round,
    solved: Solve,
    *,
    capacity: dict[str, int],
    budget: float | None,
    deadline: float,
) -> _Round | None:
    """The first of at most ``GROW_ROUNDS`` plans, ``best``'s with one replica more each time
    of the option whose pool meets the least, that reaches the search's aim (:func:`_aimed`),
    else the first of ``best`` and them that holds the target; ``None`` when none does (the
    search's best stands: a plan that does not hold is not kept, and the next pass would move
    off it). Derating shrinks the missing option's MaxTput until its load no longer fits, and
    the optimum may then move the traffic to other options rather than buy one more replica:
    ``code-70b-2rps-150ms`` on ``bench/attainment.py`` (h100-tp4×1, 98.6%) wandered over A100
    mixes at 67-95% for twelve rounds where h100-tp4×2 meets 99.4%, as
    `gpumix plan` finds among its single-type baselines (replicas added one at a time)."""
    r, held = best, best if _holds(c, best) else None
    for _ in range(GROW_ROUNDS):
        predicted = r.predicted[c.key]
        alloc = r.plan.services[_demand_name(c.key)]
        if not isinstance(predicted, PredictedAttainment) or stalled(predicted) or alloc.short:
            return held
        counts = {o: n for o, n in alloc.counts.items() if n}
        pools = predicted.pools
        option = min(counts, key=lambda o: (pools[o].met if o in pools else 1.0, o), default=None)
        if option is None:
            return held
        counts[option] += 1
        choice, spec = c.problem.choices[option], c.service.spec
        used = _pool_gpus(c, counts)[choice.pool]
        cost = alloc.cost_per_hour + choice.price_per_gpu_hour * choice.gpus_per_replica
        caps = [b for b in (budget, spec.budget.max_cost_per_hour if spec.budget else None)
                if b is not None]  # fmt: skip
        most = spec.max_replicas
        if (
            used > capacity.get(choice.pool, used)
            or any(cost > b + 1e-9 for b in caps)
            or (most is not None and sum(counts.values()) > most)
        ):
            return held  # pinned, a replica the pool, a budget or maxReplicas has no room for
        if time.monotonic() >= deadline:
            return held
        try:
            r = solved([c], capacity, budget, (r.factors, r.steps), {c.key: counts})
        except Exception:  # no room for it, or the solver failed: the search's best stands
            log.info("attainment loop: %s: no plan with one more %s replica", _demand_name(c.key),
                     option)  # fmt: skip
            return held
        if not _serves_as_much(r, first):
            return held
        if _aimed(c, r):
            log.info("attainment loop: %s reaches its target with one more %s replica",
                     _demand_name(c.key), option)  # fmt: skip
            return r
        held = held or (r if _holds(c, r) else None)
    return held


SINGLE_TYPE_AFTER = 6
"""Derating rounds after which a service's search also tries plans of one option
(:func:`_single_type`): one that ends sooner found its plan, or the misses left are ones
capacity does not recover (or the capacity ran out)."""


def _single_type(
    c: "_Candidate",
    best: _Round,
    first: _Round,
    solved: Solve,
    *,
    capacity: dict[str, int],
    budget: float | None,
    deadline: float,
) -> _Round | None:
    """The cheapest plan of one option found that reaches the search's aim (:func:`_aimed`),
    and costs less than ``best`` when that reaches it too; ``None`` when none does. Each
    option is searched as the service was, derated from 1 at most ``DERATING_ROUNDS`` times,
    in the order of its underated single-type cost, where the pools, budgets and maxReplicas
    have room for that, and only while it is cheaper than the best plan so far (derating only
    raises the cost).
    Derating every pool that misses keeps a mix a mix, so a search can climb for ever smaller
    gains over a mix dearer than a single type it never tried: ``rag-7b-50rps-40ms`` on
    ``bench/attainment.py`` took 12 rounds from 60 to 210 $/h (h100×14 + h100-tp2×7, predicted
    0.992) where h100-tp2×8 is predicted at 0.992 for 120 $/h.
    `gpumix plan` takes the cheapest single type that keeps the promise as its floor
    (:func:`gpumix.attainment.promise`); each is a search of its own, so the operator searches
    them only for a service whose search took ``SINGLE_TYPE_AFTER`` rounds or more."""
    name = _demand_name(c.key)
    assert c.problem.instance is not None  # a candidate has an instance (_unplannable)
    # The joint ILP's alone-miss budget (with_alone_miss_budget) holds for one option too: an
    # option alone that sends more requests where they miss alone has no plan.
    usable = [k for k in range(len(c.problem.instance.gpus)) if c.problem.instance.usable(k)]
    instance = with_instance_alone_miss_budget(
        c.problem.instance, _target(c), Formulation.ROUTABLE, usable
    )
    cost = best.plan.services[name].cost_per_hour if _aimed(c, best) else math.inf
    spec = c.service.spec
    caps = [
        b for b in (budget, spec.budget.max_cost_per_hour if spec.budget else None) if b is not None
    ]
    starts: dict[str, float] = {}
    for g in instance.gpus:
        try:
            alone = solve(instance, only=g.name)
        except (UnservableBucketError, SolverError):  # this option cannot serve it alone
            continue
        if alone is None or alone.cost_per_hour >= cost - 1e-9:
            continue
        # Derating only adds replicas: an underated plan without room, within the budgets and
        # maxReplicas, never will have it.
        used = _pool_gpus(c, alone.counts)
        if (
            all(n <= capacity.get(p, n) for p, n in used.items())
            and all(alone.cost_per_hour <= b + 1e-9 for b in caps)
            and (spec.max_replicas is None or sum(alone.counts.values()) <= spec.max_replicas)
        ):
            starts[g.name] = alone.cost_per_hour
    found: _Round | None = None
    for option in sorted(starts, key=lambda o: (starts[o], o)):
        pins: dict[ObjectKey, Pins] = {c.key: {option: None}}
        step: Step | None = ({c.key: {}}, {c.key: 0})
        for _ in range(DERATING_ROUNDS + 1):
            if step is None or starts[option] >= cost - 1e-9:
                break
            if time.monotonic() >= deadline:
                return found
            try:
                r = solved([c], capacity, budget, step, pins)
            except Exception:  # the plans so far stand
                log.warning("attainment loop: %s on %s alone failed", name, option, exc_info=True)
                return found
            spent = r.plan.services[name].cost_per_hour
            if not _serves_as_much(r, first) or spent >= cost - 1e-9:
                break
            if _aimed(c, r):
                found, cost = r, spent
                log.info("attainment loop: %s on %s alone reaches its target for %.2f $/h",
                         name, option, spent)  # fmt: skip
                break
            step = _derate([c], r)
    return found


HOLDING_ROUNDS = 3
"""Fleet solves that may pin services a plan moved off the plans that held their targets
(:func:`_kept_holding`), each pinning those the solve before moved (offline at 200 services,
a change's re-solve moved 1-20 services, and each solve pinning some moved 1-3 others)."""


def _kept_holding(
    candidates: list["_Candidate"],
    searching: list["_Candidate"],
    first: _Round,
    final: _Round,
    solved: Solve,
    *,
    available: dict[str, int],
    budget: float | None,
) -> tuple[_Round, dict[ObjectKey, dict[str, int]]]:
    """``final`` with the services it moves off a plan that runs and holds their target onto
    one predicted to miss it, or off one that runs short of it onto one predicted to meet
    less (:func:`_moved_off`), pinned to what runs, and the searched services to their plans,
    solved again (at most ``HOLDING_ROUNDS`` times, the last one pinning every holding plan
    that moved, so that none is left to miss); and the holding services so pinned, which
    later passes keep on those plans while their rate stands (`DeratingStatus.kept_at_rate`,
    :func:`_kept_on`; one short of its target is free again in the next pass, as capacity
    that would let it hold may come free). The factors a search found hold for
    the plans it predicted; a later fleet solve is free to place a service elsewhere at those
    factors, on an option no round loaded (offline at 200 services, a re-solve after a
    rollout moved 8 services, two from 99.4% and 100% to 43% and 28%). Kept as it is when a
    solve fails or leaves more traffic unserved than ``first``."""
    searched = {c.key for c in searching}
    pins: dict[ObjectKey, dict[str, int]] = {}
    for n in range(HOLDING_ROUNDS):
        last = n == HOLDING_ROUNDS - 1  # the last keeps every holding plan that moved
        moved = {
            c.key: plan for c in candidates
            if c.key not in searched and c.key not in pins
            and (plan := _moved_off(c, final, predicted=not last))
        }  # fmt: skip
        if not moved:
            break
        plans = {c.key: final.plan.services[_demand_name(c.key)].counts for c in searching}
        try:
            trial = solved(candidates, available, budget, (final.factors, final.steps),
                           {**plans, **pins, **moved})  # fmt: skip
        except Exception:
            log.warning("pinning the services a plan moved off their target failed",
                        exc_info=True)  # fmt: skip
            break
        if not _serves_as_much(trial, first):
            break
        log.info("attainment loop: kept %d services on the plans that run",
                 len(moved), extra={"services": [_demand_name(k) for k in moved]})  # fmt: skip
        pins |= moved
        final = trial
    return final, {
        c.key: pins[c.key] for c in candidates if c.key in pins and _holding_plan(c) is not None
    }


def _holding_plan(c: "_Candidate") -> dict[str, int] | None:
    """The plan in force, when it has rolled out (:func:`_rolled_out`) and status predicts it
    to hold the target (SLOAtRisk False); else ``None``."""
    return _rolled_out(c, _promised_plan(c))


def _short_plan(c: "_Candidate") -> tuple[dict[str, int], float] | None:
    """The plan in force and its predicted attainment (status.predictedAttainment), when it
    has rolled out (:func:`_rolled_out`) and status predicts it to miss its promise
    (SLOAtRisk True)."""
    risk = condition(c.previous.conditions, SLO_AT_RISK) if c.previous is not None else None
    if c.previous is None or risk is None or risk.status != ConditionStatus.TRUE:
        return None
    met, runs = c.previous.predicted_attainment, _rolled_out(c, _status_plan(c))
    return (runs, met) if met is not None and runs is not None else None


def _rolled_out(c: "_Candidate", planned: dict[str, int] | None) -> dict[str, int] | None:
    """``planned`` when it is what runs and is ready (replicas whose nodes are gone are
    not)."""
    runs = {o: n for o, n in c.running.ready.items() if n}
    return runs if runs and runs == planned else None


def _status_plan(c: "_Candidate") -> dict[str, int]:
    """Replicas per option of the plan status reports in force (none: empty)."""
    previous = c.previous.allocation if c.previous is not None else []
    return {a_key(a.pool, a.gpus_per_replica): a.replicas for a in previous if a.replicas}


def _promised_plan(c: "_Candidate") -> dict[str, int] | None:
    """The plan in force when status predicts it to hold the target (SLOAtRisk False)."""
    risk = condition(c.previous.conditions, SLO_AT_RISK) if c.previous is not None else None
    if risk is None or risk.status != ConditionStatus.FALSE:
        return None
    return _status_plan(c)


def _pool_gpus(c: "_Candidate", counts: Mapping[str, int]) -> dict[str, int]:
    """GPUs ``counts`` (replicas per option) take in each pool."""
    out: dict[str, int] = {}
    for o, n in counts.items():
        choice = c.problem.choices[o]
        out[choice.pool] = out.get(choice.pool, 0) + n * choice.gpus_per_replica
    return out


def _moved_off(c: "_Candidate", r: _Round, *, predicted: bool = True) -> dict[str, int] | None:
    """The plan in force, when round ``r`` moves this service off it: off one that holds
    (:func:`_holding_plan`) onto one predicted not to hold (``predicted``), or at all; off one
    that runs short of its target (:func:`_short_plan`) onto one predicted to meet less. A
    service below its target was free in every fleet solve, and another's change took its
    pool: live at 500 services, ``svc-0154`` (rate unchanged) went ``a40 9→8, l40 0→1``, then
    ``a40 8→5, l40 1→3``, in the passes of two other services' changes (#19)."""
    moved = {o: n for o, n in r.plan.services[_demand_name(c.key)].counts.items() if n}
    met = _met(c, r)
    plan = _holding_plan(c)
    if plan is None:
        short = _short_plan(c)
        if short is None or met is None or round(met, 4) >= short[1]:
            return None
        plan = short[0]
    elif predicted and (met is None or _holds(c, r)):
        return None
    return plan if moved != plan else None


def _kept_on(c: "_Candidate", rate: float, room: dict[str, int]) -> dict[str, int] | None:
    """The plan in force, pinned, when status says a pass kept it at this planned rate
    (`DeratingStatus.kept_at_rate`): while it holds (:func:`_holding_plan`), or while it is
    rolling out, predicted to hold (SLOAtRisk False), into pools with ``room`` for it. Either
    way its GPUs are taken from ``room``. A plan grown by replicas (:func:`_grown`) is not what
    the factors kept plan free, so the next pass, before it runs, would drop it; a plan whose
    nodes went has no room (the GPU drop moves it)."""
    if not _kept_at(c, rate):
        return None
    holding = _holding_plan(c)
    plan = holding or _promised_plan(c)
    if not plan or any(o not in c.problem.choices for o in plan):
        return None
    need = _pool_gpus(c, plan)
    if holding is None and any(g > room.get(p, 0) for p, g in need.items()):
        return None
    for p, g in need.items():
        room[p] = room.get(p, 0) - g
    return plan


def _kept_at(c: "_Candidate", rate: float) -> bool:
    """Status says a pass kept the plan in force at this planned rate."""
    kept = c.previous.derating if c.previous is not None else None
    at = kept.kept_at_rate if kept is not None else None
    return at is not None and abs(at - rate) <= 1e-9 * max(1.0, rate)


def _still_kept(c: "_Candidate", rate: float, r: _Round) -> bool:
    """A plan kept at this rate that round ``r`` plans again, before it runs (rolling out):
    still kept, so that status does not drop the mark and the plan is pinned once it runs."""
    if not _kept_at(c, rate):
        return False
    plan = r.plan.services[_demand_name(c.key)].counts
    return _status_plan(c) == {o: n for o, n in plan.items() if n}


def _option_gpus(c: "_Candidate", allocation: ServiceAllocation) -> dict[str, int]:
    """GPUs per option ``allocation`` places (`ServiceDecision.held_gpus`' form)."""
    return {
        o: n * c.problem.choices[o].gpus_per_replica
        for o, n in allocation.counts.items()
        if n and o in c.problem.choices
    }


def _target(c: "_Candidate") -> float:
    return c.service.spec.slo.attainment_target


def _met(c: "_Candidate", r: _Round) -> float | None:
    """This service's predicted attainment in round ``r`` (``None``: not predicted)."""
    predicted = r.predicted[c.key]
    return predicted.met if isinstance(predicted, PredictedAttainment) else None


def _holds(c: "_Candidate", r: _Round, *, aimed: bool = False) -> bool:
    """Whether round ``r``'s plan keeps this service's promise (`PredictedAttainment.holds`),
    or with ``aimed`` reaches what a search aims at (:func:`_aimed`)."""
    predicted = r.predicted[c.key]
    level = aim(_target(c)) if aimed else _target(c)
    return isinstance(predicted, PredictedAttainment) and predicted.holds(level)


def _aimed(c: "_Candidate", r: _Round) -> bool:
    """Whether round ``r``'s plan reaches what a search aims at, one standard error of its
    prediction above the target (:func:`gpumix.attainment.aim`): a search stops there, where
    a plan in force is kept while it holds the target itself (:func:`_holds`)."""
    return _holds(c, r, aimed=True)


def _kept_derating(c: "_Candidate") -> tuple[dict[str, float], int] | None:
    """The factors (and rounds) of the search status keeps for this service, when it ran for
    its current spec generation (for the options it still has); ``None``: no search has, and
    this pass runs one (a new spec, other SLO, model or pools, starts over)."""
    kept = _this_generation(c)
    if kept is None or kept.searching:
        return None
    return _still_options(c, kept), kept.rounds


def _this_generation(c: "_Candidate") -> DeratingStatus | None:
    """The search status keeps for this service's current spec generation, if any."""
    kept = c.previous.derating if c.previous is not None else None
    return kept if kept is not None and kept.observed_generation == c.generation else None


def _resuming(c: "_Candidate") -> bool:
    """Whether the last pass cut this generation's search at its slice (:func:`_search_alone`)
    and this pass goes on with it."""
    kept = _this_generation(c)
    return kept is not None and kept.searching


def _resumed(c: "_Candidate") -> tuple[dict[str, float], int]:
    """Where a search this pass starts begins: a cut one at the factors (and rounds) of the
    best round it had found, else at the factors a rate change carried over (:func:`_carried`),
    at round 0. From its best round, the rounds after it are found again in the caches."""
    kept = _this_generation(c)
    if kept is not None and kept.searching:
        return _still_options(c, kept), kept.rounds
    return _carried(c), 0


def _serves(c: "_Candidate") -> bool:
    """Whether the service has replicas now: a search of it that takes long delays the plan
    for a change in its traffic, where one of a new service delays its first."""
    return any(n > 0 for n in c.running.replicas.values())


def _still_options(c: "_Candidate", kept: DeratingStatus) -> dict[str, float]:
    """The ``kept`` factors of the options the service still has."""
    return {o: f for o, f in kept.factors().items() if o in c.problem.choices}


def _basis(c: "_Candidate") -> str:
    """A digest of what a search's factors were found for: the spec less the request rate."""
    spec = c.service.spec
    workload = spec.workload.model_copy(update={"request_rate": 0.0})
    return cache_key(spec.model_copy(update={"workload": workload}).model_dump_json())


def _carried(c: "_Candidate") -> dict[str, float]:
    """The factors the last generation's search found, when the new one changed only the
    request rate (for the options it still has), else none: a new search starts from them.
    They are per replica (a pool's MaxTput at the target), what an observed rate keeps within a
    generation too; from 1 a rate change took more joint solves and simulations to the same
    plan (#19, offline at 100 services: 13 solves where 7 did). The search still derates
    further where the new plan misses."""
    kept = c.previous.derating if c.previous is not None else None
    if kept is None or kept.basis != _basis(c):
        return {}
    return _still_options(c, kept)


Step = tuple[dict[ObjectKey, dict[str, float]], dict[ObjectKey, int]]
"""A round's factors and derating rounds per service."""


def _derate(candidates: list["_Candidate"], last: _Round) -> Step | None:
    """The next round's factors: the ``candidates`` (those searching) predicted below target,
    fully served (what misses for want of capacity is not MaxTput's doing), with misses that are
    not just requests that miss even alone, take one :func:`gpumix.attainment.derate_step`;
    ``None`` when none do. A service is derated at most ``MAX_ROUNDS`` times, the offline loop's
    bound: a target out of reach (a TTFT SLO that long prompts miss alone) otherwise buys
    replicas for ever smaller gains."""
    factors, steps = dict(last.factors), dict(last.steps)
    for c in candidates:
        predicted = last.predicted[c.key]
        alloc = last.plan.services[_demand_name(c.key)]
        if (
            not isinstance(predicted, PredictedAttainment)
            or _aimed(c, last)
            or stalled(predicted)
            or alloc.short
            or steps[c.key] >= MAX_ROUNDS
        ):
            continue
        stepped = derate_step(factors[c.key], predicted, alloc.counts, alloc.load, aim(_target(c)))
        factors[c.key] = {o: max(round(f, 4), 1e-4) for o, f in stepped.items()}  # as kept
        steps[c.key] += 1
    return None if factors == last.factors else (factors, steps)


def _serves_as_much(trial: _Round, first: _Round) -> bool:
    """No service has more traffic unserved than in the first round: one service's derating
    must not take another's capacity (nor its own) away."""
    return all(
        a.unserved_rate <= first.plan.services[name].unserved_rate + 1e-9
        for name, a in trial.plan.services.items()
    )


def _best_round(c: "_Candidate", rounds: list[_Round]) -> int:
    """The round whose plan is best for this service: the cheapest that reaches its target;
    when none does, the cheapest within ``STALL_GAIN`` of the highest predicted attainment
    (plan_to_target's rule), the earliest (least derated) of equally cheap ones; the first
    round when nothing was predicted."""
    name = _demand_name(c.key)
    met = {i: m for i, r in enumerate(rounds) if (m := _met(c, r)) is not None}
    if not met:
        return 0
    reached = [i for i in met if _aimed(c, rounds[i])]
    top = max(met.values())
    pool = reached or [i for i, m in met.items() if m >= top - STALL_GAIN]
    return min(pool, key=lambda i: (round(rounds[i].plan.services[name].cost_per_hour, 6), i))


def _derating_status(
    c: "_Candidate", r: _Round, *, ended: bool, searching: bool, kept_at: float | None
) -> DeratingStatus | None:
    """What status keeps of the search: present (even with no factor) once it has ended for
    this generation, which is what tells later passes not to search again, or was cut to go on
    (``searching``); and the planned rate at which the plan in force is kept
    (:func:`_kept_holding`)."""
    options = [
        OptionDerating(option=o, factor=f) for o, f in sorted(r.factors[c.key].items()) if f < 1
    ]
    if not ended and not searching and not options and not r.steps[c.key]:
        return None
    return DeratingStatus(
        observed_generation=c.generation, options=options, rounds=r.steps[c.key], basis=_basis(c),
        kept_at_rate=kept_at, searching=searching,
    )  # fmt: skip


def _joint_instance(
    candidates: list["_Candidate"],
    available: dict[str, int],
    budget: float | None,
    derating: dict[ObjectKey, dict[str, float]],
    pinned: Mapping[ObjectKey, Pins] | None = None,
    *,
    demands: dict[DemandKey, ServiceDemand] | None = None,
) -> JointInstance:
    """The joint ILP's input, each service's MaxTput scaled by its ``derating`` factors and the
    replicas of the ``pinned`` services fixed (per option; absent: none). ``demands``: those
    built for earlier solves of the pass, by service, factors and pins (a change's pass solves
    the fleet two or three times, each service derated and pinned alike: at 500 services 0.4 s
    a solve)."""
    memo = {} if demands is None else demands
    services = []
    for c in candidates:
        factors, pins = derating.get(c.key), (pinned or {}).get(c.key)
        key: DemandKey = (
            c.key,
            tuple(sorted((factors or {}).items())),
            None if pins is None else tuple(sorted(pins.items())),
        )
        if key not in memo:
            memo[key] = _demand(c, factors, pins)
        services.append(memo[key])
    pools = [PoolLimit(name=p, gpus=g) for p, g in sorted(available.items())]
    return JointInstance(services=services, pools=pools, budget_per_hour=budget)


def _demand(c: "_Candidate", factors: dict[str, float] | None, pins: Pins | None) -> ServiceDemand:
    """``c``'s service in the joint ILP (:attr:`_Candidate.demand`), its MaxTput scaled by
    ``factors`` and its replicas ``pins`` fixed."""
    assert c.demand is not None  # set as the candidate is made (_with_demand)
    if not factors and pins is None:
        return c.demand
    factors = factors or {}
    options = []
    for o in c.demand.options:
        update: dict[str, Any] = {"fixed": _fixed(c, o.name, pins)}
        if o.name in factors:
            update["max_tput"] = scaled_grid(o.max_tput, factors[o.name])
        options.append(o.model_copy(update=update))
    return c.demand.model_copy(update={"options": options})


def _base_demand(c: "_Candidate") -> ServiceDemand:
    """``c``'s service in the joint ILP at its planned rate, underated and unpinned, without
    its alone-miss budget."""
    spec = c.service.spec
    instance = c.problem.instance
    assert instance is not None
    # Replicas the KV scheduler removed still count as running for churn (sticky plans).
    kv_prev = c.previous.kv_scheduler if c.previous else None
    kv_back = reductions(spec.kv_migration, kv_prev, planned_targets(c.previous))
    actual = spec.workload.request_rate
    scale = c.rate / actual if actual > 0 else 1.0
    options = [
        ReplicaOption(
            name=gpu.name,
            pool=c.problem.choices[gpu.name].pool,
            gpus_per_replica=c.problem.choices[gpu.name].gpus_per_replica,
            cost_per_hour=gpu.cost_per_hour,
            max_tput=gpu.max_tput,
            running=c.running.replicas.get(gpu.name, 0) + kv_back.get(gpu.name, 0),
            fixed=_fixed(c, gpu.name, None),
            alone_miss=gpu.alone_miss,
        )
        for gpu in instance.gpus
    ]
    return ServiceDemand(
        name=_demand_name(c.key),
        rates=[[r * scale for r in row] for row in instance.rates],
        options=options,
        slice_factor=instance.slice_factor,
        priority=Priority.BATCH if spec.priority == "Batch" else Priority.INTERACTIVE,
        weight=spec.weight,
        budget_per_hour=spec.budget.max_cost_per_hour if spec.budget else None,
        churn_penalty=spec.churn.penalty,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        input_edges=instance.input_edges,
        output_edges=instance.output_edges,
        slo_label=instance.slo_label,
        routable=True,
    )


def _fixed(c: "_Candidate", option: str, pins: Pins | None) -> int | None:
    """Replicas of ``option`` the solve may not change: a pinned plan's, or those an autoscaler
    owns (as they run); ``None``: free."""
    if pins is not None:
        return pins.get(option, 0)
    return c.running.replicas.get(option, 0) if option in c.conflicts else None


SOLVES_KEPT = 16
"""Joint plans kept (:func:`_solve`): a pass's derating rounds and the plan later passes ask
for again. At fleet size one plan takes megabytes (500 services: about 6 MB, and 3 MB of
instance JSON, kept as a digest), so not more, and only the last two unpacked."""
_solved: DigestCache[JointAllocation | None] = DigestCache(SOLVES_KEPT, hot=2)
_rolling: DigestCache[tuple[churn.RunningCounts, JointAllocation]] = DigestCache(SOLVES_KEPT, hot=1)
"""By instance without its running replicas: the last plan, and what ran when it was solved or
last kept (:func:`churn.toward`). A plan the search stopped short of its gap is kept too: it
loses nothing against any other plan as it rolls out, and a new solve would only try again
from the same caches (at 200 services, 7 s a pass for the in-turn floor beside the priced
plan)."""


def _solve(instance: JointInstance, time_limit_s: float) -> JointAllocation | None:
    """Plans are pure functions of the instance; the loop reruns on every pod event, so cache.
    A plan rolling out changes the instance it was solved for (its running replicas) in the
    passes that follow; while they move towards the plan it is kept rather than solved again
    (at 200 services 1.7-3.4 s a pass after every rollout, in front of the next change)."""

    def solve() -> JointAllocation | None:
        start = time.perf_counter()
        rolling = f"{time_limit_s!r}\0{churn.without_running(instance)}"
        earlier = _rolling.peek(rolling)
        if earlier is not None and churn.toward(*earlier, instance):
            plan: JointAllocation | None = churn.rebased(earlier[1], instance)
        else:
            plan = solve_joint(instance, time_limit_s=time_limit_s, gap_rel=GAP_REL)
        if plan is not None:
            _rolling.put(rolling, (churn.running(instance), plan))
        # Which way a fleet was planned (priced pools, the contention decomposition, a floor)
        # decides a pass's time and memory; the message says it.
        said = "no plan" if plan is None else f"{plan.result.status}; {plan.result.message}"
        log.info("joint solve: %d services in %.1f s: %s", len(instance.services),
                 time.perf_counter() - start, said)  # fmt: skip
        return plan

    return _solved.get(f"{time_limit_s!r}\0{instance.model_dump_json()}", solve)


def _gpus_per_node(pools: list[GPUPool], members: dict[str, list[NodeInfo]]) -> dict[str, int]:
    """The largest node's GPUs per pool (``members``: its nodes): a tensor-parallel replica
    must fit in one node."""
    return {p.name: max(n.allocatable_gpus for n in members[p.name]) for p in pools
            if members[p.name]}  # fmt: skip
