"""The joint plan at fleet size by priced pools (#19): each service's price envelope is its
cheapest plan at every price, the bound is below the joint optimum, with one scarce pool the
master's choice is the joint optimum, and a pass after one change solves only that service."""

from __future__ import annotations

import random

import pytest
from plan_helpers import fleet, full, squeezed_fleet

from gpumix.plan.joint import (
    JointInstance,
    PoolLimit,
    ReplicaOption,
    ServiceDemand,
    pricing,
    solve_joint,
    validate_joint,
)
from gpumix.plan.joint import solve as js

GAP = 0.0
LIMIT = 30.0


def scarce(services: int, seed: int, cheap: int) -> JointInstance:
    """Services that each want several GPUs of the scarce pool (one-GPU replicas for small
    requests, two-GPU ones for large), `mid` and `dear` taking what it cannot. Whether a plan
    keeps all, some or none of its share of the scarce pool is what the choice is about."""
    rng = random.Random(seed)
    demands = []
    for i in range(services):
        options = [
            ReplicaOption(name="c1", pool="cheap", cost_per_hour=1.0,
                          max_tput=[[rng.uniform(0.9, 1.1), 0.3]]),
            ReplicaOption(name="c2", pool="cheap", gpus_per_replica=2, cost_per_hour=2.0,
                          max_tput=[[2.2, rng.uniform(1.0, 1.4)]]),
            ReplicaOption(name="mid", pool="mid", cost_per_hour=1.5, max_tput=[[1.0, 0.3]]),
            ReplicaOption(name="dear", pool="dear", cost_per_hour=3.2,
                          max_tput=[[2.0, rng.uniform(1.6, 2.0)]]),
        ]  # fmt: skip
        rates = [[rng.uniform(2.0, 9.0), rng.uniform(0.0, 1.5)]]
        demands.append(ServiceDemand(name=f"s{i}", rates=rates, options=options))
    pools = [PoolLimit(name="cheap", gpus=cheap), PoolLimit(name="mid"), PoolLimit(name="dear")]
    return JointInstance(services=demands, pools=pools, allow_partial=False)


def own_plans(inst: JointInstance) -> list[js.JointAllocation]:
    parts = js._own_plans(inst, "highs", LIMIT, GAP)
    assert parts is not None
    return parts


def solve_one(alone: JointInstance) -> js.JointAllocation | None:
    return js._own_plan(alone.model_dump_json(), "highs", LIMIT, GAP)


def priced_optimum(inst: JointInstance, i: int, t: float, unit: dict[str, float]) -> float:
    """v_s(t) solved directly: the cheapest plan of service i with its pools priced at t."""
    plan = solve_joint(pricing.priced_alone(inst, i, {p: t * u for p, u in unit.items()}))
    assert plan is not None and plan.result.status == "optimal"
    col = pricing.column(inst, i, plan)
    return col.objective + t * pricing.weight(col, unit)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_envelope_is_every_services_cheapest_plan_at_every_price(seed: int) -> None:
    inst = scarce(8, seed, cheap=20)
    parts = own_plans(inst)
    unit = pricing.units(inst, {"cheap"})
    assert unit == {"cheap": 1.0}
    for i in range(len(inst.services)):
        env = pricing.envelope(inst, i, parts[i], unit, solve_one)
        lines = [(c.objective, pricing.weight(c, unit)) for c in env.at.values()]
        for t in [k / 40 for k in range(61)] + [10.0]:  # pieces here lie within 0.05-1.3
            direct = priced_optimum(inst, i, t, unit)
            assert min(f + t * w for f, w in lines) == pytest.approx(direct, rel=1e-6, abs=1e-6)
            assert env.lower(t, unit) <= direct + 1e-6


