"""Pods on a node that is gone do not count as available (found by tests/e2e/test_chaos.py);
pods the scheduler cannot place are named with its reason."""

from __future__ import annotations

from typing import Any

from gpumix.reconcile.digest import running_services, stranded_pods, unschedulable_pods

LABELS = {"gpumix.io/service": "chat", "gpumix.io/pool": "a100-80gb"}
DEPLOYMENT = {"metadata": {"name": "chat-a100-80gb", "namespace": "ns", "labels": LABELS},
              "spec": {"replicas": 2}, "status": {"availableReplicas": 2}}  # fmt: skip


def pod(name: str, node: str, ready: bool = True, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": LABELS, **meta},
            "spec": {"nodeName": node},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}  # fmt: skip


def test_a_ready_pod_on_a_deleted_node_is_not_available() -> None:
    pods = [pod("a", "gpu-a100-80gb-0"), pod("b", "gpu-a100-80gb-1")]
    assert stranded_pods(pods, {"gpu-a100-80gb-0"}) == {("ns", "chat", "a100-80gb"): 1}
    running = running_services([DEPLOYMENT], pods, {"gpu-a100-80gb-0"})[("ns", "chat")]
    assert running.ready == {"a100-80gb": 1}
    assert running.replicas == {"a100-80gb": 2}


def test_pods_on_nodes_that_exist_unready_or_terminating_pods_change_nothing() -> None:
    nodes = {"n0"}
    pods = [pod("a", "n0"), pod("b", "gone", ready=False),
            pod("c", "gone", deletionTimestamp="2026-01-01T00:00:00Z")]  # fmt: skip
    assert stranded_pods(pods, nodes) == {}
    assert running_services([DEPLOYMENT], pods, nodes)[("ns", "chat")].ready == {"a100-80gb": 2}
    # Without the nodes (the KV loop; the view before its first listing) nothing is discounted.
    assert running_services([DEPLOYMENT], [pod("d", "gone")])[("ns", "chat")].ready == {
        "a100-80gb": 2
    }


def pending(name: str, message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            reason: str = "Unschedulable", **meta: Any) -> dict[str, Any]:  # fmt: skip
    labels = {**LABELS, "gpumix.io/gpus-per-replica": "2"}
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels, **meta},
            "spec": {},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": reason,
                 "message": message}]}}  # fmt: skip


def test_pods_the_scheduler_cannot_place_are_counted_with_its_reason() -> None:
    why = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pods = [pending("b", "later"), pending("a", why), pending("c", reason="SchedulingGated"),
            pending("d", deletionTimestamp="2026-01-01T00:00:00Z"), pod("e", "n0")]  # fmt: skip
    assert unschedulable_pods(pods) == {
        ("ns", "chat", "a100-80gb-tp2"): f"2 pods unschedulable: {why}"  # the first by name's
    }
    labels = {**LABELS, "gpumix.io/gpus-per-replica": "2"}
    tp2 = {**DEPLOYMENT, "metadata": {**DEPLOYMENT["metadata"], "labels": labels}}
    running = running_services([DEPLOYMENT, tp2], pods)[("ns", "chat")]
    assert running.unschedulable == {"a100-80gb-tp2": f"2 pods unschedulable: {why}"}
    assert running_services([DEPLOYMENT], pods)[("ns", "chat")].unschedulable == {}
