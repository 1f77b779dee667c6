"""Benders decomposition of the full-service min-cost stage (issue #5, "speed at scale").

The compact ILP (:mod:`gpumix.plan.joint.model`) carries every service's traffic split — one
continuous variable per (service, bucket, option), ~5,000 at Coral scale — into every node of
the branch-and-bound tree, and its LP bound is weak (the replica counts round up per service).
Only the replica counts are integer and only they couple services (pools, budgets), so the
problem splits:

- the *master* holds the counts and every constraint on them — pools, budgets, ``maxReplicas``,
  ``minReplicas``, pins, the churn penalty — built from the same constraint families as the
  compact model (:func:`gpumix.plan.joint.model.build` with ``routing=False``), ~100 integer
  variables;
- each service's *routing LP* asks whether given counts can carry its traffic:
  ``min Σ_o t_o`` s.t. ``Σ_o x[b,o] = 1`` per bucket, ``Σ_b L[b,o]·x[b,o] − t_o ≤ y_o`` per
  option, ``x[b,o] ≤ y_o`` (shares only on options with a replica: the compact model's
  ``add_bought_only``, which capacity alone does not enforce for a bucket whose load is below
  the LP tolerance), with ``L[b,o] = rate_b / MaxTput[o,b]`` (Mélange §5.4.2's load of the whole
  bucket, its slices counted as the compact model's ``capacity_loads`` counts them; ``b``
  ranges over :meth:`~gpumix.plan.joint.instance.ServiceDemand.groups`, and a routable
  service's row loads an option with the sum of its buckets' loads). When the
  overload ``Σ t`` is positive its dual (row duals ``μ``, bound duals ``π``) gives a *routing
  cut* ``Σ_o (μ_o + Σ_b π[b,o])·y_o ≥ Σ_b min_o (μ_o·L[b,o] + π[b,o])``, valid for every count
  vector that can carry the traffic (weak duality, checked by construction below, whatever the
  LP solver's accuracy). Counts that leave a bucket no replica at all get the *coverage cut*
  ``Σ_{o serves b} y_o ≥ 1`` instead (also a row of the master).

The cuts describe each service's feasible counts exactly (the projection of the compact model's
capacity and assignment rows), so the loop — cut the master's LP relaxation first, then solve the
master MIP and add cuts at its solutions until none is violated — ends with a plan the compact
model would also accept, and the master's bound is a bound on the compact optimum: the reported
gap is a true gap. The master's B&B nodes are tiny LPs, and HiGHS's own cuts on the routing rows
tighten it where the compact model's bound stayed weak (``bench/joint.py``: ~1 s instead of ~15 s).

HiGHS only (the routing LPs are re-solved in place through highspy); anything unexpected —
no highspy, a cut that does not cut, the time limit — returns ``None`` and the caller solves
the compact model, so this is a speed-up, never a different answer.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pulp

from gpumix.plan.instance import Bucket
from gpumix.plan.joint import model as jm
from gpumix.plan.joint.instance import JointInstance, PoolLimit, ServiceDemand
from gpumix.plan.model import LOAD_TOL, MIN_CAPACITY_LOAD, capacity_loads
from gpumix.plan.result import SolveResult
from gpumix.plan.solvers import highs_available, run

FEASIBLE_OVERLOAD = 1e-7
"""Total overload (replica units) below which counts carry a service's traffic: the HiGHS LP
tolerance, well inside the validator's ``LOAD_CHECK_TOL`` per option."""
MIN_CUT_COEFFICIENT = MIN_CAPACITY_LOAD
"""Least coefficient of a replica count in a routing cut (smaller ones are raised to it)."""
COVER_TOL = 1e-9
"""Shortfall of a bucket's coverage ``Σ_o min(1, y_o)`` below 1 that still counts as covered."""
LP_PHASE_VIOLATION = 1e-3
"""Relative violation below which the LP phase stops adding cuts (the MIP phase adds any)."""
SAVED_VIOLATION = 1e-6
"""Relative violation for cuts at the master's earlier (non-final) improving solutions."""
ABS_GAP = 1e-6
"""Absolute gap at which the loop stops, HiGHS's default ``mip_abs_gap`` (it stops there too)."""
MIP_PHASE_LOOSE_GAP = 0.05
"""Gap of the master solves until one of its solutions carries every service's traffic."""
LP_PHASE_ROUNDS = 60
MIP_PHASE_ROUNDS = 60


