"""The apiserver rejects at `kubectl apply` what gpumix's own models reject, naming the field.

Each case breaks one rule of an LLMService, a GPUPool or a GPUProfile. It must be refused by the
real apiserver (schema or CEL; a server-side dry run, so nothing is created and cluster-scoped
names never collide) with the field's path in the message, and by gpumix's pydantic models
(`gpumix plan` and the operator read objects through them): the two validators agree.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpumix.manifests import ManifestError, parse_object
from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"
Breaker = Callable[[dict[str, Any]], None]


def _first(path: Path, kind: str) -> dict[str, Any]:
    doc = next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == kind)
    return dict(doc)


SERVICE = _first(SAMPLES / "chat.yaml", "LLMService")
GATED = _first(SAMPLES / "gated-model" / "llama.yaml", "LLMService")
POOL = _first(SAMPLES / "gpupools.yaml", "GPUPool")
CONFIGURED = copy.deepcopy(SERVICE)
CONFIGURED["spec"]["model"] = {
    "name": "example/qwen3-8b-variant",
    "config": {"configMapKeyRef": {"name": "qwen3.config", "key": "qwen3-8b_config.json"}},
}
PROFILE = _first(SAMPLES / "profiles-llama-2-7b.yaml", "GPUProfile")
SAMPLED_PROFILE: dict[str, Any] = {
    "apiVersion": "gpumix.io/v1alpha1",
    "kind": "GPUProfile",
    "metadata": {"name": "sampled"},
    "spec": {
        "model": "m",
        "gpuType": "a10g",
        "inputEdges": [1, 512, 2048],
        "outputEdges": [1, 128, 512],
        "samples": [{"inputBucket": 0, "outputBucket": 1, "points": [{"rate": 1, "tpotMs": 30}]}],
    },
}


def _set(path: str, value: Any, entry: str | None = None) -> Breaker:
    """Set a dotted path of the object (``spec.slo.tpotMs``) to ``value``, or its map entry
    ``entry`` (which may hold dots: ``gpumix.io/pool``); a list index one past the end appends."""

    def apply(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".") + ([entry] if entry is not None else [])
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list) and int(leaf) == len(node):
            node.append(value)
        elif isinstance(node, list):
            node[int(leaf)] = value
        else:
            node[leaf] = value

    return apply


def _drop(path: str) -> Breaker:
    def apply(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            node = node[key]
        del node[leaf]

    return apply


def _both(*breakers: Breaker) -> Breaker:
    def apply(obj: dict[str, Any]) -> None:
        for b in breakers:
            b(obj)

    return apply


ZERO_ROWS = [[0.0] * 5 for _ in range(5)]

CASES: list[tuple[str, dict[str, Any], Breaker, str]] = [
    ("input-edges-order", SERVICE,
     _set("spec.workload.inputEdges", [1, 512, 256, 1024, 2048, 3072]), "spec.workload.inputEdges"),
    ("output-edges-repeat", SERVICE, _set("spec.workload.outputEdges", [1, 64, 64, 256, 512, 1001]),
     "spec.workload.outputEdges"),
    ("one-edge", SERVICE, _set("spec.workload.outputEdges", [1]), "spec.workload.outputEdges"),
    ("tpot-zero", SERVICE, _set("spec.slo.tpotMs", 0), "spec.slo.tpotMs"),
    ("tpot-negative", SERVICE, _set("spec.slo.tpotMs", -5), "spec.slo.tpotMs"),
    ("ttft-zero", SERVICE, _set("spec.slo.ttftMs", 0), "spec.slo.ttftMs"),
    ("min-over-max", SERVICE, _both(_set("spec.minReplicas", 3), _set("spec.maxReplicas", 1)),
     "spec.minReplicas"),
    ("all-zero-histogram", SERVICE, _set("spec.workload.histogram", ZERO_ROWS),
     "spec.workload.histogram"),
    ("negative-share", SERVICE, _set("spec.workload.histogram.0", [-1.0, 1, 1, 1, 1]),
     "spec.workload.histogram"),
    ("slice-factor", SERVICE, _set("spec.workload.sliceFactor", 0), "spec.workload.sliceFactor"),
    # Bounds found by tests/e2e/test_fuzz_api.py: beyond them the joint ILP failed for everyone.
    ("rate-over-a-million", SERVICE, _set("spec.workload.requestRate", 2e6),
     "spec.workload.requestRate"),
    ("histogram-cell-huge", SERVICE, _set("spec.workload.histogram.0", [1e13, 1, 1, 1, 1]),
     "spec.workload.histogram[0][0]"),
    ("backlog-huge", SERVICE,
     _both(_set("spec.priority", "Batch"), _set("spec.batch", {"backlogRequests": 1e10})),
     "spec.batch.backlogRequests"),
    ("service-name-64", SERVICE, _set("metadata.name", "a" * 64), "metadata.name"),
    ("pool-name-64", POOL, _set("metadata.name", "p" * 64), "metadata.name"),
    ("pool-price-huge", POOL, _set("spec.pricePerGPUHour", 1e300), "spec.pricePerGPUHour"),
    ("profile-tiny-tput", PROFILE, _set("spec.tables.1.maxTput.0", [1e-300, 1, 1, 1, 1]),
     "spec.tables[1].maxTput"),
    ("template-gpu-request", GATED,
     _set("spec.template.spec.containers.0.resources.requests", 2, "nvidia.com/gpu"),
     "spec.template.spec.containers[0].resources.requests"),
    ("template-gpu-limit", GATED,
     _set("spec.template.spec.containers.0.resources.limits", 2, "nvidia.com/gpu"),
     "spec.template.spec.containers[0].resources.limits"),
    ("template-container-name", GATED, _set("spec.template.spec.containers.0.name", "sidecar"),
     "spec.template.spec.containers[0].name"),
    ("template-two-containers", GATED,
     _set("spec.template.spec.containers.1", {"name": "vllm"}), "spec.template.spec.containers"),
    ("template-selector-label", GATED,
     _set("spec.template.metadata.labels", "l4", "gpumix.io/pool"),
     "spec.template.metadata.labels"),
    ("template-gpumix-volume", GATED,
     _set("spec.template.spec.volumes", [{"name": "dshm", "emptyDir": {}}]),
     "spec.template.spec.volumes"),
    ("cache-size-missing", GATED, _drop("spec.model.cache.size"), "spec.model.cache.size"),
    ("model-config-name", SERVICE,
     _set("spec.model.config", {"configMapKeyRef": {"name": "Qwen_3"}}),
     "spec.model.config.configMapKeyRef.name"),
    ("model-config-no-name", SERVICE, _set("spec.model.config", {"configMapKeyRef": {}}),
     "spec.model.config.configMapKeyRef.name"),
    ("model-config-key", SERVICE,
     _set("spec.model.config", {"configMapKeyRef": {"name": "qwen3", "key": "hf/config.json"}}),
     "spec.model.config.configMapKeyRef.key"),
    ("model-config-no-source", SERVICE, _set("spec.model.config", {}),
     "spec.model.config.configMapKeyRef"),
    ("pool-gpu-type-empty", POOL, _set("spec.gpuType", ""), "spec.gpuType"),
    ("pool-selector-empty", POOL, _set("spec.nodeSelector", {}), "spec.nodeSelector"),
    ("pool-selector-missing", POOL, _drop("spec.nodeSelector"), "spec.nodeSelector"),
    ("pool-price-zero", POOL, _set("spec.pricePerGPUHour", 0), "spec.pricePerGPUHour"),
    ("pool-gpus-per-node", POOL, _set("spec.gpusPerNode", 0), "spec.gpusPerNode"),
    ("pool-max-gpus", POOL, _set("spec.maxGPUs", -1), "spec.maxGPUs"),
    ("pool-toleration", POOL, _set("spec.tolerations", [{"key": "k", "operator": "Maybe"}]),
     "spec.tolerations[0].operator"),
    ("profile-model-empty", PROFILE, _set("spec.model", ""), "spec.model"),
    ("profile-tp-degree", PROFILE, _set("spec.gpusPerReplica", 3), "spec.gpusPerReplica"),
    ("profile-neither-form", PROFILE, _drop("spec.tables"), "spec"),
    ("profile-both-forms", PROFILE, _set("spec.samples", SAMPLED_PROFILE["spec"]["samples"]),
     "spec"),
    ("profile-table-rows", PROFILE, _set("spec.tables.1.maxTput", [[1.0] * 5]), "spec.tables"),
    ("profile-table-tpot", PROFILE, _set("spec.tables.0.tpotMs", 0), "spec.tables[0].tpotMs"),
    ("profile-negative-tput", PROFILE, _set("spec.tables.1.maxTput.0", [-1.0, 1, 1, 1, 1]),
     "spec.tables[1].maxTput[0]"),
    ("profile-edges-order", PROFILE, _set("spec.inputEdges", [1, 512, 256, 1024, 2048, 3072]),
     "spec.inputEdges"),
    ("profile-sample-bucket", SAMPLED_PROFILE, _set("spec.samples.0.inputBucket", 2),
     "spec.samples"),
    ("profile-no-points", SAMPLED_PROFILE, _set("spec.samples.0.points", []),
     "spec.samples[0].points"),
    ("profile-negative-rate", SAMPLED_PROFILE, _set("spec.samples.0.points.0.rate", -1),
     "spec.samples[0].points[0].rate"),
]  # fmt: skip


def _dry_run(kube: KubeTarget, obj: dict[str, Any], namespace: str) -> Any:
    doc = copy.deepcopy(obj)
    if doc["kind"] == "LLMService":
        doc["metadata"]["namespace"] = namespace
    return kube.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False
    )


@pytest.mark.parametrize("valid", [SERVICE, GATED, CONFIGURED, POOL, PROFILE, SAMPLED_PROFILE],
                         ids=["service", "gated", "model-config", "pool", "profile",
                              "sampled"])  # fmt: skip
def test_the_unbroken_objects_are_accepted(
    kube: KubeTarget, namespace: str, valid: dict[str, Any]
) -> None:
    parse_object(valid, "test")
    done = _dry_run(kube, valid, namespace)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("valid", "breaker", "field"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_the_apiserver_and_gpumix_both_reject_it_naming_the_field(
    kube: KubeTarget, namespace: str, valid: dict[str, Any], breaker: Breaker, field: str
) -> None:
    broken = copy.deepcopy(valid)
    breaker(broken)
    with pytest.raises(ManifestError):
        parse_object(broken, "test")
    done = _dry_run(kube, broken, namespace)
    assert done.returncode != 0, done.stdout
    assert "is invalid" in done.stderr, done.stderr
    assert field in done.stderr, done.stderr


UNKNOWN_FIELDS = [
    ("template-port", "spec.template.spec.containers.0.ports", [{"containerPort": 9000}],
     "spec.template.spec.containers[0].ports"),
    ("template-image", "spec.template.spec.containers.0.image", "other:1",
     "spec.template.spec.containers[0].image"),
    ("template-args", "spec.template.spec.containers.0.args", ["--x"],
     "spec.template.spec.containers[0].args"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "field"), [c[1:] for c in UNKNOWN_FIELDS],
                         ids=[c[0] for c in UNKNOWN_FIELDS])  # fmt: skip
def test_what_the_template_may_not_set_is_an_unknown_field(
    kube: KubeTarget, namespace: str, path: str, value: Any, field: str
) -> None:
    """The container's port, image and args are gpumix's and spec.model's: no template field
    exists for them, so kubectl's strict field validation refuses them by name."""
    broken = copy.deepcopy(GATED)
    _set(path, value)(broken)
    with pytest.raises(ManifestError):
        parse_object(broken, "test")
    done = _dry_run(kube, broken, namespace)
    assert done.returncode != 0, done.stdout
    assert f'unknown field "{field}"' in done.stderr, done.stderr
