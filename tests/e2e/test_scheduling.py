"""Real scheduling onto KWOK GPU nodes: resource fit, node selectors, taints, GC."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from gpumix_e2e import KubeTarget
from gpumix_testcluster import GPU_CLASS_LABEL, GPU_RESOURCE, GPU_TAINT, wait_for

pytestmark = pytest.mark.e2e

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
