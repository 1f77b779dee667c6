"""The joint validator finds each kind of violation it checks, and only that one.

``solve_joint`` already validates what it returns, so checking its plans again proves nothing;
here every case starts from a plan written by hand, breaks one property (in the plan or in the
instance it is checked against) and keeps the rest consistent: loads, costs, unserved rates and
pool totals are recomputed for the altered counts and shares.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpumix.plan.joint import (
    JointAllocation,
    JointInstance,
    Objective,
    PoolLimit,
    ReplicaOption,
    ServiceAllocation,
    ServiceDemand,
    validate_joint,
)
from gpumix.plan.result import SolveResult

Share = dict[str, list[list[float]]]


def service(**kw: object) -> ServiceDemand:
    """20 and 4 req/s in buckets (0, 0) and (0, 1), none in (0, 2); ``b`` cannot serve (0, 1)."""
    return ServiceDemand.model_validate({
        "name": "s", "rates": [[20.0, 4.0, 0.0]], "options": [
            ReplicaOption(name="a", pool="a", cost_per_hour=2.0, max_tput=[[10.0, 4.0, 10.0]]),
            ReplicaOption(name="b", pool="b", cost_per_hour=1.5, max_tput=[[6.0, 0.0, 6.0]]),
        ], **kw,
    })  # fmt: skip


def instance(service_kw: dict[str, object] | None = None, **kw: object) -> JointInstance:
    pools = kw.pop("pools", [PoolLimit(name="a", gpus=4), PoolLimit(name="b", gpus=4)])
    return JointInstance.model_validate(
        {"services": [service(**(service_kw or {}))], "pools": pools, **kw}
    )


INST = instance()
HALF: Share = {"a": [[0.5, 1.0, 0.0]], "b": [[0.5, 0.0, 0.0]]}
"""Bucket (0, 0) split evenly: load 1 + 1 on ``a`` (2 replicas), 1.67 on ``b`` (2 replicas)."""


def plan(
    share: Share,
    counts: dict[str, int],
    unserved: list[list[float]] | None = None,
    reasons: list[str] | None = None,
    inst: JointInstance = INST,
) -> JointAllocation:
    """A min-cost plan whose loads, costs, unserved rate and pool totals agree with it."""
    svc = inst.services[0]
    unserved = unserved or [[0.0] * 3]
    load = dict.fromkeys(counts, 0.0)
    for o, option in enumerate(svc.options):
        for j, fraction in enumerate(share.get(option.name, [[]])[0]):
            slice_load = svc.slice_load(o, (0, j))
            if fraction and slice_load is not None:
                load[option.name] += fraction * svc.slice_factor * slice_load
    cost = sum(n * svc.options[[o.name for o in svc.options].index(k)].cost_per_hour
               for k, n in counts.items())  # fmt: skip
    alloc = ServiceAllocation(
        counts=counts, share=share, unserved=unserved, load=load, cost_per_hour=cost,
        total_rate=svc.total_rate,
        unserved_rate=sum(u * r for u, r in zip(unserved[0], svc.rates[0], strict=True)),
        added=sum(counts.values()), removed=0, reasons=reasons or [],
    )  # fmt: skip
    result = SolveResult(status="optimal", solver="highs", objective=cost, gap=0.0, seconds=0.0)
    return JointAllocation(
        objective=Objective.MIN_COST, services={svc.name: alloc},
        pool_gpus={o.pool: counts.get(o.name, 0) for o in svc.options},
        cost_per_hour=cost, churn_cost=0.0, result=result, stages=[result],
    )  # fmt: skip


GOOD = plan(HALF, {"a": 2, "b": 2})


def altered(share: Share, **cells: float) -> Share:
    """``share`` with ``option_j=value`` cells of row 0 replaced."""
    out = {name: [list(row) for row in rows] for name, rows in share.items()}
    for key, value in cells.items():
        name, j = key.split("_")
        out[name][0][int(j)] = value
    return out


def with_service(allocation: JointAllocation, **changes: object) -> JointAllocation:
    service = allocation.services["s"].model_copy(update=changes)
    return allocation.model_copy(update={"services": {"s": service}})


def test_a_valid_plan_passes() -> None:
    assert validate_joint(INST, GOOD) == []
    partial = plan(altered(HALF, a_1=0.5), {"a": 2, "b": 2}, [[0.0, 0.5, 0.0]], ["pool a"])
    assert validate_joint(INST, partial) == []


def _pinned_a() -> ReplicaOption:
    return service().options[0].model_copy(update={"fixed": 3})


SHORT = [[0.0, 0.5, 0.0]]
"""Half of bucket (0, 1) unserved (2 req/s)."""
Case = Callable[[], tuple[JointInstance, JointAllocation]]
CASES: dict[str, tuple[Case, str]] = {
    "a service missing": (
        lambda: (INST, GOOD.model_copy(update={"services": {}})),
        "plan covers services []",
    ),
    "an option missing": (
        lambda: (INST, with_service(GOOD, counts={"a": 2})),
        "s: options ['a'] != ['a', 'b']",
    ),
    "negative count": (
        lambda: (INST, plan({"a": [[1.0, 1.0, 0.0]], "b": [[0.0] * 3]}, {"a": 3, "b": -1})),
        "s/b: negative count -1",
    ),
    "pinned count changed": (
        lambda: (instance({"options": [_pinned_a(), service().options[1]]}), GOOD),
        "s/a: pinned at 3, planned 2",
    ),
    "negative share": (
        lambda: (INST, plan(altered(HALF, a_0=1.25, b_0=-0.25), {"a": 4, "b": 1})),
        "s/b bucket (0, 0): negative share",
    ),
    "traffic where the SLO is missed": (
        lambda: (INST, plan(altered(HALF, a_1=0.75, b_1=0.25), {"a": 2, "b": 2})),
        "s/b bucket (0, 1): routed where SLO is missed",
    ),
    "load above the replicas": (
        lambda: (INST, plan(HALF, {"a": 1, "b": 2})),
        "s/a: load 2 exceeds 1 replicas",
    ),
    "reported load wrong": (
        lambda: (INST, with_service(GOOD, load={"a": 5.0, "b": GOOD.services["s"].load["b"]})),
        "s/a: reported load 5.0 != 2.0",
    ),
    "bucket not fully placed": (
        lambda: (INST, plan(altered(HALF, a_1=0.5), {"a": 2, "b": 2})),
        "s bucket (0, 1): 2 of its 4 req/s placed on options with replicas or reported unserved",
    ),
    "traffic on a bucket without any": (
        lambda: (INST, plan(altered(HALF, a_2=0.5), {"a": 2, "b": 2})),
        "s bucket (0, 2): traffic on an empty bucket",
    ),
    "unserved without allow_partial": (
        lambda: (
            instance(allow_partial=False),
            plan(altered(HALF, a_1=0.5), {"a": 2, "b": 2}, SHORT, ["pool a is full"]),
        ),
        "s: unserved traffic without allow_partial",
    ),
    "unserved rate wrong": (
        lambda: (
            INST,
            with_service(
                plan(altered(HALF, a_1=0.5), {"a": 2, "b": 2}, SHORT, ["pool a is full"]),
                unserved_rate=1.0,
            ),
        ),
        "s: unserved 1.0 != 2.0",
    ),
    "unserved without a reason": (
        lambda: (INST, plan(altered(HALF, a_1=0.5), {"a": 2, "b": 2}, SHORT)),
        "s: unserved traffic without a reason",
    ),
    "service cost wrong": (
        lambda: (INST, with_service(GOOD, cost_per_hour=1.0)),
        "s: cost 1.0 != 7.0",
    ),
    "over the service budget": (
        lambda: (instance({"budget_per_hour": 6.0}), GOOD),
        "s: 7.0000 $/h over its budget 6.0",
    ),
    "above maxReplicas": (
        lambda: (instance({"max_replicas": 3}), GOOD),
        "s: more than maxReplicas 3",
    ),
    "below minReplicas without a reason": (
        lambda: (instance({"min_replicas": 5}), GOOD),
        "s: fewer than minReplicas without a reason",
    ),
    "pool total wrong": (
        lambda: (INST, GOOD.model_copy(update={"pool_gpus": {"a": 3, "b": 2}})),
        "pool a: reported 3 GPUs",
    ),
    "pool over its GPUs": (
        lambda: (instance(pools=[PoolLimit(name="a", gpus=1), PoolLimit(name="b")]), GOOD),
        "pool a: 2 GPUs > 1 free",
    ),
    "over the cluster budget": (
        lambda: (instance(budget_per_hour=6.0), GOOD),
        "cluster: 7.0000 $/h over the budget 6.0",
    ),
    "total cost wrong": (
        lambda: (INST, GOOD.model_copy(update={"cost_per_hour": 8.0})),
        "cost_per_hour 8.0 != 7.0",
    ),
}
"""Each kind of violation :func:`validate_joint` checks (traffic left on an option with no
replica: ``test_joint_tiny_rates``)."""


@pytest.mark.parametrize("case", list(CASES))
def test_the_validator_reports_exactly_the_violation(case: str) -> None:
    build, expected = CASES[case]
    inst, allocation = build()
    assert validate_joint(inst, allocation) == [expected]


def test_a_bucket_on_an_option_with_no_replica_is_not_placed() -> None:
    """Shares sum to 1, but part of bucket (0, 0) sits on ``b``, which has no replica."""
    problems = validate_joint(INST, plan(HALF, {"a": 2, "b": 0}))
    assert problems == [
        "s/b: load 1.66666667 exceeds 0 replicas",
        "s bucket (0, 0): 10 of its 20 req/s placed on options with replicas or reported "
        "unserved (b holds 0.5, with no replica)",
    ]
