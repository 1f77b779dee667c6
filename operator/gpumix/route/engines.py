"""Which engine pods the router may send to, read from the pods of one LLMService.

A pod takes requests once it is Running and Ready and is not being deleted; its pool key is the
one the plan's routing table uses (``<pool>`` or ``<pool>-tp<k>``,
:func:`gpumix.problem.option_key`), from the labels the operator puts on every engine pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpumix.problem import option_key
from gpumix.render.deployment import PORT
from gpumix.render.names import POOL_LABEL, SERVICE_LABEL, TP_LABEL

ENGINE_URL_ANNOTATION = "gpumix.io/engine-url"
"""Overrides a pod's engine address (``http://<podIP>:8000``): for an engine behind a sidecar on
another port, and for the e2e tests, which point KWOK pods at `gpumix sim serve` pods."""

Engines = dict[str, dict[str, str]]
"""pool key → pod name → base URL of the pod's OpenAI server."""


def pod_url(body: Mapping[str, Any], annotation: str, port: int) -> str | None:
    """``http://<podIP>:<port>``, or the pod's ``annotation`` when set; None without an IP."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    override = (meta.get("annotations") or {}).get(annotation)
    if override:
        return str(override).rstrip("/")
    ip = status.get("podIP")
    return f"http://{ip}:{port}" if ip else None


def pool_key(labels: Mapping[str, str]) -> str | None:
    """The routing table's key for a pod's pool, from its labels; None for a pod of no pool."""
    pool = labels.get(POOL_LABEL)
    if not pool:
        return None
    try:
        tp = int(labels.get(TP_LABEL, "1"))
    except ValueError:
        tp = 1
    return option_key(pool, tp)


def is_ready(body: Mapping[str, Any]) -> bool:
    status = body.get("status") or {}
    if (body.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ready_engines(pods: Iterable[Mapping[str, Any]], service: str) -> Engines:
    """The ready engine pods of ``service`` per pool key, with the URL the router calls."""
    out: Engines = {}
    for body in pods:
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(SERVICE_LABEL) != service or not is_ready(body):
            continue
        key = pool_key(labels)
        url = pod_url(body, ENGINE_URL_ANNOTATION, PORT)
        if key is not None and url is not None:
            out.setdefault(key, {})[str(meta.get("name", ""))] = url
    return out
