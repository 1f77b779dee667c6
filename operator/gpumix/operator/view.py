"""An in-memory view of the cluster, kept current by kopf watch events (level-based input)."""

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from gpumix.reconcile.cluster import Snapshot
from gpumix.reconcile.digest import autoscaler_targets, node_info, pod_info, running_services

KINDS = ("services", "pools", "profiles", "nodes", "pods", "deployments", "hpas")


@dataclass
class ClusterView:
    """Latest body of every watched object, by kind and (namespace, name)."""

    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(
        default_factory=lambda: {k: {} for k in KINDS}
    )
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def update(self, kind: str, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event_type == "DELETED":
            self.objects[kind].pop(key, None)
        else:
            self.objects[kind][key] = copy.deepcopy(body)
        self.changed.set()

    def snapshot(
        self, now: str, time_limit_s: float, budget_per_hour: float | None = None
    ) -> Snapshot:
        o = self.objects
        return Snapshot(
            services=list(o["services"].values()),
            pools=list(o["pools"].values()),
            profiles=list(o["profiles"].values()),
            nodes=[node_info(b) for b in o["nodes"].values()],
            pods=[pod_info(b) for b in o["pods"].values()],
            running=running_services(o["deployments"].values()),
            autoscalers=autoscaler_targets(o["hpas"].values()),
            now=now,
            time_limit_s=time_limit_s,
            budget_per_hour=budget_per_hour,
        )
