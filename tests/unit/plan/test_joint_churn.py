"""A plan rolling out is kept while its running replicas move towards it (#19): on random
instances, the plan kept is as cheap, penalty included, as solving the moved instance again."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_joint import joint_instances

from gpumix.plan.joint import JointInstance, solve_joint
from gpumix.plan.joint.churn import rebased, running, toward, without_running
from gpumix.plan.joint.solve import LOOSE_TOL
from proptest import budget


def moved(
    instance: JointInstance, counts: dict[str, dict[str, int]], steps: list[float]
) -> JointInstance:
    """``instance`` with each option's running replicas moved ``step`` of the way to ``counts``."""
    it = iter(steps)
    services = []
    for s in instance.services:
        options = []
        for o in s.options:
            goal = counts[s.name][o.name]
            now = o.running + round(next(it) * (goal - o.running))
            options.append(o.model_copy(update={"running": now}))
        services.append(s.model_copy(update={"options": options}))
    return instance.model_copy(update={"services": services})


@budget(25)
@given(joint_instances(), st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=40, max_size=40))
def test_a_plan_kept_while_running_moves_towards_it_is_as_cheap_as_solving_again(
    inst: JointInstance, steps: list[float]
) -> None:
    inst = inst.model_copy(update={
        "services": [s.model_copy(update={"churn_penalty": 0.5}) for s in inst.services]
    })  # fmt: skip
    plan = solve_joint(inst, time_limit_s=20)
    assert plan is not None
    assume(plan.result.status == "optimal")
    counts = {name: alloc.counts for name, alloc in plan.services.items()}
    later = moved(inst, counts, steps)
    assert without_running(later) == without_running(inst)
    assert toward(running(inst), plan, later)
    kept = rebased(plan, later)
    again = solve_joint(later, time_limit_s=20)
    assert again is not None
    for name, alloc in kept.services.items():
        assert alloc.counts == plan.services[name].counts
        # Within the slack a stage's optimum gets when the next stage needs it (LOOSE_TOL).
        unserved = again.services[name].unserved_rate
        assert alloc.unserved_rate == pytest.approx(unserved, abs=LOOSE_TOL)
    # The penalty counted against what runs now, as a solve of ``later`` reads its plan back.
    penalty = sum(
        0.5 * o.cost_per_hour * max(0, counts[s.name][o.name] - o.running)
        for s in later.services
        for o in s.options
        if o.fixed is None
    )
    assert kept.churn_cost == pytest.approx(penalty)
    cheapest = again.cost_per_hour + again.churn_cost
    assert kept.cost_per_hour + kept.churn_cost <= cheapest + 1e-6 * max(1.0, cheapest)


def test_running_that_moved_past_the_plan_or_away_from_it_is_not_towards_it() -> None:
    inst = JointInstance.model_validate({
        "services": [{"name": "s", "rates": [[4.0]], "churn_penalty": 0.5, "options": [
            {"name": "a", "pool": "a", "cost_per_hour": 1.0, "max_tput": [[2.0]], "running": 1},
            {"name": "b", "pool": "b", "cost_per_hour": 3.0, "max_tput": [[4.0]], "running": 1},
        ]}],
        "pools": [{"name": "a"}, {"name": "b"}],
    })  # fmt: skip
    plan = solve_joint(inst, time_limit_s=20)
    assert plan is not None
    assert plan.services["s"].counts == {"a": 2, "b": 0}
    before = running(inst)
    assert toward(before, plan, inst)

    def at(a: int, b: int) -> JointInstance:
        return moved(inst, {"s": {"a": a, "b": b}}, [1.0, 1.0])

    assert toward(before, plan, at(2, 0))  # the rollout finished
    assert toward(before, plan, at(2, 1))  # a grew first, b not yet removed
    assert not toward(before, plan, at(3, 0))  # past the plan
    assert not toward(before, plan, at(0, 1))  # away from it
    assert not toward(before, plan, at(1, 2))
    kept = rebased(plan, at(2, 1))
    assert (kept.services["s"].added, kept.services["s"].removed) == (0, 1)
    assert kept.churn_cost == 0.0 < plan.churn_cost == pytest.approx(0.5)
    assert kept.result.objective == pytest.approx(plan.result.objective - 0.5)
    assert rebased(kept, at(2, 0)).result.message == kept.result.message  # said once
