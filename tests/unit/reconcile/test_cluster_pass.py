"""The cluster-wide planner pass on realistic snapshots (no cluster needed)."""

import logging
from typing import Any

import pytest
import yaml

from gpumix.reconcile import cluster
from gpumix.reconcile.capacity import NodeInfo, PodInfo
from gpumix.reconcile.cluster import Snapshot, plan_cluster
from gpumix.reconcile.digest import autoscaler_targets, pod_info, running_services
from gpumix.reconcile.service import Running

from ..conftest import EXAMPLES

NOW = "2026-11-21T12:00:00Z"
KEY = ("default", "chat")
CLASSES = {"l4": 1, "a10g": 1, "a100-80gb": 8, "h100": 8}


def nodes(per_class: dict[str, int]) -> list[NodeInfo]:
    return [
        NodeInfo(name=f"{c}-{i}", labels={"gpumix.io/gpu-class": c}, allocatable_gpus=CLASSES[c])
        for c, n in per_class.items()
        for i in range(n)
    ]


def pools() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "gpumix.io/v1alpha1", "kind": "GPUPool",
         "metadata": {"name": c, "generation": 1},
         "spec": {"gpuType": c, "nodeSelector": {"gpumix.io/gpu-class": c}}}
        for c in CLASSES
    ]  # fmt: skip


def service(name: str, rate: float, created: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    body["metadata"].update(name=name, uid=f"uid-{name}", generation=1, creationTimestamp=created)
    body["spec"]["workload"]["requestRate"] = rate
    body["spec"].update(spec)
    return body


def profiles() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((EXAMPLES / "profiles-llama-2-7b.yaml").read_text()))


def snap(**kw: Any) -> Snapshot:
    base: dict[str, Any] = {
        "services": [], "pools": pools(), "profiles": profiles(),
        "nodes": nodes({"l4": 4, "a10g": 4, "a100-80gb": 3, "h100": 2}), "pods": [],
        "running": {}, "autoscalers": {}, "now": NOW,
    }  # fmt: skip
    return Snapshot.model_validate({**base, **kw})


def cond(status: Any, type_: str) -> tuple[str, str, str]:
    c = next(c for c in status.conditions if c.type == type_)
    return c.status.value, c.reason, c.message


def test_new_service_gets_a_plan_and_rolls_out() -> None:
    d = plan_cluster(snap(services=[service("chat", 5.5, "2026-01-01T00:00:00Z")]))
    sd = d.services[("default", "chat")]
    assert sd.target is not None and sd.apply is not None
    assert sd.apply == {p: n for p, n in sd.target.items() if n}
    assert cond(sd.status, "Planned")[:2] == ("True", "PlanComputed")
    assert cond(sd.status, "Ready")[:2] == ("False", "RollingOut")
    assert sd.status.cost_per_hour is not None and sd.status.savings_percent is not None
    assert [e.reason for e in sd.events] == ["PlanChanged"]  # derated to 99%: no SLOAtRisk
    assert d.pool_status["a100-80gb"].allocatable_gpus == 24
    assert d.pool_status["h100"].nodes == 2


def test_ready_once_every_replica_is_available() -> None:
    first = plan_cluster(snap(services=[service("chat", 5.5, "t0")])).services[("default", "chat")]
    assert first.target is not None
    live = {p: n for p, n in first.target.items() if n}
    body = service("chat", 5.5, "t0")
    body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    again = plan_cluster(
        snap(services=[body], running={("default", "chat"): Running(replicas=live, ready=live)})
    ).services[("default", "chat")]
    assert cond(again.status, "Ready")[:2] == ("True", "Serving")
    assert again.target == first.target
    assert again.events == []  # nothing changed, nothing to announce


def test_a_replica_the_scheduler_cannot_place_is_named_once() -> None:
    """Pods of the plan that the scheduler cannot place turn Ready to Unschedulable with its
    reason, and a Warning event says so once, not every pass."""
    first = plan_cluster(snap(services=[service("chat", 5.5, "t0")])).services[KEY]
    assert first.target is not None
    live = {p: n for p, n in first.target.items() if n}
    option = sorted(live)[0]
    why = "1 pod unschedulable: 0/13 nodes are available: 13 Insufficient nvidia.com/gpu."
    short = {**live, option: live[option] - 1}
    running = Running(replicas=live, ready=short, unschedulable={option: why})
    body = service("chat", 5.5, "t0")
    body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    stuck = plan_cluster(snap(services=[body], running={KEY: running})).services[KEY]
    status, reason, message = cond(stuck.status, "Ready")
    assert (status, reason) == ("False", "Unschedulable")
    assert f"{option} {live[option] - 1}/{live[option]} ready" in message
    assert message.endswith(f"; {option}: {why}")
    assert [(e.type, e.reason, e.message) for e in stuck.events] == [
        ("Warning", "Unschedulable", message)
    ]
    body["status"] = stuck.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    again = plan_cluster(snap(services=[body], running={KEY: running})).services[KEY]
    assert cond(again.status, "Ready")[:2] == ("False", "Unschedulable")
    assert again.events == []
    # All the plan's replicas ready, a surge pod with no room (a template change in a full
    # pool): the service serves as planned, and stays Ready.
    surge = Running(replicas=live, ready=live, unschedulable={option: why})
    serving = plan_cluster(snap(services=[body], running={KEY: surge})).services[KEY]
    assert cond(serving.status, "Ready")[:2] == ("True", "Serving")


