"""Among a joint plan's equally cheap traffic splits, the one its replica counts alone decide.

The joint ILP fixes replica counts and cost; how each bucket is split across a service's options
is whichever optimal vertex the solver lands on, and it moves with anything else in the model
(churn terms once replicas run, a warm start). The same counts of the demo service were so
predicted to meet the SLO for 96% of requests in one pass and 64% in the next. These two LPs
derive the split from the counts and demand alone: first the least peak utilisation (load ÷
replicas) over the service's options, then, at that peak, each bucket as much as possible on the
options relatively fastest for it (Mélange §6.3: large requests on large GPUs). Counts, cost and
the traffic served of each bucket are unchanged.
"""

from __future__ import annotations

import pulp

from gpumix.plan.joint.instance import ServiceDemand
from gpumix.plan.joint.result import ServiceAllocation
from gpumix.plan.result import SolverName
from gpumix.plan.solvers import run


def balanced(
    service: ServiceDemand,
    alloc: ServiceAllocation,
    solver: SolverName = "highs",
    time_limit_s: float = 10.0,
) -> ServiceAllocation:
    """``alloc`` with its split re-derived from its counts (unchanged when an LP fails)."""
    rows, cols = service.shape
    names = [o.name for o in service.options]
    served = {
        (i, j): sum(alloc.share.get(n, [[0.0] * cols] * rows)[i][j] for n in names)
        for i in range(rows)
        for j in range(cols)
    }
    pairs: dict[tuple[int, tuple[int, int]], float] = {}
    """(option, bucket) → load of its whole traffic on one replica of the option."""
    for b, fraction in served.items():
        for o, option in enumerate(service.options):
            slice_load = service.slice_load(o, b)
            if fraction > 0 and alloc.counts.get(option.name, 0) > 0 and slice_load is not None:
                pairs[o, b] = slice_load * service.slice_factor
    if not pairs or any(f > 1e-9 and all(c != b for _, c in pairs) for b, f in served.items()):
        return alloc
    problem = pulp.LpProblem(f"balance_{service.name}", pulp.LpMinimize)
    x = {(o, b): problem.add_variable(f"x_{o}_{b[0]}_{b[1]}", lowBound=0) for o, b in pairs}
    peak = problem.add_variable("peak", lowBound=0)
    for b, fraction in served.items():
        here = [x[o, c] for o, c in pairs if c == b]
        if fraction > 0 and here:
            problem += pulp.lpSum(here) == fraction, f"served_{b[0]}_{b[1]}"
    for o, option in enumerate(service.options):
        terms = [weight * x[p, b] for (p, b), weight in pairs.items() if p == o]
        if terms:
            problem += pulp.lpSum(terms) <= alloc.counts[option.name] * peak, f"peak_{o}"
    problem += peak
    if run(problem, solver, time_limit_s).status != "optimal" or peak.value() is None:
        return alloc
    problem += peak <= (peak.value() or 0.0) + 1e-9, "least_peak"
    fastest = {
        b: max(service.options[o].max_tput[b[0]][b[1]] for o, c in pairs if c == b)
        for b in served
        if served[b] > 0
    }
    problem.sense = pulp.LpMaximize
    problem.setObjective(
        pulp.lpSum(
            service.rates[b[0]][b[1]] * service.options[o].max_tput[b[0]][b[1]] / fastest[b] * v
            for (o, b), v in x.items()
        )
    )
    if run(problem, solver, time_limit_s).status != "optimal":
        return alloc
    share = {n: [[0.0] * cols for _ in range(rows)] for n in names}
    load = dict.fromkeys(names, 0.0)
    for (o, b), v in x.items():
        value = max(0.0, v.value() or 0.0)
        if value > 1e-9:
            share[names[o]][b[0]][b[1]] = value
            load[names[o]] += value * pairs[o, b]
    return alloc.model_copy(update={"share": share, "load": load})