@dataclass
class Cut:
    coefficients: dict[int, float]
    """Option index → ``μ_o``."""
    rhs: float

    def violation(self, counts: dict[int, float]) -> float:
        return self.rhs - sum(mu * counts.get(o, 0.0) for o, mu in self.coefficients.items())


class RoutingLP:
    """One service's traffic split for given replica counts, re-solved in place (highspy)."""

    def __init__(self, service: ServiceDemand, options: list[int]) -> None:
        import highspy  # noqa: PLC0415 - only on the HiGHS path

        self.service = service
        self.options = options
        self.groups = service.groups()
        loads: dict[tuple[Bucket, int], float] = {}
        for o in options:
            # Slice loads as the compact model's capacity rows count them (capacity_loads):
            # a tiny bucket's load is then either clearly carried or clearly over.
            served = [(b, service.slice_load(o, b)) for b in service.buckets_with_traffic()]
            row = [(b, load) for b, load in served if load is not None]
            counted = capacity_loads([load for _, load in row])
            for (b, _), load in zip(row, counted, strict=True):
                loads[b, o] = load * service.slice_factor
        # A group's share on an option loads it with every bucket of the group.
        self.pairs: list[tuple[int, int]] = [
            (g, o) for g, group in enumerate(self.groups) for o in options if o in group.options
        ]
        self.loads = {
            (g, o): sum(loads[b, o] for b in self.groups[g].buckets) for g, o in self.pairs
        }
        # The alone-miss budget (the compact model's add_alone_miss_budgets), in shares of the
        # demand: Σ c[g,o]·x[g,o] − m ≤ β, its excess m costing as overload does.
        budget = service.alone_miss_budget
        total = service.total_rate
        self.budget = None if budget is None or total <= 0 else budget + LOAD_TOL
        self.miss = np.array([
            sum(service.alone_miss_rate(o, b) for b in self.groups[g].buckets) / total
            if self.budget is not None else 0.0
            for g, o in self.pairs
        ])  # fmt: skip
        n_g, n_o, n_m = len(self.groups), len(options), int(self.budget is not None)
        h: Any = cast(Any, highspy).Highs()  # highspy's stubs lack the bulk calls used here
        h.setOptionValue("output_flag", False)
        inf = highspy.kHighsInf
        rows_lo = np.concatenate([np.ones(n_g), np.full(n_o + n_m, -inf)])
        rows_hi = np.concatenate([np.ones(n_g), np.zeros(n_o), np.full(n_m, self.budget or 0)])
        h.addRows(n_g + n_o + n_m, rows_lo, rows_hi, 0, np.zeros(0, np.int32),
                  np.zeros(0, np.int32), np.zeros(0))  # fmt: skip
        # t_o (overload, cost 1), x[g,o] (share of group g on option o, cost 0), then m.
        option_row = {o: n_g + i for i, o in enumerate(options)}
        budget_row = n_g + n_o
        starts: list[int] = []
        index: list[int] = []
        value: list[float] = []
        for o in options:
            starts.append(len(index))
            index.append(option_row[o])
            value.append(-1.0)
        for (g, o), miss in zip(self.pairs, self.miss, strict=True):
            starts.append(len(index))
            index += [g, option_row[o]]
            value += [1.0, self.loads[g, o]]
            if miss > 0:
                index.append(budget_row)
                value.append(float(miss))
        if n_m:
            starts.append(len(index))
            index.append(budget_row)
            value.append(-1.0)
        n_cols = n_o + len(self.pairs) + n_m
        costs = np.concatenate([np.ones(n_o), np.zeros(len(self.pairs)), np.ones(n_m)])
        lower, upper = np.zeros(n_cols), np.full(n_cols, inf)
        h.addCols(n_cols, costs, lower, upper, len(index), np.array(starts, np.int32),
                  np.array(index, np.int32), np.array(value))  # fmt: skip
        self.highs = h
        self.pair_group = np.array([g for g, _ in self.pairs], np.int64)
        self.pair_option = np.array([option_row[o] - n_g for _, o in self.pairs], np.int64)
        self.pair_load = np.array([self.loads[pair] for pair in self.pairs])
        self.rows = np.array([option_row[o] for o in options], np.int32)
        self.pair_cols = np.arange(n_o, n_o + len(self.pairs), dtype=np.int32)
        self.n_g = n_g
        self._inf = inf

    def check(self, counts: dict[int, float]) -> tuple[float, Cut | None]:
        """Overload of the best split under ``counts`` and, when above
        :data:`FEASIBLE_OVERLOAD`, the routing cut (``inf`` and no cut when the LP has no
        answer: the caller gives up)."""
        if not self.groups:
            return 0.0, None
        y = np.array([counts.get(o, 0.0) for o in self.options])
        uncovered = self._uncovered(y)
        if uncovered is not None:
            return uncovered
        self.highs.changeRowsBounds(len(self.rows), self.rows, np.full(len(y), -self._inf), y)
        # x[g,o] ≤ y_o where y_o < 1 (at 1 and above, Σ_o x[g,o] = 1 bounds it already).
        y_pair = y[self.pair_option]
        bounded = y_pair < 1.0
        upper = np.where(bounded, y_pair, self._inf)
        self.highs.changeColsBounds(
            len(self.pair_cols), self.pair_cols, np.zeros(len(upper)), upper
        )
        self.highs.run()
        if self.highs.modelStatusToString(self.highs.getModelStatus()) != "Optimal":
            return math.inf, None
        overload = float(self.highs.getInfo().objective_function_value)
        if overload <= FEASIBLE_OVERLOAD:
            return overload, None
        solution = self.highs.getSolution()
        n_o = len(self.options)
        row_dual = np.maximum(0.0, -np.asarray(solution.row_dual))
        mu = row_dual[self.n_g : self.n_g + n_o]
        nu = float(row_dual[self.n_g + n_o]) if self.budget is not None else 0.0
        col_dual = np.asarray(solution.col_dual)[n_o : n_o + len(self.pairs)]
        pi = np.where(bounded, np.maximum(0.0, -col_dual), 0.0)
        # θ_g = min_o (μ_o·L[g,o] + π[g,o] + ν·c[g,o]) makes (θ, μ, π, ν) dual feasible, and
        # x[g,o] ≤ y_o holds wherever traffic is carried, so the cut (its right-hand side less
        # ν·β) is valid by construction.
        theta = np.full(self.n_g, np.inf)
        np.minimum.at(
            theta, self.pair_group, mu[self.pair_option] * self.pair_load + pi + nu * self.miss
        )
        coefficients = mu.copy()
        np.add.at(coefficients, self.pair_option, pi)
        # Raising a coefficient only weakens the cut; a tiny one (a tiny bucket's π) is what
        # HiGHS's presolve misreads next to whole replicas (see MIN_CAPACITY_LOAD).
        coefficients = np.where(coefficients > 0, np.maximum(coefficients, MIN_CUT_COEFFICIENT), 0)
        rhs = float(theta.sum()) - nu * (self.budget or 0.0)
        return overload, Cut(
            {o: float(c) for o, c in zip(self.options, coefficients, strict=True) if c > 0}, rhs
        )

    def _uncovered(self, y: np.ndarray[Any, Any]) -> tuple[float, Cut] | None:
        """The coverage cut of the first group that ``y`` leaves without a replica (the
        shares ``x[g,o] ≤ y_o`` cannot sum to 1), with how much is missing."""
        cover = np.zeros(self.n_g)
        np.add.at(cover, self.pair_group, np.minimum(1.0, y[self.pair_option]))
        short = np.flatnonzero(cover < 1.0 - COVER_TOL)
        if not len(short):
            return None
        g = int(short[0])
        options = {self.options[int(k)] for k in self.pair_option[self.pair_group == g]}
        return 1.0 - float(cover[g]), Cut(dict.fromkeys(sorted(options), 1.0), 1.0)

    def shares(self) -> dict[tuple[Bucket, int], float]:
        """``x[b,o]`` of the last solve (call after a feasible :meth:`check`; a group's share
        for each of its buckets), each group's scaled to sum to exactly 1: HiGHS's tolerances
        apply to its scaled LP, and a group whose column is scaled up (a tiny load) may come
        back summing to 1 ± 1e-6."""
        values = self.highs.getSolution().col_value
        n_o = len(self.options)
        x = np.maximum(0.0, np.asarray(values[n_o : n_o + len(self.pairs)], dtype=float))
        total = np.zeros(self.n_g)
        np.add.at(total, self.pair_group, x)
        x /= np.where(total > 0, total, 1.0)[self.pair_group]
        return {
            (b, o): float(x[i])
            for i, (g, o) in enumerate(self.pairs)
            for b in self.groups[g].buckets
        }


