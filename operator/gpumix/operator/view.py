"""An in-memory view of the cluster, kept current by kopf watch events (level-based input)."""

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from gpumix.operator import metrics
from gpumix.reconcile.capacity import NodeInfo, PodInfo
from gpumix.reconcile.cluster import SEARCH_SLICE_S, SEARCH_TIME_LIMIT_S, Snapshot
from gpumix.reconcile.digest import autoscaler_targets, node_info, pod_info, running_services
from gpumix.reconcile.kvmigration import ADMIN_URL_ANNOTATION
from gpumix.reconcile.modelshape import config_map_ref
from gpumix.route.engines import ENGINE_URL_ANNOTATION

KINDS = ("services", "pools", "profiles", "nodes", "pods", "deployments", "hpas", "configmaps")


POD_ANNOTATIONS = (ADMIN_URL_ANNOTATION, ENGINE_URL_ANNOTATION)
"""The annotations anything reads of a pod (`gpumix.reconcile.kvmigration`)."""


def _picked(source: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: copy.deepcopy(source[k]) for k in keys if source.get(k) is not None}


def _resources(containers: Any) -> list[dict[str, Any]]:
    return [_picked(c, ("resources",)) for c in containers or []]


def _pod(body: dict[str, Any]) -> dict[str, Any]:
    """What is read of a pod: its GPUs, node and phase (`gpumix.reconcile.digest.pod_info`), its
    labels, creation and deletion, Ready and PodScheduled conditions (stranded, unschedulable,
    `running_services`), IP and URL annotations (the KV loop's `live_pods`, `router_urls`).
    A vLLM pod's body is mostly its spec (command, env, probes, affinity, volumes), and the view
    watches every pod in the cluster; conditions keep no times, so a probe's timestamp is no
    change the planner would pass for."""
    meta, spec, status = (body.get(k) or {} for k in ("metadata", "spec", "status"))
    kept_meta = _picked(meta, ("namespace", "name", "labels", "creationTimestamp",
                               "deletionTimestamp"))  # fmt: skip
    if annotations := {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k in POD_ANNOTATIONS}:  # fmt: skip
        kept_meta["annotations"] = annotations
    kept_spec = _picked(spec, ("nodeName",))
    for field_ in ("containers", "initContainers"):
        if spec.get(field_):
            kept_spec[field_] = _resources(spec[field_])
    kept_status = _picked(status, ("phase", "podIP"))
    if status.get("conditions"):
        kept_status["conditions"] = [
            _picked(c, ("type", "status", "reason", "message")) for c in status["conditions"]
        ]
    return {"metadata": kept_meta, "spec": kept_spec, "status": kept_status}


def _deployment(body: dict[str, Any]) -> dict[str, Any]:
    """What is read of a Deployment (`gpumix.reconcile.digest.running_services`, the writer):
    its labels and deletion, replicas, its pods' GPUs and how many are available. The view
    holds gpumix's only, each with a vLLM pod template."""
    meta, spec, status = (body.get(k) or {} for k in ("metadata", "spec", "status"))
    kept_spec = _picked(spec, ("replicas",))
    template = (spec.get("template") or {}).get("spec") or {}
    pod_spec = {f: _resources(template[f]) for f in ("containers", "initContainers")
                if template.get(f)}  # fmt: skip
    if pod_spec:
        kept_spec["template"] = {"spec": pod_spec}
    return {
        "metadata": _picked(meta, ("namespace", "name", "labels", "deletionTimestamp")),
        "spec": kept_spec,
        "status": _picked(status, ("availableReplicas",)),
    }


