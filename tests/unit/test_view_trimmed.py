"""The view keeps of a pod and a Deployment only what is read of them: every reader sees the same
on what is kept as on the whole object (a vLLM Deployment as gpumix renders it, and its pods)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpumix.operator.view import ClusterView
from gpumix.reconcile.digest import pod_info, running_services, stranded_pods, unschedulable_pods
from gpumix.reconcile.kvmigration import ADMIN_URL_ANNOTATION, live_pods, router_urls
from gpumix.render.names import ROUTER_LABEL

GOLDEN = Path(__file__).parent / "render" / "golden"


def deployment(name: str = "deployment-a100-80gb-tp2") -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((GOLDEN / f"{name}.yaml").read_text())
    body["metadata"] |= {"uid": "u1", "resourceVersion": "7", "generation": 2,
                         "managedFields": [{"manager": "gpumix"}],
                         "annotations": {"deployment.kubernetes.io/revision": "1"}}  # fmt: skip
    body["spec"]["replicas"] = 3
    body["status"] = {"replicas": 3, "availableReplicas": 2, "readyReplicas": 2,
                      "conditions": [{"type": "Available", "status": "True",
                                      "lastUpdateTime": "2026-11-30T00:00:00Z"}]}  # fmt: skip
    return body


def pod(
    d: dict[str, Any], i: int, *, node: str | None, ready: bool, **extra: Any
) -> dict[str, Any]:
    template = copy.deepcopy(d["spec"]["template"])
    meta = template["metadata"] | {
        "name": f"{d['metadata']['name']}-{i}", "namespace": d["metadata"]["namespace"],
        "creationTimestamp": f"2026-11-30T00:00:0{i}Z", "uid": f"p{i}",
        "ownerReferences": [{"kind": "ReplicaSet", "name": "rs"}],
        "annotations": {"kubectl.kubernetes.io/restartedAt": "x", **extra.pop("annotations", {})},
        **extra,
    }  # fmt: skip
    spec = template["spec"] | ({"nodeName": node} if node else {})
    scheduled = {"type": "PodScheduled", "status": "True" if node else "False",
                 "lastTransitionTime": "2026-11-30T00:00:00Z"}  # fmt: skip
    if not node:
        scheduled |= {"reason": "Unschedulable", "message": "0/3 nodes are available"}
    status = {
        "phase": "Running" if node else "Pending", "podIP": f"10.0.0.{i}" if node else None,
        "conditions": [scheduled, {"type": "Ready", "status": str(ready),
                                   "lastProbeTime": None}],
        "containerStatuses": [{"name": "vllm", "ready": ready, "restartCount": 0}],
    }  # fmt: skip
    return {"metadata": meta, "spec": spec, "status": {k: v for k, v in status.items() if v}}


@pytest.fixture
def objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    d = deployment()
    router = pod(d, 9, node="n1", ready=True,
                 annotations={ADMIN_URL_ANNOTATION: "http://r:9"})  # fmt: skip
    router["metadata"]["labels"] = {ROUTER_LABEL: "chat"}
    pods = [
        pod(d, 0, node="n1", ready=True),
        pod(d, 1, node="gone", ready=True),
        pod(d, 2, node=None, ready=False),
        pod(d, 3, node="n1", ready=True, deletionTimestamp="2026-11-30T00:01:00Z"),
        router,
    ]
    return [d], pods


def kept(kind: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    view = ClusterView()
    for b in bodies:
        view.update(kind, None, b)
    return list(view.objects[kind].values())


def test_every_reader_sees_the_same_on_what_the_view_keeps(
    objects: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    deployments, pods = objects
    kd, kp = kept("deployments", deployments), kept("pods", pods)
    ns, service = pods[0]["metadata"]["namespace"], "chat"
    assert [pod_info(p) for p in kp] == [pod_info(p) for p in pods]
    assert stranded_pods(kp, {"n1"}) == stranded_pods(pods, {"n1"})
    assert unschedulable_pods(kp) == unschedulable_pods(pods)
    assert running_services(kd, kp, {"n1"}) == running_services(deployments, pods, {"n1"})
    assert live_pods(kp, ns, service) == live_pods(pods, ns, service)
    assert router_urls(kp, ns, service) == router_urls(pods, ns, service)
    # What the readers found is not nothing: the comparison could fail.
    running = running_services(deployments, pods, {"n1"})[ns, service]
    assert running.replicas == {"a100-80gb-tp2": 3} and running.ready == {"a100-80gb-tp2": 1}
    assert running.gpus_per_replica == {"a100-80gb-tp2": 2} and running.unschedulable
    assert [p.name for p in live_pods(pods, ns, service)["a100-80gb-tp2"]] == [
        "chat-a100-80gb-tp2-0", "chat-a100-80gb-tp2-1"]  # fmt: skip
    assert router_urls(pods, ns, service) == ["http://r:9"]


def test_a_pod_is_kept_at_a_fraction_of_its_size_and_a_probe_time_is_no_change(
    objects: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    deployments, pods = objects
    (kd,), (kp, *_) = kept("deployments", deployments), kept("pods", pods)
    assert len(json.dumps(kd)) * 3 < len(json.dumps(deployments[0]))
    assert len(json.dumps(kp)) * 3 < len(json.dumps(pods[0]))
    view = ClusterView()
    view.update("pods", None, pods[0])
    view.changed.clear()
    probed = copy.deepcopy(pods[0])
    probed["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-30T00:05:00Z"
    probed["status"]["containerStatuses"][0]["restartCount"] = 0
    view.update("pods", "MODIFIED", probed)
    assert not view.changed.is_set()
    probed["status"]["conditions"][1]["status"] = "False"
    view.update("pods", "MODIFIED", probed)
    assert view.changed.is_set()


def test_the_snapshot_reads_each_node_and_pod_as_last_changed_and_not_once_deleted(
    objects: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    _, pods = objects
    node = {"metadata": {"name": "n1", "labels": {"gpumix.io/pool": "a100-80gb"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}  # fmt: skip
    view = ClusterView()
    view.update("nodes", None, node)
    for p in pods:
        view.update("pods", None, p)
    grown = copy.deepcopy(node)
    grown["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    view.update("nodes", "MODIFIED", grown)
    moved = copy.deepcopy(pods[2])
    moved["spec"]["nodeName"], moved["status"]["phase"] = "n1", "Running"
    view.update("pods", "MODIFIED", moved)
    view.update("pods", "DELETED", pods[0])
    snap = view.snapshot("now", 5)
    assert [n.allocatable_gpus for n in snap.nodes] == [4]
    assert sorted(snap.pods, key=lambda p: p.name) == sorted(
        [pod_info(p) for p in (pods[1], moved, *pods[3:])], key=lambda p: p.name
    )
    view.update("nodes", "DELETED", grown)
    assert view.snapshot("now", 5).nodes == []
