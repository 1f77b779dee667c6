"""The KV loop through the router (``kvMigration.via: Router``, issue #16): the routers' ledgers
and the engines' /metrics become MELL's view, and moves go to the replica holding each stream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpumix.api import LLMService
from gpumix.operator.kvloop import PodLoad, PodRequest, plan_consolidation
from gpumix.operator.kvtask import KvLoop
from gpumix.operator.view import ClusterView
from gpumix.reconcile.kvmigration import (
    ADMIN_URL_ANNOTATION,
    EngineGauges,
    engine_gauges,
    ledger_samples,
    live_pods,
    router_urls,
)
from gpumix.route.engines import ENGINE_URL_ANNOTATION

from .test_kv_operator import FakeWriter, pod_body, status

ENGINES = ("chat-a", "chat-b", "chat-c")  # activation order: chat-c is the newest


def metrics(blocks: int = 100, running: int = 0, waiting: int = 0, usage: float = 0.3) -> str:
    """A vLLM /metrics page, as the engine writes it."""
    m = 'model_name="m"'
    return "\n".join([
        "# TYPE vllm:cache_config_info gauge",
        f'vllm:cache_config_info{{{m},num_gpu_blocks="{blocks}",block_size="16"}} 1.0',
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{m}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{m}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{m}}} {usage}",
        "",
    ])  # fmt: skip


def ledger(**pods: list[tuple[str, int, bool]]) -> dict[str, Any]:
    """A router's /admin/inflight: pod → [(id, kv tokens, movable)]."""
    return {
        "pods": {
            pod: {"pool": "a10g", "requests": [
                {"id": rid, "prompt_tokens": kv - 5, "generated_tokens": 5, "kv_tokens": kv,
                 "max_tokens": 100, "movable": movable,
                 "refusal": None if movable else "seed"}
                for rid, kv, movable in reqs
            ]}
            for pod, reqs in pods.items()
        }
    }  # fmt: skip


def engine_pods() -> list[dict[str, Any]]:
    bodies = [pod_body(n, f"2026-01-01T00:00:0{k}Z") for k, n in enumerate(ENGINES)]
    for b in bodies:
        b["metadata"]["annotations"] = {ENGINE_URL_ANNOTATION: f"http://{b['metadata']['name']}"}
    return bodies


def router_pod(name: str, phase: str = "Running", service: str = "chat") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns",
                     "labels": {"gpumix.io/router": service},
                     "annotations": {ADMIN_URL_ANNOTATION: f"http://{name}"}},
        "status": {"phase": phase, "podIP": "10.1.0.9"},
    }  # fmt: skip


def test_engine_gauges_read_capacity_and_pressure_from_vllm_metrics() -> None:
    g = engine_gauges(metrics(blocks=100, running=3, waiting=2, usage=0.5))
    assert g == EngineGauges(capacity_tokens=1600, running=3, waiting=2, used_fraction=0.5)
    with pytest.raises(ValueError, match="cache_config_info"):
        engine_gauges("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n")


def test_only_the_services_live_router_pods_are_asked() -> None:
    pods = [router_pod("r1"), router_pod("r2", phase="Pending"), router_pod("x", service="other"),
            *engine_pods()]  # fmt: skip
    assert router_urls(pods, "ns", "chat") == ["http://r1"]


def gauges(**running: int) -> dict[str, EngineGauges | str]:
    return {p: EngineGauges(1600, running.get(p, 0), 0, 0.2) for p in ENGINES}


def test_the_ledgers_of_every_replica_are_joined_per_pod() -> None:
    groups = live_pods(engine_pods(), "ns", "chat")
    ledgers: dict[str, dict[str, Any] | str] = {
        "http://r1": ledger(**{"chat-a": [("r0", 900, True)], "chat-c": [("r1", 300, True)]}),
        "http://r2": ledger(**{"chat-c": [("r0", 250, True)]}),
    }
    samples = ledger_samples(groups, ledgers, gauges(**{"chat-a": 1, "chat-c": 2}))
    c = samples["chat-c"]
    assert not isinstance(c, str)
    assert [(r.id, r.via, r.kv_tokens) for r in c.load.requests] == [
        ("r1", "http://r1", 300), ("r0", "http://r2", 250)]  # fmt: skip
    assert c.load.kv_tokens == 1600 and c.load.url == "http://chat-c" and not c.load.pinned


def test_a_replica_that_does_not_answer_leaves_every_pod_without_data() -> None:
    groups = live_pods(engine_pods(), "ns", "chat")
    ledgers: dict[str, dict[str, Any] | str] = {"http://r1": ledger(), "http://r2": "timed out"}
    samples = ledger_samples(groups, ledgers, gauges())
    assert samples == dict.fromkeys(ENGINES, "router http://r2: timed out")
    assert ledger_samples(groups, {}, gauges()) == dict.fromkeys(ENGINES, "no live router pod")


