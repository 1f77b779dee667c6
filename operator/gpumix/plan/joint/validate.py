"""Solver-independent re-check of a joint plan (CP-SAT Primer style), plain arithmetic only.

Every property the issue asks of a plan is checked here, so tests and the operator catch a
modelling bug before it reaches a cluster: pools never exceeded, budgets respected, every served
bucket only on options that meet the SLO, load within replicas, each bucket's traffic fully on
options with a replica or reported unserved (relative to that bucket's demand, however small),
never fewer replicas than ``minReplicas`` without a reason.
"""

from __future__ import annotations

import math

from gpumix.plan.joint.instance import JointInstance, Objective
from gpumix.plan.joint.result import JointAllocation
from gpumix.plan.validate import ASSIGN_REL_TOL, LOAD_CHECK_TOL

MONEY_TOL = 1e-6


def validate_joint(instance: JointInstance, plan: JointAllocation) -> list[str]:
    if sorted(plan.services) != sorted(s.name for s in instance.services):
        return [f"plan covers services {sorted(plan.services)}"]
    problems = _shape_problems(instance, plan)
    if problems:
        return problems  # pools and costs cannot be added up over a malformed plan
    pool_use = {p.name: 0 for p in instance.pools}
    pinned = dict.fromkeys(pool_use, 0)
    total = 0.0
    pinned_total = 0.0
    min_cost = plan.objective is Objective.MIN_COST
    served = 1.0 if min_cost else (plan.throughput_scale or 0.0)  # max-throughput: α × demand
    for service in instance.services:
        alloc = plan.services[service.name]
        rows, cols = service.shape
        totals = [list(row) for row in alloc.unserved]
        # Unserved plus the shares on options with a replica: 1 for a bucket with traffic.
        placed = [list(row) for row in alloc.unserved]
        idle: dict[tuple[int, int], list[str]] = {}
        cost = 0.0
        pinned_cost = 0.0
        for o, option in enumerate(service.options):
            count = alloc.counts[option.name]
            where = f"{service.name}/{option.name}"
            if count < 0:
                problems.append(f"{where}: negative count {count}")
            if option.fixed is not None and count != option.fixed:
                problems.append(f"{where}: pinned at {option.fixed}, planned {count}")
            pool_use[option.pool] += count * option.gpus_per_replica
            pinned[option.pool] += (option.fixed or 0) * option.gpus_per_replica
            cost += count * option.cost_per_hour
            pinned_cost += (option.fixed or 0) * option.cost_per_hour
            load = 0.0
            for i in range(rows):
                for j in range(cols):
                    fraction = alloc.share[option.name][i][j]
                    if fraction == 0:
                        continue
                    totals[i][j] += fraction
                    if count >= 1:
                        placed[i][j] += fraction
                    else:
                        idle.setdefault((i, j), []).append(f"{option.name} holds {fraction:.3g}")
                    if fraction < 0:
                        problems.append(f"{where} bucket ({i}, {j}): negative share")
                    s_factor = service.slice_factor
                    slice_load = service.slice_load(o, (i, j))
                    if slice_load is None:
                        problems.append(f"{where} bucket ({i}, {j}): routed where SLO is missed")
                        continue
                    load += served * fraction * s_factor * slice_load
            if count >= 0 and load > count + LOAD_CHECK_TOL * max(1, count):
                problems.append(f"{where}: load {load:.9g} exceeds {count} replicas")
            if not math.isclose(load, alloc.load[option.name], rel_tol=1e-6, abs_tol=1e-6):
                problems.append(f"{where}: reported load {alloc.load[option.name]} != {load}")
        scale = 1.0
        if plan.objective is Objective.MAX_THROUGHPUT:
            scale = 1.0 if (plan.throughput_scale or 0) > 0 else 0.0
        unserved_rate = 0.0
        for i in range(rows):
            for j in range(cols):
                rate = service.rates[i][j]
                unserved_rate += alloc.unserved[i][j] * rate
                if rate > 0 and abs(placed[i][j] - 1.0) > ASSIGN_REL_TOL:
                    where = "; ".join(idle.get((i, j), []))
                    problems.append(
                        f"{service.name} bucket ({i}, {j}): {placed[i][j] * rate:.6g} of its "
                        f"{rate:.6g} req/s placed on options with replicas or reported unserved"
                        + (f" ({where}, with no replica)" if where else "")
                    )
                if rate == 0 and scale and totals[i][j] != 0:
                    problems.append(f"{service.name} bucket ({i}, {j}): traffic on an empty bucket")
        if service.alone_miss_budget is not None:
            traffic = service.buckets_with_traffic()
            missed = sum(
                share[i][j] * service.alone_miss_rate(o, (i, j))
                for o, option in enumerate(service.options)
                if any(map(any, share := alloc.share[option.name]))
                for i, j in traffic
            )
            allowed = (service.alone_miss_budget + ASSIGN_REL_TOL) * service.total_rate
            if missed > allowed:
                problems.append(
                    f"{service.name}: {missed:.6g} req/s placed where they miss alone, over "
                    f"its budget {service.alone_miss_budget:.6g} of {service.total_rate:.6g}"
                )
        if alloc.unserved_rate > 0 and not instance.allow_partial:
            problems.append(f"{service.name}: unserved traffic without allow_partial")
        if not math.isclose(unserved_rate, alloc.unserved_rate, rel_tol=1e-6, abs_tol=1e-9):
            problems.append(f"{service.name}: unserved {alloc.unserved_rate} != {unserved_rate}")
        if alloc.unserved_rate > 0 and not alloc.reasons:
            problems.append(f"{service.name}: unserved traffic without a reason")
        if not math.isclose(cost, alloc.cost_per_hour, rel_tol=1e-9, abs_tol=1e-9):
            problems.append(f"{service.name}: cost {alloc.cost_per_hour} != {cost}")
        budget = service.budget_per_hour
        if budget is not None and cost > max(budget, pinned_cost) + MONEY_TOL:
            problems.append(f"{service.name}: {cost:.4f} $/h over its budget {budget}")
        if service.max_replicas is not None and sum(alloc.counts.values()) > max(
            service.max_replicas, sum(o.fixed or 0 for o in service.options)
        ):
            problems.append(f"{service.name}: more than maxReplicas {service.max_replicas}")
        if sum(alloc.counts.values()) < service.min_replicas and not alloc.reasons:
            problems.append(f"{service.name}: fewer than minReplicas without a reason")
        total += cost
        pinned_total += pinned_cost
    for pool in instance.pools:
        if pool_use[pool.name] != plan.pool_gpus.get(pool.name):
            problems.append(f"pool {pool.name}: reported {plan.pool_gpus.get(pool.name)} GPUs")
        if pool.gpus is not None and pool_use[pool.name] > max(pool.gpus, pinned[pool.name]):
            problems.append(f"pool {pool.name}: {pool_use[pool.name]} GPUs > {pool.gpus} free")
    budget = instance.budget_per_hour
    if budget is not None and total > max(budget, pinned_total) + MONEY_TOL:
        problems.append(f"cluster: {total:.4f} $/h over the budget {budget}")
    if not math.isclose(total, plan.cost_per_hour, rel_tol=1e-9, abs_tol=1e-9):
        problems.append(f"cost_per_hour {plan.cost_per_hour} != {total}")
    return problems


def _shape_problems(instance: JointInstance, plan: JointAllocation) -> list[str]:
    """Every service's plan names exactly its options."""
    problems = []
    for service in instance.services:
        alloc = plan.services[service.name]
        names = sorted(o.name for o in service.options)
        if sorted(alloc.counts) != names or sorted(alloc.share) != names:
            problems.append(f"{service.name}: options {sorted(alloc.counts)} != {names}")
    return problems
