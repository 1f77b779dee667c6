"""The joint min-cost plan at fleet size: priced pools, one plan per service, a small master
(#19, "where the joint ILP does not scale").

Services are coupled only by the pools' GPUs (Coral §4.3's availability constraint). Put a
price on each GPU of the contended pools and the joint problem falls apart into one Mélange
problem per service (§5.4) whose options cost more by the price of the GPUs they take. With
the prices ``t·u_p`` along one ray (``u_p``: the pool's cheapest $/GPU·h), ``v_s(t)`` the
cheapest priced plan of service ``s`` and ``G_p`` the pool's GPUs,

    L(t) = Σ_s v_s(t) − t · Σ_p u_p · G_p

is a lower bound on the joint optimum for every ``t ≥ 0`` (Lagrangian relaxation of the pool
rows: every joint plan is a plan of each service, and takes at most ``G_p`` of each pool).
Every priced plan is also a whole plan of its service, so the joint plan is the choice of one
of them per service within the pools' GPUs: a master ILP with one binary per plan (a
Dantzig–Wolfe column), small however many services contend. Where the contention
decomposition (:mod:`gpumix.plan.joint.contention`) must solve nearly every service jointly
because most of them want one scarce pool, this is the search that scales.

``v_s`` is the lower envelope of one line per plan (cost plus ``t`` times the priced GPUs it
takes), so it is concave, piecewise linear, with a handful of pieces. :func:`envelope` finds
them all by solving only where two known plans' lines cross (Eisner and Severance's
parametric search): two or three solves for most services, none of them depending on another
service, so they are cached with the service's own plan and a pass after one service changed
solves only that one's again. ``L`` is then maximised exactly over the envelopes' breakpoints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pulp

from gpumix.plan.joint import contention
from gpumix.plan.joint.instance import JointInstance, PoolLimit
from gpumix.plan.joint.result import JointAllocation
from gpumix.plan.result import SolverName
from gpumix.plan.solvers import run

CLOSED = math.inf
"""The price at which the priced pools are closed to a service: its plan without them."""
MAX_SOLVES = 8
"""Priced solves per service and search; real envelopes here have 2-4 pieces."""
CAPS = 8
"""Most capped plans per service and pool (:func:`capped`): every GPU count below what its own
plan takes up to this many, evenly spaced beyond."""
CROSSING_TOL = 1e-4
"""A plan at a crossing within this share of the lines' value adds no piece."""

Prices = dict[str, float]
"""$/h per GPU of each priced pool; ``CLOSED`` to take the pool away."""
SolveOne = Callable[[JointInstance], JointAllocation | None]
"""The cheapest plan of a one-service instance (cached by the caller), ``None``: none."""


@dataclass(frozen=True)
class Column:
    """One whole plan of one service: its true cost plus churn, and the GPUs it takes."""

    plan: JointAllocation
    objective: float
    gpus: dict[str, int]

    def counts(self) -> tuple[tuple[str, int], ...]:
        (alloc,) = self.plan.services.values()
        return tuple(sorted(alloc.counts.items()))


def column(instance: JointInstance, index: int, plan: JointAllocation) -> Column:
    service = instance.services[index]
    alloc = plan.services[service.name]
    return Column(plan, plan.cost_per_hour + plan.churn_cost, contention.usage(service, alloc))


def units(instance: JointInstance, pools: set[str]) -> dict[str, float]:
    """Each pool's cheapest $/GPU·h among the options that use it: the ray's direction."""
    out: dict[str, float] = {}
    for service in instance.services:
        for option in service.options:
            if option.pool in pools:
                per_gpu = option.cost_per_hour / option.gpus_per_replica
                out[option.pool] = min(out.get(option.pool, math.inf), per_gpu)
    return out


def priced_alone(instance: JointInstance, index: int, prices: Prices) -> JointInstance:
    """Service ``index`` alone in the whole pools, each free option priced by the GPUs it
    takes; a ``CLOSED`` pool has no GPUs for it."""
    service = instance.services[index]
    options = [
        o.model_copy(update={"price_per_hour": prices[o.pool] * o.gpus_per_replica})
        if o.fixed is None and math.isfinite(prices.get(o.pool, 0.0)) and prices.get(o.pool)
        else o
        for o in service.options
    ]
    pools = [
        PoolLimit(name=p.name, gpus=0) if prices.get(p.name) == CLOSED else p
        for p in instance.pools
    ]
    return instance.model_copy(update={
        "services": [service.model_copy(update={"options": options})],
        "pools": pools,
        "budget_per_hour": None,
        "allow_partial": False,
    })  # fmt: skip


def weight(col: Column, unit: dict[str, float]) -> float:
    """The slope of the column's line: $/h per unit of ``t`` for the priced GPUs it takes."""
    return sum(u * col.gpus.get(p, 0) for p, u in unit.items())


