"""Plans as people and programs read them: a text table and a JSON object."""

from typing import Any

from gpumix.attainment import KV_HEADROOM, PredictedAttainment, PromisedPlan
from gpumix.plan import Allocation, AllocationInstance, Plan
from gpumix.plan.joint import JointAllocation


def plan_json(plan: Plan) -> dict[str, Any]:
    """`gpumix plan --output json`: stable keys for scripts."""
    alloc = plan.allocation
    return {
        "status": alloc.result.status if alloc else "infeasible",
        "allocation": dict(alloc.counts) if alloc else {},
        "cost_per_hour": round(alloc.cost_per_hour, 6) if alloc else None,
        "baselines": {
            n: (round(b.cost_per_hour, 6) if b else None) for n, b in plan.baselines.items()
        },
        "savings": {n: (None if s is None else round(s, 6)) for n, s in plan.savings.items()},
        "solve_seconds": round(alloc.result.seconds, 6) if alloc else None,
        "solver": alloc.result.solver if alloc else None,
        "gap": alloc.result.gap if alloc else None,
    }


def _counts(alloc: Allocation) -> str:
    return ", ".join(f"{n}×{c}" for n, c in alloc.counts.items() if c) or "nothing"


def plan_table(
    title: str, plan: Plan, instance: AllocationInstance, unit_gpus: dict[str, int] | None = None
) -> str:
    """A readable summary: the mix per option, $/h, every single-type baseline and the saving."""
    unit_gpus = unit_gpus or {}
    price = {g.name: g.cost_per_hour for g in instance.gpus}
    lines = [title]
    alloc = plan.allocation
    if alloc is None:
        lines.append("  no feasible allocation: the availability caps are too tight for the demand")
    else:
        lines.append(f"  {'pool':<16}{'replicas':>9}{'GPUs':>6}{'load':>8}{'$/h':>10}")
        for name, count in alloc.counts.items():
            gpus = count * unit_gpus.get(name, 1)
            load = alloc.load.get(name, 0.0)
            lines.append(f"  {name:<16}{count:>9}{gpus:>6}{load:>8.2f}{count * price[name]:>10.3f}")
        total_gpus = sum(c * unit_gpus.get(n, 1) for n, c in alloc.counts.items())
        lines.append(
            f"  {'total':<16}{sum(alloc.counts.values()):>9}{total_gpus:>6}{'':>8}"
            f"{alloc.cost_per_hour:>10.3f}"
        )
        r = alloc.result
        gap = "" if r.gap is None else f", gap {r.gap:.2g}"
        lines.append(f"  solved in {r.seconds:.3f} s ({r.solver}, {r.status}{gap})")
    lines.append("  single-type baselines (Mélange §6.1):")
    for name, base in plan.baselines.items():
        if base is None:
            lines.append(f"    {name:<16}cannot serve this workload alone")
            continue
        saving = plan.savings.get(name)
        note = "" if saving is None else f"  (the mix saves {100 * saving:.1f}%)"
        lines.append(f"    {name:<16}{_counts(base):<20}{base.cost_per_hour:>9.3f} $/h{note}")
    return "\n".join(lines)


def joint_json(plan: JointAllocation, name: str, baselines: Plan | None) -> dict[str, Any]:
    """One service of a joint plan with `plan_json`'s keys, plus what it leaves unserved and
    the joint solve it came from (`gpumix plan` with several LLMServices)."""
    alloc = plan.services[name]
    result = plan.result
    status = "partial" if alloc.short else result.status
    return {
        "status": status,
        "allocation": dict(alloc.counts),
        "cost_per_hour": round(alloc.cost_per_hour, 6),
        "baselines": {
            n: (round(b.cost_per_hour, 6) if b else None)
            for n, b in (baselines.baselines.items() if baselines else [])
        },
        "solve_seconds": round(result.seconds, 6),
        "solver": result.solver,
        "gap": result.gap,
        "unserved_fraction": round(alloc.unserved_fraction, 6),
        "reasons": alloc.reasons,
        "joint": {
            "objective": plan.objective.value,
            "cost_per_hour": round(plan.cost_per_hour, 6),
            "throughput_scale": plan.throughput_scale,
            "pool_gpus": plan.pool_gpus,
        },
    }


