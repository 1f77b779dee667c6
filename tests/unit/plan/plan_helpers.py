"""Instance builders, a random-instance strategy and a brute-force optimum for the plan tests."""

from __future__ import annotations

import itertools
import math

from hypothesis import strategies as st

from gpumix.plan import AllocationInstance, GPUOption


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
        counts = [math.ceil(load - 1e-9) for load in loads]
        if any(
            g.max_count is not None and c > g.max_count
            for g, c in zip(inst.gpus, counts, strict=True)
        ):
            continue
        cost = sum(c * g.cost_per_hour for c, g in zip(counts, inst.gpus, strict=True))
        if best is None or cost < best:
            best = cost
    return best


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
