"""Real scheduling onto KWOK GPU nodes: resource fit, node selectors, taints, GC."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpumix.api import GPUPool, LLMService
from gpumix.manifests import load_objects
from gpumix.problem import PoolChoice
from gpumix.render.deployment import render_deployment
from gpumix.render.names import Owner
from gpumix_e2e import KubeTarget
from gpumix_testcluster import GPU_CLASS_LABEL, GPU_RESOURCE, GPU_TAINT, GpuPool, wait_for

pytestmark = pytest.mark.e2e

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"
A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_TOLERATION = {
    "key": GPU_TAINT["key"],
    "operator": "Equal",
    "value": GPU_TAINT["value"],
    "effect": GPU_TAINT["effect"],
}


def gpu_pod_spec(gpus: int, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "nodeSelector": node_selector or {},
        "tolerations": [GPU_TOLERATION],
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "server",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": {"cpu": "100m", GPU_RESOURCE: str(gpus)},
                    "limits": {GPU_RESOURCE: str(gpus)},
                },
            }
        ],
    }


def deployment(
    name: str, namespace: str, replicas: int, pod_spec: dict[str, Any]
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def pods(kube: KubeTarget, namespace: str, selector: str) -> list[client.V1Pod]:
    core = client.CoreV1Api(kube.api_client)
    items: list[client.V1Pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
    return items


def test_a100_deployment_runs_only_on_a100_nodes(kube: KubeTarget, namespace: str) -> None:
    replicas = 4
    kube.apply(
        deployment("a100", namespace, replicas, gpu_pod_spec(1, {GPU_CLASS_LABEL: "a100-80gb"}))
    )

    def all_running() -> list[client.V1Pod] | None:
        current = pods(kube, namespace, "app=a100")
        running = [p for p in current if p.status.phase == "Running"]
        return current if len(current) == replicas and len(running) == replicas else None

    running = wait_for("4 A100 pods Running", all_running, timeout=90, interval=0.5)
    core = client.CoreV1Api(kube.api_client)
    for pod in running:
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels["nvidia.com/gpu.product"] == A100_PRODUCT, pod.spec.node_name
        assert node.metadata.labels[GPU_CLASS_LABEL] == "a100-80gb"
        assert node.status.allocatable[GPU_RESOURCE] == "8"
        ready = [c.status for c in pod.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"], pod.metadata.name


def test_pod_needing_more_gpus_than_any_node_stays_unschedulable(
    kube: KubeTarget, namespace: str
) -> None:
    core = client.CoreV1Api(kube.api_client)
    most = max(int(n.status.allocatable.get(GPU_RESOURCE, "0")) for n in core.list_node().items)
    assert most >= 1, "no node advertises nvidia.com/gpu"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-big", "namespace": namespace},
        "spec": gpu_pod_spec(most + 1),
    }
    kube.apply(pod)

    def unschedulable() -> client.V1PodCondition | None:
        status = core.read_namespaced_pod("too-big", namespace).status
        for cond in status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

    cond = wait_for("PodScheduled=False", unschedulable, timeout=60, interval=0.5)
    assert cond.reason == "Unschedulable"
    assert f"Insufficient {GPU_RESOURCE}" in cond.message
    final = core.read_namespaced_pod("too-big", namespace)
    assert final.status.phase == "Pending"
    assert not final.spec.node_name


def test_deleting_owner_garbage_collects_dependents(kube: KubeTarget, namespace: str) -> None:
    kube.apply(deployment("gc", namespace, 2, gpu_pod_spec(1, {GPU_CLASS_LABEL: "l4"})))
    apps = client.AppsV1Api(kube.api_client)

    def running_pods() -> list[client.V1Pod] | None:
        current = [p for p in pods(kube, namespace, "app=gc") if p.status.phase == "Running"]
        return current if len(current) == 2 else None

    wait_for("2 pods Running", running_pods, timeout=90, interval=0.5)
    replica_sets = apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items
    assert len(replica_sets) == 1
    assert replica_sets[0].metadata.owner_references[0].kind == "Deployment"

    apps.delete_namespaced_deployment(
        "gc", namespace, body=client.V1DeleteOptions(propagation_policy="Background")
    )

    def all_gone() -> bool | None:
        left_rs = apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items
        left_pods = pods(kube, namespace, "app=gc")
        return True if not left_rs and not left_pods else None

    wait_for("ReplicaSet and pods garbage-collected", all_gone, timeout=90, interval=0.5)


def test_gpu_nodes_can_be_added_and_removed(kube: KubeTarget) -> None:
    if kube.cluster is None:
        pytest.skip("adding KWOK nodes needs the local hack/ cluster (not --kube-context)")
    cluster = kube.cluster
    before = cluster.node_names("h100")
    added = cluster.add_gpu_nodes("h100", 2)
    assert len(added) == 2
    assert not set(added) & set(before)

    core = client.CoreV1Api(kube.api_client)
    for name in added:
        node = core.read_node(name)
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
        assert node.metadata.labels[GPU_CLASS_LABEL] == "h100"
        assert node.status.capacity[GPU_RESOURCE] == "8"
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
        assert (GPU_TAINT["key"], GPU_TAINT["value"], GPU_TAINT["effect"]) in taints
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        assert ready == ["True"]

    cluster.delete_gpu_nodes(added)
    assert cluster.node_names("h100") == before


def test_gpu_nodes_renew_their_leases(kube: KubeTarget) -> None:
    """Liveness like a kubelet's, so nodes stay Ready through long tests."""
    if kube.cluster is None:
        pytest.skip("KWOK leases exist only on the local hack/ cluster (not --kube-context)")
    coordination = client.CoordinationV1Api(kube.api_client)
    names = kube.cluster.node_names()
    first = {n: coordination.read_namespaced_lease(n, "kube-node-lease").spec for n in names}

    def all_renewed() -> bool | None:
        for name, spec in first.items():
            now = coordination.read_namespaced_lease(name, "kube-node-lease").spec
            if now.renew_time <= spec.renew_time:
                return None
        return True

    for spec in first.values():
        assert spec.holder_identity
        assert spec.lease_duration_seconds > 0
    # KWOK renews at a fraction of the 40 s lease duration.
    wait_for("every node Lease renewed", all_renewed, timeout=45, interval=1)


