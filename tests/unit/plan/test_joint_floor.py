"""The joint plan is never dearer than planning the services in turn (#19's floor): when the
joint search stops at its time limit on a dearer plan, or with none, the in-turn plan is kept."""

from __future__ import annotations

import random
from typing import Any

import pytest
from plan_helpers import fleet as fleet_with_scarce_pool

from gpumix.plan.joint import (
    JointInstance,
    PoolLimit,
    ReplicaOption,
    ServiceDemand,
    solve_joint,
    solve_sequential,
    validate_joint,
)
from gpumix.plan.joint import solve as js
from gpumix.plan.joint.solve import _at_least_floor

POOLS = {"l4": 0.8, "a10g": 1.0, "a100": 3.7, "h100": 4.4}  # $/h per replica
SPEED = {"l4": 1.0, "a10g": 1.3, "a100": 4.5, "h100": 6.5}  # × a small replica's req/s


def fleet(services: int, seed: int, squeeze: float = 0.6) -> JointInstance:
    """`services` services of 3 × 4 buckets over four pools: the two cheap ones hold `squeeze`
    of what the services alone would take there, so the services compete for them; the two
    dear ones have no limit, so every service can be served."""
    rng = random.Random(seed)
    demands = []
    for i in range(services):
        rates = [[rng.choice([0.0, rng.uniform(0.2, 6.0)]) for _ in range(4)] for _ in range(3)]
        rates[0][0] += 1.0
        options = [
            ReplicaOption(
                name=pool, pool=pool, cost_per_hour=price,
                max_tput=[[SPEED[pool] * (3.0 - r) * (1.5 - 0.25 * c) * rng.uniform(0.8, 1.2)
                           for c in range(4)] for r in range(3)],
            )
            for pool, price in POOLS.items()
        ]  # fmt: skip
        demands.append(ServiceDemand(name=f"s{i}", rates=rates, options=options, slice_factor=8))
    free = JointInstance(services=demands, pools=[PoolLimit(name=p) for p in POOLS])
    alone = solve_joint(free)
    assert alone is not None
    limits = [
        PoolLimit(name=p, gpus=int(squeeze * alone.pool_gpus[p]) if POOLS[p] < 2 else None)
        for p in POOLS
    ]
    return free.model_copy(update={"pools": limits, "allow_partial": False})


@pytest.mark.parametrize("time_limit", [0.01, 0.05, 30.0])
def test_a_time_boxed_joint_plan_is_never_dearer_than_planning_in_turn(time_limit: float) -> None:
    inst = fleet(12, seed=3)
    in_turn = solve_sequential(inst)
    assert in_turn.served == len(inst.services)  # else there is no floor to hold
    plan = solve_joint(inst, time_limit_s=time_limit)  # 0.01 s: the joint search stops early
    assert plan is not None
    assert all(a.unserved_rate == 0 for a in plan.services.values())
    assert plan.cost_per_hour + plan.churn_cost <= in_turn.cost_per_hour + 1e-6


def test_a_dearer_joint_plan_gives_way_to_the_in_turn_plan() -> None:
    inst = fleet(4, seed=5)
    best = solve_joint(inst)
    assert best is not None
    dear = best.model_copy(update={"cost_per_hour": best.cost_per_hour * 3})
    kept = _at_least_floor(inst, dear, "highs", 30.0, 0.0)
    in_turn = solve_sequential(inst)
    assert kept.result.message.startswith("the services planned in turn")
    assert kept.cost_per_hour == pytest.approx(in_turn.cost_per_hour)
    assert validate_joint(inst, kept) == []
    # A joint plan at least as cheap as planning in turn is kept as it is.
    assert _at_least_floor(inst, best, "highs", 30.0, 0.0).services == best.services


