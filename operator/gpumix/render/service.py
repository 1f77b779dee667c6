"""The Service in front of every pod of one LLMService, across all its GPU pools."""

from typing import Any

from gpumix.api import LLMServiceSpec
from gpumix.render.deployment import PORT, PORT_NAME
from gpumix.render.names import Owner, labels_for, object_meta, selector_for, service_name


def render_service(owner: Owner, spec: LLMServiceSpec) -> dict[str, Any]:
    """The v1 ClusterIP Service ``<service>`` selecting the pods of every pool's Deployment.

    kube-proxy spreads connections evenly over pods, which ignores request size; size-aware
    routing (Mélange App. A.2) reads the routing ConfigMap instead. ``spec`` is unused today and
    kept so that the signature does not change when the port becomes configurable.
    """
    del spec
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, service_name(owner.name), labels_for(owner.name)),
        "spec": {
            "ports": [
                {"name": PORT_NAME, "port": PORT, "protocol": "TCP", "targetPort": PORT_NAME}
            ],
            "selector": selector_for(owner.name),
            "type": "ClusterIP",
        },
    }
