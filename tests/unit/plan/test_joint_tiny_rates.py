"""No traffic below the solver's tolerance goes missing (joint planner): the issue's input as a
joint service, min-cost (Benders and the compact model) and max-throughput, and tiny and huge
buckets side by side against an exact optimum."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from plan_helpers import HUGE_RATES, TINY_RATES
from test_plan_tiny_rates import tiny_long_inputs as single_service

from gpumix.plan.joint import (
    JointInstance,
    Objective,
    PoolLimit,
    ReplicaOption,
    ServiceDemand,
    makespan,
    solve_joint,
    validate_joint,
)
from gpumix.plan.result import SolverName
from gpumix.plan.validate import LOAD_CHECK_TOL
from proptest import budget


def tiny_long_inputs(
    h100_cost: float = 4.37, long_inputs: tuple[float, float] = (2e-7, 4e-8), **kw: object
) -> JointInstance:
    """The issue's Mélange input as one service, a pool per GPU type, the H100 at
    ``h100_cost`` $/h (``kw``: the instance's other fields, e.g. pool limits and a budget)."""
    inst = single_service(long_inputs)
    options = [
        ReplicaOption(
            name=gpu.name, pool=gpu.name, max_tput=gpu.max_tput,
            cost_per_hour=h100_cost if gpu.name == "H100" else gpu.cost_per_hour,
        )
        for gpu in inst.gpus
    ]  # fmt: skip
    service = ServiceDemand(
        name="svc", rates=inst.rates, options=options, slice_factor=inst.slice_factor
    )
    pools = kw.pop("pools", [PoolLimit(name=o.name) for o in options])
    return JointInstance.model_validate({"services": [service], "pools": pools, **kw})


@pytest.mark.parametrize(
    ("decompose", "solver"), [(True, "highs"), (False, "highs"), (False, "cbc")]
)
def test_tiny_buckets_only_the_h100_serves_get_an_h100(decompose: bool, solver: SolverName) -> None:
    plan = solve_joint(tiny_long_inputs(), decompose=decompose, solver=solver)
    assert plan is not None and plan.result.status == "optimal"
    alloc = plan.services["svc"]
    assert alloc.counts == {"A10G": 0, "L4": 0, "A100-80GB": 0, "H100": 1}
    assert plan.cost_per_hour == pytest.approx(4.37)
    assert alloc.share["H100"][2] == pytest.approx([1.0, 1.0])
    assert alloc.unserved_rate == 0


@pytest.mark.parametrize("long_inputs", [(2e-7, 4e-8), (2e-8, 4e-9), (1e-10, 1e-10)])
def test_max_throughput_buys_the_h100_the_tiny_buckets_need(
    long_inputs: tuple[float, float],
) -> None:
    """At 9 $/h the H100 is the dearest way to throughput: within 11.01 $/h (and no A10G or
    L4), three A100s would serve 3.2× the demand, but none of them serves the long inputs. One
    H100 serves all of it 2.45 times over (makespan 0.408 s per second of demand)."""
    pools = [PoolLimit(name=n, gpus=0) for n in ("A10G", "L4")]
    pools += [PoolLimit(name=n, gpus=4) for n in ("A100-80GB", "H100")]
    inst = tiny_long_inputs(9.0, long_inputs, pools=pools, budget_per_hour=11.01)
    plan = solve_joint(inst, Objective.MAX_THROUGHPUT)
    assert plan is not None and plan.throughput_scale is not None
    alloc = plan.services["svc"]
    assert alloc.counts == {"A10G": 0, "L4": 0, "A100-80GB": 0, "H100": 1}
    # Jiang's makespan of the plan, with the loads as they are: the model rounds the tiny
    # buckets' loads up (capacity_loads), which costs it a few millionths of α.
    service = inst.services[0]
    assert makespan(service, alloc.counts, alloc.share) == pytest.approx(
        1 / plan.throughput_scale, rel=1e-5
    )
    assert plan.throughput_scale == pytest.approx(1 / 0.40833, rel=1e-4)


def test_the_plan_that_left_them_out_fails_validation() -> None:
    """Its H100 load (9e-9 replicas) hides inside any absolute load tolerance."""
    inst = tiny_long_inputs()
    plan = solve_joint(inst)
    assert plan is not None
    alloc = plan.services["svc"]
    zero = [[0.0, 0.0] for _ in range(3)]
    share = {name: [list(r) for r in zero] for name in alloc.counts}
    share["A100-80GB"][:2] = [[1.0, 1.0], [1.0, 1.0]]
    share["H100"][2] = [1.0, 1.0]
    service = inst.services[0]
    load = dict.fromkeys(alloc.counts, 0.0)
    for o, option in enumerate(service.options):
        for i, row in enumerate(share[option.name]):
            for j, fraction in enumerate(row):
                slice_load = service.slice_load(o, (i, j))
                if fraction and slice_load is not None:
                    load[option.name] += fraction * service.slice_factor * slice_load
    counts = {"A10G": 0, "L4": 0, "A100-80GB": 1, "H100": 0}
    old = alloc.model_copy(update={"counts": counts, "share": share, "load": load,
                                   "cost_per_hour": 3.67})  # fmt: skip
    broken = plan.model_copy(update={
        "services": {"svc": old}, "cost_per_hour": 3.67,
        "pool_gpus": {"A10G": 0, "L4": 0, "A100-80GB": 1, "H100": 0},
    })  # fmt: skip
    assert validate_joint(inst, broken) == [
        "svc bucket (2, 0): 0 of its 2e-07 req/s placed on options with replicas or reported "
        "unserved (H100 holds 1, with no replica)",
        "svc bucket (2, 1): 0 of its 4e-08 req/s placed on options with replicas or reported "
        "unserved (H100 holds 1, with no replica)",
    ]


# ----------------------------------------------- tiny and huge side by side, against exact costs


def exact_cost(service: ServiceDemand, slack: float = 0.0) -> float:
    """Cheapest replicas of two options that carry ``service`` with any traffic split, in
    exact arithmetic: a replica for every option with traffic, however little; ``y ≥ 1``
    replicas carry a load up to ``y·(1 + slack)`` (``slack`` > 0: a lower bound on what a
    solver may buy within its tolerance). Option ``a`` must serve every bucket.

    For ``y_a`` replicas of ``a``, the least load left to ``b`` is a fractional knapsack:
    buckets only ``a`` serves go to ``a``, then the others in order of ``a``'s relative speed.
    """
    a, b = service.options
    room = 1 + Fraction(slack)
    only_a, either = Fraction(0), []
    for i, j in service.buckets_with_traffic():
        rate = Fraction(service.rates[i][j])
        load_a = rate / Fraction(a.max_tput[i][j])
        if b.max_tput[i][j] > 0:
            either.append((load_a, rate / Fraction(b.max_tput[i][j])))
        else:
            only_a += load_a
    either.sort(key=lambda loads: loads[0] / loads[1])
    most_a = math.ceil(only_a + sum(load_a for load_a, _ in either))
    best = math.inf
    for y_a in range(most_a + 1):
        left = y_a * room - only_a
        if left < 0 or (y_a == 0 and only_a > 0):
            continue
        to_b = Fraction(0)
        for load_a, load_b in either:
            on_a = min(Fraction(1), left / load_a) if y_a else Fraction(0)
            left -= on_a * load_a
            to_b += (1 - on_a) * load_b
        y_b = max(1, math.ceil(to_b / room)) if to_b > 0 else 0
        best = min(best, y_a * a.cost_per_hour + y_b * b.cost_per_hour)
    return best


@st.composite
def mixed_scale_services(draw: st.DrawFn) -> ServiceDemand:
    """One service, 1×3 buckets, a tiny and a huge one among them; option ``a`` serves every
    bucket, ``b`` sometimes not."""
    rate = st.one_of(TINY_RATES, HUGE_RATES, st.integers(1, 80).map(lambda x: x / 8))
    rates = [draw(rate) for _ in range(3)]
    rates[draw(st.integers(0, 2))] = draw(TINY_RATES)
    if max(rates) < 100:
        rates[rates.index(max(rates))] = draw(HUGE_RATES)
    fast = st.integers(4, 120).map(lambda x: x / 4)
    options = [
        ReplicaOption(
            name=name, pool=name, cost_per_hour=draw(st.integers(10, 800).map(lambda x: x / 100)),
            max_tput=[[draw(fast if name == "a" else st.one_of(st.just(0.0), fast))
                       for _ in range(3)]],
        )
        for name in ("a", "b")
    ]  # fmt: skip
    return ServiceDemand(
        name="s", rates=[rates], options=options, slice_factor=draw(st.integers(1, 8))
    )


@budget(30)
@given(mixed_scale_services(), st.booleans())
def test_tiny_and_huge_buckets_side_by_side_cost_the_exact_optimum(
    service: ServiceDemand, decompose: bool
) -> None:
    """With Benders and with the compact model, the cost lies between the exact optimum with
    the validator's load tolerance (still a replica for every option that takes traffic) and
    the exact optimum without it."""
    inst = JointInstance(services=[service], pools=[PoolLimit(name="a"), PoolLimit(name="b")])
    low, high = exact_cost(service, LOAD_CHECK_TOL), exact_cost(service)
    plan = solve_joint(inst, decompose=decompose)
    assert plan is not None
    assert low - 1e-6 <= plan.cost_per_hour <= high + 1e-6
