"""Routable services (``ServiceDemand.routable``): each input row split as one, as the router
that sees the prompt but not the answer's length executes it (issue #14).

Properties on the random joint instances of ``test_joint`` with every service routable: every
plan (compact, Benders, balanced) gives each bucket of a row the same share on each option and
the same unserved share, and costs no less than the free split when both serve everything (it
is a restriction of it).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from test_joint import QUICK, joint_instances

from gpumix.plan.joint import JointInstance, ReplicaOption, ServiceDemand, solve_joint
from gpumix.plan.joint.result import JointAllocation


def _routable(inst: JointInstance, on: bool = True) -> JointInstance:
    services = [s.model_copy(update={"routable": on}) for s in inst.services]
    return inst.model_copy(update={"services": services})


def _split_by_group(inst: JointInstance, plan: JointAllocation) -> None:
    for service in inst.services:
        alloc = plan.services[service.name]
        for buckets, options in service.groups():
            (i0, j0), names = buckets[0], [o.name for o in service.options]
            for b in buckets:
                assert alloc.unserved[b[0]][b[1]] == pytest.approx(alloc.unserved[i0][j0])
                for o, name in enumerate(names):
                    here = alloc.share[name][b[0]][b[1]]
                    assert here == pytest.approx(alloc.share[name][i0][j0], abs=1e-9)
                    assert o in options or here == 0


@QUICK
@given(joint_instances())
def test_routable_plans_split_each_row_as_one(inst: JointInstance) -> None:
    inst = _routable(inst)
    for decompose in (True, False):
        plan = solve_joint(inst, decompose=decompose)
        assert plan is not None
        _split_by_group(inst, plan)


@QUICK
@given(joint_instances())
def test_a_routable_plan_costs_no_less_than_the_free_split(inst: JointInstance) -> None:
    """Nothing running, no churn penalty: the objective is the cost alone."""
    services = [
        s.model_copy(update={
            "churn_penalty": 0.0,
            "options": [o.model_copy(update={"running": 0}) for o in s.options],
        })
        for s in inst.services
    ]  # fmt: skip
    inst = inst.model_copy(update={"services": services})
    routable, free = solve_joint(_routable(inst)), solve_joint(_routable(inst, on=False))
    assert routable is not None and free is not None
    if any(a.unserved_rate > 0 for p in (routable, free) for a in p.services.values()):
        return  # degradation stages: less served may cost less
    if routable.result.status != "optimal" or free.result.status != "optimal":
        return
    assert routable.cost_per_hour >= free.cost_per_hour - 1e-6


def _service(tput: dict[str, list[list[float]]], routable: bool = True) -> ServiceDemand:
    return ServiceDemand(
        name="s", rates=[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], routable=routable,
        options=[ReplicaOption(name=n, pool="p", cost_per_hour=1.0, max_tput=t)
                 for n, t in tput.items()],
    )  # fmt: skip


def test_groups_are_rows_on_the_options_that_serve_all_of_them() -> None:
    # Row 0: a serves both buckets, b only the first; row 1: no option serves all three.
    service = _service({
        "a": [[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]],
        "b": [[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]],
    })  # fmt: skip
    assert [tuple(g) for g in service.groups()] == [
        (((0, 0), (0, 1)), (0,)),
        (((1, 0),), (0, 1)), (((1, 1),), (1,)), (((1, 2),), (0,)),
    ]  # fmt: skip
    free = _service({"a": [[1.0] * 3] * 2}, routable=False)
    assert [g.buckets for g in free.groups()] == [((b,)) for b in free.buckets_with_traffic()]
