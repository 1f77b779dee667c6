"""The fixed rendering input (owner, spec, pools, choices, plan) and the golden-file comparison.

Golden files are rewritten only on explicit request: ``GPUMIX_UPDATE_GOLDEN=1 pytest
tests/unit/render``; review the diff before committing it.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import strategies as st

from gpumix.api import GPUPool, LLMServiceSpec
from gpumix.problem import PoolChoice
from gpumix.render import Owner

GOLDEN = Path(__file__).parent / "golden"
UPDATE_ENV = "GPUMIX_UPDATE_GOLDEN"
ROUTER_IMAGE = "registry.example/gpumix:1.2.3"

# Kubernetes object names: DNS-1123 subdomains (lowercase alphanumerics, '-' and '.').
_SUB = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?", fullmatch=True)
_SHORT = st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
NAMES = st.one_of(_SHORT, _SUB)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # spell every value out: a golden file is read by people


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None  # multi-line text as a block, not one escaped line
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=100)


def assert_golden(name: str, rendered: dict[str, Any]) -> None:
    """``rendered`` equals ``golden/<name>.yaml``; with GPUMIX_UPDATE_GOLDEN=1, rewrite it first."""
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get(UPDATE_ENV) == "1":
        path.write_text(to_yaml(rendered), encoding="utf-8")
    if not path.exists():
        pytest.fail(f"{path} is missing; create it with {UPDATE_ENV}=1 pytest tests/unit/render")
    expected = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert rendered == expected, (
        f"rendering differs from {path}; if the change is intended, regenerate with "
        f"{UPDATE_ENV}=1 pytest tests/unit/render and review the diff\n"
        f"--- rendered ---\n{to_yaml(rendered)}"
    )


def make_pool(name: str, gpu_type: str, **spec: Any) -> GPUPool:
    return GPUPool.model_validate(
        {
            "kind": "GPUPool",
            "metadata": {"name": name},
            "spec": {"gpuType": gpu_type, "nodeSelector": {"gpumix.io/gpu-class": name}, **spec},
        }
    )


def _owner() -> Owner:
    return Owner(name="chat", namespace="serving", uid="6f1c2a4e-0b7d-4a55-9a0e-3d2f8c1b7e90")


def _spec() -> LLMServiceSpec:
    return LLMServiceSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-2-7b-hf"},
            "slo": {"tpotMs": 120},
            "workload": {
                "requestRate": 5.5,
                "inputEdges": [1, 256, 1024],
                "outputEdges": [1, 128, 512],
                "histogram": [[10, 5], [3, 0]],
            },
        }
    )


def _tp2_spec(spec: LLMServiceSpec) -> LLMServiceSpec:
    model = spec.model.model_copy(
        update={
            "name": "meta-llama/Llama-2-70b-hf",
            "served_name": "llama-70b",
            "image": "vllm/vllm-openai:v0.10.2",
            "args": ["--max-model-len", "4096", "--gpu-memory-utilization", "0.92"],
        }
    )
    return spec.model_copy(update={"model": model})


TEMPLATE = {
    "metadata": {
        "labels": {"team": "search", "app.kubernetes.io/name": "not-vllm"},
        "annotations": {"sidecar.istio.io/inject": "false", "prometheus.io/scrape": "false"},
    },
    "spec": {
        "serviceAccountName": "llm-serving",
        "priorityClassName": "inference",
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"topology.kubernetes.io/zone": "z2", "cloud.example/spot": "false"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
        ],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"team": "search"}},
                        },
                    }
                ]
            }
        },
        "volumes": [{"name": "certs", "configMap": {"name": "ca-bundle"}}],
        "containers": [
            {
                "name": "vllm",
                "env": [
                    {
                        "name": "HF_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
                    },
                    {"name": "HF_HUB_OFFLINE", "value": "0"},
                ],
                "envFrom": [{"configMapRef": {"name": "vllm-env"}}],
                "volumeMounts": [
                    {"name": "certs", "mountPath": "/etc/ssl/extra", "readOnly": True}
                ],
                "resources": {
                    "requests": {"cpu": 8, "memory": "64Gi"},
                    "limits": {"memory": "64Gi"},
                },
            }
        ],
    },
}
"""Every field of spec.template, with the overlaps the merge rules decide: a pool toleration
repeated, a pool node-selector key (zone) set otherwise, gpumix's label and annotation keys, an
env var the cache sets."""


def _templated_spec(spec: LLMServiceSpec) -> LLMServiceSpec:
    return LLMServiceSpec.model_validate(
        {
            **spec.model_dump(by_alias=True, exclude_none=True),
            "model": {
                "name": "meta-llama/Llama-3.1-8B-Instruct",
                "cache": {"size": "40Gi", "storageClassName": "shared-nfs"},
            },
            "template": TEMPLATE,
        }
    )


def _l4() -> GPUPool:
    return make_pool("l4", "l4")


def _a100() -> GPUPool:
    return make_pool(
        "a100-80gb",
        "a100-80gb",
        nodeSelector={"gpumix.io/gpu-class": "a100-80gb", "topology.kubernetes.io/zone": "z1"},
        tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "gpumix.io/reserved", "operator": "Equal", "value": "llm"},
        ],
    )


def _choices() -> dict[str, PoolChoice]:
    return {
        "l4": PoolChoice(
            pool="l4", gpu_type="l4", gpus_per_replica=1, price_per_gpu_hour=0.7, profile="l4-7b"
        ),
        "a100-80gb": PoolChoice(
            pool="a100-80gb",
            gpu_type="a100-80gb",
            gpus_per_replica=2,
            price_per_gpu_hour=3.67,
            profile="a100-70b-tp2",
        ),
        "h100": PoolChoice(
            pool="h100", gpu_type="h100", gpus_per_replica=1, price_per_gpu_hour=7.516, profile="h"
        ),
    }


def _shares() -> dict[str, list[list[float]]]:
    """A plan with slice factor 8 (shares in eighths), h100 bought nothing; (1, 1) has no traffic.

    0.1 + 0.2 style float noise checks the 6-decimal rounding."""
    return {
        "l4": [[0.625, 1.0], [0.1 + 0.2, 0.0]],
        "a100-80gb": [[0.375, 0.0], [0.7, 0.0]],
        "h100": [[0.0, 0.0], [0.0, 0.0]],
    }


def _replicas() -> dict[str, int]:
    return {"l4": 3, "a100-80gb": 1, "h100": 0}


@dataclass(frozen=True)
class Inputs:
    """Everything the renderers take, for the golden files and the invariants alike."""

    owner: Owner
    spec: LLMServiceSpec
    tp2_spec: LLMServiceSpec
    templated_spec: LLMServiceSpec
    l4: GPUPool
    a100: GPUPool
    choices: dict[str, PoolChoice]
    shares: dict[str, list[list[float]]]
    replicas: dict[str, int]


def make_inputs() -> Inputs:
    spec = _spec()
    return Inputs(
        owner=_owner(),
        spec=spec,
        tp2_spec=_tp2_spec(spec),
        templated_spec=_templated_spec(spec),
        l4=_l4(),
        a100=_a100(),
        choices=_choices(),
        shares=_shares(),
        replicas=_replicas(),
    )
