"""Instance builders, a random-instance strategy and a brute-force optimum for the plan tests."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest
from hypothesis import strategies as st

from gpumix.plan import AllocationInstance, GPUOption
from gpumix.plan.joint import JointInstance, PoolLimit, ReplicaOption, ServiceDemand, solve_joint
from gpumix.plan.joint import solve as js
from gpumix.plan.model import MIN_CAPACITY_LOAD, MIN_CAPACITY_RATIO


def instance(
    rates: list[list[float]],
    gpus: dict[str, tuple[float, list[list[float]]]],
    slice_factor: int = 1,
    **kwargs: object,
) -> AllocationInstance:
    return AllocationInstance.model_validate(
        {
            "rates": rates,
            "gpus": [
                GPUOption(name=name, cost_per_hour=cost, max_tput=tput)
                for name, (cost, tput) in gpus.items()
            ],
            "slice_factor": slice_factor,
            **kwargs,
        }
    )


def brute_force_cost(inst: AllocationInstance) -> float | None:
    """Cheapest cost by enumerating every way to split every bucket into whole slices.

    Independent of the ILP: for each split, each type needs ``ceil(load)`` units (§5.4.2,
    capacity 1 per unit). Only for tiny instances.
    """
    s_factor = inst.slice_factor
    buckets = inst.buckets_with_traffic()
    n_types = len(inst.gpus)
    splits = [
        c for c in itertools.product(range(s_factor + 1), repeat=n_types) if sum(c) == s_factor
    ]
    best: float | None = None
    for choice in itertools.product(splits, repeat=len(buckets)):
        loads = [0.0] * n_types
        ok = True
        for bucket, split in zip(buckets, choice, strict=True):
            for k, n in enumerate(split):
                if n == 0:
                    continue
                slice_load = inst.slice_load(k, bucket)
                if slice_load is None:
                    ok = False
                    break
                loads[k] += n * slice_load
            if not ok:
                break
        if not ok:
            continue
        cost = _cost(inst, [math.ceil(load - 1e-9) for load in loads])
        if cost is not None and (best is None or cost < best):
            best = cost
    return best


def _cost(inst: AllocationInstance, counts: list[int]) -> float | None:
    """Cost of buying ``counts`` units per type; None beyond a type's ``max_count``."""
    if any(
        g.max_count is not None and c > g.max_count for g, c in zip(inst.gpus, counts, strict=True)
    ):
        return None
    return sum(c * g.cost_per_hour for c, g in zip(counts, inst.gpus, strict=True))


@st.composite
def instances(
    draw: st.DrawFn, max_rows: int = 3, max_cols: int = 3, max_slices: int = 4
) -> AllocationInstance:
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(1, max_cols))
    n_types = draw(st.integers(2, 3))
    rate = st.one_of(st.just(0.0), st.integers(1, 80).map(lambda x: x / 8))
    # gpu0 serves every bucket (so a plan exists); the others sometimes can't (MaxTput 0).
    positive = st.integers(1, 120).map(lambda x: x / 4)
    tput = st.one_of(st.just(0.0), positive)

    def matrix(elements: st.SearchStrategy[float]) -> st.SearchStrategy[list[list[float]]]:
        row = st.lists(elements, min_size=cols, max_size=cols)
        return st.lists(row, min_size=rows, max_size=rows)

    gpus = [
        GPUOption(
            name=f"gpu{k}",
            cost_per_hour=draw(st.integers(10, 800).map(lambda x: x / 100)),
            max_tput=draw(matrix(positive if k == 0 else tput)),
        )
        for k in range(n_types)
    ]
    return AllocationInstance(
        rates=draw(matrix(rate)), gpus=gpus, slice_factor=draw(st.integers(1, max_slices))
    )


