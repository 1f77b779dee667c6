"""The joint plan decomposed by contention (#19): services whose own plans do not touch an
overflowing pool keep them, the others are solved jointly, and the plan costs what the full
joint solve finds."""

from __future__ import annotations

import pytest
from plan_helpers import fleet, full, squeezed_fleet

from gpumix.plan.joint import (
    contention,
    solve_joint,
    validate_joint,
)
from gpumix.plan.joint import solve as js


@pytest.mark.parametrize("seed", [1, 2])
def test_only_the_services_that_contend_are_solved_jointly_at_the_full_optimum(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inst = fleet(js.DECOMPOSE_FROM + 2, seed)
    monkeypatch.setattr(js, "_priced", lambda *_: None)  # the search before this one
    plan = solve_joint(inst, gap_rel=0.0)
    assert plan is not None and validate_joint(inst, plan) == []
    assert plan.result.message.startswith("decomposed: ")
    evens = (len(inst.services) + 1) // 2
    assert f"{evens} of {len(inst.services)} services contend for cheap" in plan.result.message
    assert plan.pool_gpus["cheap"] <= 6
    assert plan.cost_per_hour + plan.churn_cost == pytest.approx(full(inst, monkeypatch), rel=1e-6)
    assert plan.result.status == "optimal" and plan.result.gap == pytest.approx(0, abs=1e-6)


def test_past_contenders_max_the_decomposition_is_not_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At 94-189 contenders the decomposition stopped at its limit far off the bound and took
    # 330-420 MB (#19): past the cap the fleet keeps the floor instead.
    inst = fleet(js.DECOMPOSE_FROM + 2, 1)
    evens = (len(inst.services) + 1) // 2
    monkeypatch.setattr(js, "_priced", lambda *_: None)
    tried: list[int] = []
    inner = js._full_service

    def counted(part: js.JointInstance, *args: object, **kwargs: object) -> object:
        tried.append(len(part.services))
        return inner(part, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(js, "_full_service", counted)
    monkeypatch.setattr(js, "CONTENDERS_MAX", evens - 1)
    plan = solve_joint(inst, gap_rel=0.0)
    assert plan is not None and validate_joint(inst, plan) == []
    assert not plan.result.message.startswith("decomposed: ")
    assert evens not in tried
    assert plan.cost_per_hour + plan.churn_cost >= full(inst, monkeypatch) - 1e-6
    monkeypatch.setattr(js, "CONTENDERS_MAX", evens)
    assert js._by_service(inst, js._own_plans(inst, "highs", 30, 0.0) or [], "highs", 30,
                          0.0) is not None  # fmt: skip


def test_a_pool_the_contended_services_spill_into_pulls_its_users_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `mid` holds about what the odd services take on their own: the even ones, pushed out of
    # `cheap`, overflow it, so the odd services join the joint solve too.
    squeezed, mid = squeezed_fleet()
    monkeypatch.setattr(js, "_priced", lambda *_: None)  # the search before this one
    plan = solve_joint(squeezed, gap_rel=0.0)
    assert plan is not None and validate_joint(squeezed, plan) == []
    assert plan.pool_gpus["mid"] <= mid
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
