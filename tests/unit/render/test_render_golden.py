"""Golden files: the exact objects rendered for a fixed input (render_helpers.py).

Regenerate on purpose only: ``GPUMIX_UPDATE_GOLDEN=1 pytest tests/unit/render``.
"""

import json

import pytest
from render_helpers import ROUTER_IMAGE, Inputs, assert_golden

from gpumix.api import Routing
from gpumix.render import (
    ROUTER_KINDS,
    ROUTING_KEY,
    render_cache_claim,
    render_cache_job,
    render_deployment,
    render_engines_service,
    render_router,
    render_routing_configmap,
    render_service,
)

OPERATOR_NS = "gpumix-system"


def test_deployment_one_gpu(inputs: Inputs) -> None:
    i = inputs
    assert_golden("deployment-l4", render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], 3))


def test_deployment_tensor_parallel(inputs: Inputs) -> None:
    i = inputs
    rendered = render_deployment(i.owner, i.tp2_spec, i.a100, i.choices["a100-80gb"], 1)
    assert_golden("deployment-a100-80gb-tp2", rendered)


def test_deployment_with_template_and_cache(inputs: Inputs) -> None:
    i = inputs
    rendered = render_deployment(i.owner, i.templated_spec, i.a100, i.choices["a100-80gb"], 2)
    assert_golden("deployment-templated", rendered)


def test_model_cache_objects(inputs: Inputs) -> None:
    assert_golden("cache-claim", render_cache_claim(inputs.owner, inputs.templated_spec))
    assert_golden("cache-job", render_cache_job(inputs.owner, inputs.templated_spec))


def test_service(inputs: Inputs) -> None:
    assert_golden(
        "service", render_service(inputs.owner, inputs.spec, router_ready=True)
    )  # selects the routers


def test_service_in_routing_mode_service(inputs: Inputs) -> None:
    spec = inputs.spec.model_copy(update={"routing": Routing(mode="Service")})
    assert_golden("service-mode-service", render_service(inputs.owner, spec, router_ready=True))


def test_engines_service(inputs: Inputs) -> None:
    assert_golden("engines-service", render_engines_service(inputs.owner))


@pytest.mark.parametrize(("index", "kind"), list(enumerate(kind for _, kind in ROUTER_KINDS)))
def test_router(inputs: Inputs, index: int, kind: str) -> None:
    spec = inputs.spec.model_copy(update={"routing": Routing(replicas=3, max_inflight_per_pod=64)})
    rendered = render_router(inputs.owner, spec, ROUTER_IMAGE, OPERATOR_NS)[index]
    assert rendered["kind"] == kind
    assert_golden(f"router-{kind.lower()}", rendered)


def test_routing_configmap(inputs: Inputs) -> None:
    i = inputs
    rendered = render_routing_configmap(i.owner, i.spec, i.shares, i.replicas, i.choices)
    assert_golden("routing-configmap", rendered)
    # The golden file pins the text; check the document it holds, too.
    document = json.loads(rendered["data"][ROUTING_KEY])
    assert sorted(document["pools"]) == ["a100-80gb", "l4"]
    assert document["pools"]["l4"]["share"][1][0] == 0.3  # 0.1 + 0.2, rounded to 6 decimals
