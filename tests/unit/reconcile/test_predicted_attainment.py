"""The planner pass predicts the attainment of the plan it applies (real joint plans, simulated)."""

import re
from typing import Any

import pytest

from gpumix.api import GPUPool, GPUProfile, LLMService, LLMServiceStatus
from gpumix.attainment import KV_HEADROOM
from gpumix.plan import Allocation
from gpumix.reconcile import cluster
from gpumix.reconcile import service as service_module
from gpumix.reconcile.cluster import plan_cluster
from gpumix.reconcile.service import ServiceDecision, predicted_attainment

from .test_cluster_pass import cond, pools, profiles, service, snap

KEY = ("default", "chat")


def planned(body: dict[str, Any]) -> ServiceDecision:
    return plan_cluster(snap(services=[body])).services[KEY]


def with_status(body: dict[str, Any], status: LLMServiceStatus) -> dict[str, Any]:
    return {**body, "status": status.model_dump(by_alias=True, mode="json", exclude_none=True)}


@pytest.fixture
def first_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The joint plan as first solved, without the attainment loop (test_attainment_loop.py)."""
    monkeypatch.setattr(cluster, "DERATING_ROUNDS", 0)


@pytest.mark.usefixtures("first_plans")
def test_plan_below_its_target_is_at_risk_naming_the_worst_pool_once() -> None:
    # The sample's joint plan (a mix: a100-80gb×1 + two cheaper types) loads each to its
    # MaxTput: below 99%.
    body = service("chat", 5.5, "t0")
    first = planned(body)
    status = first.status
    assert status.predicted_attainment is not None and status.predicted_attainment < 0.99
    assert len(status.allocation) >= 2
    per_pool = {a.pool: a.predicted_attainment for a in status.allocation}
    assert all(v is not None for v in per_pool.values()), per_pool
    worst = min(per_pool, key=lambda p: per_pool[p] or 0.0)
    state, reason, message = cond(status, "SLOAtRisk")
    assert (state, reason) == ("True", "BelowTarget")
    assert f"below the target 99%: {worst}: {100 * (per_pool[worst] or 0):.1f}% " in message
    assert [e.message for e in first.events if e.reason == "SLOAtRisk"] == [message]
    again = planned(with_status(body, status))  # next pass, same plan: same status, no event
    assert again.status.predicted_attainment == status.predicted_attainment
    assert cond(again.status, "SLOAtRisk") == (state, reason, message)
    assert "SLOAtRisk" not in [e.reason for e in again.events]


@pytest.mark.usefixtures("first_plans")
def test_plan_on_target_is_not_at_risk_until_the_target_is_raised() -> None:
    # a100-80gb×1 for 3 req/s at TPOT 80 ms: 99.8% predicted, its KV cache well within headroom.
    only = {"pools": ["a100-80gb"]}
    first = planned(service("chat", 3, "t0", slo={"tpotMs": 80}, **only))
    predicted = first.status.predicted_attainment
    assert predicted is not None and 0.99 <= predicted < 0.999
    state, reason, message = cond(first.status, "SLOAtRisk")
    assert (state, reason) == ("False", "OnTarget")
    assert message.endswith("meets the target 99%")
    assert "SLOAtRisk" not in [e.reason for e in first.events]
    higher = {"tpotMs": 80, "attainmentTarget": 0.999}
    raised = planned(with_status(service("chat", 3, "t0", slo=higher, **only), first.status))
    assert raised.status.predicted_attainment == first.status.predicted_attainment
    assert cond(raised.status, "SLOAtRisk")[:2] == ("True", "BelowTarget")
    assert [e.reason for e in raised.events] == ["SLOAtRisk"]


@pytest.mark.usefixtures("first_plans")
def test_a_plan_on_target_with_a_kv_cache_past_its_headroom_is_at_risk_naming_the_pool() -> None:
    # a10g×2 for 1.2 req/s: above 90% predicted, with the caches over half full on average.
    body = service("chat", 1.2, "t0", slo={"tpotMs": 120, "attainmentTarget": 0.9}, pools=["a10g"])
    status = planned(body).status
    assert status.predicted_attainment is not None and status.predicted_attainment >= 0.9
    state, reason, message = cond(status, "SLOAtRisk")
    assert (state, reason) == ("True", "KVCacheFull")
    assert "meets the target 90% only with KV caches too full to hold it" in message
    full = re.search(r"a10g: .*its KV cache (\d+)% full on average", message)
    assert full is not None and int(full.group(1)) > 100 * KV_HEADROOM


def test_a_prediction_that_fails_leaves_the_plan_applied_and_attainment_unknown() -> None:
    """The simulator has no shape for this model; the planner still plans it from profiles."""
    model = "example/unshaped-7b"
    body = service("chat", 5.5, "t0")
    body["spec"]["model"]["name"] = model
    profs = profiles()
    for p in profs:
        p["spec"]["model"] = model
    sd = plan_cluster(snap(services=[body], profiles=profs)).services[KEY]
    assert sd.apply
    assert sd.status.predicted_attainment is None
    assert all(a.predicted_attainment is None for a in sd.status.allocation)
    assert sd.status.derating is None  # nothing to derate by
    state, reason, message = cond(sd.status, "SLOAtRisk")
    assert (state, reason) == ("Unknown", "PredictionFailed")
    assert "no built-in shape for model 'example/unshaped-7b'" in message


def test_a_plan_with_no_replica_is_predicted_to_meet_nothing() -> None:
    """A budget of 0 $/h buys no replica: nothing to simulate, every request missed, said
    as such (not a prediction that failed, nor a traceback in the log)."""
    body = service("chat", 5.5, "t0")
    body["spec"]["budget"] = {"maxCostPerHour": 0}
    sd = planned(body)
    assert sd.target is not None and not any(sd.target.values())
    assert sd.status.predicted_attainment == 0
    state, reason, message = cond(sd.status, "SLOAtRisk")
    assert (state, reason) == ("True", "BelowTarget")
    assert message == "predicted attainment 0.00% is below the target 99%: no replica serves"


def test_no_traffic_is_not_simulated() -> None:
    sd = planned(service("chat", 0, "t0"))
    assert sd.status.predicted_attainment is None
    assert cond(sd.status, "SLOAtRisk")[:2] == ("False", "NoTraffic")


def test_an_unchanged_plan_is_simulated_once() -> None:
    """Only what the simulation reads is digested: not metadata (resourceVersion moves on
    every status write) nor the solve that produced the allocation."""
    svc = LLMService.model_validate(service("chat", 5.5, "t0"))
    gpu_pools = [GPUPool.model_validate(p) for p in pools()]
    profs = [GPUProfile.model_validate(p) for p in profiles()]
    sd = planned(service("chat", 5.5, "t0"))
    assert sd.target is not None
    alloc = Allocation.model_validate({
        "counts": sd.target, "share": sd.shares, "load": {}, "cost_per_hour": 0.0,
        "result": {"status": "optimal", "solver": "highs", "objective": None, "gap": None,
                   "seconds": 0.5},
    })  # fmt: skip
    first = predicted_attainment(svc, gpu_pools, profs, alloc)
    simulated = service_module._predictions.misses
    touched = svc.model_copy(update={"metadata": {**svc.metadata, "resourceVersion": "42"}})
    resolved = alloc.model_copy(update={"result": alloc.result.model_copy(update={"seconds": 1})})
    assert predicted_attainment(touched, gpu_pools, profs, resolved) == first
    assert service_module._predictions.misses == simulated
    fewer = alloc.model_copy(update={"counts": {**alloc.counts, "a10g": 1}})
    predicted_attainment(svc, gpu_pools, profs, fewer)
    assert service_module._predictions.misses == simulated + 1


def test_the_specs_digest_is_computed_once_per_pass_and_follows_every_spec() -> None:
    pool_objs = [GPUPool.model_validate(p) for p in pools()]
    profile_objs = [GPUProfile.model_validate(p) for p in profiles()]
    first = service_module._specs_digest(pool_objs, profile_objs)
    assert service_module._specs_digest(pool_objs, profile_objs) is first  # held, not redone
    again = service_module._specs_digest(list(pool_objs), list(profile_objs))
    assert again == first  # new lists of the same specs: the same digest
    changed = [pool_objs[0].model_copy(update={"spec": pool_objs[0].spec.model_copy(
        update={"price_per_gpu_hour": 0.123})}),
        *pool_objs[1:]]  # fmt: skip
    assert service_module._specs_digest(changed, profile_objs) != first
    fewer = profile_objs[1:]
    assert service_module._specs_digest(pool_objs, fewer) not in (first, again)
