"""Pure decisions of the KV-migration loop (MELL, issue #7 step 5): which pods, when to act, and
how consolidation and the planner's replica target meet.

**Planner and KV scheduler.** The planner's target per option (pool, plus ``-tp<k>``) is an
*upper bound*: sized by Mélange for throughput under the SLO. MELL serves the same load with
fewer pods when their KV caches fit on fewer GPUs, so the KV loop may run fewer: it empties the
newest pod by migrations, marks it with the lowest ``pod-deletion-cost`` and records
``status.kvScheduler.scaledIn = [{option, plannedReplicas, removed}]``. The planner applies
``target - removed`` (never below one replica of an option it plans) while its target for that
option still equals ``plannedReplicas``; a new target voids the entry (the fresh plan rules, and
the KV loop may consolidate again), so does disabling ``kvMigration``. The planner is the only
writer of Deployments; the KV loop is the only writer of ``status.kvScheduler``.

**Scheduling back up.** MELL activates a GPU when a request fits nowhere: when a pod of an option
with ``removed > 0`` has requests waiting for KV blocks or its KV cache is ≥ ``PRESSURE`` full,
the loop gives one replica back (``removed - 1``).

**One pool is one MELL cluster.** MELL's system model has homogeneous GPUs (§VI-A), so each
option's pods are consolidated among themselves, in activation order (oldest first).

**Through the router** (``via: Router``, stock vLLM): a pod's requests are the union of every
router replica's ledger (each replica owns the streams it relays), its KV capacity and pressure
come from the engine's own ``/metrics`` (``vllm:cache_config_info``, ``num_requests_waiting``,
``kv_cache_usage_perc``). A replica that does not answer leaves the whole service alone for the
pass: its streams could be on any pod, and a pod is emptied only when all of them are known. A
pod running more requests than the routers know of (clients that bypass the router) is never
emptied, nor one holding a stream that cannot move.

**Acting only when settled.** An option is consolidated only when the Deployment runs exactly
``target - removed`` replicas and that many pods are live (Running, not terminating), so a
scale-in in progress is never taken for load that moved. No admin data from a pod means the
option is left alone this pass (no data is never zero load).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gpumix.api import KvMigration, KvScaleIn, KvSchedulerStatus, LLMServiceStatus
from gpumix.operator.kvloop import (
    KvDecision,
    PodLoad,
    PodRequest,
    parse_admin_listing,
    plan_consolidation,
)
from gpumix.problem import option_key
from gpumix.render.deployment import ADMIN_PORT, PORT
from gpumix.render.names import ROUTER_LABEL, SERVICE_LABEL, label_value
from gpumix.route.engines import ENGINE_URL_ANNOTATION, pod_url, pool_key

ADMIN_URL_ANNOTATION = "gpumix.io/admin-url"
"""Overrides the pod's admin endpoint (`http://<podIP>:ADMIN_PORT`): the hook for a sidecar on
another address and for the e2e test, which points KWOK pods at `gpumix sim serve` pods."""
PRESSURE = 0.95
"""KV-cache fill of a pod above which a replica removed by the KV loop is given back."""
KEEP_DRAINED = 10


@dataclass(frozen=True)
class KvPod:
    name: str
    option: str
    node: str
    created: str
    url: str | None
    """The admin contract's address (``via: Engine``)."""
    engine_url: str | None = None
    """The OpenAI server's address, whose ``/metrics`` gives KV capacity (``via: Router``)."""


@dataclass(frozen=True)
class PodSample:
    """One live pod's admin listing: its load for MELL, and whether it is under KV pressure."""

    load: PodLoad
    used_fraction: float
    waiting: int


@dataclass
class OptionAction:
    option: str
    decision: KvDecision
    loads: list[PodLoad]


@dataclass
class KvPass:
    """What one pass does for one service: migrations per option, then the status to write."""

    actions: list[OptionAction] = field(default_factory=list)
    scaled_in: dict[str, tuple[int, int]] = field(default_factory=dict)
    """option → (plannedReplicas, removed) after this pass, if the actions succeed."""
    notes: list[str] = field(default_factory=list)


def admin_url(body: Mapping[str, Any]) -> str | None:
    return pod_url(body, ADMIN_URL_ANNOTATION, ADMIN_PORT)


def _live(body: Mapping[str, Any]) -> bool:
    """Running and not being deleted."""
    meta = body.get("metadata") or {}
    return (
        not meta.get("deletionTimestamp") and (body.get("status") or {}).get("phase") == "Running"
    )


