"""The planner's cache: least recently used goes first, and a value comes back equal to what was
made although it is kept packed."""

from gpumix.digestcache import DigestCache
from gpumix.plan.joint.result import ServiceAllocation


def allocation(rate: float) -> ServiceAllocation:
    grid = [[0.0, 0.25], [0.5, 0.0]]
    return ServiceAllocation(
        counts={"a10g": 2, "l4": 0}, share={"a10g": grid, "l4": [[0.0, 0.0], [0.0, 0.0]]},
        unserved=[[0.0, 0.0], [0.0, 0.0]], load={"a10g": 1.5, "l4": 0.0}, cost_per_hour=2.02,
        total_rate=rate, unserved_rate=0.0, added=2, removed=0, reasons=["pool a10g full"],
    )  # fmt: skip


def test_a_hit_returns_an_equal_value_without_making_it_again() -> None:
    cache: DigestCache[ServiceAllocation] = DigestCache(4)
    made: list[float] = []

    def make(rate: float) -> ServiceAllocation:
        made.append(rate)
        return allocation(rate)

    first = cache.get("a", lambda: make(1.0))
    again = cache.get("a", lambda: make(2.0))
    assert made == [1.0]
    assert again == first and again.total_rate == 1.0
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.values() == [first]
    assert cache.packed_bytes() > 0


def test_the_least_recently_used_goes_first() -> None:
    cache: DigestCache[int] = DigestCache(2)
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)
    cache.get("a", lambda: -1)  # a is now the most recent
    cache.get("c", lambda: 3)  # b goes
    assert len(cache) == 2
    assert cache.get("a", lambda: -1) == 1
    assert cache.get("b", lambda: 20) == 20  # made again
    assert cache.misses == 4


def test_none_is_a_value_kept() -> None:
    cache: DigestCache[int | None] = DigestCache(2)
    assert cache.get("x", lambda: None) is None
    assert cache.get("x", lambda: 5) is None
    assert cache.hits == 1
    cache.clear()
    assert len(cache) == 0 and cache.packed_bytes() == 0


def test_the_hot_values_are_the_objects_made_and_the_others_equal_copies() -> None:
    cache: DigestCache[ServiceAllocation] = DigestCache(8, hot=1)
    a = cache.get("a", lambda: allocation(1.0))
    assert cache.get("a", lambda: allocation(9.0)) is a  # hot: no unpacking
    b = cache.get("b", lambda: allocation(2.0))  # a leaves the hot set
    again = cache.get("a", lambda: allocation(9.0))
    assert again == a and again is not a  # unpacked
    assert cache.get("a", lambda: allocation(9.0)) is again  # hot again
    assert cache.get("b", lambda: allocation(9.0)) == b
    assert (cache.hits, cache.misses) == (4, 2)


def test_a_value_evicted_is_not_kept_hot() -> None:
    cache: DigestCache[int] = DigestCache(1, hot=4)
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)  # evicts a, from the hot set too
    assert cache.get("a", lambda: 10) == 10
