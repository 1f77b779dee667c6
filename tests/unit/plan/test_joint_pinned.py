"""Services with every option pinned are planned on their own and the others in what they
leave (`gpumix.plan.joint.solve._around_pinned`): the same optimum as the whole instance."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_joint import QUICK, joint_instances
from test_joint_benders import _compact, _full_service

from gpumix.plan.joint import JointInstance, PoolLimit, ReplicaOption, ServiceDemand, solve_joint
from gpumix.plan.joint import solve as js


def _pinned(inst: JointInstance, which: list[bool]) -> JointInstance:
    """``inst`` served in full, the services ``which`` names pinned to what runs."""
    services = [
        s.model_copy(update={"options": [o.model_copy(update={"fixed": o.running})
                                         for o in s.options]}) if pin else s
        for s, pin in zip(inst.services, which, strict=True)
    ]  # fmt: skip
    return _full_service(inst).model_copy(update={"services": services, "allow_partial": False})


@QUICK
@given(joint_instances(), st.data())
def test_pinned_services_planned_apart_reach_the_whole_optimum(
    inst: JointInstance, data: st.DataObject
) -> None:
    which = data.draw(st.lists(st.booleans(), min_size=len(inst.services),
                               max_size=len(inst.services)))  # fmt: skip
    inst = _pinned(inst, which)
    assume(not any(s.unservable() for s in inst.services))  # raises without partial service
    _, whole = _compact(inst)
    plan = solve_joint(inst)
    if whole is None:
        assert plan is None
        return
    assert plan is not None
    assert plan.cost_per_hour + plan.churn_cost == pytest.approx(whole, rel=2e-4, abs=1e-6)


def _held_and_free(running: int = 0) -> JointInstance:
    """A service pinned to 3 replicas of ``a`` (``running`` of them up) and a free one, with
    pool ``a`` 4 GPUs and ``b`` unbounded."""
    held = ServiceDemand(name="held", rates=[[6.0]], churn_penalty=0.5, options=[
        ReplicaOption(name="a", pool="a", cost_per_hour=1.0, max_tput=[[2.0]], fixed=3,
                      running=running),
        ReplicaOption(name="b", pool="b", cost_per_hour=3.0, max_tput=[[2.0]], fixed=0),
    ])  # fmt: skip
    free = ServiceDemand(name="free", rates=[[4.0]], options=[
        ReplicaOption(name="a", pool="a", cost_per_hour=1.0, max_tput=[[2.0]]),
        ReplicaOption(name="b", pool="b", cost_per_hour=3.0, max_tput=[[2.0]]),
    ])  # fmt: skip
    return JointInstance(services=[held, free],
                         pools=[PoolLimit(name="a", gpus=4), PoolLimit(name="b")])  # fmt: skip


def test_a_free_service_is_planned_in_what_the_pinned_ones_leave() -> None:
    """Held on 3 of the pool's 4 GPUs, the pinned service leaves one to the free service, which
    needs two of them for its own cheapest plan: it takes the one left and the dearer pool for
    the rest; the message says the pinned one was planned on its own."""
    plan = solve_joint(_held_and_free())
    assert plan is not None
    assert plan.services["held"].counts == {"a": 3, "b": 0}
    assert plan.services["free"].counts == {"a": 1, "b": 1}
    assert plan.pool_gpus == {"a": 4, "b": 1}
    assert plan.cost_per_hour == pytest.approx(7.0)
    assert plan.result.message.startswith("1 services pinned, each on its own")


def test_a_short_free_service_names_the_whole_pool_as_full() -> None:
    """Three of the pool's four GPUs held by the pinned service, the free one gets the last
    and is short: its reason counts the pool's GPUs, not the one GPU left to it."""
    held = ServiceDemand(name="held", rates=[[6.0]], options=[
        ReplicaOption(name="a", pool="a", cost_per_hour=1.0, max_tput=[[2.0]], fixed=3),
    ])  # fmt: skip
    free = ServiceDemand(name="free", rates=[[4.0]], options=[
        ReplicaOption(name="a", pool="a", cost_per_hour=1.0, max_tput=[[2.0]]),
    ])  # fmt: skip
    inst = JointInstance(services=[held, free], pools=[PoolLimit(name="a", gpus=4)])
    plan = solve_joint(inst)
    assert plan is not None
    assert plan.services["free"].counts == {"a": 1}
    assert plan.services["free"].unserved_rate == pytest.approx(2.0)
    assert plan.services["free"].reasons == ["pool a is full (4/4 GPUs planned)"]
    assert plan.services["held"].reasons == []


def test_a_pinned_service_is_solved_once_whatever_runs() -> None:
    """A rollout changes what runs, not a pinned service's plan: the second solve finds it
    and its split kept (no new one-service solve, no new split), with the replicas it adds and
    removes counted against what runs now."""
    js._own.clear()
    js._splits.clear()
    before = solve_joint(_held_and_free(running=0))
    misses, splits = js._own.misses, js._splits.misses
    after = solve_joint(_held_and_free(running=2))
    assert before is not None and after is not None
    assert js._own.misses == misses  # the pinned one kept; the free one's instance is the same
    assert js._splits.misses == splits  # and so are both splits
    assert after.services["held"].counts == before.services["held"].counts == {"a": 3, "b": 0}
    assert after.services["held"].share == before.services["held"].share
    assert (before.services["held"].added, after.services["held"].added) == (3, 1)
    assert after.services["free"].counts == {"a": 1, "b": 1}
