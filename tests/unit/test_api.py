"""The API models reject every kind of bad input with an error that names the field."""

from typing import Any

import pytest
from pydantic import ValidationError

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.manifests import describe


def service(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-2-7b-hf"},
        "slo": {"tpotMs": 40},
        "workload": {
            "requestRate": 4,
            "inputEdges": [1, 256, 1024, 4096],
            "outputEdges": [1, 128, 512],
            "histogram": [[0.3, 0.1], [0.3, 0.1], [0.1, 0.1]],
        },
    }
    for path, value in overrides.items():
        node = spec
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    return {"apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
            "metadata": {"name": "chat"}, "spec": spec}  # fmt: skip


def errors_of(doc: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        LLMService.model_validate(doc)
    return describe(info.value)


def test_valid_service_parses_with_defaults() -> None:
    svc = LLMService.model_validate(service())
    assert svc.spec.workload.slice_factor == 8
    assert svc.spec.workload.source == "Static"
    assert svc.spec.model.image.startswith("vllm/vllm-openai:")
    rates = svc.spec.workload.bucket_rates()
    assert sum(map(sum, rates)) == pytest.approx(4.0)


def test_routing_defaults_to_two_routers_and_reads_camel_case() -> None:
    routing = LLMService.model_validate(service()).spec.routing
    assert (routing.mode, routing.replicas, routing.max_inflight_per_pod) == ("Router", 2, 256)
    doc = service(routing={"mode": "Service", "replicas": 1, "maxInflightPerPod": 8})
    routing = LLMService.model_validate(doc).spec.routing
    assert (routing.mode, routing.replicas, routing.max_inflight_per_pod) == ("Service", 1, 8)


def test_over_provision_scales_bucket_rates() -> None:
    svc = LLMService.model_validate(service(**{"workload.overProvision": 0.25}))
    assert sum(map(sum, svc.spec.workload.bucket_rates())) == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("override", "field", "text"),
    [
        ({"workload.requestRate": -1}, "spec.workload.requestRate", "greater than or equal to 0"),
        ({"workload.histogram": [[1, 1], [1, 1]]}, "spec.workload", "has 2 rows"),
        ({"workload.histogram": [[1], [1], [1]]}, "spec.workload", "histogram[0]: has 1 columns"),
        ({"workload.histogram": [[0, 0], [0, 0], [0, 0]]}, "spec.workload", "positive share"),
        (
            {"workload.histogram": [[-1, 1], [1, 1], [1, 1]]},
            "spec.workload.histogram[0][0]",
            "greater than or equal to 0",
        ),
        ({"workload.inputEdges": [1, 1024, 256, 4096]}, "spec.workload", "strictly increasing"),
        ({"slo.tpotMs": 0}, "spec.slo.tpotMs", "greater than 0"),
        ({"slo.attainmentTarget": 0.2}, "spec.slo.attainmentTarget", "greater than or equal"),
        ({"slo.attainmentTarget": 1}, "spec.slo.attainmentTarget", "less than or equal"),
        ({"slo": None}, "spec.slo", "Field required"),
        ({"model.name": ""}, "spec.model.name", "at least 1 character"),
        ({"workload.sliceFactor": 0}, "spec.workload.sliceFactor", "greater than or equal to 1"),
        ({"maxReplicas": 1, "minReplicas": 2}, "spec", "minReplicas (2) must be <= maxReplicas"),
        ({"workload.reqestRate": 4}, "spec.workload.reqestRate", "Extra inputs"),
        ({"scaling": {"forecast": {"enabled": True}}}, "spec", "need workload.source: Prometheus"),
        ({"scaling": {"pacing": "Utilisation"}}, "spec", "need workload.source: Prometheus"),
        ({"scaling": {"pacing": "Sometimes"}}, "spec.scaling.pacing", "'Immediate'"),
        (
            {"scaling": {"forecast": {"stepSeconds": 5}}},
            "spec.scaling.forecast.stepSeconds",
            "greater than or equal to 15",
        ),
        (
            {"scaling": {"calibration": {"maxFactor": 0.5}}},
            "spec.scaling.calibration.maxFactor",
            "greater than or equal to 1",
        ),
        ({"batch": {"deadlineSeconds": 3600}}, "spec", "batch needs priority: Batch"),
        (
            {"priority": "Batch", "batch": {"backlogRequests": -1}},
            "spec.batch.backlogRequests",
            "greater than or equal to 0",
        ),
        (
            {"routing": {"mode": "Proxy"}},
            "spec.routing.mode",
            "'Router', 'Service' or 'InferencePool'",
        ),
        ({"routing": {"replicas": 0}}, "spec.routing.replicas", "greater than or equal to 1"),
        (
            {"routing": {"maxInflightPerPod": 0}},
            "spec.routing.maxInflightPerPod",
            "greater than or equal to 1",
        ),
        ({"routing": {"replica": 3}}, "spec.routing.replica", "Extra inputs"),
    ],
)
def test_bad_service_fields_are_named(override: dict[str, Any], field: str, text: str) -> None:
    message = errors_of(service(**override))
    assert any(line.startswith(field) and text in line for line in message.splitlines()), message


