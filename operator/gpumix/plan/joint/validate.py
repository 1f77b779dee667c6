"""Solver-independent re-check of a joint plan (CP-SAT Primer style), plain arithmetic only.

Every property the issue asks of a plan is checked here, so tests and the operator catch a
modelling bug before it reaches a cluster: pools never exceeded, budgets respected, every served
bucket only on options that meet the SLO, load within replicas, shares + unserved = 1, never
fewer replicas than ``minReplicas`` without a reason.
"""

from __future__ import annotations

import math

from gpumix.plan.joint.instance import JointInstance, Objective
from gpumix.plan.joint.result import JointAllocation
from gpumix.plan.validate import LOAD_CHECK_TOL

MONEY_TOL = 1e-6


def validate_joint(instance: JointInstance, plan: JointAllocation) -> list[str]:
    problems: list[str] = []
    if sorted(plan.services) != sorted(s.name for s in instance.services):
        return [f"plan covers services {sorted(plan.services)}"]
    pool_use = {p.name: 0 for p in instance.pools}
    pinned = dict.fromkeys(pool_use, 0)
    total = 0.0
    pinned_total = 0.0
    min_cost = plan.objective is Objective.MIN_COST
    served = 1.0 if min_cost else (plan.throughput_scale or 0.0)  # max-throughput: α × demand
    for service in instance.services:
        alloc = plan.services[service.name]
        names = [o.name for o in service.options]
        if sorted(alloc.counts) != sorted(names) or sorted(alloc.share) != sorted(names):
            problems.append(f"{service.name}: options {sorted(alloc.counts)} != {sorted(names)}")
            continue
        rows, cols = service.shape
        totals = [list(row) for row in alloc.unserved]
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
                    if fraction < 0:
                        problems.append(f"{where} bucket ({i}, {j}): negative share")
                    s_factor = service.slice_factor
                    slice_load = service.slice_load(o, (i, j))
                    if slice_load is None:
                        problems.append(f"{where} bucket ({i}, {j}): routed where SLO is missed")
                        continue
                    load += served * fraction * s_factor * slice_load
            if load > count + LOAD_CHECK_TOL:
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
                if rate > 0 and not math.isclose(totals[i][j], 1.0, abs_tol=1e-6):
                    problems.append(
                        f"{service.name} bucket ({i}, {j}): shares + unserved = {totals[i][j]}"
                    )
                if rate == 0 and scale and totals[i][j] != 0:
                    problems.append(f"{service.name} bucket ({i}, {j}): traffic on an empty bucket")
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
