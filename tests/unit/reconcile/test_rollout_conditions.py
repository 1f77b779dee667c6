"""Make-before-break staging and condition bookkeeping."""

from hypothesis import given
from hypothesis import strategies as st

from gpumix.api import ConditionStatus
from gpumix.reconcile.conditions import set_condition
from gpumix.reconcile.rollout import settled, stage


def test_shrinking_pool_waits_for_growing_pool() -> None:
    current, target = {"a100": 2, "l4": 1}, {"a100": 0, "l4": 3}
    assert stage(current, target, ready={"a100": 2, "l4": 1}) == {"a100": 2, "l4": 3}
    assert stage(current, target, ready={"a100": 2, "l4": 2}) == {"a100": 2, "l4": 3}
    assert stage(current, target, ready={"a100": 2, "l4": 3}) == {"a100": 0, "l4": 3}


def test_the_pass_after_scaling_up_still_waits_for_the_new_replicas() -> None:
    """The Deployments already ask for the grown target (applied on the pass before, or by the
    leader that died): the shrinking pool still waits until those replicas are available."""
    target = {"a": 0, "b": 4}
    assert stage({"a": 2, "b": 4}, target, ready={"a": 2, "b": 2}) == {"a": 2, "b": 4}
    assert stage({"a": 2, "b": 4}, target, ready={"a": 2, "b": 4}) == {"a": 0, "b": 4}
    # A pool that keeps its size but lost a replica holds the shrinking too.
    kept = {"a": 0, "b": 2, "c": 1}
    assert stage({"a": 1, "b": 2, "c": 1}, kept, {"a": 1, "b": 1, "c": 1})["a"] == 1


def test_pure_scale_down_and_up_apply_at_once() -> None:
    assert stage({"a": 3}, {"a": 1}, {"a": 3}) == {"a": 1}
    assert stage({}, {"a": 2}, {}) == {"a": 2}


counts = st.dictionaries(st.sampled_from("abcd"), st.integers(0, 5), max_size=4)


@given(current=counts, target=counts, ready=counts)
def test_staging_never_drops_below_min_of_current_and_target(
    current: dict[str, int], target: dict[str, int], ready: dict[str, int]
) -> None:
    staged = stage(current, target, ready)
    for pool in set(current) | set(target):
        lo = min(current.get(pool, 0), target.get(pool, 0))
        hi = max(current.get(pool, 0), target.get(pool, 0))
        assert lo <= staged[pool] <= hi
        assert staged[pool] >= target.get(pool, 0)  # growth is never delayed
    # Shrinking happens only once every pool that grows or keeps its size is fully available.
    staying = [p for p in target if target[p] >= current.get(p, 0)]
    if any(ready.get(p, 0) < target[p] for p in staying):
        assert all(staged[p] >= current.get(p, 0) for p in current)


def test_settled() -> None:
    assert settled({"a": 2, "b": 0}, {"a": 2})
    assert not settled({"a": 2}, {"a": 1})
    assert not settled({"a": 2}, {"a": 2, "b": 1})


def test_transition_time_moves_only_when_status_flips() -> None:
    t0, t1 = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"
    c = set_condition([], "Ready", ConditionStatus.FALSE, "RollingOut", "x", generation=1, now=t0)
    c = set_condition(c, "Ready", ConditionStatus.FALSE, "Unservable", "y", generation=2, now=t1)
    assert c[0].last_transition_time is not None
    assert c[0].last_transition_time.isoformat().startswith("2026-01-01T00:00")
    assert (c[0].reason, c[0].observed_generation) == ("Unservable", 2)
    c = set_condition(c, "Ready", ConditionStatus.TRUE, "Serving", "", generation=2, now=t1)
    assert c[0].last_transition_time is not None
    assert c[0].last_transition_time.isoformat().startswith("2026-01-01T01:00")
    c = set_condition(c, "Planned", ConditionStatus.TRUE, "PlanComputed", "", generation=2, now=t1)
    assert [x.type for x in c] == ["Ready", "Planned"]