_HIGHS_INF = 1e30
"""highspy's infinity (``kHighsInf`` is ``inf``; any bound ≥ 1e20 is infinite to HiGHS)."""


def _relaxation(problem: pulp.LpProblem) -> tuple[Any, dict[str, int]]:
    """``problem``'s LP relaxation as a highspy model, and each variable's column."""
    import highspy  # noqa: PLC0415 - only on the HiGHS path

    h: Any = cast(Any, highspy).Highs()
    h.setOptionValue("output_flag", False)
    variables = problem.variables()
    column = {v.name: i for i, v in enumerate(variables)}
    n = len(variables)
    costs = np.array([float(problem.objective.get(v, 0.0)) for v in variables])
    lower = np.array([-_HIGHS_INF if v.lowBound is None else float(v.lowBound) for v in variables])
    upper = np.array([_HIGHS_INF if v.upBound is None else float(v.upBound) for v in variables])
    h.addCols(n, costs, lower, upper, 0, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))
    for constraint in problem.constraints():
        items = [(column[v.name], float(a)) for v, a in constraint.items() if a != 0]
        low, high = constraint.getLb(), constraint.getUb()
        h.addRow(
            -_HIGHS_INF if low is None else float(low),
            _HIGHS_INF if high is None else float(high),
            len(items),
            np.array([i for i, _ in items], np.int32),
            np.array([a for _, a in items]),
        )
    return h, column


