"""One pass of the cluster-wide planner: every GPUPool's status and every LLMService's decision.

Services are planned one at a time in a stable order (oldest first) against what the pools have
left after the services before them, so the sum of all plans never exceeds a pool: a service that
does not fit reports InsufficientCapacity instead of overcommitting. Joint optimisation across
services (Coral §2.2) will replace the loop body without changing its inputs or outputs.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpumix.api import (
    ConditionStatus,
    GPUPool,
    GPUPoolStatus,
    GPUProfile,
    LLMService,
    LLMServiceStatus,
)
from gpumix.manifests import describe
from gpumix.reconcile.capacity import (
    NodeInfo,
    PodInfo,
    foreign_gpus,
    plannable_gpus,
    pool_status,
)
from gpumix.reconcile.conditions import set_condition
from gpumix.reconcile.service import EventSpec, Running, ServiceDecision, decide_service
from gpumix.render import deployment_name

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
    message = "invalid spec: " + describe(err).replace("\n", "; ")
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
    for body in sorted(snap.pools, key=lambda b: _key(b)[1]):
        try:
            pool = GPUPool.model_validate({**body, "status": None})
        except ValidationError as err:
            invalid.append(InvalidObject(kind="GPUPool", key=_key(body), message=describe(err)))
            continue
        old = (body.get("status") or {}).get("conditions") or []
        previous = GPUPoolStatus.model_validate({"conditions": old}).conditions
        statuses[pool.name] = pool_status(
            pool, nodes=snap.nodes, pods=snap.pods, previous=previous,
            generation=body.get("metadata", {}).get("generation"), now=snap.now,
        )  # fmt: skip
        pools.append(pool)
    profiles = []
    for body in snap.profiles:
        try:
            profiles.append(GPUProfile.model_validate(body))
        except ValidationError as err:
            invalid.append(InvalidObject(kind="GPUProfile", key=_key(body), message=describe(err)))

    free = {
        p.name: max(0, plannable_gpus(p, statuses[p.name]) - foreign_gpus(p, snap.nodes, snap.pods))
        for p in pools
    }
    decisions: dict[ObjectKey, ServiceDecision] = {}
    order = sorted(
        snap.services,
        key=lambda b: (b.get("metadata", {}).get("creationTimestamp", ""), _key(b)),
    )
    for body in order:
        key = _key(body)
        running = snap.running.get(key, Running())
        try:
            service = LLMService.model_validate({**body, "status": None})
        except ValidationError as err:
            decision = _invalid_service(body, err, running, snap.now)
        else:
            conflicts = {
                pool.name: snap.autoscalers[(key[0], deployment_name(key[1], pool.name))]
                for pool in pools
                if (key[0], deployment_name(key[1], pool.name)) in snap.autoscalers
            }
            decision = decide_service(
                service,
                generation=body.get("metadata", {}).get("generation"),
                pools=pools,
                profiles=profiles,
                available_gpus=free,
                running=running,
                previous=_status_of(body),
                conflicts=conflicts,
                now=snap.now,
                time_limit_s=snap.time_limit_s,
            )
        for pool_name, gpus in decision.held_gpus.items():
            if pool_name in free:
                free[pool_name] = max(0, free[pool_name] - gpus)
        decisions[key] = decision
    return ClusterDecision(pool_status=statuses, services=decisions, invalid=invalid)