def test_at_fleet_size_a_search_out_of_time_plans_in_turn_without_the_full_joint_ilp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the priced search and the contention decomposition find nothing in time, the full
    joint ILP (minutes and hundreds of MB at 200 services) is not tried: the services are
    planned in turn, and the search goes on from its cache in the next pass."""
    inst = fleet_with_scarce_pool(js.DECOMPOSE_FROM + 2, 8, cheap=3)
    full_service = js._full_service

    def one_service_only(instance: JointInstance, *args: Any, **kwargs: Any) -> Any:
        assert len(instance.services) == 1, "the full joint ILP was solved"
        return full_service(instance, *args, **kwargs)

    monkeypatch.setattr(js, "_fleet", lambda *args: None)  # as when time runs out
    monkeypatch.setattr(js, "_full_service", one_service_only)
    plan = solve_joint(inst)
    in_turn = solve_sequential(inst)
    assert plan is not None
    assert plan.result.message.startswith("the services planned in turn")
    assert plan.cost_per_hour == pytest.approx(in_turn.cost_per_hour)
    assert validate_joint(inst, plan) == []


def running(inst: JointInstance, counts: dict[str, dict[str, int]]) -> JointInstance:
    """``inst`` with ``counts`` (per service, per option) running, and a churn penalty."""

    def with_running(s: ServiceDemand) -> ServiceDemand:
        options = [o.model_copy(update={"running": counts[s.name][o.name]}) for o in s.options]
        return s.model_copy(update={"churn_penalty": 0.5, "options": options})

    services = [with_running(s) for s in inst.services]
    return inst.model_copy(update={"services": services})


def test_a_search_out_of_time_keeps_the_plan_that_runs_when_it_still_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted operator's cold caches let the priced search run out of time at fleet size:
    the joint plan that runs (made by the operator before it) still serves and fits, and is
    kept (nothing moves) rather than replaced by the dearer services planned in turn."""
    base = fleet_with_scarce_pool(js.DECOMPOSE_FROM + 2, 8, cheap=3)
    made = solve_joint(base)
    assert made is not None
    inst = running(base, {n: dict(a.counts) for n, a in made.services.items()})
    in_turn = solve_sequential(inst)
    assert in_turn.cost_per_hour > made.cost_per_hour + 1e-6  # else nothing to tell apart
    monkeypatch.setattr(js, "_fleet", lambda *args: None)  # as when time runs out
    plan = solve_joint(inst)
    assert plan is not None
    assert plan.result.message.startswith("the plan that runs kept")
    assert {n: a.counts for n, a in plan.services.items()} == {
        n: a.counts for n, a in made.services.items()
    }
    assert all(a.added == a.removed == 0 for a in plan.services.values())
    assert plan.churn_cost == 0
    assert validate_joint(inst, plan) == []


def test_running_replicas_that_no_longer_serve_are_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Demand grew past what runs: the plan that runs leaves traffic unserved, so the services
    are planned in turn (and every one is served)."""
    base = fleet_with_scarce_pool(js.DECOMPOSE_FROM + 2, 8, cheap=3)
    made = solve_joint(base)
    assert made is not None
    grown = base.model_copy(update={"services": [
        s.model_copy(update={"rates": [[3 * r for r in row] for row in s.rates]})
        if i == 0 else s
        for i, s in enumerate(base.services)
    ]})  # fmt: skip
    inst = running(grown, {n: dict(a.counts) for n, a in made.services.items()})
    monkeypatch.setattr(js, "_fleet", lambda *args: None)
    plan = solve_joint(inst)
    assert plan is not None
    assert plan.result.message.startswith("the services planned in turn")
    assert all(a.unserved_rate == 0 for a in plan.services.values())
    assert plan.services["s0"].added > 0
    assert validate_joint(inst, plan) == []


def test_running_replicas_over_a_shrunk_pool_are_not_kept() -> None:
    """The plan that runs no longer fits: a pool lost GPUs under it."""
    base = fleet_with_scarce_pool(js.DECOMPOSE_FROM + 2, 8, cheap=3)
    made = solve_joint(base)
    assert made is not None and made.pool_gpus["cheap"] > 0
    inst = running(base, {n: dict(a.counts) for n, a in made.services.items()})
    assert js._running_plan(inst, "highs", 30.0, 0.0) is not None
    shrunk = inst.model_copy(update={"pools": [
        p.model_copy(update={"gpus": made.pool_gpus["cheap"] - 1}) if p.name == "cheap" else p
        for p in inst.pools
    ]})  # fmt: skip
    assert js._running_plan(shrunk, "highs", 30.0, 0.0) is None
