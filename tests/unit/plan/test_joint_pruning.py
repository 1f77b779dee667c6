"""Dominated-option pruning (Jiang App. G (i)) never changes the optimum: not when
``maxReplicas`` binds (swapping one large replica for several small ones adds replicas), not
with a ``minReplicas`` floor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_joint import QUICK, joint_instances
from test_joint_benders import _full_service

from gpumix.plan.joint import (
    JointInstance,
    PoolLimit,
    ReplicaOption,
    ServiceDemand,
    solve_joint,
)
from gpumix.plan.joint import model as jm
from gpumix.plan.solvers import run


def tp(max_replicas: int | None) -> JointInstance:
    """10 req/s: two tp1 replicas (0.9 $/h, 5 req/s each) beat one tp2 (2 $/h, 10 req/s)."""
    service = ServiceDemand(
        name="s", rates=[[10.0]], max_replicas=max_replicas, options=[
            ReplicaOption(name="a", pool="a", cost_per_hour=0.9, max_tput=[[5.0]]),
            ReplicaOption(name="a-tp2", pool="a", gpus_per_replica=2, cost_per_hour=2.0,
                          max_tput=[[10.0]]),
        ],
    )  # fmt: skip
    return JointInstance(services=[service], pools=[PoolLimit(name="a")])


@pytest.mark.parametrize("decompose", [True, False])
def test_max_replicas_binding_keeps_the_large_replica(decompose: bool) -> None:
    free = solve_joint(tp(None), decompose=decompose)
    assert free is not None and free.services["s"].counts == {"a": 2, "a-tp2": 0}
    inst = tp(1)
    plan = solve_joint(inst, decompose=decompose)
    assert plan is not None
    assert plan.services["s"].counts == {"a": 0, "a-tp2": 1}
    assert plan.services["s"].unserved_rate == 0
    assert plan.cost_per_hour == pytest.approx(2.0)


def test_an_option_is_not_pruned_for_one_pinned_at_zero() -> None:
    """``a`` alone dominates ``a-tp2``, but pinned at zero it cannot take its replicas: the
    plan is one ``a-tp2``, all served (pruned, it was nothing, all unserved)."""
    inst = tp(None)
    small, big = inst.services[0].options
    pinned = inst.services[0].model_copy(
        update={"options": [small.model_copy(update={"fixed": 0}), big]}
    )
    plan = solve_joint(inst.model_copy(update={"services": [pinned], "allow_partial": True}))
    assert plan is not None
    assert plan.services["s"].counts == {"a": 0, "a-tp2": 1}
    assert plan.services["s"].unserved_rate == 0


@st.composite
def capped(draw: st.DrawFn) -> JointInstance:
    """Random services whose tp2/tp4 options are often dominated by tp1 (near-linear scaling),
    under small ``maxReplicas`` caps and ``minReplicas`` floors, some options pinned."""
    services = []
    for s in range(draw(st.integers(1, 2))):
        options = []
        for pool in ("p0", "p1")[: draw(st.integers(1, 2))]:
            per_gpu = draw(st.sampled_from([1.0, 2.5, 4.0]))
            price = draw(st.sampled_from([0.5, 1.0, 2.0]))
            for k in (1, 2, 4):
                scaling = draw(st.sampled_from([0.8, 1.0])) if k > 1 else 1.0
                options.append(ReplicaOption(
                    name=f"{pool}-tp{k}", pool=pool, gpus_per_replica=k, cost_per_hour=price * k,
                    max_tput=[[per_gpu * k * scaling, draw(st.sampled_from([0.0, per_gpu * k]))]],
                    fixed=draw(st.sampled_from([None, None, None, 0, 1])),
                ))  # fmt: skip
        services.append(ServiceDemand(
            name=f"s{s}", rates=[[draw(st.sampled_from([1.0, 6.0, 15.0])), 0.0]],
            options=options, slice_factor=draw(st.integers(1, 2)),
            max_replicas=draw(st.one_of(st.none(), st.integers(1, 4))),
            min_replicas=draw(st.integers(0, 4)),
        ))  # fmt: skip
    pools = [PoolLimit(name=p, gpus=draw(st.one_of(st.none(), st.integers(4, 16))))
             for p in ("p0", "p1")]  # fmt: skip
    return JointInstance(services=services, pools=pools)


def _optimum(inst: JointInstance, prune: bool) -> float | None:
    model = jm.build(inst, fractional=False, partial=False, prune=prune)
    model.problem.setObjective(jm.cost_expr(inst, model) + jm.churn_expr(inst, model))
    result = run(model.problem, "highs", 30.0, 0.0)
    return result.objective if result.status == "optimal" else None


@QUICK
@given(st.one_of(capped(), joint_instances().map(_full_service)))
def test_pruning_keeps_the_full_service_optimum(inst: JointInstance) -> None:
    pruned, full = _optimum(inst, True), _optimum(inst, False)
    if full is None:
        assert pruned is None
        return
    assert pruned == pytest.approx(full, rel=2e-4, abs=1e-6)
