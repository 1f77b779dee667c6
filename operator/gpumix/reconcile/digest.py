"""Raw Kubernetes objects → the few facts the planner needs (pure, so it is unit-tested)."""

from collections.abc import Collection, Iterable
from typing import Any

from gpumix.problem import option_key
from gpumix.reconcile.capacity import GPU_RESOURCE, MANAGED_BY, NodeInfo, PodInfo
from gpumix.reconcile.service import Running
from gpumix.render.names import POOL_LABEL, SERVICE_LABEL, TP_LABEL


def _quantity(value: Any) -> int:
    """GPU counts are whole numbers; anything unparsable counts as none."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _container_gpus(container: dict[str, Any]) -> int:
    res = container.get("resources") or {}
    # Extended resources cannot be overcommitted: requests default to limits.
    req = (res.get("requests") or {}).get(GPU_RESOURCE)
    return _quantity(req if req is not None else (res.get("limits") or {}).get(GPU_RESOURCE))


def pod_spec_gpus(spec: dict[str, Any]) -> int:
    """What the scheduler reserves: the sum over containers, or the largest init container."""
    main = sum(_container_gpus(c) for c in spec.get("containers") or [])
    init = max((_container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def node_info(body: dict[str, Any]) -> NodeInfo:
    meta, status = body.get("metadata", {}), body.get("status") or {}
    return NodeInfo(
        name=meta.get("name", ""),
        labels=meta.get("labels") or {},
        allocatable_gpus=_quantity((status.get("allocatable") or {}).get(GPU_RESOURCE, 0)),
    )


def pod_info(body: dict[str, Any]) -> PodInfo:
    meta, spec = body.get("metadata", {}), body.get("spec") or {}
    return PodInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node=spec.get("nodeName"),
        gpus=pod_spec_gpus(spec),
        phase=(body.get("status") or {}).get("phase", "Pending"),
        managed_by_gpumix=(meta.get("labels") or {}).get(MANAGED_BY) == "gpumix",
    )


def _option(labels: dict[str, str]) -> str:
    return option_key(labels.get(POOL_LABEL, ""), _quantity(labels.get(TP_LABEL, "1")) or 1)


PodKey = tuple[str, str, str]
"""(namespace, service, option) of a pod of gpumix's engine Deployments."""


def _engine_pod(meta: dict[str, Any]) -> PodKey | None:
    """The pod's :data:`PodKey` when it is one of gpumix's engine pods (service and pool
    labels), else ``None``."""
    labels = meta.get("labels") or {}
    service = labels.get(SERVICE_LABEL)
    if not service or POOL_LABEL not in labels:
        return None
    return meta.get("namespace", ""), service, _option(labels)


def stranded_pods(pods: Iterable[dict[str, Any]], nodes: Collection[str]) -> dict[PodKey, int]:
    """Ready pods of gpumix's engine Deployments bound to a node that no longer exists, per
    (namespace, service, option). Their Deployment still counts them available — no kubelet is
    left to say otherwise, and pod GC deletes them only after its 40 s quarantine — but they
    serve nothing: make-before-break must not count them (found by tests/e2e/test_chaos.py: a
    node deleted mid-rollout let the old pool go while the new one served one replica short)."""
    out: dict[PodKey, int] = {}
    for body in pods:
        meta, spec = body.get("metadata", {}), body.get("spec") or {}
        key, node = _engine_pod(meta), spec.get("nodeName")
        if key is None or not node or node in nodes:
            continue
        conditions = (body.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if ready and not meta.get("deletionTimestamp"):
            out[key] = out.get(key, 0) + 1
    return out


def unschedulable_pods(pods: Iterable[dict[str, Any]]) -> dict[PodKey, str]:
    """Pods of gpumix's engine Deployments the scheduler could not place, per (namespace,
    service, option): how many, and the scheduler's reason for the first by name (``0/12 nodes
    are available: 3 Insufficient nvidia.com/gpu``). A plan the pool's GPU count holds can still
    leave a k-GPU replica without k free GPUs on any one node; the service's status says so
    rather than wait, silently, in ``RollingOut``."""
    found: dict[PodKey, list[tuple[str, str]]] = {}
    for body in pods:
        meta, spec = body.get("metadata", {}), body.get("spec") or {}
        key = _engine_pod(meta)
        if key is None or spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        for cond in (body.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                found.setdefault(key, []).append((meta.get("name", ""), cond.get("message", "")))
    out = {}
    for key, named in found.items():
        _, message = min(named)
        pods_ = "1 pod" if len(named) == 1 else f"{len(named)} pods"
        out[key] = f"{pods_} unschedulable: {message.strip()}" if message else pods_
    return out


def running_services(
    deployments: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]] = (),
    nodes: Collection[str] | None = None,
) -> dict[tuple[str, str], Running]:
    """(namespace, service) → replicas, available replicas, GPUs per replica, Deployment name and
    unschedulable pods (:func:`unschedulable_pods`), per option (:func:`gpumix.problem.option_key`:
    the pool, plus ``-tp<k>`` for k-GPU replicas).
    Given the cluster's `pods` and `nodes` (names), pods on nodes that are gone do not count as
    available (:func:`stranded_pods`).
    """
    pods = list(pods)
    stranded = stranded_pods(pods, nodes) if nodes is not None else {}
    unschedulable = unschedulable_pods(pods)
    acc: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for body in deployments:
        meta = body.get("metadata", {})
        labels = meta.get("labels") or {}
        service, pool = labels.get(SERVICE_LABEL), labels.get(POOL_LABEL)
        if not service or not pool or meta.get("deletionTimestamp"):
            continue
        spec = body.get("spec") or {}
        entry = acc.setdefault((meta.get("namespace", ""), service), {
            "replicas": {}, "ready": {}, "gpus_per_replica": {}, "names": {},
            "unschedulable": {}})  # fmt: skip
        key = _option(labels)
        entry["replicas"][key] = int(spec.get("replicas", 1))
        available = int((body.get("status") or {}).get("availableReplicas") or 0)
        lost = stranded.get((meta.get("namespace", ""), service, key), 0)
        entry["ready"][key] = max(0, available - lost)
        template = (spec.get("template") or {}).get("spec") or {}
        entry["gpus_per_replica"][key] = pod_spec_gpus(template) or 1
        entry["names"][key] = meta.get("name", "")
        why = unschedulable.get((meta.get("namespace", ""), service, key))
        if why is not None:
            entry["unschedulable"][key] = why
    return {key: Running.model_validate(v) for key, v in acc.items()}


def autoscaler_targets(
    hpas: Iterable[dict[str, Any]],
) -> dict[tuple[str, str], str]:
    """(namespace, Deployment name) → which HorizontalPodAutoscaler scales it. KEDA ScaledObjects
    act through an HPA they create, so they are caught here too."""
    out: dict[tuple[str, str], str] = {}
    for body in hpas:
        meta, ref = body.get("metadata", {}), (body.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") == "Deployment" and ref.get("name"):
            owner: dict[str, Any] = next(iter(meta.get("ownerReferences") or []), {})
            who = f"HorizontalPodAutoscaler {meta.get('name')}"
            if owner.get("kind") == "ScaledObject":
                who += f" (KEDA ScaledObject {owner.get('name')})"
            out[meta.get("namespace", ""), ref["name"]] = who
    return out