def exact_brute_force_cost(
    inst: AllocationInstance, *, per_row: bool = False, slack: float = 0.0, rounded: bool = False
) -> float | None:
    """:func:`brute_force_cost` in exact rational arithmetic.

    Loads are :class:`~fractions.Fraction` s of the float rates and MaxTputs, so a bucket of
    1e-9 req/s weighs exactly that, and a type that takes any of it needs a whole unit however
    small the load. A type needs ``ceil(load - slack)`` units otherwise: ``slack`` > 0 gives a
    lower bound on what a solver may buy within its capacity tolerance. ``rounded``: each slice
    counts at least the floor :func:`~gpumix.plan.model.capacity_loads` rounds its type's row up
    to, as the model counts it (the model's optimum, an upper bound). ``per_row``: one split
    per input row, applied to every bucket of the row (the routable formulation). Only for tiny
    instances.
    """
    s_factor = inst.slice_factor
    buckets = inst.buckets_with_traffic()
    floors = [Fraction(0)] * len(inst.gpus)
    if rounded:
        for k in range(len(inst.gpus)):
            row = [x for b in buckets if (x := inst.slice_load(k, b)) is not None]
            floors[k] = Fraction(max(MIN_CAPACITY_LOAD, MIN_CAPACITY_RATIO * max(row, default=0.0)))
    groups = sorted({i for i, _ in buckets}) if per_row else buckets
    n_types = len(inst.gpus)
    splits = [
        c for c in itertools.product(range(s_factor + 1), repeat=n_types) if sum(c) == s_factor
    ]
    best: float | None = None
    for choice in itertools.product(splits, repeat=len(groups)):
        split_of = dict(zip(groups, choice, strict=True))
        loads = [Fraction(0)] * n_types
        ok = True
        for i, j in buckets:
            split = split_of[i] if per_row else split_of[i, j]
            for k, n in enumerate(split):
                tput = inst.gpus[k].max_tput[i][j]
                if n and tput <= 0:
                    ok = False
                elif n:
                    load = Fraction(inst.rates[i][j]) / (s_factor * Fraction(tput))
                    loads[k] += n * max(load, floors[k])
        if not ok:
            continue
        cost = _cost(
            inst, [max(int(load > 0), math.ceil(load - Fraction(slack))) for load in loads]
        )
        if cost is not None and (best is None or cost < best):
            best = cost
    return best


TINY_RATES = st.integers(1, 9).flatmap(lambda m: st.integers(7, 10).map(lambda e: m * 10.0**-e))
"""Req/s of a bucket no solver tolerance may swallow: 1e-10 … 9e-7."""
HUGE_RATES = st.integers(1, 9).flatmap(lambda m: st.integers(2, 3).map(lambda e: m * 10.0**e))
"""Req/s of a bucket that needs up to tens of thousands of units: 100 … 9000."""


@st.composite
def mixed_scale_instances(
    draw: st.DrawFn, max_rows: int = 2, max_slices: int = 2
) -> AllocationInstance:
    """Tiny and huge buckets side by side (1×2, 1×3 or 2×2 buckets, 2–3 types): gpu0 serves every
    bucket, the others sometimes cannot, so a tiny bucket may need a type of its own."""
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(2, 3 if rows == 1 else 2))
    rate = st.one_of(TINY_RATES, HUGE_RATES, st.integers(1, 80).map(lambda x: x / 8))
    rates = [[draw(rate) for _ in range(cols)] for _ in range(rows)]
    if not any(r < 1e-6 for row in rates for r in row):
        rates[-1][-1] = draw(TINY_RATES)
    if not any(r >= 100 for row in rates for r in row):
        rates[0][0] = draw(HUGE_RATES)
    positive = st.integers(1, 120).map(lambda x: x / 4)
    tput = st.one_of(st.just(0.0), positive)
    gpus = [
        GPUOption(
            name=f"gpu{k}",
            cost_per_hour=draw(st.integers(10, 800).map(lambda x: x / 100)),
            max_tput=[
                [draw(positive if k == 0 else tput) for _ in range(cols)] for _ in range(rows)
            ],
        )
        for k in range(draw(st.integers(2, 3)))
    ]
    return AllocationInstance(rates=rates, gpus=gpus, slice_factor=draw(st.integers(1, max_slices)))


# Fleets with a scarce pool (the joint plan's decompositions, #19)

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


def squeezed_fleet() -> tuple[JointInstance, int]:
    """A fleet whose `mid` pool holds one GPU more than the odd services take on their own:
    the even ones, pushed out of the scarce `cheap` pool, overflow it. Also `mid`'s GPUs."""
    inst = fleet(js.DECOMPOSE_FROM + 2, 3, cheap=2)
    free = inst.model_copy(update={"pools": [p.model_copy(update={"gpus": None})
                                             for p in inst.pools]})  # fmt: skip
    alone = solve_joint(free)
    assert alone is not None
    mid = alone.pool_gpus["mid"] + 1
    pools = [PoolLimit(name="cheap", gpus=2), PoolLimit(name="mid", gpus=mid),
             PoolLimit(name="dear")]  # fmt: skip
    return inst.model_copy(update={"pools": pools}), mid
