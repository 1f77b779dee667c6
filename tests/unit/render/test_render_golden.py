"""Golden files: the exact objects rendered for a fixed input (render_helpers.py).

Regenerate on purpose only: ``GPUMIX_UPDATE_GOLDEN=1 pytest tests/unit/render``.
"""

import json

from render_helpers import Inputs, assert_golden

from gpumix.render import (
    ROUTING_KEY,
    render_deployment,
    render_routing_configmap,
    render_service,
)


def test_deployment_one_gpu(inputs: Inputs) -> None:
    i = inputs
    assert_golden("deployment-l4", render_deployment(i.owner, i.spec, i.l4, i.choices["l4"], 3))


def test_deployment_tensor_parallel(inputs: Inputs) -> None:
    i = inputs
    rendered = render_deployment(i.owner, i.tp2_spec, i.a100, i.choices["a100-80gb"], 1)
    assert_golden("deployment-a100-80gb-tp2", rendered)


def test_service(inputs: Inputs) -> None:
    assert_golden("service", render_service(inputs.owner, inputs.spec))


def test_routing_configmap(inputs: Inputs) -> None:
    i = inputs
    rendered = render_routing_configmap(i.owner, i.spec, i.shares, i.replicas, i.choices)
    assert_golden("routing-configmap", rendered)
    # The golden file pins the text; check the document it holds, too.
    document = json.loads(rendered["data"][ROUTING_KEY])
    assert sorted(document["pools"]) == ["a100-80gb", "l4"]
    assert document["pools"]["l4"]["share"][1][0] == 0.3  # 0.1 + 0.2, rounded to 6 decimals
