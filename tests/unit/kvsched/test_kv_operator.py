"""The KV loop's decision glue (gpumix.reconcile.kvmigration), its I/O pass with fakes, and how
the planner applies what the KV scheduler removed (its target is an upper bound)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpumix.api import KvMigration, KvScaleIn, KvSchedulerStatus, LLMService, LLMServiceStatus
from gpumix.operator.kvloop import DELETION_COST
from gpumix.operator.kvtask import KvLoop
from gpumix.operator.view import ClusterView
from gpumix.reconcile.cluster import plan_cluster
from gpumix.reconcile.kvmigration import (
    ADMIN_URL_ANNOTATION,
    KvPod,
    PodSample,
    decide_pass,
    live_pods,
    reductions,
    sample,
)
from gpumix.reconcile.service import Running

from ..reconcile.test_cluster_pass import cond, service, snap

ON = KvMigration(enabled=True)
BLOCKS = 100  # × 16 = 1600 tokens per pod


def listing(*reqs: tuple[int, int], waiting: int = 0) -> dict[str, Any]:
    rs = [
        {
            "id": i,
            "state": "running",
            "prompt_tokens": kv - 10,
            "output_tokens": kv + 500,
            "generated_tokens": 10,
            "kv_tokens": kv,
            "kv_blocks": -(-kv // 16),
        }
        for i, kv in reqs
    ]
    rs += [
        {
            "id": 100 + k,
            "state": "waiting",
            "prompt_tokens": 10,
            "output_tokens": 10,
            "generated_tokens": 0,
            "kv_tokens": 0,
            "kv_blocks": 0,
        }
        for k in range(waiting)
    ]
    used = sum(r["kv_blocks"] for r in rs)
    return {"block_size": 16, "kv_blocks": BLOCKS, "used_blocks": used, "requests": rs}


def pod_body(name: str, created: str, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                     "labels": {"gpumix.io/service": "chat", "gpumix.io/pool": "a10g"},
                     "annotations": annotations},
        "spec": {"nodeName": f"node-{name}"},
        "status": {"phase": "Running", "podIP": "10.1.0.7"},
    }  # fmt: skip


def status(planned: int, removed: int = 0, planned_for: int | None = None) -> LLMServiceStatus:
    entry = KvScaleIn(option="a10g", planned_replicas=planned_for or planned, removed=removed)
    kv = KvSchedulerStatus(scaled_in=[entry] if removed else [])
    return LLMServiceStatus.model_validate({
        "allocation": [{"pool": "a10g", "gpuType": "a10g", "replicas": planned,
                        "costPerHour": 1.0}],
        "kvScheduler": kv.model_dump(by_alias=True),
    })  # fmt: skip


THREE = {
    "chat-a": listing((1, 900), (2, 200)),
    "chat-b": listing((1, 1000)),
    "chat-c": listing((1, 300), (2, 250)),  # the newest pod
}


def pods3() -> dict[str, list[KvPod]]:
    bodies = [pod_body(n, f"2026-01-01T00:00:0{k}Z") for k, n in enumerate(THREE)]
    bodies[2]["metadata"]["annotations"] = {ADMIN_URL_ANNOTATION: "http://127.0.0.1:9/"}
    return live_pods(bodies, "ns", "chat")


def samples(pods: dict[str, list[KvPod]], bodies: dict[str, Any]) -> dict[str, PodSample | str]:
    return {p.name: sample(p, bodies[p.name]) for p in pods["a10g"]}


def test_pods_in_activation_order_with_the_admin_url_override() -> None:
    pods = pods3()
    assert [p.name for p in pods["a10g"]] == ["chat-a", "chat-b", "chat-c"]
    assert [p.url for p in pods["a10g"]] == ["http://10.1.0.7:8001", "http://10.1.0.7:8001",
                                             "http://127.0.0.1:9"]  # fmt: skip
    gone = pod_body("chat-d", "t")
    gone["metadata"]["deletionTimestamp"] = "t"
    assert live_pods([gone], "ns", "chat") == {}


def test_settled_pool_empties_its_newest_pod_and_scales_in_by_one() -> None:
    pods = pods3()
    step = decide_pass(ON, status=status(3), deployment_replicas={"a10g": 3}, pods=pods,
                       samples=samples(pods, THREE))  # fmt: skip
    assert [a.decision.drained for a in step.actions] == [["chat-c"]]
    assert {src for _, src, _ in step.actions[0].decision.moves} == {"chat-c"}
    assert step.scaled_in == {"a10g": (3, 1)}


def test_no_action_while_a_scale_in_is_in_progress_or_data_is_missing() -> None:
    pods = pods3()
    s = samples(pods, THREE)
    # the planner has not applied 3 - 1 yet
    step = decide_pass(ON, status=status(3, removed=1), deployment_replicas={"a10g": 3},
                       pods=pods, samples=s)  # fmt: skip
    assert step.actions == [] and "waiting for 2 pods" in step.notes[0]
    assert step.scaled_in == {"a10g": (3, 1)}  # kept
    # no data is not zero load
    step = decide_pass(ON, status=status(3), deployment_replicas={"a10g": 3}, pods=pods,
                       samples={**s, "chat-b": "URLError: refused"})  # fmt: skip
    assert step.actions == [] and "no KV data (chat-b: URLError: refused)" in step.notes[0]


def test_kv_pressure_gives_a_removed_replica_back() -> None:
    pods = pods3()
    two = {"a10g": pods["a10g"][:2]}
    bodies = {"chat-a": listing((1, 1500), waiting=2), "chat-b": listing((1, 300))}
    step = decide_pass(ON, status=status(3, removed=1), deployment_replicas={"a10g": 2},
                       pods=two, samples=samples(two, bodies))  # fmt: skip
    assert step.actions == [] and step.scaled_in == {"a10g": (3, 0)}
    assert "KV pressure on chat-a" in step.notes[0]


def test_reductions_apply_to_the_target_they_were_made_for_only() -> None:
    kv = status(3, removed=1).kv_scheduler
    assert reductions(ON, kv, {"a10g": 3}) == {"a10g": 1}
    assert reductions(ON, kv, {"a10g": 4}) == {}  # a new plan voids it
    assert reductions(KvMigration(), kv, {"a10g": 3}) == {}  # migration disabled
    many = status(2, removed=5).kv_scheduler
    assert reductions(ON, many, {"a10g": 2}) == {"a10g": 1}  # never the last replica


def test_planner_runs_target_minus_removed_and_does_not_scale_back_up() -> None:
    body = service("chat", 2, "t0", pools=["a10g"], kvMigration={"enabled": True})
    first = plan_cluster(snap(services=[body])).services[("default", "chat")]
    planned = first.target["a10g"]
    assert first.target == {"a10g": planned} and planned >= 2
    st = first.status.model_copy(update={"kv_scheduler": KvSchedulerStatus(
        scaled_in=[KvScaleIn(option="a10g", planned_replicas=planned, removed=1)])})  # fmt: skip
    body["status"] = st.model_dump(by_alias=True, mode="json", exclude_none=True)
    kept = planned - 1
    running = Running(replicas={"a10g": kept}, ready={"a10g": kept}, gpus_per_replica={"a10g": 1})
    again = plan_cluster(snap(services=[body], running={("default", "chat"): running}))
    sd = again.services[("default", "chat")]
    assert sd.target == {"a10g": planned}  # the plan (upper bound) is unchanged …
    assert sd.apply == {"a10g": kept}  # … and the Deployment keeps the KV scheduler's count
    assert cond(sd.status, "Ready")[:2] == ("True", "Serving")
    assert f"the KV scheduler runs a10g={kept}" in cond(sd.status, "Ready")[2]
    assert sd.status.kv_scheduler == st.kv_scheduler
    assert sd.events == []
    # disabling migration gives the replica back
    body["spec"]["kvMigration"] = {"enabled": False}
    sd = plan_cluster(snap(services=[body], running={("default", "chat"): running})).services[
        ("default", "chat")
    ]
    assert sd.apply == {"a10g": planned}


class FakeWriter:
    def __init__(self) -> None:
        self.pods: list[tuple[str, str, dict[str, Any]]] = []
        self.status: list[dict[str, Any]] = []

    def patch_pod(self, ns: str, name: str, patch: dict[str, Any]) -> None:
        self.pods.append((ns, name, patch))

    def patch_service_status(self, ns: str, name: str, st: dict[str, Any]) -> None:
        self.status.append(st)


def test_a_pass_migrates_annotates_the_emptied_pod_and_patches_only_kv_status() -> None:
    svc = {"apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
           "metadata": {"name": "chat", "namespace": "ns"},
           "spec": {"model": {"name": "meta-llama/Llama-2-7b-hf"}, "slo": {"tpotMs": 120},
                    "workload": {"requestRate": 1, "inputEdges": [1, 10], "outputEdges": [1, 10],
                                 "histogram": [[1]]},
                    "kvMigration": {"enabled": True, "via": "Engine"}},
           "status": status(3).model_dump(by_alias=True, mode="json")}  # fmt: skip
    bodies = [pod_body(n, f"2026-01-01T00:00:0{k}Z") for k, n in enumerate(THREE)]
    for b in bodies:
        b["metadata"]["annotations"] = {ADMIN_URL_ANNOTATION: f"http://{b['metadata']['name']}"}
    deployment = {"metadata": {"name": "chat-a10g", "namespace": "ns",
                               "labels": {"gpumix.io/service": "chat", "gpumix.io/pool": "a10g"}},
                  "spec": {"replicas": 3}}  # fmt: skip
    calls: list[str] = []

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        calls.append(url)
        return {"id": 1, "prompt_tokens": 10, "output_tokens": 20, "generated_tokens": 1}

    writer = FakeWriter()
    loop = KvLoop(ClusterView(), writer, fetch=lambda url: THREE[url.removeprefix("http://")],
                  post=post)  # type: ignore[arg-type]  # fmt: skip
    loop.pass_service(svc, LLMService.model_validate({**svc, "status": None}), bodies, [deployment])
    assert calls[::2] == ["http://chat-c/admin/migrate_out"] * 2
    assert set(calls[1::2]) <= {"http://chat-a/admin/migrate_in", "http://chat-b/admin/migrate_in"}
    assert writer.pods == [
        ("ns", "chat-c", {"metadata": {"annotations": {DELETION_COST: "-1000"}}})
    ]
    [patch] = writer.status
    assert set(patch) == {"kvScheduler"}
    kv = patch["kvScheduler"]
    assert kv["migrations"] == 2 and kv["drainedPods"] == ["chat-c"]
    assert kv["scaledIn"] == [{"option": "a10g", "plannedReplicas": 3, "removed": 1}]


def test_the_kv_loop_starts_after_the_planners_first_pass() -> None:
    """Until then the view may hold part of kopf's listing (`Planner.listed`)."""
    body = service("chat", 2, "t0", pools=["a10g"], kvMigration={"enabled": True})
    view = ClusterView()
    view.update("services", "ADDED", body)
    first_pass = asyncio.Event()
    loop = KvLoop(view, FakeWriter(), tick_s=0.01, after=first_pass)  # type: ignore[arg-type]
    seen: list[bool] = []
    loop.pass_service = lambda *_: seen.append(first_pass.is_set())  # type: ignore[method-assign]

    async def scenario() -> None:
        task = asyncio.create_task(loop.run())
        await asyncio.sleep(0.1)
        assert not seen
        first_pass.set()
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(scenario())
    assert seen and all(seen)


def test_the_loop_validates_a_service_again_only_once_the_view_holds_another_body() -> None:
    """Every tick reads every service; a body the view still holds is not validated again."""
    body = service("chat", 2, "t0", pools=["a10g"], kvMigration={"enabled": True})
    view = ClusterView()
    view.update("services", "ADDED", body)
    loop = KvLoop(view, FakeWriter())  # type: ignore[arg-type]
    key = ("default", "chat")
    first = loop._service(key, view.objects["services"][key])
    assert first is not None and first.spec.kv_migration.enabled
    assert loop._service(key, view.objects["services"][key]) is first
    off = {**body, "spec": {**body["spec"], "kvMigration": {"enabled": False}}}
    view.update("services", "MODIFIED", off)
    again = loop._service(key, view.objects["services"][key])
    assert again is not None and not again.spec.kv_migration.enabled
    bad = {**body, "spec": {**body["spec"], "kvMigration": {"enabled": "sometimes"}}}
    view.update("services", "MODIFIED", bad)
    assert loop._service(key, view.objects["services"][key]) is None