def _rendered(
    namespace: str, service: str, pool: GPUPool, gpus: int, replicas: int
) -> dict[str, Any]:
    """The Deployment gpumix renders for ``service`` (the chat sample's spec) on ``pool``, without
    its owner reference: no LLMService owns it here, and the garbage collector would delete it."""
    (sample,) = [o for o in load_objects([SAMPLES / "chat.yaml"]) if isinstance(o, LLMService)]
    owner = Owner(name=service, namespace=namespace, uid=str(uuid.uuid4()))
    choice = PoolChoice(pool=pool.name, gpu_type="a40", gpus_per_replica=gpus,
                        price_per_gpu_hour=1.0, profile="a40")  # fmt: skip
    body = render_deployment(owner, sample.spec, pool, choice, replicas)
    del body["metadata"]["ownerReferences"]
    return body


def test_a_full_pool_of_four_gpu_nodes_places_one_and_two_gpu_replicas(
    kube: KubeTarget, namespace: str
) -> None:
    """Three 4-GPU nodes, three 1-GPU replicas placed first, then four 2-GPU ones: 11 of 12 GPUs,
    which fit only if the 1-GPU pods share a node. The scheduler's default scoring spreads them
    one per node, leaving 3 free GPUs on each and room for three 2-GPU pods, not four; the
    packing affinity gpumix renders (`packing_affinity`) keeps them together."""
    if kube.cluster is None:
        pytest.skip("adding KWOK nodes needs the local hack/ cluster (not --kube-context)")
    suffix = uuid.uuid4().hex[:6]
    nodes = GpuPool(name=f"pack-{suffix}", gpu_class=f"pack-{suffix}", product="NVIDIA-A40",
                    gpus_per_node=4, gpu_memory_mib=46068, nodes=3, instance_type="g-a40x4",
                    cpu="64", memory="256Gi")  # fmt: skip
    pool = GPUPool.model_validate({
        "kind": "GPUPool", "metadata": {"name": "a40"},
        "spec": {"gpuType": "a40", "nodeSelector": {GPU_CLASS_LABEL: nodes.gpu_class}},
    })  # fmt: skip
    added = kube.cluster.add_gpu_nodes(nodes, 3)
    try:
        core = client.CoreV1Api(kube.api_client)

        def placed(selector: str, count: int) -> dict[str, str] | None:
            items = core.list_namespaced_pod(namespace, label_selector=selector).items
            bound = {p.metadata.name: p.spec.node_name for p in items if p.spec.node_name}
            return bound if len(bound) == count else None

        kube.apply(_rendered(namespace, "small", pool, 1, 3))
        small = wait_for("three 1-GPU pods bound", lambda: placed("gpumix.io/service=small", 3),
                         timeout=90, interval=0.5)  # fmt: skip
        kube.apply(_rendered(namespace, "large", pool, 2, 4))

        def large_settled() -> dict[str, str] | None:
            items = core.list_namespaced_pod(
                namespace, label_selector="gpumix.io/service=large"
            ).items
            unschedulable = [
                p.metadata.name
                for p in items
                for c in p.status.conditions or []
                if c.type == "PodScheduled" and c.reason == "Unschedulable"
            ]
            assert not unschedulable, (unschedulable, small)
            return placed("gpumix.io/service=large", 4)

        large = wait_for("four 2-GPU pods bound", large_settled, timeout=90, interval=0.5)
        assert len(set(small.values())) == 1, small  # the 1-GPU pods share one node
        assert set(small.values()) | set(large.values()) == set(added)
    finally:
        kube.cluster.delete_gpu_nodes(added)