def test_a_pod_running_requests_no_router_knows_is_never_emptied() -> None:
    groups = live_pods(engine_pods(), "ns", "chat")
    ledgers: dict[str, dict[str, Any] | str] = {
        "http://r1": ledger(**{"chat-c": [("r1", 300, True)]})
    }
    samples = ledger_samples(groups, ledgers, gauges(**{"chat-c": 2}))  # one bypassed the router
    c = samples["chat-c"]
    assert not isinstance(c, str) and c.load.pinned
    loads = [s.load for s in samples.values() if not isinstance(s, str)]
    assert plan_consolidation(loads).drained == []
    unpinned = [*loads[:2], PodLoad(**{**c.load.__dict__, "pinned": False})]
    assert plan_consolidation(unpinned).drained == ["chat-c"]


def load(name: str, *reqs: tuple[str, int, bool]) -> PodLoad:
    requests = tuple(PodRequest(rid, kv, kv - 5, 5, 100, "http://r1", movable)
                     for rid, kv, movable in reqs)  # fmt: skip
    return PodLoad(name, f"http://{name}", "node", 1600, requests)


def test_a_pod_holding_a_stream_that_cannot_move_is_never_emptied() -> None:
    pods = [load("chat-a", ("a", 900, True)), load("chat-b", ("b", 1000, True))]
    assert plan_consolidation([*pods, load("chat-c", ("c", 300, True))]).drained == ["chat-c"]
    stuck = load("chat-c", ("c", 300, True), ("d", 100, False))
    decision = plan_consolidation([*pods, stuck])
    assert decision.drained == []
    assert all(r.movable for r, _, _ in decision.moves)


def test_a_destination_re_prefills_no_more_than_the_recompute_budget() -> None:
    pods = [load("chat-a", ("a", 900, True)), load("chat-b", ("b", 1000, True)),
            load("chat-c", ("c", 300, True), ("d", 250, True))]  # fmt: skip
    assert plan_consolidation(pods, recompute_budget=550).drained == ["chat-c"]
    # 550 tokens to move, at most 400 per destination: both go to one pod (MELL packs), refused.
    decision = plan_consolidation(pods, recompute_budget=400)
    spent: dict[str, int] = {}
    for r, _, dst in decision.moves:
        spent[dst] = spent.get(dst, 0) + r.kv_tokens
    assert all(v <= 400 for v in spent.values())


def test_a_pass_through_the_router_moves_each_stream_via_its_replica() -> None:
    svc = {"apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
           "metadata": {"name": "chat", "namespace": "ns"},
           "spec": {"model": {"name": "meta-llama/Llama-2-7b-hf"}, "slo": {"tpotMs": 120},
                    "workload": {"requestRate": 1, "inputEdges": [1, 10], "outputEdges": [1, 10],
                                 "histogram": [[1]]},
                    "kvMigration": {"enabled": True}},
           "status": status(3).model_dump(by_alias=True, mode="json")}  # fmt: skip
    pages = {
        "http://r1/admin/inflight": json.dumps(ledger(**{
            "chat-a": [("r0", 900, True)], "chat-b": [("r1", 1000, True)],
            "chat-c": [("r2", 300, True)]})),
        "http://r2/admin/inflight": json.dumps(ledger(**{"chat-c": [("r0", 250, True)]})),
        **{f"http://{p}/metrics": metrics(running=n)
           for p, n in zip(ENGINES, (1, 1, 2), strict=True)},
    }  # fmt: skip
    calls: list[tuple[str, dict[str, Any]]] = []

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        calls.append((url, body))
        return {"outcome": "migrated"}

    writer = FakeWriter()
    deployment = {"metadata": {"name": "chat-a10g", "namespace": "ns",
                               "labels": {"gpumix.io/service": "chat", "gpumix.io/pool": "a10g"}},
                  "spec": {"replicas": 3}}  # fmt: skip
    loop = KvLoop(ClusterView(), writer, get=pages.__getitem__, post=post)
    pods = [*engine_pods(), router_pod("r1"), router_pod("r2")]
    loop.pass_service(svc, LLMService.model_validate({**svc, "status": None}), pods, [deployment])
    assert sorted((url, body["id"]) for url, body in calls) == [
        ("http://r1/admin/migrate", "r2"), ("http://r2/admin/migrate", "r0")]  # fmt: skip
    assert {body["to"] for _, body in calls} <= {"chat-a", "chat-b"}
    assert [name for _, name, _ in writer.pods] == ["chat-c"]
    assert writer.status[0]["kvScheduler"]["drainedPods"] == ["chat-c"]