def lower_at(col: Column, t: float, unit: dict[str, float]) -> float:
    """A lower bound on ``v_s(t)`` from the priced solve at ``t`` that found ``col``: its
    priced objective less the solve's reported gap."""
    priced = col.objective + t * weight(col, unit)
    gap = col.plan.result.gap
    if gap is None:
        return priced if col.plan.result.status == "optimal" else 0.0
    return priced * (1 - min(1.0, max(0.0, gap)))


@dataclass(frozen=True)
class Envelope:
    """One service's plans at the prices searched: ``t → plan`` (``CLOSED`` included)."""

    at: dict[float, Column]

    def lower(self, t: float, unit: dict[str, float]) -> float:
        """A lower bound on ``v_s(t)``: the chord of the solved points around ``t`` (``v_s`` is
        concave), or the last one's beyond them (``v_s`` only grows with prices)."""
        solved = sorted((s, lower_at(c, s, unit)) for s, c in self.at.items() if s != CLOSED)
        below = [(s, v) for s, v in solved if s <= t]
        above = [(s, v) for s, v in solved if s > t]
        if not above:
            return below[-1][1]
        (s0, v0), (s1, v1) = below[-1], above[0]
        return v0 + (v1 - v0) * (t - s0) / (s1 - s0)


def envelope(
    instance: JointInstance, index: int, own: JointAllocation, unit: dict[str, float],
    solve_one: SolveOne,
) -> Envelope:  # fmt: skip
    """Every piece of ``v_s`` along the ray ``t·unit``: from the own plan (``t = 0``) and the
    plan without the priced pools, solve where two neighbours' lines cross; a plan there on
    neither line is a new piece, searched on both sides."""
    at = {0.0: column(instance, index, own)}
    closed = solve_one(priced_alone(instance, index, dict.fromkeys(unit, CLOSED)))
    if closed is not None:
        at[CLOSED] = column(instance, index, closed)
    pending = [(0.0, CLOSED)] if closed is not None else []
    solves = 1
    while pending and solves < MAX_SOLVES:
        a, b = pending.pop()
        left, right = at[a], at[b]
        wa, wb = weight(left, unit), weight(right, unit)
        if wa <= wb or left.counts() == right.counts():
            continue
        t = (right.objective - left.objective) / (wa - wb)
        if not a < t < b:
            continue
        plan = solve_one(priced_alone(instance, index, {p: t * u for p, u in unit.items()}))
        solves += 1
        if plan is None:
            continue
        found = at[t] = column(instance, index, plan)
        crossing = left.objective + t * wa
        if found.counts() in (left.counts(), right.counts()):
            continue
        if found.objective + t * weight(found, unit) >= crossing * (1 - CROSSING_TOL):
            continue
        pending += [(a, t), (t, b)]
    return Envelope(at)


def distinct(columns: Iterable[Column]) -> list[Column]:
    """The different plans (by replica counts) in order, the first of each kept."""
    out: dict[tuple[tuple[str, int], ...], Column] = {}
    for col in columns:
        out.setdefault(col.counts(), col)
    return list(out.values())


def cap_counts(own: int) -> list[int]:
    """The GPU caps below ``own`` a service's capped plans are solved at (0: pool closed)."""
    if own <= CAPS:
        return list(range(own))
    return sorted({round(own * j / CAPS) for j in range(CAPS)})


def capped(
    instance: JointInstance, index: int, own: Column, pools: set[str], solve_one: SolveOne
) -> list[Column]:
    """The service's cheapest plans with fewer GPUs of one priced pool than its own plan
    takes: the columns between the envelope's pieces, without which the pool's last GPUs stay
    idle where no service's piece fits them. With one contended pool and every service's
    plans at every cap, the master's choice would be the joint optimum (no plan wants more of
    the pool than its own optimum); :func:`solve_priced` caps only the services its first
    choice moved, which found the same plans on the scale bench's fleets."""
    out = []
    for pool in sorted(pools):
        for k in cap_counts(own.gpus.get(pool, 0)):
            alone = priced_alone(instance, index, {})
            limits = [PoolLimit(name=p.name, gpus=k) if p.name == pool else p for p in alone.pools]
            plan = solve_one(alone.model_copy(update={"pools": limits}))
            if plan is not None:
                out.append(column(instance, index, plan))
    return out


def lagrangian_bound(
    instance: JointInstance, fixed: float, envelopes: list[Envelope], unit: dict[str, float]
) -> float:
    """``max_t L(t)`` over every breakpoint of the envelopes (the maximum of a concave
    piecewise-linear function lies on one); ``fixed``: the lower bound of the services no
    price moves."""
    total = sum(u * (instance.pool(p).gpus or 0) for p, u in unit.items())
    points = {t for e in envelopes for t in e.at if t != CLOSED}
    return max(fixed + sum(e.lower(t, unit) for e in envelopes) - t * total for t in sorted(points))


@dataclass(frozen=True)
class Choice:
    """The master's answer: one column per priced service and the solve's account."""

    picked: dict[int, Column]
    status: str
    seconds: float


