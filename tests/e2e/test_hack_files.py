"""Static checks of hack/ files (no cluster needed): the kind config mirrors the KWOK pools."""

from __future__ import annotations

import yaml

from gpumix_testcluster import (
    GPU_CLASS_LABEL,
    GPU_RESOURCE,
    HACK_DIR,
    gpu_node_manifest,
    load_pools,
)

GFD_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")


def test_default_pools_are_the_documented_fleet() -> None:
    fleet = {(p.gpu_class, p.product, p.gpus_per_node, p.nodes) for p in load_pools()}
    assert fleet == {
        ("l4", "NVIDIA-L4", 1, 4),
        ("a10g", "NVIDIA-A10G", 1, 4),
        ("a100-80gb", "NVIDIA-A100-SXM4-80GB", 8, 3),
        ("h100", "NVIDIA-H100-80GB-HBM3", 8, 2),
        (None, None, 0, 1),  # the CPU-only `system` pool, where the operator's own pod runs
    }


def test_cpu_pool_nodes_have_no_gpu_labels_taint_or_capacity() -> None:
    pool = next(p for p in load_pools() if not p.has_gpus)
    node = gpu_node_manifest(pool, "cpu-system-0")
    assert not any(k.startswith("nvidia.com/") for k in node["metadata"]["labels"])
    assert GPU_CLASS_LABEL not in node["metadata"]["labels"]
    assert node["spec"]["taints"] == []
    assert GPU_RESOURCE not in node["status"]["capacity"]


def test_node_manifest_carries_labels_taint_and_capacity() -> None:
    pool = next(p for p in load_pools() if p.gpu_class == "a100-80gb")
    node = gpu_node_manifest(pool, "gpu-a100-80gb-0")
    labels = node["metadata"]["labels"]
    assert labels[GPU_CLASS_LABEL] == "a100-80gb"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    for part in ("capacity", "allocatable"):
        assert node["status"][part][GPU_RESOURCE] == "8"
        assert {"cpu", "memory", "pods"} <= set(node["status"][part])


def test_kind_workers_mirror_the_pools() -> None:
    config = yaml.safe_load((HACK_DIR / "kind-config.yaml").read_text())
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    by_class = {w["labels"][GPU_CLASS_LABEL]: w for w in workers if GPU_CLASS_LABEL in w["labels"]}
    pools = [p for p in load_pools() if p.has_gpus]
    assert set(by_class) == {p.gpu_class for p in pools}
    cpu_workers = [w for w in workers if GPU_CLASS_LABEL not in w["labels"]]
    cpu_types = [p.instance_type for p in load_pools() if not p.has_gpus]
    assert [w["labels"] for w in cpu_workers] == [
        {"node.kubernetes.io/instance-type": t} for t in cpu_types
    ]
    assert all("kubeadmConfigPatches" not in w for w in cpu_workers)  # no GPU taint
    for pool in pools:
        worker = by_class[pool.gpu_class]
        for label in GFD_LABELS:
            assert worker["labels"][label] == pool.labels()[label], (pool.name, label)
        patches = [yaml.safe_load(p) for p in worker["kubeadmConfigPatches"]]
        taints = [t for p in patches for t in p["nodeRegistration"]["taints"]]
        assert taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