def live_pods(
    pods: Iterable[Mapping[str, Any]], namespace: str, service: str
) -> dict[str, list[KvPod]]:
    """The service's Running, non-terminating pods per option, oldest first (activation order)."""
    out: dict[str, list[KvPod]] = {}
    for body in pods:
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace") != namespace or labels.get(SERVICE_LABEL) != service:
            continue
        if not _live(body):
            continue
        option = pool_key(labels)
        if option is None:
            continue
        out.setdefault(option, []).append(
            KvPod(
                name=meta.get("name", ""),
                option=option,
                node=(body.get("spec") or {}).get("nodeName") or "",
                created=meta.get("creationTimestamp") or "",
                url=admin_url(body),
                engine_url=pod_url(body, ENGINE_URL_ANNOTATION, PORT),
            )
        )
    for group in out.values():
        group.sort(key=lambda p: (p.created, p.name))
    return out


def router_urls(pods: Iterable[Mapping[str, Any]], namespace: str, service: str) -> list[str]:
    """Admin URLs of the service's live router pods (Running, not being deleted)."""
    out = []
    for body in pods:
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace") != namespace or labels.get(ROUTER_LABEL) != label_value(service):
            continue
        if not _live(body):
            continue
        url = admin_url(body)
        if url is not None:
            out.append(url)
    return sorted(out)


@dataclass(frozen=True)
class EngineGauges:
    """What a vLLM pod's ``/metrics`` says of its KV cache."""

    capacity_tokens: int
    running: int
    waiting: int
    used_fraction: float


def engine_gauges(text: str) -> EngineGauges:
    """Parse a vLLM ``/metrics`` page; ValueError without ``vllm:cache_config_info``."""
    values: dict[str, float] = {}
    capacity = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vllm:cache_config_info":
                capacity = int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"])
            else:
                values[s.name] = s.value
    if capacity is None:
        raise ValueError("no vllm:cache_config_info in /metrics")
    usage = values.get("vllm:kv_cache_usage_perc", values.get("vllm:gpu_cache_usage_perc", 1.0))
    return EngineGauges(
        capacity_tokens=capacity,
        running=int(values.get("vllm:num_requests_running", 0)),
        waiting=int(values.get("vllm:num_requests_waiting", 0)),
        used_fraction=usage,
    )


def ledger_samples(
    pods: Mapping[str, Sequence[KvPod]],
    ledgers: Mapping[str, dict[str, Any] | str],
    gauges: Mapping[str, EngineGauges | str],
) -> dict[str, PodSample | str]:
    """Each pod's sample from the routers' ledgers (router admin URL → its ``/admin/inflight``
    answer, or why there is none) and the engines' gauges (pod name → gauges, or why none)."""
    pods_all = [p for group in pods.values() for p in group]
    silent = [f"router {u}: {why}" for u, why in sorted(ledgers.items()) if isinstance(why, str)]
    if silent or not ledgers:
        why = "; ".join(silent) or "no live router pod"
        return {p.name: why for p in pods_all}
    out: dict[str, PodSample | str] = {}
    for pod in pods_all:
        g = gauges.get(pod.name, "not scraped")
        if isinstance(g, str):
            out[pod.name] = g
            continue
        requests = tuple(
            PodRequest(
                id=str(r["id"]),
                kv_tokens=int(r["kv_tokens"]),
                prompt_tokens=int(r["prompt_tokens"]),
                generated_tokens=int(r["generated_tokens"]),
                output_tokens=int(r.get("max_tokens") or 0),
                via=url,
                movable=bool(r.get("movable")),
            )
            for url, body in sorted(ledgers.items())
            if not isinstance(body, str)
            for r in ((body.get("pods") or {}).get(pod.name) or {}).get("requests", [])
        )
        load = PodLoad(
            name=pod.name,
            url=pod.engine_url or "",
            node=pod.node,
            kv_tokens=g.capacity_tokens,
            requests=requests,
            pinned=g.running + g.waiting > len(requests),
        )
        out[pod.name] = PodSample(load=load, used_fraction=g.used_fraction, waiting=g.waiting)
    return out