@dataclass
class BendersSolution:
    counts: dict[jm.Key, int]
    placement: dict[jm.PlaceKey, float]
    """Slices (``n ∈ [0, S]``) as in the compact model's slice placement."""
    result: SolveResult
    master_solves: int = 0
    cuts: int = 0
    stages: list[SolveResult] = field(default_factory=list)


def applicable(instance: JointInstance) -> bool:
    return highs_available() and not any(s.unservable() for s in instance.services)


def solve_benders(
    instance: JointInstance,
    time_limit_s: float,
    gap_rel: float,
) -> BendersSolution | SolveResult | None:
    """The cheapest plan serving every demand in full.

    Returns the plan, or the master's :class:`SolveResult` when it is infeasible (then the
    compact model is infeasible too: the master is its relaxation), or ``None`` to fall back.
    """
    start = time.perf_counter()
    deadline = start + time_limit_s
    master = jm.build(instance, fractional=False, partial=False, routing=False)
    objective = jm.cost_expr(instance, master) + jm.churn_expr(instance, master)
    master.problem.setObjective(objective)
    routing = {
        si: RoutingLP(service, [o for (s, o) in master.counts if s == si])
        for si, service in enumerate(instance.services)
    }
    cuts = 0
    lp_solves = 0
    new_cuts: list[tuple[int, Cut]] = []
    stages: list[SolveResult] = []
    carried: dict[int, set[tuple[float, ...]]] = {si: set() for si in routing}
    """Count vectors already known to carry a service's traffic (not checked again)."""

    def separate(values: dict[jm.Key, float], threshold: float) -> tuple[int, set[int]] | None:
        """Add the cuts violated at ``values`` by more than ``threshold`` (relative); also say
        which services ``values`` leave overloaded. ``None`` when an overloaded service's cut
        does not cut at all (numerical trouble: give up rather than loop)."""
        nonlocal cuts
        added, overloaded = 0, set()
        for si, lp in routing.items():
            counts = {o: v for (s, o), v in values.items() if s == si}
            if tuple(counts.values()) in carried[si]:
                continue
            overload, cut = lp.check(counts)
            if cut is None:
                if overload > FEASIBLE_OVERLOAD:
                    return None  # the routing LP had no answer
                carried[si].add(tuple(counts.values()))
                continue
            overloaded.add(si)
            violation = cut.violation(counts)
            if violation <= 0.0:
                return None
            if violation <= threshold * max(1.0, abs(cut.rhs)):
                continue
            row = pulp.lpSum(mu * master.counts[si, o] for o, mu in cut.coefficients.items())
            master.problem += row >= cut.rhs, f"route_s{si}_c{cuts}"
            new_cuts.append((si, cut))
            cuts += 1
            added += 1
        return added, overloaded

    def solve(integer: bool, gap: float, start: dict[str, float] | None) -> SolveResult | None:
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        cat = pulp.LpInteger if integer else pulp.LpContinuous
        for var in master.counts.values():
            var.cat = cat
        options: dict[str, bool | int | float | str] = {"mip_improving_solution_save": integer}
        result = run(master.problem, "highs", left, gap, highs_options=options, start=start)
        stages.append(result)
        return result

    variables = master.problem.variables()

    def plan_cost(counts: dict[jm.Key, float]) -> float:
        """The master's objective at ``counts`` with the churn auxiliaries at their least."""
        total = 0.0
        for (si, o), y in counts.items():
            service = instance.services[si]
            option = service.options[o]
            total += (option.cost_per_hour + option.price_per_hour) * y
            if (si, o) in master.added:
                weight = max(service.churn_penalty, jm.TIE_BREAK)
                total += weight * option.cost_per_hour * max(0.0, y - option.running)
        return total

    def mip_start(counts: dict[jm.Key, float]) -> dict[str, float]:
        start = {master.counts[k].name: y for k, y in counts.items()}
        for k, added in master.added.items():
            start[added.name] = max(0.0, counts[k] - instance.services[k[0]].options[k[1]].running)
        return start

    def repair(counts: dict[jm.Key, float], overloaded: set[int]) -> dict[jm.Key, float] | None:
        """``counts`` with the ``overloaded`` services re-planned (compact model) in the pools
        and budget the other services leave; ``None`` when they do not fit there."""
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        others = {k: y for k, y in counts.items() if k[0] not in overloaded}
        used = dict.fromkeys((p.name for p in instance.pools), 0)
        spent = 0.0
        for (si, o), y in others.items():
            option = instance.services[si].options[o]
            used[option.pool] += round(y) * option.gpus_per_replica
            spent += y * option.cost_per_hour
        order = sorted(overloaded)
        sub = JointInstance(
            services=[instance.services[si] for si in order],
            pools=[
                PoolLimit(
                    name=p.name, gpus=None if p.gpus is None else max(0, p.gpus - used[p.name])
                )
                for p in instance.pools
            ],
            budget_per_hour=None
            if instance.budget_per_hour is None
            else max(0.0, instance.budget_per_hour - spent),
            allow_partial=False,
        )
        model = jm.build(sub, fractional=False, partial=False)
        model.problem.setObjective(jm.cost_expr(sub, model) + jm.churn_expr(sub, model))
        result = run(model.problem, "highs", left, gap_rel)
        if result.status not in ("optimal", "feasible"):
            return None
        out = dict(others)
        for j, si in enumerate(order):
            for o in range(len(instance.services[si].options)):
                if (si, o) in master.counts:
                    var = model.counts.get((j, o))
                    out[si, o] = float(round(var.value() or 0.0)) if var is not None else 0.0
        return out

    pins = _pinned(instance, master)
    if pins is not None:
        # Nothing to search: the counts are the pins, if they keep the master's rows (pools,
        # budgets, replica bounds, coverage) and carry every service's traffic.
        for key, count in pins.items():
            master.counts[key].varValue = count
        if not master.problem.valid(FEASIBLE_OVERLOAD):
            return SolveResult(status="infeasible", solver="highs", objective=None, gap=None,
                               seconds=time.perf_counter() - start,
                               message="the pinned counts break a limit")  # fmt: skip
        cost = plan_cost(pins)
        pinned = SolveResult(status="optimal", solver="highs", objective=cost, gap=0.0,
                             seconds=0.0, message="every count pinned")  # fmt: skip
        return _solution(instance, routing, pins, cost=cost, bound=cost, result=pinned,
                         start=start, lp_solves=lp_solves, cuts=cuts, stages=stages)  # fmt: skip
    # LP phase: outer-approximate each service's feasible counts around the LP optimum, on the
    # master's LP relaxation held in highspy (cuts appended in place, dual simplex warm starts).
    relaxation, column = _relaxation(master.problem)
    for _ in range(LP_PHASE_ROUNDS):
        if time.perf_counter() > deadline:
            return None
        relaxation.run()
        lp_solves += 1
        status = relaxation.modelStatusToString(relaxation.getModelStatus())
        if status == "Infeasible":
            seconds = time.perf_counter() - start
            return SolveResult(status="infeasible", solver="highs", objective=None, gap=None,
                               seconds=seconds, message="master LP infeasible")  # fmt: skip
        if status != "Optimal":
            return None
        col_value = relaxation.getSolution().col_value
        values = {k: float(col_value[column[v.name]]) for k, v in master.counts.items()}
        first = len(new_cuts)
        checked = separate(values, LP_PHASE_VIOLATION)
        if checked is None or not checked[0]:
            break
        for si, cut in new_cuts[first:]:
            index = np.array(
                [column[master.counts[si, o].name] for o in cut.coefficients], np.int32
            )
            coefficients = np.array(list(cut.coefficients.values()))
            relaxation.addRow(cut.rhs, _HIGHS_INF, len(index), index, coefficients)
    # MIP phase: cut the integer solutions that cannot carry their traffic, keep the best that
    # can (the incumbent, also the next solve's MIP start) and stop once it is within
    # ``gap_rel`` of the master's bound. Rounds stop at a loose gap until one carries.
    best: dict[jm.Key, float] | None = None
    best_cost = math.inf
    bound = -math.inf
    loose = max(gap_rel, MIP_PHASE_LOOSE_GAP)
    for _ in range(MIP_PHASE_ROUNDS):
        result = solve(True, loose if best is None else gap_rel, mip_start(best) if best else None)
        if result is None or result.solver != "highs":
            return None
        if result.status == "infeasible":
            return result
        if result.status not in ("optimal", "feasible"):
            return None
        highs = master.problem.solverModel
        bound = max(bound, float(highs.getInfo().mip_dual_bound))
        # The improving solutions HiGHS kept, and its answer (which it does not always keep).
        found = [[float(x) for x in saved.col_value] for saved in highs.getSavedMipSolutions()]
        found.append([float(v.value() or 0.0) for v in variables])
        progress = False
        for n, col_value in enumerate(found):
            counts = {k: float(round(col_value[v.index])) for k, v in master.counts.items()}
            checked = separate(counts, SAVED_VIOLATION)
            if checked is None:
                return None
            progress |= checked[0] > 0
            if checked[1] and n == len(found) - 1:
                # HiGHS's answer overloads a few services: re-plan just those in what the
                # others leave (a feasible plan, usually close to the master's bound).
                repaired = repair(counts, checked[1])
                recheck = separate(repaired, SAVED_VIOLATION) if repaired else None
                if repaired is not None and recheck is not None and not recheck[1]:
                    counts, checked = repaired, recheck
            cost = plan_cost(counts)
            if not checked[1] and cost < best_cost:
                best_cost, best, progress = cost, counts, True
        if best is not None and best_cost - bound <= max(gap_rel * abs(best_cost), ABS_GAP):
            break
        if not progress:
            return None  # no new cut, no better plan: the next master solve would be this one
    else:
        return None
    assert best is not None
    return _solution(instance, routing, best, cost=best_cost, bound=bound, result=result,
                     start=start, lp_solves=lp_solves, cuts=cuts, stages=stages,
                     gap_rel=gap_rel)  # fmt: skip


