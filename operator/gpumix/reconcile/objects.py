"""The child objects one service's decision asks for (the model cache, Deployments, Services,
routing, the router), and the router's objects to delete once routing no longer asks for them."""

from typing import Any, NamedTuple

from gpumix.api import GPUPool, LLMService
from gpumix.install import NAMESPACE
from gpumix.reconcile.service import ServiceDecision
from gpumix.render import (
    ROUTER_KINDS,
    Owner,
    render_cache_claim,
    render_cache_job,
    render_deployment,
    render_engines_service,
    render_router,
    render_routing_configmap,
    render_service,
    router_name,
)
from gpumix.render.inferencepool import MODE as INFERENCE_POOL
from gpumix.render.inferencepool import inference_pool_refs, render_inference_pool_objects


class ObjectRef(NamedTuple):
    """One namespaced object of any kind, as :meth:`KubeWriter.delete` takes it."""

    api_version: str
    kind: str
    namespace: str
    name: str


def desired_objects(
    service: LLMService,
    owner: Owner,
    decision: ServiceDecision,
    pools: dict[str, GPUPool],
    *,
    router_image: str,
    router_ready: bool,
    inference_pools_served: bool = True,
    operator_namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """What to server-side apply this pass, in order; empty when the decision leaves everything
    alone. ``router_image`` runs the router pods (``routing.mode: Router``); ``router_ready``:
    the router Deployment has an available pod, so the Service may point at the routers. The
    InferencePool only while the apiserver serves its kind (``inference_pools_served``; the
    picker and its Service either way: `gpumix.reconcile.gateway`). The routers' admin API
    admits the operator's pods in ``operator_namespace`` only."""
    if decision.apply is None or decision.target is None:
        return []
    spec = service.spec
    # The cache first: a pod that mounts it needs the claim, and waits for the Job's marker.
    objects = (
        [render_cache_claim(owner, spec), render_cache_job(owner, spec)]
        if spec.model.cache is not None
        else []
    )
    # Keyed by option: a pool's name, or `<pool>-tp<k>` for its k-GPU replicas.
    objects += [
        render_deployment(owner, spec, pools[c.pool], c, n, shape=decision.shape)
        for option, n in sorted(decision.apply.items())
        if (c := decision.choices.get(option)) is not None and c.pool in pools
    ]
    serving = {p: n for p, n in decision.target.items() if n}
    objects.append(render_service(owner, spec, router_ready=router_ready))
    objects.append(render_engines_service(owner))
    objects.append(
        render_routing_configmap(owner, spec, decision.shares, serving, decision.choices)
    )
    if spec.routing.mode != "Service":
        objects += render_router(owner, spec, router_image, operator_namespace)
    if spec.routing.mode == INFERENCE_POOL:
        objects += [
            o
            for o in render_inference_pool_objects(owner)
            if inference_pools_served or o["kind"] != "InferencePool"
        ]
    return objects


def unwanted_objects(
    service: LLMService, owner: Owner, *, router_deployed: bool, picker_deployed: bool = False
) -> list[ObjectRef]:
    """The router's objects when routing mode is Service but its Deployment (which the operator
    watches) still exists, e.g. after a switch from mode Router; the Service ``<service>``
    selects the vLLM pods again in the same pass. The InferencePool and the picker's Service
    when the mode is no longer InferencePool but the Deployment is still the picker
    (``picker_deployed``: :func:`gpumix.render.inferencepool.is_picker`).

    Those first, then in :data:`ROUTER_KINDS` order, the Deployment last: deleting stops at the
    first failure, so the Deployment stays visible and the next pass tries the lot again.
    """
    mode = service.spec.routing.mode
    refs = []
    if picker_deployed and mode != INFERENCE_POOL:
        refs = [ObjectRef(v, kind, owner.namespace, n) for v, kind, n in inference_pool_refs(owner)]
    if mode == "Service" and router_deployed:
        name = router_name(owner.name)
        refs += [ObjectRef(v, kind, owner.namespace, name) for v, kind in ROUTER_KINDS]
    return refs
