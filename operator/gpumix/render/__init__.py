"""Pure rendering of an LLMService's child objects: plain dicts the operator server-side-applies.

Everything here is deterministic (no timestamps, sorted where order carries no meaning) so that
applying an unchanged plan is a no-op, and I/O-free so that golden-file tests pin the output.
"""

from gpumix.render.cache import render_cache_claim, render_cache_job
from gpumix.render.deployment import render_deployment, toleration_dict, vllm_args
from gpumix.render.names import (
    FIELD_MANAGER,
    Owner,
    deployment_name,
    engines_service_name,
    is_dns1035_label,
    is_dns1123_label,
    is_label_value,
    labels_for,
    owner_reference,
    router_labels,
    router_name,
    router_selector,
    routing_configmap_name,
    selector_for,
    service_name,
)
from gpumix.render.podtemplate import apply_template, template_conflicts
from gpumix.render.router import ROUTER_KINDS, render_router
from gpumix.render.routing import ROUTING_KEY, render_routing_configmap, routing_document
from gpumix.render.service import render_engines_service, render_service

__all__ = [
    "FIELD_MANAGER",
    "ROUTER_KINDS",
    "ROUTING_KEY",
    "Owner",
    "apply_template",
    "deployment_name",
    "engines_service_name",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_label_value",
    "labels_for",
    "owner_reference",
    "render_cache_claim",
    "render_cache_job",
    "render_deployment",
    "render_engines_service",
    "render_router",
    "render_routing_configmap",
    "render_service",
    "router_labels",
    "router_name",
    "router_selector",
    "routing_configmap_name",
    "routing_document",
    "selector_for",
    "service_name",
    "template_conflicts",
    "toleration_dict",
    "vllm_args",
]
