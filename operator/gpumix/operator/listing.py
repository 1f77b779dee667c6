"""How many objects of each watched kind the apiserver holds, so that the first planner pass
waits for kopf's initial listings instead of planning on part of the cluster.

kopf lists every watched kind when it starts (and again after a leader takes over) and hands the
objects to the view one by one; on.event handlers are never told that a listing is over. A pass
that ran a second after start-up saw 200 of 501 nodes of a live 50-service cluster (nodes are
listed in name order), found the other pools empty and moved all 50 services off them: 709
writes and a rollout of every service, from an operator restart alone.
"""

import logging
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

from gpumix.operator.handlers import WATCHES

log = logging.getLogger("gpumix.planner")
PAGE = 500
"""Items per page when a kind must be counted by listing it (a label-selected watch, where the
apiserver gives no remaining count)."""


def _path(group: str, version: str, plural: str) -> str:
    return f"/api/{version}/{plural}" if not group else f"/apis/{group}/{version}/{plural}"


def _page(api: DynamicClient, path: str, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = api.request("GET", path, **params).to_dict()
    return body


def listed_counts(api: client.ApiClient) -> dict[str, int]:
    """Objects per watched kind (`gpumix.operator.handlers.WATCHES`): one ``limit=1`` LIST per
    kind (the apiserver's ``remainingItemCount``), pages of ``PAGE`` for a label-selected one."""
    dynamic = DynamicClient(api)
    counts = {}
    for kind, (group, version, plural, labels) in WATCHES.items():
        path = _path(group, version, plural)
        selector = ",".join(f"{k}={v}" for k, v in labels.items()) if labels else None
        body = _page(dynamic, path, label_selector=selector, limit=1)
        meta = body.get("metadata") or {}
        count = len(body.get("items") or [])
        if meta.get("remainingItemCount") is not None:
            count += int(meta["remainingItemCount"])
        elif meta.get("continue"):
            count, token = 0, None
            while True:
                body = _page(dynamic, path, label_selector=selector, limit=PAGE, _continue=token)
                count += len(body.get("items") or [])
                token = (body.get("metadata") or {}).get("continue")
                if not token:
                    break
        counts[kind] = count
    return counts