def sample(pod: KvPod, body: dict[str, Any]) -> PodSample:
    """A pod's `GET /admin/requests` answer → its MELL load and pressure."""
    load = parse_admin_listing(pod.name, pod.url or "", pod.node, body)
    blocks = int(body.get("kv_blocks") or 0)
    used = int(body.get("used_blocks") or 0) / blocks if blocks else 1.0
    waiting = sum(1 for r in body.get("requests", []) if r.get("state") == "waiting")
    return PodSample(load=load, used_fraction=used, waiting=waiting)


def planned_targets(status: LLMServiceStatus | None) -> dict[str, int]:
    """The planner's target per option, as its status reports it."""
    if status is None:
        return {}
    return {option_key(a.pool, a.gpus_per_replica): a.replicas for a in status.allocation}


def reductions(
    kv: KvMigration, kv_status: KvSchedulerStatus | None, target: Mapping[str, int]
) -> dict[str, int]:
    """Replicas per option the planner leaves out because the KV loop emptied and removed them:
    only for entries made against the current target, never the last replica of an option."""
    if not kv.enabled or kv_status is None:
        return {}
    out = {}
    for e in kv_status.scaled_in:
        planned = target.get(e.option, 0)
        if e.removed > 0 and planned == e.planned_replicas and planned > 0:
            out[e.option] = min(e.removed, planned - 1)
    return {k: v for k, v in out.items() if v > 0}


def decide_pass(
    kv: KvMigration,
    *,
    status: LLMServiceStatus | None,
    deployment_replicas: Mapping[str, int],
    pods: Mapping[str, Sequence[KvPod]],
    samples: Mapping[str, PodSample | str],
    min_replicas: int = 0,
    recompute_budget: int | None = None,
) -> KvPass:
    """One pass for one service. `samples`: pod name → its sample, or why there is none;
    ``recompute_budget``: see :func:`~gpumix.operator.kvloop.plan_consolidation`."""
    target = planned_targets(status)
    removed = reductions(kv, status.kv_scheduler if status else None, target)
    out = KvPass(scaled_in={o: (target[o], n) for o, n in removed.items()})
    total = sum(target[o] - removed.get(o, 0) for o in target)
    budget = kv.max_migrations_per_pass
    for option in sorted(target):
        want = target[option] - removed.get(option, 0)
        group = pods.get(option, [])
        if target[option] == 0:
            continue
        if deployment_replicas.get(option) != want or len(group) != want:
            out.notes.append(
                f"{option}: waiting for {want} pods (Deployment "
                f"{deployment_replicas.get(option, 0)}, live {len(group)})"
            )
            continue
        got = [samples.get(p.name, "not sampled") for p in group]
        missing = [f"{p.name}: {s}" for p, s in zip(group, got, strict=True) if isinstance(s, str)]
        if missing:
            out.notes.append(f"{option}: no KV data ({'; '.join(missing)})")
            continue
        loads = [s for s in got if isinstance(s, PodSample)]
        pressed = [s.load.name for s in loads if s.waiting > 0 or s.used_fraction >= PRESSURE]
        if pressed:
            if removed.get(option, 0) > 0:
                out.scaled_in[option] = (target[option], removed[option] - 1)
                out.notes.append(f"{option}: KV pressure on {', '.join(pressed)}; one pod back")
            continue
        if len(group) < 2 or total <= max(1, min_replicas) or budget <= 0:
            continue
        decision = plan_consolidation(
            [s.load for s in loads], max_migrations=budget, recompute_budget=recompute_budget
        )
        if not decision.drained:
            continue
        # minReplicas across pools: drain no more pods than the service may lose.
        room = total - max(1, min_replicas)
        if len(decision.drained) > room:
            continue
        budget -= len(decision.moves)
        total -= len(decision.drained)
        out.actions.append(OptionAction(option, decision, [s.load for s in loads]))
        out.scaled_in[option] = (target[option], removed.get(option, 0) + len(decision.drained))
    return out


def next_status(
    previous: KvSchedulerStatus | None,
    scaled_in: Mapping[str, tuple[int, int]],
    *,
    migrations: int,
    drained: Sequence[str],
    now: str,
    message: str | None,
) -> KvSchedulerStatus:
    prev = previous or KvSchedulerStatus()
    return KvSchedulerStatus(
        last_pass=now,
        migrations=prev.migrations + migrations,
        drained_pods=[*prev.drained_pods, *drained][-KEEP_DRAINED:],
        scaled_in=[
            KvScaleIn(option=o, planned_replicas=p, removed=n)
            for o, (p, n) in sorted(scaled_in.items())
            if n > 0
        ],
        message=message,
    )