def test_second_service_that_does_not_fit_is_partially_served_and_says_why() -> None:
    # Only two A10G and two L4 GPUs exist, and no profile lets anything else in.
    small = snap(nodes=nodes({"l4": 2, "a10g": 2}), pools=pools()[:2])
    both = [
        service("first", 1, "2026-01-01T00:00:00Z"),
        service("second", 3, "2026-01-02T00:00:00Z"),
    ]
    d = plan_cluster(small.model_copy(update={"services": both}))
    first, second = d.services[("default", "first")], d.services[("default", "second")]
    assert first.target is not None and second.target is not None
    status, reason, msg = cond(second.status, "Ready")
    assert (status, reason) == ("False", "InsufficientCapacity")
    assert "req/s unserved" in msg and "is full (" in msg
    assert second.status.unserved_fraction is not None and 0 < second.status.unserved_fraction < 1
    assert cond(second.status, "Degraded")[:2] == ("True", "PartiallyServed")
    for pool in ("l4", "a10g"):  # the two plans together never exceed a pool
        assert first.target.get(pool, 0) + second.target.get(pool, 0) <= 2
    assert d.pool_status["l4"].planned_gpus == 2 and d.pool_status["l4"].available_gpus == 2


def test_joint_plan_serves_both_where_one_at_a_time_would_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Coral §2.2 on the cluster: two services contend for a scarce A100 pool. The log says
    how each joint solve planned them (which path, at fleet size, decides time and memory):
    the fleet first and last, each service's derating rounds alone between."""
    only = [p for p in pools() if p["metadata"]["name"] in ("a100-80gb", "a10g")]
    scarce = snap(nodes=nodes({"a100-80gb": 1, "a10g": 4}), pools=only)
    both = [
        service("first", 5.5, "2026-01-01T00:00:00Z"),
        service("second", 5.5, "2026-01-02T00:00:00Z"),
    ]
    cluster._solved.clear()
    with caplog.at_level(logging.INFO, logger="gpumix.planner"):
        d = plan_cluster(scarce.model_copy(update={"services": both}))
    solves = [r.getMessage() for r in caplog.records if r.getMessage().startswith("joint solve")]
    fleet, alone = "joint solve: 2 services in ", "joint solve: 1 services in "
    assert solves[0].startswith(fleet) and solves[-1].startswith(fleet), solves
    assert all(m.startswith((fleet, alone)) for m in solves), solves
    assert all(": optimal; " in m or ": feasible; " in m for m in solves), solves
    for key in (("default", "first"), ("default", "second")):
        sd = d.services[key]
        assert sd.status.unserved_fraction is None, cond(sd.status, "Ready")
    assert d.pool_status["a100-80gb"].planned_gpus is not None
    assert d.pool_status["a100-80gb"].planned_gpus <= 8


def test_an_unreachable_min_replicas_floor_is_degraded_not_failed() -> None:
    body = service("chat", 0.5, "t0", minReplicas=6, pools=["a10g"])  # 4 one-GPU a10g nodes
    sd = plan_cluster(snap(services=[body])).services[("default", "chat")]
    assert sd.target == {"a10g": 4}
    status, reason, message = cond(sd.status, "Degraded")
    assert (status, reason) == ("True", "MinReplicasNotReached")
    assert "minReplicas 6 not reachable (4 planned)" in message
    assert cond(sd.status, "Planned")[:2] == ("True", "PlanComputed")


def test_min_replicas_is_a_floor_on_the_plan() -> None:
    alone = plan_cluster(snap(services=[service("chat", 0.5, "t0")]))
    target = alone.services[("default", "chat")].target
    assert target is not None and 0 < sum(target.values()) < 4
    d = plan_cluster(snap(services=[service("chat", 0.5, "t0", minReplicas=4)]))
    sd = d.services[("default", "chat")]
    assert sd.target is not None and sum(sd.target.values()) >= 4
    assert sd.status.unserved_fraction is None


