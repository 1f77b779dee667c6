"""Plans as people and programs read them: a text table and a JSON object."""

from typing import Any

from gpumix.plan import Allocation, AllocationInstance, Plan


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