@pytest.mark.parametrize(("seed", "cheap"), [(1, 11), (2, 27), (3, 41), (4, 57)])
def test_with_one_scarce_pool_the_choice_is_the_joint_optimum_and_the_bound_is_below_it(
    seed: int, cheap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inst = scarce(js.DECOMPOSE_FROM + 4, seed, cheap=cheap)
    parts = own_plans(inst)
    out = pricing.solve_priced(inst, parts, solve_one, solver="highs", limit=LIMIT, gap=GAP)
    assert out is not None
    optimum = full(inst, monkeypatch)
    objective = sum(p.cost_per_hour + p.churn_cost for p in out.plans)
    assert objective == pytest.approx(optimum, rel=1e-6)
    own = sum(p.cost_per_hour + p.churn_cost for p in parts)
    assert own - 1e-6 <= out.bound <= optimum + 1e-6
    assert out.bound > own + 1e-6  # pricing the pool proves more than the plans alone
    assert sum(p.pool_gpus["cheap"] for p in out.plans) <= cheap
    plan = solve_joint(inst, gap_rel=GAP)
    assert plan is not None and validate_joint(inst, plan) == []
    assert plan.result.message.startswith("priced cheap: ")
    assert plan.cost_per_hour + plan.churn_cost == pytest.approx(optimum, rel=1e-6)


def test_plans_that_keep_part_of_their_share_fill_the_scarce_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Five services of 3 replicas each, 7 cheap GPUs: a service's envelope is all cheap or all
    # mid (they tie at the crossing), so without plans capped in between two GPUs stay idle.
    options = [
        ReplicaOption(name="c1", pool="cheap", cost_per_hour=1.0, max_tput=[[1.0]]),
        ReplicaOption(name="mid", pool="mid", cost_per_hour=1.5, max_tput=[[1.0]]),
    ]
    inst = JointInstance(
        services=[ServiceDemand(name=f"s{i}", rates=[[3.0]], options=options) for i in range(5)],
        pools=[PoolLimit(name="cheap", gpus=7), PoolLimit(name="mid")],
        allow_partial=False,
    )
    out = pricing.solve_priced(inst, own_plans(inst), solve_one, solver="highs", limit=LIMIT,
                               gap=GAP)  # fmt: skip
    assert out is not None
    assert sum(p.pool_gpus["cheap"] for p in out.plans) == 7
    assert sum(p.cost_per_hour for p in out.plans) == pytest.approx(7 * 1.0 + 8 * 1.5)
    assert sum(p.cost_per_hour for p in out.plans) == pytest.approx(full(inst, monkeypatch))


def test_a_pool_the_priced_services_spill_into_is_priced_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    squeezed, mid = squeezed_fleet()
    parts = own_plans(squeezed)
    out = pricing.solve_priced(squeezed, parts, solve_one, solver="highs", limit=LIMIT, gap=GAP)
    assert out is not None
    assert out.message.startswith("priced cheap, mid: ")
    assert sum(p.pool_gpus["mid"] for p in out.plans) <= mid
    objective = sum(p.cost_per_hour + p.churn_cost for p in out.plans)
    optimum = full(squeezed, monkeypatch)
    assert out.bound <= optimum + 1e-6 <= objective + 2e-6


def test_after_one_service_changes_only_its_plans_are_solved_again() -> None:
    inst = fleet(js.DECOMPOSE_FROM + 4, 7, cheap=3)
    solved: list[str] = []

    def counted(alone: JointInstance) -> js.JointAllocation | None:
        before = js._own.misses
        plan = solve_one(alone)
        if js._own.misses > before:
            solved.append(alone.services[0].name)
        return plan

    first = pricing.solve_priced(
        inst, own_plans(inst), counted, solver="highs", limit=LIMIT, gap=GAP
    )
    assert first is not None
    assert len(set(solved)) > 2  # the cold search solved many services' priced plans
    rates = [[r * 1.8 for r in row] for row in inst.services[2].rates]
    services = list(inst.services)
    services[2] = services[2].model_copy(update={"rates": rates})
    changed = inst.model_copy(update={"services": services})
    solved.clear()
    again = pricing.solve_priced(
        changed, own_plans(changed), counted, solver="highs", limit=LIMIT, gap=GAP
    )
    assert again is not None
    assert set(solved) == {"s2"}


def test_no_time_left_gives_no_plan() -> None:
    inst = fleet(js.DECOMPOSE_FROM + 2, 8, cheap=3)
    parts = own_plans(inst)
    assert pricing.solve_priced(inst, parts, solve_one, solver="highs", limit=0.0, gap=GAP) is None


@pytest.mark.parametrize(
    ("own", "caps"),
    [(0, []), (1, [0]), (3, [0, 1, 2]), (8, list(range(8))), (16, list(range(0, 16, 2)))],
)
def test_cap_counts(own: int, caps: list[int]) -> None:
    assert pricing.cap_counts(own) == caps


def test_after_one_service_changes_only_the_splits_that_moved_are_derived_again() -> None:
    """`solve._balanced` caches each service's split: a re-solve after one change derives again
    only what the change moved, and a cached split is the one derived afresh."""
    inst = fleet(js.DECOMPOSE_FROM + 4, 7, cheap=3)
    first = solve_joint(inst, time_limit_s=LIMIT, gap_rel=GAP)
    assert first is not None
    rates = [[r * 1.8 for r in row] for row in inst.services[2].rates]
    services = list(inst.services)
    services[2] = services[2].model_copy(update={"rates": rates})
    changed = inst.model_copy(update={"services": services})
    before = js._splits.misses
    again = solve_joint(changed, time_limit_s=LIMIT, gap_rel=GAP)
    assert again is not None
    moved = sum(first.services[n] != again.services[n] for n in again.services)
    assert 1 <= js._splits.misses - before <= moved < len(services)
    js._splits.clear()
    fresh = solve_joint(changed, time_limit_s=LIMIT, gap_rel=GAP)
    assert fresh is not None
    assert fresh.services == again.services
