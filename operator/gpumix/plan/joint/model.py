"""The joint ILP: variables and one function per constraint family.

Per service ``s`` and replica option ``o`` (Coral §4.3's serving instance of a template, Jiang
§4.3's configuration ``c``): an integer replica count ``y[s,o]``. Per bucket ``b`` with traffic,
how its traffic is placed (one split per group of :meth:`ServiceDemand.groups`: a routable
service's buckets of one input row share theirs, as the router executes it), in one of two
forms:

- ``min-cost``: Mélange §5.4's placement of bucket traffic, ``n[s,b,o] ∈ [0, S]`` per servable
  option plus ``u[s,b] ∈ [0, S]`` left unserved (graceful degradation, 0 when everything fits),
  with ``Σ_o n + u = S``. Unlike Mélange's slices these are continuous, as Jiang §4.3's
  fractional assignment ``x_{c,w}``: the router splits traffic by any weights (App. A.2), the
  optimum can only get cheaper, and with only the replica counts integer a Coral-scale instance
  solves in a fraction of the time (``bench/joint.py``);
- ``max-throughput``: Jiang §4.3's fractional assignment ``x`` scaled by the common throughput
  factor ``α`` (``x = α·x_Jiang``, which makes the makespan constraint (3) linear:
  ``Σ_w x_{c,w} f_w / h_{c,w} ≤ y_c`` with ``T = 1/α``), with ``Σ_o x[s,b,o] = α``. Both are
  held in units of an upper bound ``A`` on ``α`` (``alpha_scale``): then ``α/A`` is near 1 at
  the optimum, so each bucket's row is in shares of the bucket as in the min-cost form, and a
  solver tolerance of 1e-7 stays 1e-7 of the bucket however small ``α`` is.

Constraint families: replica capacity (Mélange (3) / Jiang (3)), traffic only on options with a
replica (:func:`add_bought_only`; the replica-count master has its relaxation, a replica for
every bucket, :func:`add_coverage`), pool GPUs (Coral's availability constraint / Jiang (6)),
budgets (Jiang (5), per service and cluster-wide), ``maxReplicas``, ``minReplicas`` (hard, or
with a shortfall ``m[s]`` minimised in its own stage), and the churn penalty's auxiliary
``a[s,o] ≥ y[s,o] − running[s,o]`` (Coral §4.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulp

from gpumix.plan.instance import Bucket
from gpumix.plan.joint.instance import JointInstance, ServiceDemand
from gpumix.plan.model import LOAD_TOL, capacity_loads

Key = tuple[int, int]
"""(service index, option index)."""
PlaceKey = tuple[int, Bucket, int]
"""(service index, bucket, option index)."""


@dataclass
class JointModel:
    problem: pulp.LpProblem
    counts: dict[Key, pulp.LpVariable]
    placement: dict[PlaceKey, pulp.LpVariable]
    unserved: dict[tuple[int, Bucket], pulp.LpVariable] = field(default_factory=dict)
    added: dict[Key, pulp.LpVariable] = field(default_factory=dict)
    short: dict[int, pulp.LpVariable] = field(default_factory=dict)
    """Replicas each service falls short of its ``minReplicas`` (soft form only)."""
    alpha: pulp.LpVariable | None = None
    """The throughput factor of the max-throughput form, in units of ``alpha_scale``."""
    alpha_scale: float = 1.0
    """``A``: ``α = A·alpha`` and ``x = A·placement`` (max-throughput form)."""


def _upper(instance: JointInstance, service: ServiceDemand, o: int) -> int | None:
    option = service.options[o]
    if option.fixed is not None:
        return option.fixed
    bounds = []
    gpus = instance.pool(option.pool).gpus
    if gpus is not None:
        bounds.append(gpus // option.gpus_per_replica)
    if service.max_replicas is not None:
        bounds.append(service.max_replicas)
    return min(bounds) if bounds else None


def add_counts(
    problem: pulp.LpProblem, instance: JointInstance, pruned: set[Key]
) -> dict[Key, pulp.LpVariable]:
    """``y[s,o] ∈ Z≥0``, pinned where an option is ``fixed``; deterministic names. Pruned
    (dominated) options get no variable: they are 0 in every plan."""
    counts = {}
    for si, service in enumerate(instance.services):
        for o, option in enumerate(service.options):
            if (si, o) in pruned:
                continue
            low = option.fixed or 0
            counts[si, o] = problem.add_variable(
                f"y_s{si}_o{o}", lowBound=low, upBound=_upper(instance, service, o),
                cat=pulp.LpInteger,
            )  # fmt: skip
    return counts


def dominated(instance: JointInstance) -> set[Key]:
    """Options no optimal plan needs (Jiang App. G (i), pruning dominated configurations).

    Option ``B`` (``k_B`` GPUs) is dominated by ``A`` in the same pool when ``k_A`` divides
    ``k_B``, ``m = k_B / k_A`` replicas of ``A`` cost no more than one of ``B`` and serve at
    least as much of every bucket (``m·MaxTput_A ≥ MaxTput_B``): any ``B`` replica can then be
    swapped for ``m`` of ``A`` on the same GPUs. The swap adds ``m − 1`` replicas, which a
    ``minReplicas`` floor only welcomes but a ``maxReplicas`` cap may forbid: under a cap only
    ``m = 1`` prunes. Under an alone-miss budget, ``A`` must also miss no more requests alone
    in any bucket. Running or pinned options are never pruned (the churn penalty and the
    pins refer to them), nor pruned for a pinned ``A``, whose count cannot grow to take ``B``'s
    replicas (a solve pinning all options but one at zero left a service unserved where that
    one alone serves it); among identical options the first stays.
    """
    out: set[Key] = set()
    for si, service in enumerate(instance.services):
        for b, big in enumerate(service.options):
            if big.running or big.fixed is not None:
                continue
            for a, small in enumerate(service.options):
                if a == b or small.pool != big.pool or (si, a) in out or small.fixed is not None:
                    continue
                if big.gpus_per_replica % small.gpus_per_replica:
                    continue
                m = big.gpus_per_replica // small.gpus_per_replica
                if m > 1 and service.max_replicas is not None:
                    continue
                if m * (small.cost_per_hour + small.price_per_hour) > (
                    big.cost_per_hour + big.price_per_hour + 1e-12
                ):
                    continue
                if all(
                    m * ts >= tb
                    for rs, rb in zip(small.max_tput, big.max_tput, strict=True)
                    for ts, tb in zip(rs, rb, strict=True)
                ) and (
                    service.alone_miss_budget is None
                    or all(
                        service.alone_miss_rate(a, bucket) <= service.alone_miss_rate(b, bucket)
                        for bucket in service.buckets_with_traffic()
                    )
                ):
                    out.add((si, b))
                    break
    return out


def add_slice_placement(
    problem: pulp.LpProblem, instance: JointInstance, partial: bool, pruned: set[Key]
) -> tuple[dict[PlaceKey, pulp.LpVariable], dict[tuple[int, Bucket], pulp.LpVariable]]:
    """Mélange (2), aggregated and relaxed, with unserved traffic: ``Σ_o n[s,g,o] + u[s,g] = S``
    per group ``g`` of :meth:`ServiceDemand.groups` (a bucket, or a routable service's input
    row); every bucket of the group places ``n[s,g,o]`` slices on ``o``."""
    placement: dict[PlaceKey, pulp.LpVariable] = {}
    unserved: dict[tuple[int, Bucket], pulp.LpVariable] = {}
    for si, service in enumerate(instance.services):
        s_factor = service.slice_factor
        for buckets, options in service.groups():
            name = _group_name(si, buckets)
            row = []
            for o in options:
                if (si, o) in pruned:
                    continue
                var = problem.add_variable(f"n_{name}_t{o}", lowBound=0, upBound=s_factor)
                placement.update({(si, b, o): var for b in buckets})
                row.append(var)
            u = problem.add_variable(f"u_{name}", lowBound=0, upBound=s_factor if partial else 0)
            unserved.update({(si, b): u for b in buckets})
            problem += pulp.lpSum(row) + u == s_factor, f"assign_{name}"
    return placement, unserved


def add_fractional_placement(
    problem: pulp.LpProblem, instance: JointInstance, alpha: pulp.LpVariable, pruned: set[Key]
) -> dict[PlaceKey, pulp.LpVariable]:
    """Jiang (2) scaled by ``α``: ``Σ_o x[s,g,o] = α`` per group (every bucket served α times
    over)."""
    placement: dict[PlaceKey, pulp.LpVariable] = {}
    for si, service in enumerate(instance.services):
        for buckets, options in service.groups():
            name = _group_name(si, buckets)
            row = []
            for o in options:
                if (si, o) in pruned:
                    continue
                var = problem.add_variable(f"x_{name}_t{o}", lowBound=0)
                placement.update({(si, b, o): var for b in buckets})
                row.append(var)
            problem += pulp.lpSum(row) == alpha, f"assign_{name}"
    return placement


def _group_name(si: int, buckets: tuple[Bucket, ...]) -> str:
    """``s{si}_i{i}_o{j}`` of a group's first bucket (a whole row's group: ``s{si}_i{i}``)."""
    (i, j), whole = buckets[0], len(buckets) > 1
    return f"s{si}_i{i}" if whole else f"s{si}_i{i}_o{j}"


def variable_groups(model: JointModel) -> dict[str, list[PlaceKey]]:
    """The placement keys of each placement variable (a group's buckets share one)."""
    out: dict[str, list[PlaceKey]] = {}
    for key, var in model.placement.items():
        out.setdefault(var.name, []).append(key)
    return out


def placement_loads(instance: JointInstance, model: JointModel) -> dict[PlaceKey, float]:
    """Replica-units of load per unit of each placement variable (Mélange §5.4.2): per slice
    (min-cost) or per share of the bucket at throughput ``A`` (max-throughput), as
    :func:`~gpumix.plan.model.capacity_loads` counts them in each option's row."""
    raw: dict[Key, dict[PlaceKey, float]] = {}
    for key in model.placement:
        si, b, o = key
        service = instance.services[si]
        load = service.slice_load(o, b)
        assert load is not None, "placement only holds servable (bucket, option) pairs"
        if model.alpha is not None:
            load *= service.slice_factor * model.alpha_scale
        raw.setdefault((si, o), {})[key] = load
    out: dict[PlaceKey, float] = {}
    for row in raw.values():
        out.update(zip(row, capacity_loads(list(row.values())), strict=True))
    return out


def add_capacity(problem: pulp.LpProblem, instance: JointInstance, model: JointModel) -> None:
    """Mélange (3) per option: placed load ≤ replicas (each replica has capacity 1).

    No slack on the right-hand side (the single-service model's ``LOAD_TOL``): beside
    :func:`add_bought_only`'s rows, a right-hand side of 1e-9 made HiGHS 1.16's presolve return
    a dearer plan as optimal (one service, three options: 0.51 $/h instead of 0.50, found by
    ``test_joint_benders``'s property test), and the solver's feasibility tolerance (1e-7)
    already absorbs a load sum one ulp above a whole number."""
    loads = placement_loads(instance, model)
    terms: dict[Key, list[pulp.LpAffineExpression]] = {k: [] for k in model.counts}
    for key, var in model.placement.items():
        terms[key[0], key[2]].append(loads[key] * var)
    for (si, o), count in model.counts.items():
        if terms[si, o]:
            problem += pulp.lpSum(terms[si, o]) - count <= 0, f"capacity_s{si}_o{o}"


def add_bought_only(
    problem: pulp.LpProblem, instance: JointInstance, model: JointModel, bounded: bool
) -> None:
    """A bucket's traffic only on options with a replica: its share there ``≤ y[s,o]``, one
    row per placement variable (a group's buckets share it).

    Capacity (3) implies it in exact arithmetic (traffic on an option loads it, and a load
    above 0 needs a whole replica) but not within solver tolerances: a bucket of 1e-8 req/s
    loads any option less than HiGHS's feasibility tolerance (1e-7), so (3) alone lets it sit
    on an option with no replica (Mélange §5.4.2's loads are absolute; this row is in shares of
    the bucket). Min-cost: ``n[s,b,o] / S ≤ y[s,o]``. Max-throughput: ``x[s,b,o] / A ≤ y[s,o]``,
    valid when ``A ≥ α`` on every plan (``bounded``: ``alpha_scale`` is such a bound), since
    ``x / α`` is the share; without that, no rows (the solve that finds the bound).
    """
    if model.alpha is not None and not bounded:
        return
    for name, keys in variable_groups(model).items():
        si, _, o = keys[0]
        slices = 1.0 if model.alpha is not None else instance.services[si].slice_factor
        var = model.placement[keys[0]]
        problem += (1 / slices) * var - model.counts[si, o] <= 0, f"bought_{name}"


def add_alone_miss_budgets(
    problem: pulp.LpProblem, instance: JointInstance, model: JointModel
) -> None:
    """Each service's :attr:`ServiceDemand.alone_miss_budget`: requests placed where they miss
    even alone (capacity cannot recover them; ours, as :func:`gpumix.plan.model.
    add_alone_miss_budget`), at most that share of its demand (max-throughput: of ``α`` times
    it). A placement variable places a slice of each bucket of its group (max-throughput:
    ``α/A`` of each)."""
    terms: dict[int, list[pulp.LpAffineExpression]] = {}
    for keys in variable_groups(model).values():
        si, _, o = keys[0]
        service = instance.services[si]
        if service.alone_miss_budget is None:
            continue
        per = 1.0 if model.alpha is not None else 1.0 / service.slice_factor
        missed = per * sum(service.alone_miss_rate(o, b) for _, b, _ in keys)
        terms.setdefault(si, []).append(missed * model.placement[keys[0]])
    for si, row in terms.items():  # none in the replica-count master: RoutingLP bounds it
        service = instance.services[si]
        assert service.alone_miss_budget is not None
        limit = (service.alone_miss_budget + LOAD_TOL) * service.total_rate
        if model.alpha is not None:
            problem += pulp.lpSum(row) - limit * model.alpha <= 0, f"alone_miss_s{si}"
        else:
            problem += pulp.lpSum(row) <= limit, f"alone_miss_s{si}"


def add_coverage(
    problem: pulp.LpProblem, instance: JointInstance, model: JointModel, pruned: set[Key]
) -> None:
    """A replica for every group with traffic: ``Σ_{o serves g} y[s,o] ≥ 1``.

    What :func:`add_bought_only` and the assignment rows imply for the counts alone, so the
    replica-count master (no traffic split) has it too: then every bucket has somewhere to go
    in :class:`gpumix.plan.joint.benders.RoutingLP`, however little traffic it has.
    """
    for si, service in enumerate(instance.services):
        for buckets, options in service.groups():
            row = [model.counts[si, o] for o in options if (si, o) not in pruned]
            problem += pulp.lpSum(row) >= 1, f"cover_{_group_name(si, buckets)}"


def pinned_gpus(instance: JointInstance, pool: str) -> int:
    return sum(
        (o.fixed or 0) * o.gpus_per_replica
        for s in instance.services
        for o in s.options
        if o.pool == pool
    )


def add_pool_limits(problem: pulp.LpProblem, instance: JointInstance, model: JointModel) -> None:
    """Coral §4.3 availability / Jiang (6): GPUs placed in each pool ≤ what it has free.

    Pinned (autoscaler-owned) replicas count, and when they alone exceed the pool the limit
    becomes what they hold, so the model stays feasible and nothing else goes there.
    """
    for p, pool in enumerate(instance.pools):
        if pool.gpus is None:
            continue
        used = [
            instance.services[si].options[o].gpus_per_replica * var
            for (si, o), var in model.counts.items()
            if instance.services[si].options[o].pool == pool.name
        ]
        if used:
            limit = max(pool.gpus, pinned_gpus(instance, pool.name))
            problem += pulp.lpSum(used) <= limit, f"pool_{p}"


def _cost(instance: JointInstance, model: JointModel, si: int | None) -> pulp.LpAffineExpression:
    return pulp.lpSum(
        instance.services[s].options[o].cost_per_hour * var
        for (s, o), var in model.counts.items()
        if si is None or s == si
    )


def _pinned_cost(instance: JointInstance, si: int | None) -> float:
    return sum(
        (o.fixed or 0) * o.cost_per_hour
        for s, service in enumerate(instance.services)
        if si is None or s == si
        for o in service.options
    )


def add_budgets(problem: pulp.LpProblem, instance: JointInstance, model: JointModel) -> None:
    """Jiang (5): $/h within each service's budget and within the cluster's."""
    for si, service in enumerate(instance.services):
        if service.budget_per_hour is not None:
            limit = max(service.budget_per_hour, _pinned_cost(instance, si))
            problem += _cost(instance, model, si) <= limit, f"budget_s{si}"
    if instance.budget_per_hour is not None:
        limit = max(instance.budget_per_hour, _pinned_cost(instance, None))
        problem += _cost(instance, model, None) <= limit, "budget_cluster"


def add_max_replicas(problem: pulp.LpProblem, instance: JointInstance, model: JointModel) -> None:
    """``spec.maxReplicas``: replicas across all of a service's options."""
    for si, service in enumerate(instance.services):
        if service.max_replicas is None:
            continue
        pinned = sum(o.fixed or 0 for o in service.options)
        row = [var for (s, _), var in model.counts.items() if s == si]
        problem += pulp.lpSum(row) <= max(service.max_replicas, pinned), f"max_replicas_s{si}"


def add_min_replicas(
    problem: pulp.LpProblem, instance: JointInstance, model: JointModel, soft: bool
) -> None:
    """``spec.minReplicas``: ``Σ_o y[s,o] + m[s] ≥ minReplicas``. Hard (``m`` absent) in the
    full-service stage; ``soft`` adds the shortfall ``m[s] ≥ 0`` so a floor the pools or
    budgets cannot hold never makes the model infeasible (its own stage minimises it)."""
    for si, service in enumerate(instance.services):
        if not service.min_replicas:
            continue
        row = [var for (s, _), var in model.counts.items() if s == si]
        if soft:
            model.short[si] = problem.add_variable(
                f"m_s{si}", lowBound=0, upBound=service.min_replicas
            )
            row.append(model.short[si])
        problem += pulp.lpSum(row) >= service.min_replicas, f"min_replicas_s{si}"


def add_churn(problem: pulp.LpProblem, instance: JointInstance, model: JointModel) -> None:
    """Coral §4.3: ``a[s,o] ≥ y[s,o] − running[s,o]``, ``a ≥ 0``: replicas newly added.

    Scaling down costs nothing here (Coral drains gracefully, §5.1), so ``a`` is only bound
    from below when ``y`` exceeds what runs.
    """
    for (si, o), count in model.counts.items():
        option = instance.services[si].options[o]
        if option.fixed is not None:
            continue
        added = problem.add_variable(f"a_s{si}_o{o}", lowBound=0)
        problem += added - count >= -option.running, f"churn_s{si}_o{o}"
        model.added[si, o] = added


TIE_BREAK = 1e-4
"""Churn weight used when a service sets none: among equally cheap plans the running one wins
(what the single-service planner's sticky rule did), at a negligible 0.01% of a replica."""


def cost_expr(instance: JointInstance, model: JointModel) -> pulp.LpAffineExpression:
    """$/h of every replica (Mélange (1), Coral's provisioning cost), plus the price of the
    GPUs it takes where an option carries one (a priced solve, Lagrangian pricing)."""
    priced = [
        instance.services[s].options[o].price_per_hour * var
        for (s, o), var in model.counts.items()
        if instance.services[s].options[o].price_per_hour
    ]
    return _cost(instance, model, None) + pulp.lpSum(priced)


def churn_expr(instance: JointInstance, model: JointModel) -> pulp.LpAffineExpression:
    """Coral §4.3's initialisation penalty: ``Σ λ_s · c_o · a[s,o]``."""
    terms = []
    for (si, o), added in model.added.items():
        service = instance.services[si]
        weight = max(service.churn_penalty, TIE_BREAK)
        terms.append(weight * service.options[o].cost_per_hour * added)
    return pulp.lpSum(terms)


def unserved_expr(
    instance: JointInstance, model: JointModel, services: list[int]
) -> pulp.LpAffineExpression:
    """Weighted unserved req/s of ``services``: ``Σ_s w_s Σ_b rate_b / S · u[s,b]``."""
    terms = []
    for (si, b), u in model.unserved.items():
        if si in services:
            service = instance.services[si]
            rate = service.rates[b[0]][b[1]]
            terms.append(service.weight * rate / service.slice_factor * u)
    return pulp.lpSum(terms)


def short_expr(model: JointModel) -> pulp.LpAffineExpression:
    """Replicas missing below every service's ``minReplicas`` (soft form)."""
    return pulp.lpSum(model.short.values())


def build(
    instance: JointInstance,
    *,
    fractional: bool,
    partial: bool,
    prune: bool = True,
    routing: bool = True,
    soft_min: bool = False,
    alpha_bound: float | None = None,
) -> JointModel:
    """The compact model; ``routing=False`` leaves out the traffic split (placement and
    capacity rows): the replica-count master of :mod:`gpumix.plan.joint.benders`, which gets
    :func:`add_coverage` instead; ``soft_min`` lets services fall short of ``minReplicas``
    (:func:`add_min_replicas`). ``alpha_bound`` (max-throughput): an upper bound on ``α`` over
    every plan, the model's unit of ``α`` (without one: unit 1, no :func:`add_bought_only`)."""
    sense = pulp.LpMaximize if fractional else pulp.LpMinimize
    problem = pulp.LpProblem("gpumix_joint", sense)
    pruned = dominated(instance) if prune else set()
    counts = add_counts(problem, instance, pruned)
    model = JointModel(problem=problem, counts=counts, placement={})
    bounded = alpha_bound is not None and alpha_bound > 0
    if fractional:
        model.alpha_scale = alpha_bound if alpha_bound is not None and bounded else 1.0
        cap = ALPHA_CAP / model.alpha_scale
        model.alpha = problem.add_variable("alpha", lowBound=0, upBound=cap)
        model.placement = add_fractional_placement(problem, instance, model.alpha, pruned)
    elif routing:
        model.placement, model.unserved = add_slice_placement(problem, instance, partial, pruned)
    else:
        add_coverage(problem, instance, model, pruned)
    add_capacity(problem, instance, model)
    add_alone_miss_budgets(problem, instance, model)
    add_bought_only(problem, instance, model, bounded)
    add_pool_limits(problem, instance, model)
    add_budgets(problem, instance, model)
    add_max_replicas(problem, instance, model)
    add_min_replicas(problem, instance, model, soft_min)
    if not fractional:
        add_churn(problem, instance, model)
    return model


ALPHA_CAP = 1e6
"""Upper bound on the throughput factor, reached only when no service has traffic (any ``α``
serves none); instances where demand can grow without end are rejected before
(:func:`gpumix.plan.joint.solve.unbounded_pools`)."""
