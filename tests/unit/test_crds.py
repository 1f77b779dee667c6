"""The checked-in CRDs are exactly what the API models generate, and every schema is structural."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpumix.api import RESOURCES
from gpumix.api.crdgen import crd, render_crds, structural_node

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_checked_in_crds_are_fresh() -> None:
    expected = render_crds(RESOURCES)
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in CRDS.iterdir()}
    assert on_disk == expected, "crds/ is stale: run `make crds` (gpumix crds --dir crds)"


FORBIDDEN = {"$ref", "$defs", "const", "examples", "deprecated", "title", "anyOf", "oneOf", "allOf"}


def walk(node: dict[str, Any], path: str) -> list[str]:
    """Kubernetes' structural-schema rules, as far as our generator can break them."""
    problems = [f"{path}: has {k}" for k in FORBIDDEN & node.keys()]
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: no type")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties: false")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: both properties and additionalProperties")
    for flag in ("exclusiveMinimum", "exclusiveMaximum"):
        if isinstance(node.get(flag), int | float) and not isinstance(node[flag], bool):
            problems.append(f"{path}: numeric {flag}")
    if node.get("type") == "array":
        if "items" not in node:
            problems.append(f"{path}: array without items")
        else:
            problems += walk(node["items"], f"{path}[]")
    if node.get("type") == "object" and node.get("default") is None and "default" in node:
        problems.append(f"{path}: null default")
    for name, child in node.get("properties", {}).items():
        problems += walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += walk(node["additionalProperties"], f"{path}{{}}")
    for rule in node.get("x-kubernetes-validations", []):
        if not {"rule", "message"} <= rule.keys():
            problems.append(f"{path}: CEL rule without message: {rule}")
    return problems


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.kind_name)
def test_schema_is_structural(resource: Any) -> None:
    schema = crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert walk(schema, resource.kind_name) == []


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.kind_name)
def test_crd_basics(resource: Any) -> None:
    doc = crd(resource)
    version = doc["spec"]["versions"][0]
    assert doc["metadata"]["name"] == f"{resource.plural}.gpumix.io"
    assert version["name"] == "v1alpha1"
    assert version["storage"]
    assert version["served"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[-1] == "Age"
    if "status" in resource.model_fields:
        assert version["subresources"] == {"status": {}}


def test_llmservice_has_printer_columns_and_cel_rules() -> None:
    version = crd(RESOURCES[0])["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["$/h"] == ".status.costPerHour"
    assert columns["Replicas"] == ".status.replicasSummary"
    assert columns["Predicted"] == ".status.predictedAttainment"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    workload = spec["properties"]["workload"]
    rules = [r["rule"] for r in workload["x-kubernetes-validations"]]
    assert "size(self.histogram) == size(self.inputEdges) - 1" in rules
    assert workload["properties"]["requestRate"]["minimum"] == 0
    assert spec["properties"]["slo"]["properties"]["tpotMs"]["exclusiveMinimum"] is True
    assert "slo" in spec["required"]
    assert any("minReplicas" in r["rule"] for r in spec["x-kubernetes-validations"])


def test_kustomization_lists_every_crd() -> None:
    kustomization = yaml.safe_load((CRDS / "Kustomization").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in CRDS.glob("*.gpumix.io.yaml")
    )


def test_exclusive_bounds_become_openapi_v3_booleans() -> None:
    node = structural_node({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})
    assert node == {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                    "maximum": 1, "exclusiveMaximum": True}  # fmt: skip


def test_llmservice_routing_is_optional_with_the_models_defaults() -> None:
    version = crd(RESOURCES[0])["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "routing" not in spec["required"]
    routing = spec["properties"]["routing"]["properties"]
    assert routing["mode"]["enum"] == ["Router", "Service", "InferencePool"]
    assert routing["mode"]["default"] == "Router"
    assert (routing["replicas"]["default"], routing["replicas"]["minimum"]) == (2, 1)
    inflight = routing["maxInflightPerPod"]
    assert (inflight["default"], inflight["minimum"], inflight["type"]) == (256, 1, "integer")