def test_unservable_slo_keeps_running_deployments() -> None:
    body = service("chat", 5.5, "t0")
    body["spec"]["slo"]["tpotMs"] = 41  # nothing serves the big buckets this fast
    body["spec"]["workload"]["inputEdges"][-1] = 4000
    running = Running(replicas={"a10g": 1}, ready={"a10g": 1}, gpus_per_replica={"a10g": 1})
    sd = plan_cluster(snap(services=[body], running={("default", "chat"): running})).services[
        ("default", "chat")
    ]
    assert sd.apply is None and sd.delete == []
    ready = cond(sd.status, "Ready")
    assert ready[:2] == ("False", "Unservable")
    assert "input 2048–4000" in ready[2] and "TPOT 41 ms" in ready[2]
    assert cond(sd.status, "Degraded")[:2] == ("True", "KeepingLastPlan")
    assert sd.held_gpus == {"a10g": 1}


def test_invalid_spec_names_the_field_and_touches_nothing() -> None:
    body = service("chat", 5.5, "t0")
    body["spec"]["workload"]["histogram"] = [[0] * 5 for _ in range(5)]
    sd = plan_cluster(snap(services=[body])).services[("default", "chat")]
    assert sd.apply is None
    status, reason, message = cond(sd.status, "Ready")
    assert (status, reason) == ("False", "InvalidSpec")
    assert "histogram: at least one bucket must have a positive share" in message


def test_autoscaler_owned_pool_is_left_alone() -> None:
    running = Running(replicas={"a10g": 3}, ready={"a10g": 3}, gpus_per_replica={"a10g": 1})
    sd = plan_cluster(
        snap(
            services=[service("chat", 5.5, "t0")],
            running={("default", "chat"): running},
            autoscalers={("default", "chat-a10g"): "HorizontalPodAutoscaler chat"},
        )
    ).services[("default", "chat")]
    assert sd.apply is not None and "a10g" not in sd.apply
    assert sd.target is not None and sd.target["a10g"] == 3
    assert "a10g" not in sd.delete
    assert cond(sd.status, "ConflictingAutoscaler")[:2] == ("True", "AutoscalerTargetsDeployment")


def test_sticky_plan_keeps_an_equally_cheap_running_mix() -> None:
    first = plan_cluster(snap(services=[service("chat", 5.5, "t0")])).services[("default", "chat")]
    assert first.target is not None
    live = {p: n for p, n in first.target.items() if n}
    body = service("chat", 5.5, "t0")  # with its status: the derating that led to `live`
    body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    again = plan_cluster(
        snap(services=[body], running={("default", "chat"): Running(replicas=live, ready=live)})
    ).services[("default", "chat")]
    assert again.apply == live


def test_foreign_pods_reduce_free_capacity() -> None:
    hog = PodInfo(namespace="x", name="hog", node="a100-80gb-0", gpus=8, phase="Running",
                  managed_by_gpumix=False)  # fmt: skip
    d = plan_cluster(snap(pods=[hog]))
    assert d.pool_status["a100-80gb"].allocated_gpus == 8


@pytest.mark.parametrize(
    ("resources", "gpus"),
    [({"limits": {"nvidia.com/gpu": "2"}}, 2), ({"requests": {"nvidia.com/gpu": 1}}, 1), ({}, 0)],
)
def test_pod_gpus_from_requests_or_limits(resources: dict[str, Any], gpus: int) -> None:
    pod = {"metadata": {"name": "p", "namespace": "n"},
           "spec": {"nodeName": "x", "containers": [{"name": "c", "resources": resources}]},
           "status": {"phase": "Running"}}  # fmt: skip
    assert pod_info(pod).gpus == gpus