def joint_table(
    titles: dict[str, str], plan: JointAllocation, units: dict[str, dict[str, int]]
) -> str:
    """Every service's mix in the joint plan, then the plan's totals."""
    lines = []
    for name, title in titles.items():
        alloc = plan.services[name]
        lines.append(title)
        lines.append(f"  {'option':<16}{'replicas':>9}{'GPUs':>6}{'load':>8}")
        for option, count in alloc.counts.items():
            if count:
                gpus = count * units[name].get(option, 1)
                lines.append(f"  {option:<16}{count:>9}{gpus:>6}{alloc.load[option]:>8.2f}")
        lines.append(f"  {'$/h':<16}{alloc.cost_per_hour:>23.3f}")
        if alloc.short:
            lines.append(
                f"  unserved: {100 * alloc.unserved_fraction:.1f}% ({'; '.join(alloc.reasons)})"
            )
        elif alloc.reasons:  # all traffic served, the minReplicas floor is not
            lines.append(f"  note: {'; '.join(alloc.reasons)}")
    r = plan.result
    gap = "" if r.gap is None else f", gap {r.gap:.2g}"
    scale = "" if plan.throughput_scale is None else f", throughput ×{plan.throughput_scale:.3g}"
    used = ", ".join(f"{p} {g}" for p, g in plan.pool_gpus.items() if g)
    lines.append(f"joint plan ({plan.objective.value}): {plan.cost_per_hour:.3f} $/h{scale}; "
                 f"GPUs {used or 'none'}")  # fmt: skip
    lines.append(f"  solved in {r.seconds:.3f} s ({r.solver}, {r.status}{gap})")
    return "\n".join(lines)


def _attainment_json(p: PredictedAttainment) -> dict[str, Any]:
    return {
        "met": round(p.met, 6),
        "tpot": round(p.tpot, 6),
        "ttft": None if p.ttft is None else round(p.ttft, 6),
        "alone": round(p.alone, 6),
        "requests": p.requests,
        "pools": {n: round(a.met, 6) for n, a in p.pools.items()},
    }


def promise_json(promised: PromisedPlan) -> dict[str, Any]:
    """`plan_json`'s keys plus the plan's number: its predicted attainment and target."""
    out = plan_json(promised.plan)
    alloc = promised.plan.allocation
    out.update(
        {
            "planner": promised.planner,
            "attainment_target": promised.target,
            "predicted_attainment": None
            if promised.predicted is None
            else _attainment_json(promised.predicted),
            "baseline_attainment": {
                n: None if a is None else round(a, 6)
                for n, a in promised.baseline_attainment.items()
            },
            "derating": {n: round(f, 6) for n, f in promised.derating.items()},
            "planning_rounds": promised.rounds,
            "share": {} if alloc is None else alloc.share,
        }
    )
    if promised.predicted is not None and not promised.reached:
        out["status"] = "below_target"
    return out


def promise_table(
    title: str,
    promised: PromisedPlan,
    instance: AllocationInstance,
    unit_gpus: dict[str, int] | None = None,
) -> str:
    """`plan_table` with the predicted attainment of the mix and of each baseline."""
    lines = plan_table(title, promised.plan, instance, unit_gpus).splitlines()
    p = promised.predicted
    if p is not None:
        ttft = "" if p.ttft is None else f", TTFT {100 * p.ttft:.2f}%"
        verdict = "meets" if promised.reached else "BELOW"
        # Below the target, say how much of the shortfall no capacity recovers, and name the
        # pools whose KV cache is past the headroom (the promise fails there at any attainment).
        alone = "" if promised.reached else f"; {100 * p.alone:.2f}% miss even alone"
        alone += "".join(
            f"; {pool}'s KV cache {100 * p.pools[pool].kv_usage:.0f}% full on average "
            f"(at most {100 * KV_HEADROOM:.0f}%)"
            for pool in p.kv_bound()
        )
        lines.insert(
            -len(promised.plan.baselines) - 1,
            f"  predicted attainment {100 * p.met:.2f}% ({verdict} the {100 * promised.target:g}% "
            f"target; TPOT {100 * p.tpot:.2f}%{ttft}{alone}; {p.requests} simulated requests"
            + ("" if promised.planner == "melange" else f", {promised.rounds} planning rounds")
            + ")",
        )
    header = len(lines) - len(promised.plan.baselines) - 1
    if promised.planner == "slo":
        lines[header] = "  single-type baselines at the same attainment target:"
    for k, name in enumerate(promised.plan.baselines):
        met = promised.baseline_attainment.get(name)
        if met is not None:
            lines[header + 1 + k] += f"  [{100 * met:.1f}% predicted]"
    return "\n".join(lines)
