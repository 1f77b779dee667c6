"""Make-before-break: move capacity between GPU classes without a dip in serving capacity.

Pools that grow are scaled up at once; pools that shrink keep their replicas until every pool
that grows or keeps its size has its target available (Coral §4.3 drains old replicas only after
new ones serve).
"""


def stage(current: dict[str, int], target: dict[str, int], ready: dict[str, int]) -> dict[str, int]:
    """Replicas to apply now, per pool, on the way from `current` (the Deployments' replicas)
    to `target`, given the `ready` replicas.

    Level-based: whether shrinking may start is read from what is available, never from what was
    applied — on the pass after a growing pool was scaled up its Deployment already asks for the
    target, and a new leader (or a restarted operator) starts in exactly that state."""
    grown = all(ready.get(p, 0) >= n for p, n in target.items() if n >= current.get(p, 0))
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
