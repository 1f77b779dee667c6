"""A service's single-type baselines are found again by its problem's identity while the problem
lives and its derating stands: no serialising, hashing or solving (Mélange §6.1's baselines,
`gpumix.reconcile.service._baselines_of`)."""

from __future__ import annotations

import gc

from gpumix.plan import AllocationInstance, GPUOption
from gpumix.reconcile import service as service_module
from gpumix.reconcile.service import _baselines_of, _baselines_seen


def readme_instance() -> AllocationInstance:
    """Mélange's README example: rate 16 over a 2 × 2 histogram, A10G and A100-80GB."""
    return AllocationInstance(
        rates=[[4.0, 8.0], [4.0, 4.0]],
        gpus=[
            GPUOption(name="A10G", cost_per_hour=1.01, max_tput=[[5.0, 1.0], [10.0, 5.0]]),
            GPUOption(name="A100-80GB", cost_per_hour=3.67, max_tput=[[20.0, 2.0], [50.0, 20.0]]),
        ],
        slice_factor=1,
    )


def lookups() -> int:
    kept = service_module._baselines_kept
    return kept.hits + kept.misses


def test_the_same_problem_and_derating_are_not_looked_up_again() -> None:
    instance = readme_instance()
    before = lookups()
    first = _baselines_of(instance, None, 5.0)
    # By hand (test_plan_solve): A10G 10 units, A100-80GB 5 units.
    assert {k: v.replicas if v else None for k, v in first.items()} == {
        "A10G": 10, "A100-80GB": 5}  # fmt: skip
    assert _baselines_of(instance, None, 5.0) is first
    assert lookups() == before + 1
    # Another derating (or time limit) is another question, asked of the derated instance.
    halved = _baselines_of(instance, {"A100-80GB": 0.5}, 5.0)
    assert halved["A100-80GB"] is not None and halved["A100-80GB"].replicas == 9
    assert _baselines_of(instance, {"A100-80GB": 0.5}, 5.0) is halved
    assert _baselines_of(instance, None, 5.0) == first
    assert lookups() == before + 3
    # An equal instance that is another object is looked up (and found in the digest cache).
    assert _baselines_of(readme_instance(), None, 5.0) == first
    assert lookups() == before + 4


def test_an_instance_that_is_gone_is_forgotten() -> None:
    instance = readme_instance()
    _baselines_of(instance, None, 5.0)
    key = id(instance)
    assert key in _baselines_seen
    del instance
    gc.collect()
    assert key not in _baselines_seen
