"""The apiserver itself rejects invalid LLMServices at apply time, naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e


def llmservice(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpumix.io/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "meta-llama/Llama-2-7b-hf"},
            "slo": {"tpotMs": 40},
            "workload": {
                "requestRate": 4,
                "inputEdges": [1, 256, 1024, 4096],
                "outputEdges": [1, 128, 512],
                "histogram": [[0.3, 0.1], [0.3, 0.1], [0.1, 0.1]],
            },
        },
    }


def exists(kube: KubeTarget, name: str, namespace: str) -> bool:
    result = kube.kubectl("get", "llmservice", name, "-n", namespace, check=False)
    return result.returncode == 0


def test_valid_llmservice_is_accepted(kube: KubeTarget, namespace: str) -> None:
    kube.apply(llmservice("chat", namespace))
    assert exists(kube, "chat", namespace)


def _histogram_rows_do_not_match_input_edges(spec: dict[str, Any]) -> None:
    spec["workload"]["histogram"] = [[0.3, 0.1], [0.3, 0.1]]  # 2 rows, 3 input buckets


def _histogram_columns_do_not_match_output_edges(spec: dict[str, Any]) -> None:
    spec["workload"]["histogram"] = [[0.3, 0.1, 0.1], [0.3, 0.1, 0.1], [0.1, 0.1, 0.1]]


def _negative_request_rate(spec: dict[str, Any]) -> None:
    spec["workload"]["requestRate"] = -1


def _missing_slo(spec: dict[str, Any]) -> None:
    del spec["slo"]


def _forecast_without_prometheus(spec: dict[str, Any]) -> None:
    spec["scaling"] = {"forecast": {"enabled": True}}


def _pacing_unknown(spec: dict[str, Any]) -> None:
    spec["workload"]["source"] = "Prometheus"
    spec["scaling"] = {"pacing": "Sometimes"}


def _calibration_factor_above_one(spec: dict[str, Any]) -> None:
    spec["workload"]["source"] = "Prometheus"
    spec["scaling"] = {"calibration": {"correctMaxTput": True, "minFactor": 2}}


def _batch_on_interactive(spec: dict[str, Any]) -> None:
    spec["batch"] = {"deadlineSeconds": 3600}


def _attainment_target_of_one(spec: dict[str, Any]) -> None:
    spec["slo"]["attainmentTarget"] = 1.0


def _batch_deadline_too_short(spec: dict[str, Any]) -> None:
    spec["priority"] = "Batch"
    spec["batch"] = {"deadlineSeconds": 10}


@pytest.mark.parametrize(
    ("break_spec", "field_path", "detail"),
    [
        pytest.param(
            _histogram_rows_do_not_match_input_edges,
            "spec.workload.histogram",
            "one row per input bucket",
            id="histogram-rows",
        ),
        pytest.param(
            _histogram_columns_do_not_match_output_edges,
            "spec.workload.histogram",
            "one value per output bucket",
            id="histogram-columns",
        ),
        pytest.param(
            _negative_request_rate,
            "spec.workload.requestRate",
            "should be greater than or equal to 0",
            id="negative-request-rate",
        ),
        pytest.param(_missing_slo, "spec.slo", "Required value", id="missing-slo"),
        pytest.param(
            _attainment_target_of_one,
            "spec.slo.attainmentTarget",
            "should be less than or equal to",  # the apiserver prints 0.9999 as 0
            id="attainment-target",
        ),
        pytest.param(
            _forecast_without_prometheus,
            "spec.scaling",
            "need workload.source: Prometheus",
            id="forecast-static",
        ),
        pytest.param(_pacing_unknown, "spec.scaling.pacing", "Unsupported value", id="pacing"),
        pytest.param(
            _calibration_factor_above_one,
            "spec.scaling.calibration.minFactor",
            "less than or equal to 1",
            id="calibration-min-factor",
        ),
        pytest.param(
            _batch_on_interactive, "spec.batch", "batch needs priority: Batch", id="batch-priority"
        ),
        pytest.param(
            _batch_deadline_too_short,
            "spec.batch.deadlineSeconds",
            "greater than or equal to 60",
            id="batch-deadline",
        ),
    ],
)
def test_invalid_llmservice_is_rejected_naming_the_field(
    kube: KubeTarget,
    namespace: str,
    break_spec: Any,
    field_path: str,
    detail: str,
) -> None:
    obj = copy.deepcopy(llmservice("broken", namespace))
    break_spec(obj["spec"])
    result = kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)
    assert result.returncode != 0, result.stdout
    assert "is invalid" in result.stderr, result.stderr
    assert field_path in result.stderr, result.stderr
    assert detail in result.stderr, result.stderr
    assert not exists(kube, "broken", namespace)
