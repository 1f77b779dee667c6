"""The Services of one LLMService: the one clients call, and a headless one over the vLLM pods."""

from typing import Any

from gpumix.api import LLMServiceSpec
from gpumix.render.deployment import PORT, PORT_NAME
from gpumix.render.names import (
    Owner,
    engines_service_name,
    labels_for,
    object_meta,
    router_selector,
    selector_for,
    service_name,
)


def _ports() -> list[dict[str, Any]]:
    return [{"name": PORT_NAME, "port": PORT, "protocol": "TCP", "targetPort": PORT_NAME}]


def render_service(owner: Owner, spec: LLMServiceSpec, *, router_ready: bool) -> dict[str, Any]:
    """The v1 ClusterIP Service ``<service>``, the address clients call.

    With ``routing.mode: Router`` it selects the router pods, which pick a pool per request by
    its size bucket (the routing ConfigMap); with ``Service`` it selects the vLLM pods of every
    pool, and kube-proxy spreads connections evenly whatever the request size. It switches to the
    routers only once one is available (``router_ready``), so turning routing on, or a first
    image pull, never leaves clients with no endpoint.
    """
    router = spec.routing.mode == "Router" and router_ready
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, service_name(owner.name), labels_for(owner.name)),
        "spec": {
            "ports": _ports(),
            "selector": router_selector(owner.name) if router else selector_for(owner.name),
            "type": "ClusterIP",
        },
    }


def render_engines_service(owner: Owner) -> dict[str, Any]:
    """The headless Service ``<service>--engines`` over the vLLM pods of every pool, in either
    routing mode: its DNS name resolves to the ready pods, for whatever must reach them past the
    router (debugging, per-pod scraping). The router itself watches the pods, not this Service."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, engines_service_name(owner.name), labels_for(owner.name)),
        "spec": {
            "clusterIP": "None",
            "ports": _ports(),
            "selector": selector_for(owner.name),
            "type": "ClusterIP",
        },
    }
