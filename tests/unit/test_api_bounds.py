"""Bounds the API fuzzing (tests/e2e/test_fuzz_api.py) showed the planner needs.

Each case was accepted before and then crashed or poisoned the one joint ILP that plans every
service: a planner pass that raises plans nobody.
"""

import math
from typing import Any

import pytest
from pydantic import ValidationError

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.manifests import describe
from gpumix.reconcile.workload import round_up


def service(workload: dict[str, Any], **spec: Any) -> dict[str, Any]:
    base = {"requestRate": 4, "inputEdges": [1, 256, 1024], "outputEdges": [1, 128, 512],
            "histogram": [[0.3, 0.1], [0.3, 0.3]]}  # fmt: skip
    return {
        "kind": "LLMService",
        "metadata": {"name": "chat"},
        "spec": {"model": {"name": "m"}, "slo": {"tpotMs": 40},
                 "workload": {**base, **workload}, **spec},
    }  # fmt: skip


def error(model: Any, doc: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(doc)
    return describe(info.value)


@pytest.mark.parametrize(
    "histogram",
    [
        [[5e-324, 5e-324], [5e-324, 5e-324]],  # every share denormal: rate / total overflowed
        [[0.0, 0.0], [0.0, 2.2250738585072014e-308]],
        [[1e12, 1e12], [1e12, 1e12]],
    ],
)
def test_bucket_rates_are_finite_and_sum_to_the_rate(histogram: list[list[float]]) -> None:
    doc = service({"requestRate": 1e6, "overProvision": 10, "histogram": histogram})
    rates = LLMService.model_validate(doc).spec.workload.bucket_rates()
    assert all(math.isfinite(r) for row in rates for r in row), rates
    assert sum(map(sum, rates)) == pytest.approx(1.1e7)


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        ({"requestRate": 1.0000001e6}, "spec.workload.requestRate"),
        ({"requestRate": 1e300}, "spec.workload.requestRate"),
        ({"requestRate": math.inf}, "spec.workload.requestRate"),  # YAML's .inf
        ({"requestRate": math.nan}, "spec.workload.requestRate"),
        ({"histogram": [[1e13, 1], [1, 1]]}, "spec.workload.histogram[0][0]"),
        ({"histogram": [[math.inf, 1], [1, 1]]}, "spec.workload.histogram[0][0]"),
    ],
)
def test_extreme_workloads_are_refused_naming_the_field(
    workload: dict[str, Any], field: str
) -> None:
    assert field in error(LLMService, service(workload))


def test_extreme_slo_and_backlog_are_refused() -> None:
    doc = service({})
    doc["spec"]["slo"]["tpotMs"] = math.nan
    assert "spec.slo.tpotMs" in error(LLMService, doc)
    doc = service({}, priority="Batch", batch={"backlogRequests": 1e10})
    assert "spec.batch.backlogRequests" in error(LLMService, doc)


def test_the_bounds_themselves_are_accepted() -> None:
    doc = service({"requestRate": 1e6, "histogram": [[1e12, 0], [0, 5e-324]]},
                  priority="Batch", batch={"backlogRequests": 1e9})  # fmt: skip
    LLMService.model_validate(doc)


def test_pool_price_is_bounded() -> None:
    spec = {"gpuType": "l4", "nodeSelector": {"a": "b"}, "pricePerGPUHour": 1e300}
    doc = {"kind": "GPUPool", "metadata": {"name": "p"}, "spec": spec}
    assert "spec.pricePerGPUHour" in error(GPUPool, doc)
    doc["spec"]["pricePerGPUHour"] = 1e6
    GPUPool.model_validate(doc)


def profile(max_tput: list[list[float]]) -> dict[str, Any]:
    spec = {"model": "m", "gpuType": "l4", "inputEdges": [1, 100, 1000], "outputEdges": [1, 100],
            "tables": [{"tpotMs": 40, "maxTput": max_tput}]}  # fmt: skip
    return {"kind": "GPUProfile", "metadata": {"name": "p"}, "spec": spec}


def test_profile_max_tput_is_zero_or_at_least_a_thousandth() -> None:
    message = error(GPUProfile, profile([[1e-300], [1.0]]))
    assert "spec.tables[0]" in message and "maxTput[0]" in message, message
    GPUProfile.model_validate(profile([[0.0], [1e-3]]))
    assert "spec.tables[0].maxTput[0][0]" in error(GPUProfile, profile([[1e13], [1.0]]))


def test_service_and_pool_names_fit_a_label_value() -> None:
    """Longer names were accepted; the Deployments' gpumix.io/pool label then held a shortened
    name, the planner read the running replicas back under it, and a KeyError ended every
    planner pass (found by the fuzzer with a 70-character GPUPool name)."""
    doc = service({})
    doc["metadata"]["name"] = "s" * 64
    assert "metadata.name: at most 63 characters" in error(LLMService, doc)
    doc["metadata"]["name"] = "s" * 63
    LLMService.model_validate(doc)
    pool = {"kind": "GPUPool", "metadata": {"name": "p" * 64},
            "spec": {"gpuType": "l4", "nodeSelector": {"a": "b"}}}  # fmt: skip
    assert "metadata.name: at most 63 characters" in error(GPUPool, pool)
    long_profile = profile([[1.0], [1.0]])
    long_profile["metadata"]["name"] = "p" * 200  # not a label anywhere: no cap
    GPUProfile.model_validate(long_profile)


@pytest.mark.parametrize("rate", [5e-324, 1e-310, 1e-300])
def test_round_up_takes_denormal_rates(rate: float) -> None:
    """A Batch service with requestRate 5e-324 raised OverflowError in round_up, which ended
    every planner pass: no service was planned while it existed (found by the fuzzer)."""
    assert 0 < round_up(rate) <= 1.001 * rate + 1e-320