def _pinned(instance: JointInstance, master: jm.JointModel) -> dict[jm.Key, float] | None:
    """The master's counts as its pins fix them, when pins fix every one; else ``None``. The
    operator keeps most services on their plans and solves each such service alone, pinned
    (:func:`gpumix.plan.joint.solve._own_plan_of`): at 500 services the first change after a
    rollout searched 499 masters without a choice in them (3 s, #19)."""
    if len(master.problem.variables()) != len(master.counts):
        return None  # a churn or shortfall variable: something is not pinned
    pins = {}
    for si, o in master.counts:
        fixed = instance.services[si].options[o].fixed
        if fixed is None:
            return None
        pins[si, o] = float(fixed)
    return pins


def _solution(
    instance: JointInstance,
    routing: dict[int, RoutingLP],
    counts: dict[jm.Key, float],
    *,
    cost: float,
    bound: float,
    result: SolveResult,
    start: float,
    lp_solves: int,
    cuts: int,
    stages: list[SolveResult],
    gap_rel: float = 0.0,
) -> BendersSolution | None:
    """The plan at ``counts`` with each service's split from its routing LP; ``None`` (fall
    back) when the LP finds them overloaded after all."""
    placement: dict[jm.PlaceKey, float] = {}
    for si, lp in routing.items():
        overload, _ = lp.check({o: v for (s, o), v in counts.items() if s == si})
        if overload > FEASIBLE_OVERLOAD:
            return None
        s_factor = instance.services[si].slice_factor
        for (b, o), share in lp.shares().items():
            placement[si, b, o] = min(1.0, share) * s_factor
    gap = max(0.0, (cost - bound) / abs(cost)) if cost else 0.0
    summary = result.model_copy(update={
        "status": "optimal" if gap <= gap_rel + 1e-12 else "feasible",
        "objective": cost,
        "gap": gap,
        "seconds": time.perf_counter() - start,
        "message": f"Benders: {lp_solves} master LPs, {len(stages)} master MIPs, "
        f"{cuts} routing cuts; "
        f"{result.message}",
    })  # fmt: skip
    return BendersSolution(
        counts={k: round(v) for k, v in counts.items()},
        placement=placement,
        result=summary,
        master_solves=lp_solves + len(stages),
        cuts=cuts,
        stages=stages,
    )
