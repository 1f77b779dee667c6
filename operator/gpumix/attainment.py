"""A plan is a promise with a number on it: predicted SLO attainment, and plans that reach a target.

Mélange's ILP (§5.4) sizes each GPU type so that its summed load, Σ rate / MaxTput, stays within
its count. That holds the SLO only if a pod loaded to MaxTput still meets it for (nearly) every
request and if each type gets exactly its planned traffic. Neither is true by construction: at
MaxTput the *mean* TPOT equals the SLO (§5.3), so a large share of requests misses it; large and
small requests share a pod (§6.3); KV capacity preempts; the router only estimates output lengths.

So every plan is simulated as it would be deployed (:func:`predict`: the routing core the router
runs, the engine as vLLM runs it) and :func:`plan_to_target` closes the loop: plan, simulate, and
where a pool's requests miss the target, derate that pool's MaxTput and solve again. Derating
only lowers capacities, so each round's optimum costs at least the previous one's (the first
plan that reaches the target is the cheapest this search finds), and it ends after
``max_rounds``. Single-type baselines go through the same loop, so savings are quoted at equal
attainment, as Mélange §6 compares at equal SLO.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.plan import (
    Allocation,
    AllocationInstance,
    Formulation,
    Plan,
    UnservableBucketError,
    plan_allocation,
    solve,
)
from gpumix.plan.result import SolverName
from gpumix.sim.scenario import PlanChoice, TrafficSpec, simulate_service

DEFAULT_TARGET = 0.99
PREDICTION_REQUESTS = 3000
PREDICTION_SEED = 1
MAX_ROUNDS = 12


class PoolAttainment(BaseModel):
    model_config = ConfigDict(frozen=True)

    requests: int
    met: float
    """Share of this pool's requests meeting every SLO the service sets."""
    utilisation: float


class PredictedAttainment(BaseModel):
    """Shares of simulated requests that meet the SLO (dropped requests miss it)."""

    model_config = ConfigDict(frozen=True)

    tpot: float
    ttft: float | None
    """``None`` when the service sets no TTFT SLO."""
    met: float
    """TPOT and, when set, TTFT: what the target is checked against."""
    requests: int
    pools: dict[str, PoolAttainment]


def predict(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    allocation: Allocation,
    *,
    requests: int = PREDICTION_REQUESTS,
    seed: int = PREDICTION_SEED,
) -> PredictedAttainment:
    """Attainment of ``allocation`` simulated with Poisson arrivals at the service's rate and
    sizes from its histogram, routed by the routing core."""
    ttft_ms = service.spec.slo.ttft_ms
    run = simulate_service(
        service,
        pools,
        profiles,
        TrafficSpec(requests=requests, seed=seed),
        plan=PlanChoice(counts=allocation.counts, share=allocation.share),
    )
    tpot_s = service.spec.slo.tpot_ms / 1e3
    ttft_s = None if ttft_ms is None else ttft_ms / 1e3
    met: defaultdict[str, int] = defaultdict(int)
    seen: defaultdict[str, int] = defaultdict(int)
    tpot_ok = ttft_ok = both = 0
    for r in run.requests:
        pool = run.pods[r.pod].name.rsplit("-", 1)[0] if r.pod >= 0 else ""
        seen[pool] += 1
        if r.finish is None:
            continue
        ok_tpot = r.tpot <= tpot_s
        ok_ttft = ttft_s is None or r.ttft <= ttft_s
        tpot_ok += ok_tpot
        ttft_ok += ok_ttft
        if ok_tpot and ok_ttft:
            both += 1
            met[pool] += 1
    n = len(run.requests)
    util = {p: s.utilisation for p, s in run.report.pools.items()}
    return PredictedAttainment(
        tpot=tpot_ok / n,
        ttft=None if ttft_s is None else ttft_ok / n,
        met=both / n,
        requests=n,
        pools={
            p: PoolAttainment(requests=seen[p], met=met[p] / seen[p], utilisation=util.get(p, 0.0))
            for p in seen
            if p
        },
    )


class TargetedPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    allocation: Allocation
    predicted: PredictedAttainment
    target: float
    derating: dict[str, float] = Field(description="Factor applied to each option's MaxTput.")
    rounds: int

    @property
    def reached(self) -> bool:
        return self.predicted.met >= self.target


def derated(instance: AllocationInstance, factors: dict[str, float]) -> AllocationInstance:
    """``instance`` with each option's MaxTput scaled by its factor (1 when absent)."""
    gpus = [
        g.model_copy(
            update={"max_tput": [[v * factors.get(g.name, 1.0) for v in row] for row in g.max_tput]}
        )
        for g in instance.gpus
    ]
    return instance.model_copy(update={"gpus": gpus})


def _step(met: float) -> float:
    """How much a missing pool's MaxTput shrinks: more the further it is from the target."""
    if met < 0.5:
        return 0.6
    if met < 0.9:
        return 0.75
    return 0.9


