"""The joint plan decomposed by contention (#19): services whose own plans do not touch an
overflowing pool keep them, the others are solved jointly, and the plan costs what the full
joint solve finds."""

from __future__ import annotations

import random

import pytest

from gpumix.plan.joint import (
    JointInstance,
    PoolLimit,
    ReplicaOption,
    ServiceDemand,
    contention,
    solve_joint,
    validate_joint,
)
from gpumix.plan.joint import solve as js

PRICE = {"cheap": 1.0, "mid": 1.6, "dear": 3.0}
SPEED = {"cheap": 1.0, "mid": 1.2, "dear": 2.0}


def fleet(services: int, seed: int, *, mid: int | None = None, cheap: int = 6) -> JointInstance:
    """Even services may use all three pools, odd ones only `mid` and `dear`: only the even
    ones compete for the scarce `cheap` pool, unless `mid` is scarce too."""
    rng = random.Random(seed)
    demands = []
    for i in range(services):
        rates = [[rng.uniform(0.5, 3.0), rng.uniform(0.0, 2.0)]]
        usable = list(PRICE) if i % 2 == 0 else ["mid", "dear"]
        options = [
            ReplicaOption(
                name=p, pool=p, cost_per_hour=PRICE[p],
                max_tput=[[SPEED[p] * rng.uniform(0.9, 1.1), SPEED[p] * 0.7]],
            )
            for p in usable
        ]  # fmt: skip
        demands.append(ServiceDemand(name=f"s{i}", rates=rates, options=options))
    pools = [PoolLimit(name="cheap", gpus=cheap), PoolLimit(name="mid", gpus=mid),
             PoolLimit(name="dear")]  # fmt: skip
    return JointInstance(services=demands, pools=pools, allow_partial=False)


def full(inst: JointInstance, monkeypatch: pytest.MonkeyPatch) -> float:
    """The full joint solve's objective (the path small fleets take)."""
    with monkeypatch.context() as m:
        m.setattr(js, "DECOMPOSE_FROM", 10**6)
        plan = solve_joint(inst, gap_rel=0.0)
    assert plan is not None and plan.result.status == "optimal"
    return plan.cost_per_hour + plan.churn_cost


@pytest.mark.parametrize("seed", [1, 2])
def test_only_the_services_that_contend_are_solved_jointly_at_the_full_optimum(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inst = fleet(js.DECOMPOSE_FROM + 2, seed)
    plan = solve_joint(inst, gap_rel=0.0)
    assert plan is not None and validate_joint(inst, plan) == []
    assert plan.result.message.startswith("decomposed: ")
    evens = (len(inst.services) + 1) // 2
    assert f"{evens} of {len(inst.services)} services contend for cheap" in plan.result.message
    assert plan.pool_gpus["cheap"] <= 6
    assert plan.cost_per_hour + plan.churn_cost == pytest.approx(full(inst, monkeypatch), rel=1e-6)
    assert plan.result.status == "optimal" and plan.result.gap == pytest.approx(0, abs=1e-6)


def test_a_pool_the_contended_services_spill_into_pulls_its_users_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `mid` holds about what the odd services take on their own: the even ones, pushed out of
    # `cheap`, overflow it, so the odd services join the joint solve too.
    inst = fleet(js.DECOMPOSE_FROM + 2, 3, cheap=2)
    free = inst.model_copy(update={"pools": [p.model_copy(update={"gpus": None})
                                             for p in inst.pools]})  # fmt: skip
    alone = solve_joint(free)
    assert alone is not None
    squeezed = inst.model_copy(update={"pools": [
        PoolLimit(name="cheap", gpus=2), PoolLimit(name="mid", gpus=alone.pool_gpus["mid"] + 1),
        PoolLimit(name="dear"),
    ]})  # fmt: skip
    plan = solve_joint(squeezed, gap_rel=0.0)
    assert plan is not None and validate_joint(squeezed, plan) == []
    assert plan.pool_gpus["mid"] <= alone.pool_gpus["mid"] + 1
    assert plan.cost_per_hour + plan.churn_cost == pytest.approx(
        full(squeezed, monkeypatch), rel=1e-6
    )


def test_contended_names_the_users_of_overflowing_pools_and_the_bound_holds() -> None:
    inst = fleet(6, 4, cheap=1)
    own = [
        solve_joint(inst.model_copy(update={"services": [s], "pools": [
            p.model_copy(update={"gpus": None}) for p in inst.pools]}))
        for s in inst.services
    ]  # fmt: skip
    assert all(p is not None for p in own)
    parts = [p for p in own if p is not None]
    allocs = {n: a for p in parts for n, a in p.services.items()}
    assert contention.overflowing(inst, allocs) == {"cheap"}
    assert not contention.fits(inst, allocs)
    users = {i for i, s in enumerate(inst.services) if allocs[s.name].counts.get("cheap", 0)}
    assert contention.contended(inst, allocs, set()) == users
    assert contention.contended(inst, allocs, {5}) == users | {5}
    joint = solve_joint(contention.restricted(inst, users), gap_rel=0.0)
    assert joint is not None
    optimum = solve_joint(inst, gap_rel=0.0)
    assert optimum is not None
    bound = contention.bound(inst, parts, users, joint)
    assert bound <= optimum.cost_per_hour + optimum.churn_cost + 1e-6
    assert bound >= sum(p.cost_per_hour + p.churn_cost for p in parts) - 1e-6