def _kept(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the view keeps of an object: a copy without ``metadata.managedFields`` (nothing reads
    them; they are often the larger part of a pod or node); of a Node only its name, labels and
    allocatable resources (`gpumix.reconcile.digest.node_info`; a real node also lists its
    images); of a Pod and a Deployment what is read of them (:func:`_pod`, :func:`_deployment`:
    at 500 services they were most of the view); of a ConfigMap (every one in the cluster is
    watched) only its name and data."""
    meta = body.get("metadata", {})
    if kind == "nodes":
        status = body.get("status") or {}
        return {
            "metadata": {"name": meta.get("name", ""), "labels": dict(meta.get("labels") or {})},
            "status": {"allocatable": dict(status.get("allocatable") or {})},
        }
    if kind == "pods":
        return _pod(body)
    if kind == "deployments":
        return _deployment(body)
    if kind == "configmaps":
        names = {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")}
        kept: dict[str, Any] = {"metadata": names}
        for field_ in ("data", "binaryData"):
            if body.get(field_):
                kept[field_] = dict(body[field_])
        return kept
    meta = {k: v for k, v in meta.items() if k != "managedFields"}
    return copy.deepcopy({**body, "metadata": meta})


@dataclass
class ClusterView:
    """Latest body of every watched object, by kind and (namespace, name)."""

    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(
        default_factory=lambda: {k: {} for k in KINDS}
    )
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    nodes: dict[tuple[str, str], NodeInfo] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodInfo] = field(default_factory=dict)
    """What a snapshot reads of each Node and Pod (`node_info`, `pod_info`), made as the object
    changes: made for 5,000 nodes and 2,800 pods on every pass, they took 0.3-1.2 s of it
    (live 500 × 5,000)."""

    def update(self, kind: str, event_type: str | None, body: dict[str, Any]) -> None:
        """Keep ``body`` (or forget it), and tell the planner when what it reads changed: not
        when a Node's status only renews its heartbeat (what the view keeps of a Node is the
        same; at 5,000 nodes those updates came several times a second and kept the planner
        in back-to-back passes, so a spec change waited for the pass in flight), nor for
        ConfigMaps no service names."""
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        objects = self.objects[kind]
        if event_type == "DELETED":
            if objects.pop(key, None) is None:
                return
            if kind == "nodes":
                self.nodes.pop(key, None)
            elif kind == "pods":
                self.pods.pop(key, None)
        else:
            kept = _kept(kind, body)
            if objects.get(key) == kept:
                return
            objects[key] = kept
            if kind == "nodes":
                self.nodes[key] = node_info(kept)
            elif kind == "pods":
                self.pods[key] = pod_info(kept)
        if kind != "configmaps" or key in self.config_map_refs():
            self.changed.set()  # other ConfigMaps change nothing the planner reads
            metrics.VIEW_CHANGES.labels(kind).inc()  # what keeps the planner passing

    def short_of(self, counts: dict[str, int]) -> dict[str, tuple[int, int]]:
        """The kinds of which the view holds fewer objects than ``counts``: (held, counted)."""
        held = {kind: len(self.objects[kind]) for kind in counts}
        return {kind: (held[kind], n) for kind, n in counts.items() if held[kind] < n}

    def config_map_refs(self) -> set[tuple[str, str]]:
        """The ConfigMaps services name in spec.model.config (namespace, name)."""
        refs = (config_map_ref(body) for body in self.objects["services"].values())
        return {ref for ref in refs if ref is not None}

    def snapshot(
        self,
        now: str,
        time_limit_s: float,
        budget_per_hour: float | None = None,
        search_time_limit_s: float = SEARCH_TIME_LIMIT_S,
        search_slice_s: float = SEARCH_SLICE_S,
    ) -> Snapshot:
        o = self.objects
        return Snapshot(
            services=list(o["services"].values()),
            pools=list(o["pools"].values()),
            profiles=list(o["profiles"].values()),
            nodes=list(self.nodes.values()),
            pods=list(self.pods.values()),
            # No nodes listed yet (start-up): nothing to tell stranded pods by.
            running=running_services(
                o["deployments"].values(), o["pods"].values(), {n for _, n in o["nodes"]} or None
            ),
            autoscalers=autoscaler_targets(o["hpas"].values()),
            config_maps={
                r: o["configmaps"][r] for r in self.config_map_refs() if r in o["configmaps"]
            },
            now=now,
            time_limit_s=time_limit_s,
            search_time_limit_s=search_time_limit_s,
            search_slice_s=search_slice_s,
            budget_per_hour=budget_per_hour,
        )
