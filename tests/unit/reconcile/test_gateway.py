"""Condition ``InferencePool``: what a service in routing mode InferencePool says about the CRD."""

from gpumix.api import LLMService, LLMServiceStatus, Routing, RoutingMode
from gpumix.reconcile.conditions import condition
from gpumix.reconcile.gateway import CONDITION_TYPE, annotate_gateway
from gpumix.reconcile.service import ServiceDecision

NOW, LATER = "2026-11-24T10:00:00Z", "2026-11-24T10:05:00Z"


def _service(chat: LLMService, mode: RoutingMode) -> LLMService:
    spec = chat.spec.model_copy(update={"routing": Routing(mode=mode)})
    return chat.model_copy(update={"spec": spec, "metadata": {"name": "chat"}})


def test_a_missing_crd_is_a_false_condition_naming_the_field_and_one_warning(
    chat: LLMService,
) -> None:
    service = _service(chat, "InferencePool")
    first = annotate_gateway(
        ServiceDecision(apply=None, status=LLMServiceStatus()), service, served=False, now=NOW
    )
    c = condition(first.status.conditions, CONDITION_TYPE)
    assert c is not None and (c.status, c.reason) == ("False", "CRDNotInstalled")
    assert c.message.startswith("spec.routing.mode InferencePool:")
    assert "inference.networking.k8s.io/v1" in c.message
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "CRDNotInstalled")]
    # Still missing on the next pass: same condition, no second event.
    again = annotate_gateway(first.model_copy(update={"events": []}), service, served=False,
                             now=LATER)  # fmt: skip
    assert again.events == []
    c2 = condition(again.status.conditions, CONDITION_TYPE)
    assert c2 is not None and c2.last_transition_time == c.last_transition_time
    # Installed: True, and the transition time moves.
    fixed = annotate_gateway(again, service, served=True, now=LATER)
    c3 = condition(fixed.status.conditions, CONDITION_TYPE)
    assert c3 is not None and (c3.status, c3.reason) == ("True", "Applied")
    assert "'chat--picker'" in c3.message and c3.last_transition_time != c.last_transition_time


def test_other_routing_modes_carry_no_inference_pool_condition(chat: LLMService) -> None:
    missing = annotate_gateway(ServiceDecision(apply=None, status=LLMServiceStatus()),
                               _service(chat, "InferencePool"), served=False, now=NOW)  # fmt: skip
    switched = annotate_gateway(missing, _service(chat, "Router"), served=False, now=LATER)
    assert condition(switched.status.conditions, CONDITION_TYPE) is None