def test_histogram_shape_error_names_histogram() -> None:
    message = errors_of(service(**{"workload.histogram": [[1, 1], [1, 1]]}))
    assert "histogram: has 2 rows but inputEdges define 3 buckets" in message


def profile(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "m", "gpuType": "l4", "inputEdges": [1, 100, 1000], "outputEdges": [1, 100],
    }  # fmt: skip
    return {"kind": "GPUProfile", "metadata": {"name": "p"}, "spec": {**base, **spec}}


def test_profile_needs_exactly_one_form() -> None:
    with pytest.raises(ValidationError, match="exactly one of tables or samples"):
        GPUProfile.model_validate(profile())
    table = [{"tpotMs": 40, "maxTput": [[1], [1]]}]
    points = [{"inputBucket": 0, "outputBucket": 0, "points": [{"rate": 1, "tpotMs": 10}]}]
    with pytest.raises(ValidationError, match="exactly one of tables or samples"):
        GPUProfile.model_validate(profile(tables=table, samples=points))
    assert GPUProfile.model_validate(profile(tables=table)).spec.tables is not None


def test_profile_table_shape_and_sample_bucket_are_checked() -> None:
    with pytest.raises(ValidationError, match=r"tables\[0\].maxTput\[0\]: has 2 columns"):
        GPUProfile.model_validate(profile(tables=[{"tpotMs": 40, "maxTput": [[1, 2], [1]]}]))
    bad = [{"inputBucket": 2, "outputBucket": 0, "points": [{"rate": 1, "tpotMs": 10}]}]
    with pytest.raises(ValidationError, match=r"samples\[0\]: bucket \(2, 0\) is outside"):
        GPUProfile.model_validate(profile(samples=bad))


def test_profile_tp_degree_is_restricted() -> None:
    table = [{"tpotMs": 40, "maxTput": [[1], [1]]}]
    with pytest.raises(ValidationError, match="gpusPerReplica"):
        GPUProfile.model_validate(profile(tables=table, gpusPerReplica=3))


def test_pool_requires_selector_and_positive_price() -> None:
    doc = {"kind": "GPUPool", "metadata": {"name": "l4"}, "spec": {"gpuType": "l4"}}
    with pytest.raises(ValidationError, match="nodeSelector"):
        GPUPool.model_validate(doc)
    doc["spec"] = {"gpuType": "l4", "nodeSelector": {"a": "b"}, "pricePerGPUHour": 0}
    with pytest.raises(ValidationError, match="pricePerGPUHour"):
        GPUPool.model_validate(doc)
    doc["spec"] = {"gpuType": "l4", "nodeSelector": {"a": "b"}}
    pool = GPUPool.model_validate(doc)
    assert pool.spec.tolerations[0].key == "nvidia.com/gpu"