def test_running_and_autoscalers_digest() -> None:
    dep = {"metadata": {"name": "chat-l4", "namespace": "default",
                        "labels": {"gpumix.io/service": "chat", "gpumix.io/pool": "l4"}},
           "spec": {"replicas": 2, "template": {"spec": {"containers": [
               {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
           "status": {"availableReplicas": 1}}  # fmt: skip
    assert running_services([dep]) == {
        ("default", "chat"): Running(
            replicas={"l4": 2},
            ready={"l4": 1},
            gpus_per_replica={"l4": 1},
            names={"l4": "chat-l4"},
        )
    }
    tp = {**dep, "metadata": {**dep["metadata"], "name": "chat-l4-tp2", "labels": {
        **dep["metadata"]["labels"], "gpumix.io/gpus-per-replica": "2"}}}  # fmt: skip
    assert running_services([tp])[("default", "chat")].names == {"l4-tp2": "chat-l4-tp2"}
    hpa = {"metadata": {"name": "keda-hpa-chat", "namespace": "default",
                        "ownerReferences": [{"kind": "ScaledObject", "name": "chat"}]},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "chat-l4"}}}  # fmt: skip
    assert "KEDA ScaledObject chat" in autoscaler_targets([hpa])[("default", "chat-l4")]


def test_pool_without_profile_is_named_in_planned() -> None:
    only_three = [p for p in profiles() if p["spec"]["gpuType"] != "h100"]
    sd = plan_cluster(snap(services=[service("chat", 5.5, "t0")], profiles=only_three)).services[
        ("default", "chat")
    ]
    status, reason, message = cond(sd.status, "Planned")
    assert (status, reason) == ("True", "PlanComputed")
    assert "pools left out: h100: no GPUProfile for model 'meta-llama/Llama-2-7b-hf'" in message


def break_planning(monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    """Make the planner's ``stage`` raise, as a gpumix bug would, for the service at 2 req/s
    ("bad"): before the joint solve (build_problem) or after it (calibrate)."""
    real = getattr(cluster, stage)

    def buggy(*args: Any, **kwargs: Any) -> Any:
        # build_problem(service, ...); calibrate(..., grid=the service's workload)
        workload = args[0].spec.workload if stage == "build_problem" else kwargs["grid"]
        if workload.request_rate == 2.0:
            raise ZeroDivisionError("float division by zero")
        return real(*args, **kwargs)

    monkeypatch.setattr(cluster, stage, buggy)


@pytest.mark.parametrize("stage", ["build_problem", "calibrate"])
def test_a_service_whose_planning_raises_keeps_its_plan_and_the_others_are_planned(
    monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """A gpumix bug tripped by one service's input (the API fuzzer found four such inputs, each
    of which stopped planning for every service) is that service's InternalError, before the
    joint solve (its problem) or after it (its decision)."""
    break_planning(monkeypatch, stage)
    running = {("default", "bad"): Running(replicas={"a10g": 2}, ready={"a10g": 2})}
    bodies = [service("bad", 2.0, "t0"), service("chat", 5.5, "t1")]
    d = plan_cluster(snap(services=bodies, running=running))
    bad, chat = d.services[("default", "bad")], d.services[("default", "chat")]
    assert bad.apply is None  # the Deployments that serve are left as they are
    status, reason, message = cond(bad.status, "Ready")
    assert (status, reason) == ("False", "InternalError")
    assert "ZeroDivisionError" in message and "gpumix bug" in message
    assert cond(bad.status, "Degraded")[:2] == ("True", "KeepingLastPlan")
    assert chat.apply is not None and cond(chat.status, "Planned")[:2] == ("True", "PlanComputed")


def test_a_service_whose_decision_raises_keeps_its_gpus_from_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The joint plan shrinks "bad" (4 A10G replicas for 2 req/s) to make room for "chat";
    its decision raises, so it keeps its 4 replicas: chat must not be planned onto them too
    (before, it was, and the capped pool was planned 6 of its 4 GPUs)."""
    break_planning(monkeypatch, "calibrate")
    only = [p for p in pools() if p["metadata"]["name"] == "a10g"]
    held = Running(replicas={"a10g": 4}, ready={"a10g": 4}, gpus_per_replica={"a10g": 1})
    bodies = [service("bad", 2.0, "t0"), service("chat", 3.0, "t1")]
    small = snap(nodes=nodes({"a10g": 4}), pools=only, running={("default", "bad"): held})
    d = plan_cluster(small.model_copy(update={"services": bodies}))
    bad, chat = d.services[("default", "bad")], d.services[("default", "chat")]
    assert bad.apply is None and cond(bad.status, "Planned")[1] == "InternalError"
    assert bad.held_gpus == {"a10g": 4}
    assert chat.target is not None and cond(chat.status, "Planned")[1] == "PlanComputed"
    capacity = d.pool_status["a10g"].allocatable_gpus
    assert capacity == 4
    assert chat.target.get("a10g", 0) + bad.held_gpus["a10g"] <= capacity
    assert sum(sd.held_gpus.get("a10g", 0) for sd in d.services.values()) <= capacity
    assert cond(chat.status, "Ready")[:2] == ("False", "InsufficientCapacity")


def test_a_deleted_pool_keeps_serving_until_the_new_replicas_are_ready_then_goes() -> None:
    """The service ran on a GPUPool that was deleted (the API fuzzer's pools, in e2e): before,
    deciding its plan raised KeyError on the pool, so it was never planned again."""
    gone = Running(
        replicas={"gone": 2}, ready={"gone": 2}, gpus_per_replica={"gone": 1},
        names={"gone": "chat-gone"},
    )  # fmt: skip
    first = plan_cluster(snap(services=[service("chat", 5.5, "t0")], running={KEY: gone}))
    sd = first.services[KEY]
    assert sd.target is not None and "gone" not in sd.target
    assert sd.apply is not None and "gone" not in sd.apply and sd.delete == []
    assert cond(sd.status, "Planned")[:2] == ("True", "PlanComputed")
    assert sd.held_gpus["gone"] == 2  # still serving: its GPUs are held
    new = {p: n for p, n in sd.target.items() if n}
    ready = Running(
        replicas={"gone": 2, **new}, ready={"gone": 2, **new},
        gpus_per_replica={"gone": 1, **dict.fromkeys(new, 1)},
        names={"gone": "chat-gone", **{p: f"chat-{p}" for p in new}},
    )  # fmt: skip
    body = service("chat", 5.5, "t0")
    body["status"] = sd.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    after = plan_cluster(snap(services=[body], running={KEY: ready})).services[KEY]
    assert after.delete == ["chat-gone"]


def spy_prepare(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the services each pass prepares (`cluster._prepare`), in order."""
    prepared: list[str] = []
    real = cluster._prepare

    def spy(service: Any, body: dict[str, Any], **kw: Any) -> Any:
        prepared.append(body["metadata"]["name"])
        return real(service, body, **kw)

    monkeypatch.setattr(cluster, "_prepare", spy)
    return prepared


def test_a_pass_prepares_again_only_the_services_whose_inputs_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rate change replans one service: the others' preparation (validation, problem, joint
    demand) is the last pass's when their bodies, running replicas and the fleet are equal, and
    the pass decides exactly as one that prepares everything again."""
    prepared = spy_prepare(monkeypatch)
    bodies = [service("a", 2.0, "t0"), service("b", 5.5, "t1")]
    first = plan_cluster(snap(services=bodies))
    assert prepared == ["a", "b"]
    again = plan_cluster(snap(services=bodies))
    assert prepared == ["a", "b"]  # nothing changed: nothing prepared
    assert again.model_dump() == first.model_dump()

    changed = [bodies[0], service("b", 8.0, "t1")]
    changed[1]["metadata"]["generation"] = 2
    prepared.clear()
    moved = plan_cluster(snap(services=changed))
    assert prepared == ["b"]
    cluster._PREPARED.clear()
    assert plan_cluster(snap(services=changed)).model_dump() == moved.model_dump()
    assert prepared == ["b", "a", "b"]

    prepared.clear()  # a node fewer: every service's problem may change
    plan_cluster(snap(services=changed, nodes=nodes({"l4": 4, "a10g": 3, "a100-80gb": 3})))
    assert prepared == ["a", "b"]
    prepared.clear()  # what runs is the service's input too
    running = {("default", "a"): Running(replicas={"a10g": 1}, ready={"a10g": 1})}
    plan_cluster(snap(services=changed, running=running))
    assert prepared == ["a", "b"]


def test_a_body_changed_in_place_is_prepared_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """What was prepared is compared with a copy of the body it was prepared from: a caller
    that edits the same dict between passes gets its edit planned."""
    prepared = spy_prepare(monkeypatch)
    body = service("chat", 2.0, "t0")
    low = plan_cluster(snap(services=[body])).services[KEY]
    body["spec"]["workload"]["requestRate"] = 12.0
    high = plan_cluster(snap(services=[body])).services[KEY]
    assert prepared == ["chat", "chat"]
    assert high.status.workload is not None and high.status.workload.request_rate == 12.0
    assert low.status.cost_per_hour is not None and high.status.cost_per_hour is not None
    assert high.status.cost_per_hour > low.status.cost_per_hour


def test_an_observed_service_is_prepared_every_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """An observed workload is decided against the pass's clock (the age of its last good
    observation): its preparation is not kept."""
    prepared = spy_prepare(monkeypatch)
    observed = service("observed", 2.0, "t0")
    observed["spec"]["workload"]["source"] = "Prometheus"
    bodies = [observed, service("static", 2.0, "t1")]
    plan_cluster(snap(services=bodies))
    plan_cluster(snap(services=bodies))
    assert prepared == ["observed", "static", "observed"]
