"""The routing core: split, prediction, ledger and pod choice (pure, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumix.render.routing import routing_document
from gpumix.route import (
    BucketSplit,
    Flight,
    Ledger,
    OutputPredictor,
    PoolFullError,
    RoutingCore,
    RoutingTable,
    histogram_prior,
)
from gpumix.route.engines import ENGINE_URL_ANNOTATION, ready_engines
from proptest import budget

EDGES_IN, EDGES_OUT = [1, 100, 1000], [1, 50, 500]


def table(shares: dict[str, list[list[float]]], replicas: dict[str, int]) -> RoutingTable:
    return RoutingTable.from_plan(EDGES_IN, EDGES_OUT, shares, replicas)


@budget(100)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5).filter(lambda w: sum(w) > 0))
def test_split_keeps_every_pool_close_to_its_share_at_every_step(weights: list[float]) -> None:
    names = [f"p{k}" for k in range(len(weights))]
    shares = {n: [[w, 0.0], [0.0, 0.0]] for n, w in zip(names, weights, strict=True)}
    split = BucketSplit(table(shares, dict.fromkeys(names, 1)), names)
    total = sum(weights)
    counts = dict.fromkeys(names, 0)
    for n in range(1, 301):
        pool = split.next_pool(0, 0)
        assert pool is not None
        counts[pool] += 1
        for name, w in zip(names, weights, strict=True):
            assert -2 < counts[name] - n * w / total < 1 + 1e-9, (n, counts)


def test_split_falls_back_to_the_row_then_replicas_and_skips_missing_pools() -> None:
    shares = {"a": [[1.0, 0.0], [0.0, 0.0]], "b": [[0.0, 0.0], [0.0, 1.0]]}
    t = table(shares, {"a": 1, "b": 3})
    split = BucketSplit(t, ["a", "b"])
    assert split.weights(0, 1) == [1.0, 0.0]  # no traffic planned in (0, 1): row 0's split
    assert split.weights(1, 0) == [0.0, 1.0]
    only_a = BucketSplit(t, ["a"])  # b's pods are not ready: a takes its buckets
    assert only_a.next_pool(1, 1) == "a"
    assert BucketSplit(t, []).next_pool(0, 0) is None
    zero = table({"a": [[0.0, 0.0], [0.0, 0.0]], "b": [[0.0, 0.0], [0.0, 0.0]]}, {"a": 1, "b": 3})
    assert BucketSplit(zero, ["a", "b"]).weights(0, 0) == [0.25, 0.75]


def test_predictor_starts_from_the_prior_learns_the_mean_and_respects_max_tokens() -> None:
    prior = histogram_prior(EDGES_OUT, [[1.0, 0.0], [0.0, 0.0]])
    assert prior == [25.5, (25.5 + 275) / 2]
    p = OutputPredictor(prior)
    assert p.predict(0) == 25.5
    assert p.predict(0, max_tokens=10) == 10
    for out in (300, 500):
        p.observe(0, out)
    assert p.predict(0) == 400
    assert p.predict(1) == prior[1]


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "progress", "remove"]),
        st.integers(0, 9),
        st.sampled_from(["x", "y"]),
        st.integers(1, 500),
    ),
    max_size=60,
)


@budget(100)
@given(ops)
def test_ledger_totals_are_the_sum_of_what_is_in_flight(
    steps: list[tuple[str, int, str, int]],
) -> None:
    ledger = Ledger()
    for op, k, pod, n in steps:
        rid = f"r{k}"
        if op == "add" and ledger.get(rid) is None:
            ledger.add(rid, Flight(pod=pod, prompt=n, predicted_output=10.0))
        elif op == "progress":
            ledger.progress(rid, n)
        elif op == "remove":
            ledger.remove(rid)
        for p in ("x", "y"):
            flights = ledger.on(p).values()
            assert ledger.tokens(p) == sum(f.prompt + f.generated for f in flights)
            assert ledger.requests(p) == len(flights)


def test_ledger_refuses_a_request_twice() -> None:
    ledger = Ledger()
    ledger.add("r", Flight(pod="x", prompt=1, predicted_output=1.0))
    with pytest.raises(ValueError, match="already in flight"):
        ledger.add("r", Flight(pod="x", prompt=1, predicted_output=1.0))


def test_core_picks_the_pod_with_fewest_tokens_in_the_planned_pool() -> None:
    t = table({"a": [[1.0, 1.0], [1.0, 1.0]]}, {"a": 2})
    core = RoutingCore(t, {"a": ["a-0", "a-1"]}, [25.0, 25.0])
    first = core.route("r1", 500)
    assert first is not None and first.pod == "a-0" and first.input_bucket == 1
    second = core.route("r2", 10)
    assert second is not None and second.pod == "a-1"
    core.progress("r2", 600)  # a-1 now holds 610 tokens, a-0 500
    third = core.route("r3", 10)
    assert third is not None and third.pod == "a-0"
    core.finish("r1", 40)
    assert core.ledger.tokens("a-0") == 10
    assert core.predictor.predict(1) == 40  # r1's answer taught bucket 1


def test_core_follows_a_new_plan_and_keeps_requests_in_flight() -> None:
    t = table({"a": [[1.0, 1.0], [1.0, 1.0]], "b": [[0.0, 0.0], [0.0, 0.0]]}, {"a": 1, "b": 1})
    core = RoutingCore(t, {"a": ["a-0"], "b": ["b-0"]}, [25.0, 25.0])
    assert {core.route(f"r{k}", 10).pool for k in range(5)} == {"a"}  # type: ignore[union-attr]
    moved = table({"a": [[0.0, 0.0], [0.0, 0.0]], "b": [[1.0, 1.0], [1.0, 1.0]]}, {"a": 1, "b": 1})
    core.update(moved, {"a": ["a-0"], "b": ["b-0"]})
    assert {core.route(f"s{k}", 10).pool for k in range(5)} == {"b"}  # type: ignore[union-attr]
    assert core.ledger.requests("a-0") == 5
    core.update(moved, {"a": ["a-0"]})  # b's pod went away: its buckets fall back to a
    decision = core.route("t", 10)
    assert decision is not None and decision.pool == "a"


def test_a_retry_goes_to_another_pod_of_the_pool_then_to_the_next_pool_by_share() -> None:
    t = table({"a": [[0.7, 0.7], [0.7, 0.7]], "b": [[0.3, 0.3], [0.3, 0.3]]}, {"a": 2, "b": 1})
    core = RoutingCore(t, {"a": ["a-0", "a-1"], "b": ["b-0"]}, [25.0, 25.0], max_inflight=1)
    first = core.route("r", 10)
    assert first is not None and first.pool == "a"
    counted = core.split._counts[first.input_bucket, first.output_bucket]
    retry = core.route("r", 10, exclude=[first.pod])
    assert retry is not None and retry.pool == "a" and retry.pod != first.pod
    assert core.split._counts[first.input_bucket, first.output_bucket] == counted  # not again
    assert len(core.ledger) == 1 and core.ledger.requests(first.pod) == 0
    last = core.route("r", 10, exclude=["a-0", "a-1"])
    assert last is not None and last.pod == "b-0"
    assert core.route("r", 10, exclude=["a-0", "a-1", "b-0"]) is None


def test_a_pool_whose_pods_are_all_at_the_limit_is_full() -> None:
    t = table({"a": [[1.0, 1.0], [1.0, 1.0]], "b": [[0.0, 0.0], [0.0, 0.0]]}, {"a": 2, "b": 1})
    core = RoutingCore(t, {"a": ["a-0", "a-1"], "b": ["b-0"]}, [25.0, 25.0], max_inflight=2)
    pods = [core.route(f"r{k}", 10) for k in range(4)]
    assert sorted(d.pod for d in pods if d is not None) == ["a-0", "a-0", "a-1", "a-1"]
    with pytest.raises(PoolFullError) as full:
        core.route("r4", 10)  # b has room, but the plan gives it none of this bucket
    assert full.value.pool == "a"
    core.finish("r0", 5)
    assert core.route("r5", 10) is not None


def pod(name: str, ready: str = "True", phase: str = "Running", **meta: Any) -> dict[str, Any]:
    labels = {"gpumix.io/service": "chat", "gpumix.io/pool": "a10g", **meta.pop("labels", {})}
    return {
        "metadata": {"name": name, "labels": labels, **meta},
        "status": {
            "phase": phase,
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_only_ready_engine_pods_of_the_service_take_requests() -> None:
    pods = [
        pod("ok"),
        pod("tp2", labels={"gpumix.io/gpus-per-replica": "2"}),
        pod("sim", annotations={ENGINE_URL_ANNOTATION: "http://127.0.0.1:9/"}),
        pod("unready", ready="False"),
        pod("pending", phase="Pending"),
        pod("leaving", deletionTimestamp="2026-01-01T00:00:00Z"),
        pod("other", labels={"gpumix.io/service": "code"}),
        pod("router", labels={"gpumix.io/pool": ""}),
    ]
    assert ready_engines(pods, "chat") == {
        "a10g": {"ok": "http://10.0.0.1:8000", "sim": "http://127.0.0.1:9"},
        "a10g-tp2": {"tp2": "http://10.0.0.1:8000"},
    }


def test_the_operator_routing_document_is_a_routing_table(chat) -> None:  # type: ignore[no-untyped-def]
    from gpumix.problem import PoolChoice  # noqa: PLC0415

    rows, cols = chat.spec.workload.shape
    shares = {
        "a10g": [[0.5] * cols for _ in range(rows)],
        "l4": [[0.0] * cols for _ in range(rows)],
    }
    choices = {
        p: PoolChoice(pool=p, gpu_type=p, gpus_per_replica=1, price_per_gpu_hour=1.0, profile="x")
        for p in shares
    }
    doc = routing_document("chat", chat.spec, shares, {"a10g": 2, "l4": 0}, choices)
    parsed = RoutingTable.model_validate(doc)
    wl = chat.spec.workload
    expected = RoutingTable.from_plan(wl.input_edges, wl.output_edges, shares, {"a10g": 2, "l4": 0})
    assert set(parsed.pools) == set(expected.pools) == {"a10g"}
    assert parsed.pools["a10g"].share == expected.pools["a10g"].share
    assert parsed.pools["a10g"].replicas == 2


def test_a_table_whose_share_does_not_fit_the_grid_is_rejected() -> None:
    with pytest.raises(ValueError, match="not 2x2"):
        table({"a": [[1.0]]}, {"a": 1})
