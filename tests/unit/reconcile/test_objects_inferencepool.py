"""What routing mode InferencePool applies, and deletes when the mode changes again."""

import pytest

from gpumix.api import LLMService, RoutingMode
from gpumix.reconcile.objects import ObjectRef, unwanted_objects
from gpumix.render import ROUTER_KINDS

from .test_objects import OWNER, _render, _service


def test_mode_inference_pool_applies_the_picker_then_its_service_then_the_pool(
    chat: LLMService,
) -> None:
    kinds = [(o["kind"], o["metadata"]["name"]) for o in _render(chat, "InferencePool")]
    router = [(kind, "chat--router") for _, kind in ROUTER_KINDS]
    assert kinds[-len(router) - 2 :] == [
        *router,
        ("Service", "chat--picker"),
        ("InferencePool", "chat"),
    ]
    (main,) = [
        o
        for o in _render(chat, "InferencePool")
        if o["metadata"]["name"] == "chat" and o["kind"] == "Service"
    ]
    assert main["spec"]["selector"] == {"gpumix.io/service": "chat"}  # the vLLM pods


@pytest.mark.parametrize(
    ("mode", "deleted"),
    [
        ("InferencePool", []),
        ("Router", ["InferencePool", "Service"]),
        ("Service", ["InferencePool", "Service", *(kind for _, kind in ROUTER_KINDS)]),
    ],
)
def test_leaving_mode_inference_pool_deletes_the_pool_and_the_pickers_service(
    chat: LLMService, mode: RoutingMode, deleted: list[str]
) -> None:
    refs = unwanted_objects(_service(chat, mode), OWNER, router_deployed=True, picker_deployed=True)
    assert [r.kind for r in refs] == deleted
    if deleted:
        assert refs[0] == ObjectRef("inference.networking.k8s.io/v1", "InferencePool",
                                    "default", "chat")  # fmt: skip
