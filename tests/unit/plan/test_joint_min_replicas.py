"""``spec.minReplicas`` in the joint plan: a floor held at the least cost when it fits, a reason
(never an infeasible solve) when pools or budgets cannot hold it, traffic served first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_joint import QUICK, fig2, joint_instances, option
from test_joint_benders import _full_service, _with_compact

from gpumix.plan.joint import (
    JointInstance,
    Objective,
    PoolLimit,
    ServiceDemand,
    solve_joint,
    solve_sequential,
)


def one(min_replicas: int, pools: dict[str, int | None], **kw: object) -> JointInstance:
    """20 req/s on a (10 req/s, 2 $/h) or b (3 req/s, 1.5 $/h): 2 × a without a floor."""
    service = ServiceDemand(
        name="s", rates=[[20.0]], options=[option("a", 2.0, [[10.0]]), option("b", 1.5, [[3.0]])],
        min_replicas=min_replicas,
    )  # fmt: skip
    return JointInstance(
        services=[service], pools=[PoolLimit(name=n, gpus=g) for n, g in pools.items()], **kw
    )


def with_floor(inst: JointInstance, floors: list[int]) -> JointInstance:
    """Service ``i`` gets ``floors[i]`` as its minReplicas (floors beyond the services unused)."""
    floored = [
        service.model_copy(update={"min_replicas": m})
        for service, m in zip(inst.services, floors, strict=False)
    ]
    return inst.model_copy(update={"services": floored})


def test_min_replicas_adds_the_cheapest_replicas_above_the_load() -> None:
    free = solve_joint(one(0, {"a": None, "b": None}))
    assert free is not None and free.services["s"].counts == {"a": 2, "b": 0}
    # Four replicas carrying 20 req/s: 2a + 2b (7.0 $/h) beats 1a + 4b (8.0) and 3a + 1b (7.5).
    plan = solve_joint(one(4, {"a": None, "b": None}))
    assert plan is not None and plan.result.status == "optimal"
    assert plan.services["s"].counts == {"a": 2, "b": 2}
    assert plan.cost_per_hour == pytest.approx(7.0)
    assert plan.services["s"].unserved_rate == 0 and plan.services["s"].reasons == []


def test_floor_held_by_benders_and_the_compact_model_at_the_same_cost() -> None:
    inst = with_floor(fig2(), [0, 4]).model_copy(
        update={"pools": [PoolLimit(name="a", gpus=3), PoolLimit(name="b", gpus=6)]}
    )
    decomposed = solve_joint(inst)
    compact = solve_joint(inst, decompose=False)
    assert decomposed is not None and compact is not None
    assert decomposed.result.message.startswith("Benders")
    assert len(decomposed.stages) == 1  # the floor fits: no degradation stage
    for plan in (decomposed, compact):
        assert sum(plan.services["m2"].counts.values()) >= 4
        assert all(a.unserved_rate == 0 and not a.reasons for a in plan.services.values())
    assert decomposed.cost_per_hour == pytest.approx(compact.cost_per_hour)


@pytest.mark.parametrize("objective", list(Objective))
@pytest.mark.parametrize("allow_partial", [True, False])
def test_unreachable_floor_still_plans_and_says_why(
    objective: Objective, allow_partial: bool
) -> None:
    inst = one(5, {"a": 2, "b": 2}, allow_partial=allow_partial)
    plan = solve_joint(inst, objective)
    assert plan is not None
    assert plan.services["s"].counts == {"a": 2, "b": 2}  # as many as the pools hold
    assert plan.services["s"].reasons == [
        "minReplicas 5 not reachable (4 planned): pool a is full (2/2 GPUs planned), "
        "pool b is full (2/2 GPUs planned)"
    ]


def test_traffic_is_served_before_a_floor() -> None:
    # fig2's pools hold exactly what serves both services: m2's floor gets nothing more.
    inst = with_floor(fig2(), [0, 4])
    plan = solve_joint(inst)
    assert plan is not None
    assert all(a.unserved_rate == 0 for a in plan.services.values())
    assert plan.services["m2"].counts == {"a": 1, "b": 1}
    assert plan.services["m2"].reasons[0].startswith("minReplicas 4 not reachable (2 planned)")
    seq = solve_sequential(inst)  # no partial service: m2 does not fit what m1 leaves, floor or not
    assert seq.services["m2"] is None


def test_budget_caps_a_floor() -> None:
    plan = solve_joint(one(4, {"a": None, "b": None}, budget_per_hour=6.5))
    assert plan is not None and plan.services["s"].unserved_rate == 0
    assert plan.cost_per_hour <= 6.5
    (reason,) = plan.services["s"].reasons
    assert reason.startswith("minReplicas 4 not reachable (3 planned): cluster budget reached")


@QUICK
@given(joint_instances(), st.lists(st.integers(0, 5), min_size=3, max_size=3))
def test_benders_holds_floors_as_the_compact_model(inst: JointInstance, floors: list[int]) -> None:
    """Full service with every floor as a hard row: the Benders master and the compact model
    agree (same optimum, or both infeasible)."""
    inst = with_floor(_full_service(inst), floors)
    solved = _with_compact(inst)
    if solved is None:
        return
    out, compact = solved
    assert out.result.objective == pytest.approx(compact, rel=2e-4, abs=1e-6)
    for si, service in enumerate(inst.services):
        assert sum(y for (s, _), y in out.counts.items() if s == si) >= service.min_replicas