def master(
    instance: JointInstance,
    found: dict[int, list[Column]],
    kept: dict[int, Column],
    *,
    solver: SolverName,
    limit: float,
    gap: float,
) -> Choice | None:
    """One column per priced service, the cheapest choice within every limited pool's GPUs
    the ``kept`` plans leave; ``None`` when no choice fits in time."""
    problem = pulp.LpProblem("priced_master", pulp.LpMinimize)
    pick = {
        (i, c): problem.add_variable(f"z_s{i}_c{c}", cat=pulp.LpBinary)
        for i, cols in found.items()
        for c in range(len(cols))
    }
    problem.setObjective(pulp.lpSum(found[i][c].objective * z for (i, c), z in pick.items()))
    for i, cols in found.items():
        problem += pulp.lpSum(pick[i, c] for c in range(len(cols))) == 1, f"one_s{i}"
    for pool in instance.pools:
        if pool.gpus is None:
            continue
        taken = sum(col.gpus.get(pool.name, 0) for col in kept.values())
        row = [
            found[i][c].gpus[pool.name] * z
            for (i, c), z in pick.items()
            if found[i][c].gpus.get(pool.name)
        ]
        if row:
            problem += pulp.lpSum(row) <= pool.gpus - taken, f"pool_{pool.name}"
        elif taken > pool.gpus:
            return None
    result = run(problem, solver, limit, gap)
    if result.status not in ("optimal", "feasible"):
        return None
    picked = {
        i: next(col for c, col in enumerate(cols) if (pick[i, c].value() or 0) > 0.5)
        for i, cols in found.items()
    }
    return Choice(picked, result.status, result.seconds)


@dataclass(frozen=True)
class Priced:
    """Every service's plan, the best Lagrangian bound found and a one-line account."""

    plans: list[JointAllocation]
    bound: float
    message: str


def solve_priced(
    instance: JointInstance,
    own: list[JointAllocation],
    solve_one: SolveOne,
    *,
    solver: SolverName,
    limit: float,
    gap: float,
) -> Priced | None:
    """The cheapest choice among the services' priced plans that fits the pools; ``None``
    when none fits or time ran out (the solves done are cached: the next pass goes on).

    The pools priced are those the services' own plans overflow; when no choice fits because
    the moved services would overflow another pool, that pool is priced too.
    """
    deadline = time.perf_counter() + limit
    allocs = {name: a for part in own for name, a in part.services.items()}
    priced = contention.overflowing(instance, allocs)
    limited = {p.name for p in instance.pools if p.gpus is not None}
    while priced:
        unit = units(instance, priced)
        users = [
            i
            for i, service in enumerate(instance.services)
            if priced & contention.usage(service, own[i].services[service.name]).keys()
        ]
        kept = {
            i: column(instance, i, own[i]) for i in range(len(instance.services)) if i not in users
        }
        envelopes: dict[int, Envelope] = {}
        for i in users:
            if time.perf_counter() > deadline:
                return None
            envelopes[i] = envelope(instance, i, own[i], unit, solve_one)
        found = {i: distinct(e.at.values()) for i, e in envelopes.items()}
        left = deadline - time.perf_counter()
        choice = master(instance, found, kept, solver=solver, limit=max(left, 1.0), gap=gap)
        # Plans capped below a service's own share of the priced pools, for the services the
        # choice moved off their own plan (or for every one when nothing fits yet).
        moved = [
            i for i in users if choice is None or choice.picked[i].counts() != found[i][0].counts()
        ]
        for i in moved:
            if time.perf_counter() > deadline:
                return None
            found[i] = distinct([*found[i], *capped(instance, i, found[i][0], priced, solve_one)])
        if moved:
            left = deadline - time.perf_counter()
            again = master(instance, found, kept, solver=solver, limit=max(left, 1.0), gap=gap)
            choice = again or choice
        if choice is None:
            spill = _spilled(instance, found, kept) & limited - priced
            if not spill:
                return None
            priced |= spill
            continue
        fixed = sum(contention.lower(own[i]) for i in kept)
        bound = lagrangian_bound(instance, fixed, list(envelopes.values()), unit)
        plans = [choice.picked[i].plan if i in choice.picked else own[i] for i in range(len(own))]
        message = (
            f"priced {', '.join(sorted(priced))}: {len(users)} of {len(own)} services chose "
            f"among {sum(len(c) for c in found.values())} plans priced or capped "
            f"(master {choice.status} in {choice.seconds:.2f} s)"
        )
        return Priced(plans, bound, message)
    return None


def _spilled(
    instance: JointInstance, found: dict[int, list[Column]], kept: dict[int, Column]
) -> set[str]:
    """Limited pools the kept plans plus the priced services' greediest plans overflow:
    where a choice can fail for a pool no price covers yet."""
    out = set()
    for pool in instance.pools:
        if pool.gpus is None:
            continue
        most = sum(max(c.gpus.get(pool.name, 0) for c in cols) for cols in found.values())
        if most + sum(col.gpus.get(pool.name, 0) for col in kept.values()) > pool.gpus:
            out.add(pool.name)
    return out
