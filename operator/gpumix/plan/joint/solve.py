"""Solve the joint problem: lexicographic stages, read back, validate, explain what is unserved.

``min-cost`` (default): first the cheapest plan serving every demand in full with every
``minReplicas`` held (Coral §4.3: cost plus initialisation penalty). Only when that is
infeasible, graceful degradation in priority order, each stage fixing the optimum of the one
before: (1) least weighted unserved req/s of interactive services, (2) of batch services,
(3) fewest replicas missing below ``minReplicas``, (4) least cost plus churn penalty.

``max-throughput``: Jiang §4.3 (and App. E for several models): the largest common factor
``α`` of every demand the pools and budgets can serve (makespan ``T = 1/α``), then the fewest
replicas missing below ``minReplicas``, then the cheapest plan reaching both. Solved directly
rather than by App. F's binary search on ``T``: the substitution ``x = α·x_Jiang`` makes the
model linear in ``α``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pulp

from gpumix.digestcache import DigestCache
from gpumix.plan.errors import InvalidAllocationError, SolverError
from gpumix.plan.instance import Bucket
from gpumix.plan.joint import benders, churn, contention, pricing
from gpumix.plan.joint import model as jm
from gpumix.plan.joint.balance import balanced
from gpumix.plan.joint.churn import charged
from gpumix.plan.joint.instance import JointInstance, Objective, Priority, ServiceDemand
from gpumix.plan.joint.inturn import in_turn
from gpumix.plan.joint.result import JointAllocation, ServiceAllocation
from gpumix.plan.joint.validate import validate_joint
from gpumix.plan.result import SolveResult, SolverName
from gpumix.plan.solvers import run

DECOMPOSE_FROM = 16
"""Services from which the joint min-cost plan starts from each service's own plan (cached) and,
when those overflow a pool, prices it (:func:`_priced`) and decomposes by contention
(:func:`_by_service`) before the full joint solve."""
CONTENDERS_MAX = 64
"""Most services the contention decomposition (:func:`_by_service`) solves jointly. On the
fleet of ``bench/scale.py`` (2-core VM, 30 s limit) it solved 49 contending services in 9 s
(+63 MB), stopped at its limit 46 % off the bound with 94 (+330 MB) and 99 % off with 189
(+420 MB, the size of the live operator's jump to 594 MB at 200 services, #19), where the
priced plan was within 0.3 %: past a few dozen it only costs memory."""
OWN_PLANS_KEPT = 8192
"""Single-service plans kept (:func:`_own_plan`, about 16 KB each): a service of a large fleet
keeps its own plan, its priced and capped plans (about five) and its plan in turn."""
OWN_PLANS_HOT = 1024
"""Single-service plans and splits kept unpacked besides: every solve of a fleet reads one of
each per service (its own plan, pinned or not, and its split), and at 500 services unpacking
them took 0.5 s of each of a change's fleet solves."""
FALLBACK_MIN_S = 5.0
"""Seconds the compact model still gets when the Benders loop gave up near the time limit."""
STAGE_TOL = 1e-7
"""Relative slack when fixing a stage's optimum for the next stage (solver tolerances)."""
LOOSE_TOL = 1e-5
"""Absolute slack the fixed optima get when the next stage comes back infeasible: HiGHS may
report a stage optimum ~1e-6 below what integral counts reach (integrality tolerance), and the
tight fix then excludes every integral point (reproduced on a random 3-service instance)."""


class JointUnservableError(ValueError):
    """A bucket no option can serve, where partial service is not allowed."""

    def __init__(self, service: str, label: str, slo: str) -> None:
        within = f" within {slo}" if slo else ""
        super().__init__(
            f"service {service}: bucket {label} cannot be served by any option{within}"
        )


class UnboundedThroughputError(ValueError):
    """Max-throughput where nothing stops every demand from growing: there is no optimum."""

    def __init__(self, pools: list[str]) -> None:
        named = f"pool{'s' if len(pools) > 1 else ''} {', '.join(pools)}"
        super().__init__(
            f"max-throughput is unbounded: with no budget, no maxReplicas and no GPU limit on "
            f"{named}, every demand can grow without end; set a pool's GPU limit, a budget or "
            "maxReplicas"
        )


def unbounded_pools(instance: JointInstance) -> list[str]:
    """The limitless pools in which every demand can grow without end under max-throughput;
    empty when a budget, a ``maxReplicas`` or a pool's GPU limit bounds some bucket's
    replicas (then ``α`` is bounded too) or when nothing has traffic."""
    if instance.budget_per_hour is not None:
        return []
    pools: set[str] = set()
    for service in instance.services:
        groups = service.groups()
        if groups and (service.budget_per_hour is not None or service.max_replicas is not None):
            return []
        for _, options in groups:
            free = {
                o.pool
                for o in (service.options[k] for k in options)
                if o.fixed is None and instance.pool(o.pool).gpus is None
            }
            if not free:
                return []
            pools |= free
    return sorted(pools)


def solve_joint(
    instance: JointInstance,
    objective: Objective = Objective.MIN_COST,
    *,
    solver: SolverName = "highs",
    time_limit_s: float = 30.0,
    gap_rel: float = 0.0,
    decompose: bool = True,
) -> JointAllocation | None:
    """The joint plan; ``None`` only when partial service is off and the demand does not fit.

    ``decompose=False`` solves the full-service stage as one compact ILP instead of through
    :mod:`gpumix.plan.joint.benders` (same optimum; for comparison and as the reference).

    A min-cost plan's split is the one its counts alone decide (:func:`balanced`).

    Raises :class:`UnboundedThroughputError` for max-throughput with nothing to bound it,
    :class:`SolverError` when a stage stops without a solution and
    :class:`InvalidAllocationError` when the answer fails :func:`validate_joint` (a bug).
    """
    for service in instance.services:
        bad = service.unservable()
        if bad and (objective is Objective.MAX_THROUGHPUT or not instance.allow_partial):
            label = service.bucket_label(bad[0])
            raise JointUnservableError(service.name, label, service.slo_label)
    if objective is Objective.MAX_THROUGHPUT and (pools := unbounded_pools(instance)):
        raise UnboundedThroughputError(pools)
    allocation: JointAllocation | None
    if objective is Objective.MAX_THROUGHPUT:
        allocation = _max_throughput(instance, solver, time_limit_s, gap_rel)
    else:
        allocation = _min_cost(instance, solver, time_limit_s, gap_rel, decompose=decompose)
    if allocation is None:
        return None
    if objective is Objective.MIN_COST:
        by_name = {s.name: s for s in instance.services}
        services = {
            name: _balanced(by_name[name], alloc, solver, time_limit_s)
            for name, alloc in allocation.services.items()
        }
        allocation = allocation.model_copy(update={"services": services})
    problems = validate_joint(instance, allocation)
    if problems:
        raise InvalidAllocationError(problems)
    return allocation


_splits: DigestCache[ServiceAllocation] = DigestCache(OWN_PLANS_KEPT, OWN_PLANS_HOT)


def _balanced(
    service: ServiceDemand, alloc: ServiceAllocation, solver: SolverName, limit: float
) -> ServiceAllocation:
    """:func:`balanced`, cached by the service and its allocation: two LPs per service and
    joint solve, where a derating round or a change re-solves the fleet with most services'
    plans as they were (live 50 services: 3.0 s of a 39 s pass). The split does not depend on
    what runs (only the replicas a plan adds and removes do), so neither does the key: after a
    rollout the first change otherwise derived every split again (500 services: 0.9 s)."""
    plan = alloc.model_dump_json(exclude={"added", "removed"})
    key = f"{solver}\0{limit!r}\0{churn.service_without_running(service)}\0{plan}"
    split = _splits.get(key, lambda: balanced(service, alloc, solver, limit))
    return alloc.model_copy(update={"share": split.share, "load": split.load})


def _solve(
    model: jm.JointModel,
    solver: SolverName,
    limit: float,
    gap: float,
    stages: list[SolveResult],
    *,
    feasible_by_construction: bool = False,
) -> SolveResult:
    result = run(model.problem, solver, limit, gap)
    if feasible_by_construction and result.status == "infeasible" and solver == "highs":
        # HiGHS 1.15 occasionally calls a stage infeasible that has a feasible point by
        # construction (found by the property tests); CBC answers those correctly.
        retry = run(model.problem, "cbc", limit, gap)
        note = "HiGHS reported a feasible-by-construction stage infeasible; solved with CBC"
        result = retry.model_copy(update={"message": f"{note}; {retry.message}"})
    stages.append(result)
    if result.status not in ("optimal", "feasible", "infeasible"):
        raise SolverError(result)
    return result


def _fix(model: jm.JointModel, expr: pulp.LpAffineExpression, value: float, name: str) -> str:
    model.problem += expr <= value * (1 + STAGE_TOL) + STAGE_TOL, name
    return name


def _next_stage(
    model: jm.JointModel,
    solver: SolverName,
    limit: float,
    gap: float,
    stages: list[SolveResult],
    *,
    fixed: list[str],
    feasible_by_construction: bool = False,
) -> SolveResult:
    """A stage after earlier optima were fixed; if it is infeasible, once more with the fixes
    loosened by `LOOSE_TOL` (constraint ``expr + c <= 0``: lowering ``c`` raises the bound)."""
    result = _solve(model, solver, limit, gap, stages,
                    feasible_by_construction=feasible_by_construction)  # fmt: skip
    if result.status != "infeasible" or not fixed:
        return result
    for name in fixed:
        model.problem.get_constraint_by_name(name).constant -= LOOSE_TOL
    return _solve(model, solver, limit, gap, stages,
                  feasible_by_construction=feasible_by_construction)  # fmt: skip


def _coupled(instance: JointInstance) -> bool:
    """Whether a pool limit or the cluster budget can couple services. When one can, a small
    fleet goes to the Benders decomposition directly: there the separate solves mostly end in
    an overflow (``bench/joint.py``: 0.2–0.3 s of 1.2 s), and when nothing binds it finds the
    same plan in about twice their time (0.3 s for 6 services). From ``DECOMPOSE_FROM``
    services on, the full joint solve stops at its time limit far from its bound
    (``bench/scale.py``) and the cached separate solves come first."""
    return instance.budget_per_hour is not None or any(p.gpus is not None for p in instance.pools)


def _separately(
    instance: JointInstance, parts: list[JointAllocation] | None
) -> JointAllocation | None:
    """Each service on its own (``parts``: :func:`_own_plans`); their union when it fits the
    pools and the cluster budget.

    Only pools and the cluster budget couple services, so relaxing them gives a lower bound
    on the joint optimum; a union that satisfies them reaches it (optimal to ``gap``). This is
    the common case (nothing contended) and costs one small solve per service, cached
    (:func:`_own_plan`): a pass after one service changed solves that one service again.
    """
    if parts is None or not contention.fits(instance, _allocs(parts)):
        return None
    stages = [stage for part in parts for stage in part.stages]
    status = "optimal" if all(r.status == "optimal" for r in stages) else "feasible"
    message = f"{len(parts)} services solved separately; no pool or budget binds"
    return _union(instance, parts, stages, status, message)


_own: DigestCache[JointAllocation | None] = DigestCache(OWN_PLANS_KEPT, OWN_PLANS_HOT)


def _own_plan(
    alone_json: str, solver: SolverName, limit: float, gap: float
) -> JointAllocation | None:
    """The cheapest full plan of a one-service instance (``None``: none), cached by the
    instance: plans are pure functions of it, and the operator replans on every event."""

    def solve() -> JointAllocation | None:
        alone = JointInstance.model_validate_json(alone_json)
        try:
            return _full_service(alone, solver, limit, gap, [], decompose=True)
        except SolverError:
            return None

    return _own.get(f"{solver}\0{limit!r}\0{gap!r}\0{alone_json}", solve)


def _alone(
    alone: JointInstance, solver: SolverName, limit: float, gap: float
) -> JointAllocation | None:
    """:func:`_own_plan` of a one-service instance a fall-back builds: a single service's solve
    is small, so it gets at least the time a fall-back gets; no plan in time: none (cached, as
    the services before it leave the same pools from pass to pass)."""
    return _own_plan(alone.model_dump_json(), solver, max(limit, FALLBACK_MIN_S), gap)


def _own_plans(
    instance: JointInstance, solver: SolverName, limit: float, gap: float
) -> list[JointAllocation] | None:
    """Every service's own cheapest full plan in the whole pools, without the cluster budget
    (the relaxation :func:`_separately` and :func:`_by_service` start from); ``None`` when a
    service has none (the degradation stages decide then)."""
    if len(instance.services) < 2:
        return None
    return _own_plans_of(instance, range(len(instance.services)), solver, limit, gap)


def _own_plans_of(
    instance: JointInstance, indices: Iterable[int], solver: SolverName, limit: float, gap: float
) -> list[JointAllocation] | None:
    """:func:`_own_plan` of each service at ``indices`` in the whole pools; ``None`` at the
    first without one."""
    parts = []
    for i in indices:
        part = _own_plan_of(contention.restricted(instance, {i}), solver, limit, gap)
        if part is None:
            return None
        parts.append(part)
    return parts


def _own_plan_of(
    alone: JointInstance, solver: SolverName, limit: float, gap: float
) -> JointAllocation | None:
    """:func:`_own_plan` of a one-service instance. One pinned on every option is looked up
    without its running replicas and rebased on them (:func:`churn.rebased`): its counts are
    fixed, so what runs only moves the replicas it adds and removes. The operator pins every
    service it keeps on its plan, and a rollout changes what runs: the first change after the
    first pass solved each of 499 pinned services again (live 500 × 5,000: 4 s, #19)."""
    if not all(o.fixed is not None for s in alone.services for o in s.options):
        return _own_plan(alone.model_dump_json(), solver, limit, gap)
    plan = _own_plan(churn.without_running(alone), solver, limit, gap)
    return None if plan is None else churn.rebased(plan, alone)


def _allocs(parts: list[JointAllocation]) -> dict[str, ServiceAllocation]:
    return {name: alloc for part in parts for name, alloc in part.services.items()}


def _by_service(
    instance: JointInstance, parts: list[JointAllocation], solver: SolverName, limit: float,
    gap: float,
) -> JointAllocation | None:  # fmt: skip
    """The joint plan, decomposed by contention (:mod:`gpumix.plan.joint.contention`): only
    the services whose own plans compete for an overflowing pool are solved jointly, the
    others keep their own optimum; ``None`` when every service or more than
    ``CONTENDERS_MAX`` contend (the priced plan or the floor then stands) or the contended
    solve finds no plan in time."""
    start = time.perf_counter()
    over = sorted(contention.overflowing(instance, _allocs(parts)))
    members = contention.contended(instance, _allocs(parts), set())
    while members and len(members) < min(len(instance.services), CONTENDERS_MAX + 1):
        left = limit - (time.perf_counter() - start)
        if left <= 0:
            return None
        try:
            joint = _full_service(
                contention.restricted(instance, members), solver, left, gap, [], decompose=True
            )
        except SolverError:
            return None
        if joint is None:
            return None
        merged = [part for i, part in enumerate(parts) if i not in members] + [joint]
        grown = contention.contended(instance, _allocs(merged), members)
        if grown != members:
            members = grown
            continue
        bound = contention.bound(instance, parts, members, joint)
        objective = sum(part.cost_per_hour + part.churn_cost for part in merged)
        plan_gap = max(0.0, 1 - bound / objective) if objective > 0 else 0.0
        status = "optimal" if plan_gap <= gap + 1e-12 else "feasible"
        message = (
            f"decomposed: {len(members)} of {len(parts)} services contend for "
            f"{', '.join(over)} and were solved jointly, the others keep their own optimum "
            f"(gap {plan_gap:.2%} to the bound); {joint.result.message}"
        )
        stages = [stage for part in merged for stage in part.stages]
        union = _union(instance, merged, stages, status, message)
        seconds = time.perf_counter() - start
        result = union.result.model_copy(update={"gap": plan_gap, "seconds": seconds})
        return union.model_copy(update={"result": result})
    return None


def _priced(
    instance: JointInstance, parts: list[JointAllocation], solver: SolverName, limit: float,
    gap: float,
) -> JointAllocation | None:  # fmt: skip
    """The joint plan chosen among each contending service's priced plans
    (:mod:`gpumix.plan.joint.pricing`), its gap to the Lagrangian bound; ``None`` when no
    choice fits in time."""
    start = time.perf_counter()

    def solve_one(alone: JointInstance) -> JointAllocation | None:
        return _alone(alone, solver, limit, gap)

    out = pricing.solve_priced(instance, parts, solve_one, solver=solver, limit=limit, gap=gap)
    if out is None:
        return None
    plans = out.plans
    objective = sum(plan.cost_per_hour + plan.churn_cost for plan in plans)
    plan_gap = max(0.0, 1 - out.bound / objective) if objective > 0 else 0.0
    status = "optimal" if plan_gap <= gap + 1e-12 else "feasible"
    message = f"{out.message}; gap {plan_gap:.2%} to the Lagrangian bound"
    stages = [stage for plan in plans for stage in plan.stages]
    union = _union(instance, plans, stages, status, message)
    seconds = time.perf_counter() - start
    result = union.result.model_copy(update={"gap": plan_gap, "seconds": seconds})
    return union.model_copy(update={"result": result})


def _union(
    instance: JointInstance,
    parts: list[JointAllocation],
    stages: list[SolveResult],
    status: str,
    message: str,
) -> JointAllocation:
    """One plan of plans for parts of ``instance``, its result summing ``stages``: every
    solve that went into it. What keeps a service short is named again against the whole
    pools and budget ("pool a10g is full (4/4 GPUs planned)"), not the share a part was
    solved in."""
    gaps = [r.gap for r in stages if r.gap is not None]
    last = stages[-1].model_copy(update={
        "seconds": sum(r.seconds for r in stages), "status": status,
        "objective": sum(part.cost_per_hour + part.churn_cost for part in parts),
        "gap": max(gaps, default=None), "message": message,
    })  # fmt: skip
    pool_gpus = {p.name: sum(part.pool_gpus[p.name] for part in parts) for p in instance.pools}
    total = sum(part.cost_per_hour for part in parts)
    services = {n: a for part in parts for n, a in part.services.items()}
    return JointAllocation(
        objective=Objective.MIN_COST,
        services=_explain(instance, services, pool_gpus, total),
        pool_gpus=pool_gpus,
        cost_per_hour=total,
        churn_cost=sum(part.churn_cost for part in parts),
        result=last,
        stages=stages,
    )


def _running_plan(
    instance: JointInstance, solver: SolverName, limit: float, gap: float
) -> list[JointAllocation] | None:
    """What runs now, as a plan (one part per service): every service at its running replica
    counts, split to serve its demand in full; ``None`` when a service's running replicas do
    not serve it or they do not fit the pools and the cluster budget together. No replica is
    added, so no churn.

    A plan the operator made earlier is still a plan: a restarted operator (or a new leader)
    with cold caches had its priced search run out of time at 200 services and planned the
    services in turn instead, moving 413 objects of a fleet nothing had changed in (#19)."""
    parts = []
    for i, service in enumerate(instance.services):
        if service.total_rate > 0 and not any(o.running or o.fixed for o in service.options):
            return None
        options = [
            o if o.fixed is not None else o.model_copy(update={"fixed": o.running})
            for o in service.options
        ]
        pinned = contention.restricted(instance, {i}).model_copy(
            update={"services": [service.model_copy(update={"options": options})]}
        )
        part = _alone(pinned, solver, limit, gap)
        if part is None:
            return None
        parts.append(part)
    return parts if parts and contention.fits(instance, _allocs(parts)) else None


def _in_turn_plan(
    instance: JointInstance, solver: SolverName, limit: float, gap: float
) -> list[JointAllocation] | None:
    """The services planned in turn (:func:`in_turn`), one part per service; ``None`` when that
    leaves a service unserved."""
    planned = [plan for _, plan in in_turn(instance, lambda a: _alone(a, solver, limit, gap))]
    parts = [plan for plan in planned if plan is not None]
    return parts if len(parts) == len(planned) else None


def _floor_plan(
    instance: JointInstance,
    solver: SolverName,
    limit: float,
    gap: float,
    before: list[SolveResult],
    *,
    joint: JointAllocation | None = None,
) -> JointAllocation | None:
    """The cheaper of the services planned in turn and the plan that runs
    (:func:`_running_plan`), when ``joint`` (the time-boxed joint search's plan, if it found
    one) is dearer; ``before``: the joint search's solves, kept in the plan's stages.

    A joint plan must never be dearer than the plan the operator made one service at a time
    (#19), yet at fleet size a time-boxed joint ILP can stop far above it. Same objective on
    every side: cost plus Coral §4.3's churn penalty (none for the plan that runs).
    """

    def objective(parts: list[JointAllocation]) -> float:
        return sum(part.cost_per_hour + part.churn_cost for part in parts)

    found = [
        (kind, parts)
        for kind, parts in (
            ("the plan that runs kept", _running_plan(instance, solver, limit, gap)),
            ("the services planned in turn", _in_turn_plan(instance, solver, limit, gap)),
        )
        if parts is not None
    ]
    if not found:
        return None
    kind, parts = min(found, key=lambda f: objective(f[1]))
    cost = objective(parts)
    if joint is None:
        message = f"{kind}: the joint search stopped with no plan"
    elif cost < joint.cost_per_hour + joint.churn_cost - STAGE_TOL:
        message = (
            f"{kind}: the joint search stopped at its time limit on "
            f"{joint.cost_per_hour + joint.churn_cost:.2f} $/h (gap {joint.result.gap or 0:.1%}), "
            f"dearer than its {cost:.2f} $/h"
        )
    else:
        return None
    stages = [*before, *(stage for part in parts for stage in part.stages)]
    return _union(instance, parts, stages, "feasible", message)


def _at_least_floor(
    instance: JointInstance, joint: JointAllocation, solver: SolverName, limit: float, gap: float
) -> JointAllocation:
    """``joint`` (stopped at its time limit short of its gap), or the services planned in turn
    or the plan that runs, when cheaper (:func:`_floor_plan`)."""
    floor = _floor_plan(instance, solver, limit, gap, joint.stages, joint=joint)
    return joint if floor is None else floor


def _full_service(
    instance: JointInstance,
    solver: SolverName,
    limit: float,
    gap: float,
    stages: list[SolveResult],
    *,
    decompose: bool,
) -> JointAllocation | None:
    """The cheapest plan serving everything, ``None`` when none exists.

    On HiGHS through the Benders decomposition (same optimum, far fewer B&B work at scale);
    the compact model when that is unavailable or gives up.
    """
    if decompose and solver == "highs" and benders.applicable(instance):
        start = time.perf_counter()
        out = benders.solve_benders(instance, limit, gap)
        if isinstance(out, benders.BendersSolution):
            stages.append(out.result)
            values = _Values(counts=out.counts, placement=out.placement)
            return _read(instance, values, stages, Objective.MIN_COST)
        if out is not None:  # the master, a relaxation, is infeasible
            stages.append(out)
            return None
        limit = max(limit - (time.perf_counter() - start), min(limit, FALLBACK_MIN_S))
    model = jm.build(instance, fractional=False, partial=False)
    cost = jm.cost_expr(instance, model) + jm.churn_expr(instance, model)
    model.problem.setObjective(cost)
    result = _solve(model, solver, limit, gap, stages)
    if result.status == "infeasible":
        return None
    return _read(instance, model, stages, Objective.MIN_COST)


def _fleet(
    instance: JointInstance, parts: list[JointAllocation], solver: SolverName, limit: float,
    gap: float,
) -> JointAllocation | None:  # fmt: skip
    """A fleet's plan when the services' own plans overflow a pool: the priced choice
    (:func:`_priced`); when it is not within ``gap`` of its bound, also the contention
    decomposition in the time left; the cheaper, never dearer than the services planned in
    turn. ``None`` when neither finds a plan (the floor is next)."""
    start = time.perf_counter()
    priced = _priced(instance, parts, solver, limit, gap)
    if priced is not None and priced.result.status == "optimal":
        return priced
    left = limit - (time.perf_counter() - start)
    by_service = _by_service(instance, parts, solver, left, gap) if left > 0 else None
    found = [p for p in (priced, by_service) if p is not None]
    if not found:
        return None
    best = min(found, key=lambda p: (round(p.cost_per_hour + p.churn_cost, 9),
                                     p.result.status != "optimal"))  # fmt: skip
    if best.result.status == "optimal":
        return best
    return _at_least_floor(instance, best, solver, limit, gap)


def _around_pinned(
    instance: JointInstance, solver: SolverName, limit: float, gap: float, *, decompose: bool
) -> JointAllocation | None:
    """The services whose every option is pinned, each on its own (:func:`_own_plan`,
    cached), and the others planned in the GPUs and budget those leave; ``None`` when none or
    all are pinned, or the pinned ones do not serve their demand in full or do not fit
    together (the whole instance is solved then).

    Exact: services are coupled only through the pools and the cluster budget, and a pinned
    service's GPUs and cost are constants, as is serving it in full (its traffic takes no
    capacity its counts do not already hold). It is what the operator solves after one
    service changes, every other service kept on its plan: as one instance, when the held
    plans and the changed service's own plan overflowed a pool, the priced search ran over
    every service, pinned or not (at 500 services 1.4-11.1 s a solve, #19)."""
    pinned = {
        i for i, s in enumerate(instance.services) if all(o.fixed is not None for o in s.options)
    }
    if not pinned or len(pinned) == len(instance.services):
        return None
    parts = _own_plans_of(instance, sorted(pinned), solver, limit, gap)
    if parts is None:
        return None
    pools = [
        p.model_copy(update={"gpus": p.gpus - sum(part.pool_gpus[p.name] for part in parts)})
        if p.gpus is not None
        else p
        for p in instance.pools
    ]
    budget = instance.budget_per_hour
    if budget is not None:
        budget -= sum(part.cost_per_hour for part in parts)
    if any(p.gpus is not None and p.gpus < 0 for p in pools) or (
        budget is not None and budget < -contention.MONEY_TOL
    ):
        return None
    free = instance.model_copy(update={
        "services": [s for i, s in enumerate(instance.services) if i not in pinned],
        "pools": pools,
        "budget_per_hour": None if budget is None else max(0.0, budget),
    })  # fmt: skip
    plan = _min_cost(free, solver, limit, gap, decompose=decompose)
    if plan is None:
        return None
    message = (
        f"{len(pinned)} services pinned, each on its own; the other {len(free.services)}: "
        f"{plan.result.message}"
    )
    stages = [*(stage for part in parts for stage in part.stages), *plan.stages]
    return _union(instance, [*parts, plan], stages, plan.result.status, message)


def _min_cost(
    instance: JointInstance, solver: SolverName, limit: float, gap: float, *, decompose: bool
) -> JointAllocation | None:
    around = _around_pinned(instance, solver, limit, gap, decompose=decompose)
    if around is not None:
        return around
    stages: list[SolveResult] = []
    any_unservable = any(s.unservable() for s in instance.services)
    decomposed = decompose and solver == "highs" and benders.applicable(instance)
    fleet = len(instance.services) >= DECOMPOSE_FROM
    if not any_unservable and (fleet or not (decomposed and _coupled(instance))):
        parts = _own_plans(instance, solver, limit, gap)
        separate = _separately(instance, parts)
        if separate is not None:
            return separate
        if decomposed and fleet and parts is not None and instance.budget_per_hour is None:
            plan = _fleet(instance, parts, solver, limit, gap)
            if plan is not None:
                return plan
            # Nothing in time at fleet size: the full joint ILP is slower and larger still (at
            # 200 services minutes and hundreds of MB, and its time-boxed plan far dearer than
            # this floor, #19). The plan that runs, or the services planned in turn, serve
            # now; the priced search's solves are cached, so the next pass goes on from where
            # this one stopped.
            floor = _floor_plan(instance, solver, limit, gap, [])
            if floor is not None:
                return floor
    partial = instance.allow_partial
    if not any_unservable:
        try:
            full = _full_service(instance, solver, limit, gap, stages, decompose=decompose)
        except SolverError:  # stopped with no plan at all: planning in turn may still find one
            if (
                len(instance.services) < 2
                or (floor := _floor_plan(instance, solver, limit, gap, stages)) is None
            ):
                raise
            return floor
        if full is not None and full.result.status != "optimal" and len(instance.services) > 1:
            return _at_least_floor(instance, full, solver, limit, gap)
        if full is not None:
            return full
        if not partial and not any(s.min_replicas for s in instance.services):
            return None
    # Without partial service only minReplicas may give way: the traffic must still fit.
    model = jm.build(instance, fractional=False, partial=partial, soft_min=True)
    goals: list[tuple[str, pulp.LpAffineExpression]] = []
    for priority in (Priority.INTERACTIVE, Priority.BATCH) if partial else ():
        members = [i for i, s in enumerate(instance.services) if s.priority is priority]
        if members:
            goals.append((f"unserved_{priority.value}", jm.unserved_expr(instance, model, members)))
    if model.short:
        goals.append(("min_replicas", jm.short_expr(model)))
    fixed: list[str] = []
    for name, expr in goals:
        model.problem.setObjective(expr)
        result = _next_stage(model, solver, limit, gap, stages, fixed=fixed,
                             feasible_by_construction=partial)  # fmt: skip
        if result.status == "infeasible":
            if not partial:
                return None
            # y = 0, u = S, m = minReplicas is always feasible
            raise SolverError(result.model_copy(update={"message": "degradation stage infeasible"}))
        fixed.append(_fix(model, expr, max(0.0, result.objective or 0.0), f"keep_{name}"))
    cost = jm.cost_expr(instance, model) + jm.churn_expr(instance, model)
    model.problem.setObjective(cost)
    result = _next_stage(
        model, solver, limit, gap, stages, fixed=fixed, feasible_by_construction=True
    )
    if result.status == "infeasible":
        raise SolverError(result.model_copy(update={"message": "cost stage infeasible"}))
    return _read(instance, model, stages, Objective.MIN_COST)


ALPHA_MARGIN = 0.01
"""Relative head-room on the LP bound of ``α``: far above the LP's tolerance, and harmless,
as the bound only scales the model (``x / A`` is the share times ``α / A``, near 1)."""


def _alpha_bound(
    instance: JointInstance, solver: SolverName, limit: float, stages: list[SolveResult]
) -> float:
    """An upper bound on ``α`` over every plan: the optimum of the LP relaxation (replica
    counts continuous, no :func:`~gpumix.plan.joint.model.add_bought_only` rows), with
    :data:`ALPHA_MARGIN` for the LP's tolerance; 0 when no plan serves anything."""
    relaxed = jm.build(instance, fractional=True, partial=False, soft_min=True)
    assert relaxed.alpha is not None
    for var in relaxed.counts.values():
        var.cat = pulp.LpContinuous
    relaxed.problem.setObjective(pulp.lpSum([relaxed.alpha]))
    result = _solve(relaxed, solver, limit, 0.0, stages)
    if result.status == "infeasible":
        raise SolverError(result.model_copy(update={"message": "max-throughput infeasible"}))
    return float(relaxed.alpha.value() or 0.0) * (1 + ALPHA_MARGIN)


def _max_throughput(
    instance: JointInstance, solver: SolverName, limit: float, gap: float
) -> JointAllocation:
    stages: list[SolveResult] = []
    bound = _alpha_bound(instance, solver, limit, stages)
    model = jm.build(instance, fractional=True, partial=False, soft_min=True, alpha_bound=bound)
    assert model.alpha is not None
    model.problem.setObjective(pulp.lpSum([model.alpha]))
    result = _solve(model, solver, limit, gap, stages)
    if result.status == "infeasible":
        raise SolverError(result.model_copy(update={"message": "max-throughput infeasible"}))
    best = float(model.alpha.value() or 0.0)
    stages[-1] = result.model_copy(update={"objective": best * model.alpha_scale})  # α, not α/A
    model.problem += -model.alpha <= -best * (1 - STAGE_TOL), "keep_alpha"
    fixed = ["keep_alpha"]
    model.problem.sense = pulp.LpMinimize
    if model.short:
        short = jm.short_expr(model)
        model.problem.setObjective(short)
        result = _next_stage(model, solver, limit, gap, stages, fixed=fixed)
        if result.status == "infeasible":
            raise SolverError(result.model_copy(update={"message": "minReplicas infeasible"}))
        fixed.append(_fix(model, short, max(0.0, result.objective or 0.0), "keep_min_replicas"))
    model.problem.setObjective(jm.cost_expr(instance, model))
    result = _next_stage(model, solver, limit, gap, stages, fixed=fixed)
    if result.status == "infeasible":
        raise SolverError(result.model_copy(update={"message": "cost stage infeasible"}))
    return _read(instance, model, stages, Objective.MAX_THROUGHPUT)


@dataclass
class _Values:
    """A solution's values, from the compact model or from the Benders decomposition."""

    counts: dict[jm.Key, int]
    placement: dict[jm.PlaceKey, float]
    unserved: dict[tuple[int, Bucket], float] = field(default_factory=dict)
    alpha: float | None = None


def _values(model: jm.JointModel) -> _Values:
    """The solution in the instance's units (``α`` and ``x`` times the model's ``A``)."""
    scale = model.alpha_scale
    alpha = None if model.alpha is None else scale * float(model.alpha.value() or 0.0)
    return _Values(
        counts={k: round(v.value() or 0.0) for k, v in model.counts.items()},
        placement={k: scale * (v.value() or 0.0) for k, v in model.placement.items()},
        unserved={k: u.value() or 0.0 for k, u in model.unserved.items()},
        alpha=alpha,
    )


def _read(
    instance: JointInstance,
    model: jm.JointModel | _Values,
    stages: list[SolveResult],
    objective: Objective,
) -> JointAllocation:
    solution = _values(model) if isinstance(model, jm.JointModel) else model
    alpha = solution.alpha
    services: dict[str, ServiceAllocation] = {}
    pool_gpus = {p.name: 0 for p in instance.pools}
    churn = 0.0
    for si, service in enumerate(instance.services):
        rows, cols = service.shape
        names = [o.name for o in service.options]
        counts = {n: solution.counts.get((si, o), 0) for o, n in enumerate(names)}
        share = {n: [[0.0] * cols for _ in range(rows)] for n in names}
        load = dict.fromkeys(names, 0.0)
        unserved = [[0.0] * cols for _ in range(rows)]
        for (s, b, o), raw in solution.placement.items():
            if s != si:
                continue
            if alpha is None:
                fraction = raw / service.slice_factor
            else:
                fraction = raw / alpha if alpha > 0 else 0.0
            if fraction <= 1e-9:
                continue
            share[names[o]][b[0]][b[1]] = fraction
            slice_load = service.slice_load(o, b)
            assert slice_load is not None
            served = 1.0 if alpha is None else alpha  # max-throughput: α times the demand
            load[names[o]] += served * fraction * service.slice_factor * slice_load
        unserved_rate = 0.0
        for (s, b), u in solution.unserved.items():
            if s == si:
                fraction = min(1.0, max(0.0, u) / service.slice_factor)  # solver tolerance
                if fraction <= 1e-9:
                    continue
                unserved[b[0]][b[1]] = fraction
                unserved_rate += fraction * service.rates[b[0]][b[1]]
        if alpha is not None and alpha <= 0:
            unserved = [[1.0 if r > 0 else 0.0 for r in row] for row in service.rates]
            unserved_rate = service.total_rate
        added, removed, penalty = charged(service, counts)
        churn += penalty
        for option in service.options:
            pool_gpus[option.pool] += counts[option.name] * option.gpus_per_replica
        services[service.name] = ServiceAllocation(
            counts=counts,
            share=share,
            unserved=unserved,
            load=load,
            cost_per_hour=sum(counts[o.name] * o.cost_per_hour for o in service.options),
            total_rate=service.total_rate,
            unserved_rate=unserved_rate,
            added=added,
            removed=removed,
        )
    total = sum(s.cost_per_hour for s in services.values())
    seconds = sum(r.seconds for r in stages)
    last = stages[-1].model_copy(update={"seconds": seconds})
    services = _explain(instance, services, pool_gpus, total)
    return JointAllocation(
        objective=objective,
        services=services,
        pool_gpus=pool_gpus,
        cost_per_hour=total,
        churn_cost=churn,
        throughput_scale=alpha,
        result=last,
        stages=stages,
    )


def _limits(
    instance: JointInstance,
    service: ServiceDemand,
    alloc: ServiceAllocation,
    pool_gpus: dict[str, int],
    total: float,
) -> list[str]:
    """The limits that keep ``service`` from one more replica: pools, budgets, maxReplicas."""
    limits: list[str] = []
    cheapest = min((o.cost_per_hour for o in service.options), default=math.inf)
    for pool in sorted({o.pool for o in service.options}):
        limit = instance.pool(pool).gpus
        smallest = min(o.gpus_per_replica for o in service.options if o.pool == pool)
        if limit is not None and pool_gpus[pool] + smallest > limit:
            limits.append(f"pool {pool} is full ({pool_gpus[pool]}/{limit} GPUs planned)")
    if (
        service.budget_per_hour is not None
        and alloc.cost_per_hour + cheapest > service.budget_per_hour + 1e-9
    ):
        limits.append(
            f"service budget reached ({alloc.cost_per_hour:.2f} of "
            f"{service.budget_per_hour:.2f} $/h)"
        )
    if instance.budget_per_hour is not None and total + cheapest > instance.budget_per_hour:
        limits.append(f"cluster budget reached ({total:.2f} of {instance.budget_per_hour:.2f} $/h)")
    if service.max_replicas is not None and sum(alloc.counts.values()) >= service.max_replicas:
        limits.append(f"maxReplicas {service.max_replicas} reached")
    if not service.options:
        limits.append("no replica option")
    return limits


def _explain(
    instance: JointInstance,
    services: dict[str, ServiceAllocation],
    pool_gpus: dict[str, int],
    total: float,
) -> dict[str, ServiceAllocation]:
    """Name the limits that bind for every service with unserved traffic or fewer replicas
    than its ``minReplicas`` (never silent)."""
    out = {}
    for service in instance.services:
        alloc = services[service.name]
        planned = sum(alloc.counts.values())
        if alloc.unserved_rate <= 0 and planned >= service.min_replicas:
            out[service.name] = alloc
            continue
        limits = _limits(instance, service, alloc, pool_gpus, total)
        reasons: list[str] = []
        if alloc.unserved_rate > 0:
            bad = service.unservable()
            if bad:
                reasons.append(
                    f"no replica option meets {service.slo_label or 'the SLO'} for "
                    + ", ".join(service.bucket_label(b) for b in bad)
                )
            reasons += limits or ([] if bad else ["capacity exhausted"])
        if planned < service.min_replicas:
            why = ", ".join(limits) or "capacity exhausted"
            reasons.append(
                f"minReplicas {service.min_replicas} not reachable ({planned} planned): {why}"
            )
        out[service.name] = alloc.model_copy(update={"reasons": reasons})
    return out
