"""Among a joint plan's equally cheap traffic splits, the one its replica counts alone decide.

The joint ILP fixes replica counts and cost; how each bucket is split across a service's options
is whichever optimal vertex the solver lands on, and it moves with anything else in the model
(churn terms once replicas run, a warm start). The same counts of the demo service were so
predicted to meet the SLO for 96% of requests in one pass and 64% in the next. These two LPs
derive the split from the counts and demand alone: first the least peak utilisation (load ÷
replicas) over the service's options, then, at that peak, each bucket as much as possible on the
options relatively fastest for it (Mélange §6.3: large requests on large GPUs), a routable
service's input row as one. Counts, cost and the traffic served of each bucket are unchanged.
"""

from __future__ import annotations

import pulp

from gpumix.plan.joint.instance import ServiceDemand
from gpumix.plan.joint.result import ServiceAllocation
from gpumix.plan.model import LOAD_TOL
from gpumix.plan.result import SolverName
from gpumix.plan.solvers import run
from gpumix.plan.validate import LOAD_CHECK_TOL


def balanced(
    service: ServiceDemand,
    alloc: ServiceAllocation,
    solver: SolverName = "highs",
    time_limit_s: float = 10.0,
) -> ServiceAllocation:
    """``alloc`` with its split re-derived from its counts (unchanged when an LP fails), one
    share per group of :meth:`ServiceDemand.groups` (a routable service's input row)."""
    rows, cols = service.shape
    names = [o.name for o in service.options]
    groups = service.groups()
    served = [
        sum(alloc.share.get(n, [[0.0] * cols] * rows)[g.buckets[0][0]][g.buckets[0][1]]
            for n in names)
        for g in groups
    ]  # fmt: skip
    pairs: dict[tuple[int, int], float] = {}
    """(option, group) → load of the group's whole traffic on one replica of the option."""
    for g, (buckets, options) in enumerate(groups):
        for o in options:
            if served[g] > 0 and alloc.counts.get(names[o], 0) > 0:
                loads = (service.slice_load(o, b) for b in buckets)
                pairs[o, g] = sum(x for x in loads if x is not None) * service.slice_factor
    if not pairs or any(f > 1e-9 and all(c != g for _, c in pairs) for g, f in enumerate(served)):
        return alloc
    problem = pulp.LpProblem(f"balance_{service.name}", pulp.LpMinimize)
    x = {(o, g): problem.add_variable(f"x_{o}_{g}", lowBound=0) for o, g in pairs}
    peak = problem.add_variable("peak", lowBound=0)
    for g, fraction in enumerate(served):
        here = [x[o, c] for o, c in pairs if c == g]
        if fraction > 0 and here:
            problem += pulp.lpSum(here) == fraction, f"served_{g}"
    for o, option in enumerate(service.options):
        terms = [weight * x[p, g] for (p, g), weight in pairs.items() if p == o]
        if terms:
            problem += pulp.lpSum(terms) <= alloc.counts[option.name] * peak, f"peak_{o}"
    if service.alone_miss_budget is not None:  # as the plan kept to it (model.py)
        misses = [
            sum(service.alone_miss_rate(o, b) for b in groups[g].buckets) * v
            for (o, g), v in x.items()
        ]
        limit = (service.alone_miss_budget + LOAD_TOL) * service.total_rate
        problem += pulp.lpSum(misses) <= limit, "alone_miss"
    problem += peak
    if run(problem, solver, time_limit_s).status != "optimal" or peak.value() is None:
        return alloc
    problem += peak <= (peak.value() or 0.0) + 1e-9, "least_peak"
    tput = [option.max_tput for option in service.options]
    fastest = {
        b: max(tput[o][b[0]][b[1]] for o, c in pairs if c == g)
        for g, group in enumerate(groups)
        if served[g] > 0
        for b in group.buckets
    }
    problem.sense = pulp.LpMaximize
    problem.setObjective(
        pulp.lpSum(
            service.rates[b[0]][b[1]] * tput[o][b[0]][b[1]] / fastest[b] * v
            for (o, g), v in x.items()
            for b in groups[g].buckets
        )
    )
    if run(problem, solver, time_limit_s).status != "optimal":
        return alloc
    share = {n: [[0.0] * cols for _ in range(rows)] for n in names}
    load = dict.fromkeys(names, 0.0)
    for (o, g), v in x.items():
        value = max(0.0, v.value() or 0.0)
        if value > 1e-9:
            for b in groups[g].buckets:
                share[names[o]][b[0]][b[1]] = value
            load[names[o]] += value * pairs[o, g]
    if any(
        load[n] > max(alloc.load[n], alloc.counts[n] * (1 + LOAD_CHECK_TOL)) for n in names
    ):  # within the LPs' tolerances, past what the validator accepts (beside an alone-miss
        # row, HiGHS split a plan loaded 1.0000004 to 1.0000014): keep the plan's split
        return alloc
    return alloc.model_copy(update={"share": share, "load": load})
