"""Make-before-break: move capacity between GPU classes without a dip in serving capacity.

Pools that grow are scaled up at once; pools that shrink keep their replicas until every growing
pool has its new replicas available (Coral §4.3 drains old replicas only after new ones serve).
"""


def stage(current: dict[str, int], target: dict[str, int], ready: dict[str, int]) -> dict[str, int]:
    """Replicas to apply now, per pool, on the way from `current` to `target`."""
    growing = [p for p, n in target.items() if n > current.get(p, 0)]
    grown = all(ready.get(p, 0) >= target[p] for p in growing)
    pools = sorted(set(current) | set(target))
    staged = {}
    for pool in pools:
        want, have = target.get(pool, 0), current.get(pool, 0)
        staged[pool] = want if want >= have or grown else have
    return staged


def settled(target: dict[str, int], ready: dict[str, int]) -> bool:
    """Every pool serves exactly its planned replicas (all new ones ready, old ones gone)."""
    pools = set(target) | set(ready)
    return all(ready.get(p, 0) == target.get(p, 0) for p in pools)


def summary(replicas: dict[str, int]) -> str:
    """Replicas per option for people, e.g. 'a100-80gb=1,l4=2' ('none' when nothing runs)."""
    return ",".join(f"{p}={n}" for p, n in sorted(replicas.items()) if n) or "none"
