"""The child objects one service's decision asks for: Deployments, the Service, routing."""

from typing import Any

from gpumix.api import GPUPool, LLMService
from gpumix.reconcile.service import ServiceDecision
from gpumix.render import (
    Owner,
    render_deployment,
    render_routing_configmap,
    render_service,
)


def desired_objects(
    service: LLMService, owner: Owner, decision: ServiceDecision, pools: dict[str, GPUPool]
) -> list[dict[str, Any]]:
    """What to server-side apply this pass; empty when the decision leaves everything alone."""
    if decision.apply is None or decision.target is None:
        return []
    spec = service.spec
    objects = [
        render_deployment(owner, spec, pools[p], decision.choices[p], n)
        for p, n in sorted(decision.apply.items())
        if p in pools and p in decision.choices
    ]
    serving = {p: n for p, n in decision.target.items() if n}
    objects.append(render_service(owner, spec))
    objects.append(
        render_routing_configmap(owner, spec, decision.shares, serving, decision.choices)
    )
    return objects
