"""Condition ``InferencePool``: can the gateway find the service (``routing.mode: InferencePool``)?

The InferencePool kind comes from the Gateway API Inference Extension's CRD, which gpumix does not
install (a gateway owns its version). Without it every apply of the pool would fail, pass after
pass, with nothing on the service to say why; instead the operator checks that the apiserver
serves the kind, leaves the pool out while it does not, and says what to install. The vLLM pods,
the picker and the Service ``<service>`` are applied either way, so clients inside the cluster are
served and the gateway finds everything ready once the CRD arrives.
"""

from gpumix.api import ConditionStatus, LLMService
from gpumix.reconcile.conditions import condition, remove_condition, set_condition
from gpumix.reconcile.service import EventSpec, ServiceDecision
from gpumix.render.inferencepool import API_VERSION, MODE, inference_pool_name
from gpumix.render.names import picker_service_name

CONDITION_TYPE = "InferencePool"
MISSING_REASON = "CRDNotInstalled"


def missing_crd_message(service: str) -> str:
    return (
        f"spec.routing.mode InferencePool: this cluster does not serve {API_VERSION} "
        f"InferencePool, so InferencePool {inference_pool_name(service)!r} is not created; install "
        "the Gateway API Inference Extension CRDs (v1.0 or later) or set spec.routing.mode Router"
    )


def annotate_gateway(
    sd: ServiceDecision, service: LLMService, *, served: bool, now: str
) -> ServiceDecision:
    """``sd`` with condition ``InferencePool`` (mode InferencePool only; removed otherwise) and a
    Warning event when it turns False."""
    status = sd.status
    name = service.name
    if service.spec.routing.mode != MODE:
        conds = remove_condition(status.conditions, CONDITION_TYPE)
        return sd.model_copy(update={"status": status.model_copy(update={"conditions": conds})})
    events = list(sd.events)
    if served:
        state, reason = ConditionStatus.TRUE, "Applied"
        message = (
            f"InferencePool {inference_pool_name(name)!r} selects the vLLM pods; its endpoint "
            f"picker is Service {picker_service_name(name)!r}"
        )
    else:
        state, reason, message = ConditionStatus.FALSE, MISSING_REASON, missing_crd_message(name)
        old = condition(status.conditions, CONDITION_TYPE)
        if old is None or old.status != ConditionStatus.FALSE:
            events.append(EventSpec(type="Warning", reason=MISSING_REASON, message=message))
    conds = set_condition(
        status.conditions, CONDITION_TYPE, state, reason, message,
        generation=status.observed_generation, now=now,
    )  # fmt: skip
    return sd.model_copy(
        update={"status": status.model_copy(update={"conditions": conds}), "events": events}
    )