def plan_to_target(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    instance: AllocationInstance,
    *,
    target: float = DEFAULT_TARGET,
    only: str | None = None,
    formulation: Formulation = Formulation.AGGREGATED,
    solver: SolverName = "highs",
    time_limit_s: float = 30.0,
    requests: int = PREDICTION_REQUESTS,
    seed: int = PREDICTION_SEED,
    max_rounds: int = MAX_ROUNDS,
) -> TargetedPlan | None:
    """The cheapest plan found whose predicted attainment reaches ``target``; when none does
    within ``max_rounds`` (or derating makes the demand infeasible under availability caps),
    the last plan, with ``reached`` False. ``None`` when not even the first solve is feasible.
    ``only`` restricts the plan to one option (a single-type baseline)."""
    factors = {g.name: 1.0 for g in instance.gpus}
    last: TargetedPlan | None = None
    for rounds in range(1, max_rounds + 1):
        allocation = solve(
            derated(instance, factors), formulation, solver=solver, time_limit_s=time_limit_s,
            only=only,
        )  # fmt: skip
        if allocation is None:
            return last
        predicted = predict(service, pools, profiles, allocation, requests=requests, seed=seed)
        last = TargetedPlan(
            allocation=allocation,
            predicted=predicted,
            target=target,
            derating=dict(factors),
            rounds=rounds,
        )
        if last.reached:
            return last
        short = [p for p, a in predicted.pools.items() if a.met < target]
        for pool in short or [p for p, c in allocation.counts.items() if c > 0]:
            factors[pool] *= _step(predicted.pools[pool].met if pool in predicted.pools else 0.0)
    return last


PlannerName = Literal["slo", "melange"]


class PromisedPlan(BaseModel):
    """A service's plan with its number: the mix, single-type baselines, predicted attainment."""

    model_config = ConfigDict(frozen=True)

    plan: Plan
    """With ``planner="slo"`` the baselines are planned to the same target (equal attainment)."""
    planner: PlannerName
    target: float
    predicted: PredictedAttainment | None
    """``None`` when there is no feasible allocation."""
    baseline_attainment: dict[str, float | None]
    """Predicted attainment of each baseline (``None``: that type cannot serve alone)."""
    derating: dict[str, float]
    rounds: int

    @property
    def reached(self) -> bool:
        return self.predicted is not None and self.predicted.met >= self.target


def promise(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    instance: AllocationInstance,
    *,
    target: float | None = None,
    planner: PlannerName = "slo",
    formulation: Formulation = Formulation.AGGREGATED,
    solver: SolverName = "highs",
    time_limit_s: float = 30.0,
) -> PromisedPlan:
    """Plan ``service`` and predict its attainment. ``slo``: :func:`plan_to_target` for the mix
    and for each single type, savings only against baselines that reach the target too;
    ``melange``: Mélange's ILP as it is (§5.4, §6.1), its prediction reported beside it."""
    target = service.spec.slo.attainment_target if target is None else target
    if planner == "melange":
        plan = plan_allocation(instance, formulation, solver=solver, time_limit_s=time_limit_s)

        def met(alloc: Allocation | None) -> PredictedAttainment | None:
            return None if alloc is None else predict(service, pools, profiles, alloc)

        shown = {n: met(b) for n, b in plan.baselines.items()}
        return PromisedPlan(
            plan=plan,
            planner=planner,
            target=target,
            predicted=met(plan.allocation),
            baseline_attainment={n: None if p is None else p.met for n, p in shown.items()},
            derating={},
            rounds=1,
        )

    def targeted(only: str | None) -> TargetedPlan | None:
        return plan_to_target(
            service, pools, profiles, instance, target=target, only=only,
            formulation=formulation, solver=solver, time_limit_s=time_limit_s,
        )  # fmt: skip

    def baseline(only: str) -> TargetedPlan | None:
        try:
            return targeted(only)
        except UnservableBucketError:
            return None

    mix = targeted(None)  # an unservable bucket is the caller's error to report
    bases = {g.name: baseline(g.name) for g in instance.gpus}
    savings: dict[str, float | None] = {}
    for name, base in bases.items():
        fair = mix is not None and mix.reached and base is not None and base.reached
        if mix is None or base is None or not fair or base.allocation.cost_per_hour <= 0:
            savings[name] = None
        else:
            savings[name] = 1.0 - mix.allocation.cost_per_hour / base.allocation.cost_per_hour
    plan = Plan(
        allocation=None if mix is None else mix.allocation,
        baselines={n: None if b is None else b.allocation for n, b in bases.items()},
        savings=savings,
        formulation=formulation,
    )
    return PromisedPlan(
        plan=plan,
        planner=planner,
        target=target,
        predicted=None if mix is None else mix.predicted,
        baseline_attainment={n: None if b is None else b.predicted.met for n, b in bases.items()},
        derating={} if mix is None else mix.derating,
        rounds=0 if mix is None else mix.rounds,
    )
