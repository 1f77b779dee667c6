"""Pure rendering of an LLMService's child objects: plain dicts the operator server-side-applies.

Everything here is deterministic (no timestamps, sorted where order carries no meaning) so that
applying an unchanged plan is a no-op, and I/O-free so that golden-file tests pin the output.
"""

from gpumix.render.deployment import render_deployment, toleration_dict, vllm_args
from gpumix.render.names import (
    FIELD_MANAGER,
    Owner,
    deployment_name,
    is_dns1035_label,
    is_dns1123_label,
    is_label_value,
    labels_for,
    owner_reference,
    routing_configmap_name,
    selector_for,
    service_name,
)
from gpumix.render.routing import ROUTING_KEY, render_routing_configmap, routing_document
from gpumix.render.service import render_service

__all__ = [
    "FIELD_MANAGER",
    "ROUTING_KEY",
    "Owner",
    "deployment_name",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_label_value",
    "labels_for",
    "owner_reference",
    "render_deployment",
    "render_routing_configmap",
    "render_service",
    "routing_configmap_name",
    "routing_document",
    "selector_for",
    "service_name",
    "toleration_dict",
    "vllm_args",
]
