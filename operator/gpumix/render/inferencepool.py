"""Routing mode InferencePool: the objects a Gateway API Inference Extension gateway routes by.

The gateway's HTTPRoute names an ``InferencePool`` ``<service>`` (``inference.networking.k8s.io/
v1``) over the service's vLLM pods; for every request the gateway asks the pool's endpoint picker
(Envoy ext_proc) which pod to send it to. The picker is the router Deployment ``<service>--router``
running ``gpumix route --ext-proc-port`` (:mod:`gpumix.route.picker`), reached through the Service
``<service>--picker``: one Deployment whichever the routing mode, so switching modes rolls it
rather than replacing it, and its RBAC, disruption budget and metrics stay the router's.
"""

from collections.abc import Mapping
from typing import Any

from gpumix.render.deployment import PORT
from gpumix.render.names import (
    PICKER_COMPONENT,
    Owner,
    labels_for,
    object_meta,
    picker_labels,
    picker_service_name,
    router_selector,
    selector_for,
    service_name,
)

MODE = "InferencePool"
API_VERSION = "inference.networking.k8s.io/v1"
EXT_PROC_PORT = 9002
"""The picker's gRPC port (ext_proc and health), the port GIE's own endpoint picker uses."""
EXT_PROC_PORT_NAME = "grpc"


def inference_pool_name(service: str) -> str:
    """``<service>``, as the Service clients call: what a user's HTTPRoute names."""
    return service_name(service)


def picker_flags() -> list[str]:
    """What turns ``gpumix route`` into the endpoint picker."""
    return ["--ext-proc-port", str(EXT_PROC_PORT)]


def picker_port() -> dict[str, Any]:
    return {"containerPort": EXT_PROC_PORT, "name": EXT_PROC_PORT_NAME, "protocol": "TCP"}


def is_picker(deployment: Mapping[str, Any] | None) -> bool:
    """Whether a router Deployment (as the operator watches it) was rendered as the endpoint
    picker: then the InferencePool and the picker's Service exist too."""
    labels = ((deployment or {}).get("metadata") or {}).get("labels") or {}
    return bool(labels.get("app.kubernetes.io/component") == PICKER_COMPONENT)


def render_inference_pool(owner: Owner) -> dict[str, Any]:
    """The InferencePool over every vLLM pod of the service (all pools: the picker splits the
    buckets among them), on the engines' port, whose picker fails closed as GIE defaults: a
    gateway that cannot ask the picker answers 5xx rather than spread requests by chance."""
    return {
        "apiVersion": API_VERSION,
        "kind": "InferencePool",
        "metadata": object_meta(owner, inference_pool_name(owner.name), labels_for(owner.name)),
        "spec": {
            "endpointPickerRef": {
                "failureMode": "FailClose",
                "kind": "Service",
                "name": picker_service_name(owner.name),
                "port": {"number": EXT_PROC_PORT},
            },
            "selector": {"matchLabels": selector_for(owner.name)},
            "targetPorts": [{"number": PORT}],
        },
    }


def render_picker_service(owner: Owner) -> dict[str, Any]:
    """The ClusterIP Service ``<service>--picker`` over the pickers' gRPC port (h2c: the gateway
    speaks HTTP/2 to it). Each ext_proc stream carries one request from headers to the answer's
    end, so the replica that picked it also sees it finish, whichever replica a stream lands on."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, picker_service_name(owner.name), picker_labels(owner.name)),
        "spec": {
            "ports": [
                {
                    "appProtocol": "kubernetes.io/h2c",
                    "name": EXT_PROC_PORT_NAME,
                    "port": EXT_PROC_PORT,
                    "protocol": "TCP",
                    "targetPort": EXT_PROC_PORT_NAME,
                }
            ],
            "selector": router_selector(owner.name),
            "type": "ClusterIP",
        },
    }


def render_inference_pool_objects(owner: Owner) -> list[dict[str, Any]]:
    """What the gateway needs besides the picker Deployment: the picker's Service, then the
    InferencePool that names it."""
    return [render_picker_service(owner), render_inference_pool(owner)]


def inference_pool_refs(owner: Owner) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of :func:`render_inference_pool_objects`, the InferencePool
    first: deleted before the Service it points at."""
    return [
        (API_VERSION, "InferencePool", inference_pool_name(owner.name)),
        ("v1", "Service", picker_service_name(owner.name)),
    ]
