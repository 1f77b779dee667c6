"""Plans that learn from reality: observed TPOT against the profile's prediction for the plan.

Each option of the plan carries its share of the observed bucket rates; its profile predicts
the TPOT a replica at that load sees (`gpumix.observe.calibration.predicted_tpot_ms`), and the
service's prediction is the rate-weighted mean. `status.calibration.tpotRatio` is observed ÷
predicted. The MaxTput factor moves only when the observation is new (one update per
observation, not per pass) and the plan has been in force through it (every replica ready at
the target); with `scaling.calibration.correctMaxTput` the planner multiplies every MaxTput of
the service by it. The prediction always uses the raw profile, so the factor converges to
1/ratio instead of compounding.
"""

from collections.abc import Mapping

from gpumix.api import Calibration, CalibrationStatus, GPUProfileSpec
from gpumix.api.workload import Workload
from gpumix.attainment import derated
from gpumix.observe import ObservedWorkload
from gpumix.observe import calibration as cal
from gpumix.problem import ServiceProblem
from gpumix.reconcile.clock import utc


def factor_of(spec: Calibration, previous: CalibrationStatus | None) -> float:
    """The MaxTput multiplier the planner applies this pass (1 unless correcting)."""
    if not spec.correct_max_tput or previous is None:
        return 1.0
    return min(spec.max_factor, max(spec.min_factor, previous.max_tput_factor))


def scaled(problem: ServiceProblem, factor: float) -> ServiceProblem:
    """`problem` with every option's MaxTput × `factor`."""
    if factor == 1.0 or problem.instance is None:
        return problem
    factors = {g.name: factor for g in problem.instance.gpus}
    return problem.model_copy(update={"instance": derated(problem.instance, factors)})


def _predict(
    problem: ServiceProblem,
    *,
    profiles: Mapping[str, GPUProfileSpec],
    grid: Workload,
    rates: list[list[float]],
    counts: Mapping[str, int],
    share: Mapping[str, list[list[float]]],
) -> cal.Prediction | None:
    total = weighted = 0.0
    bound: cal.Bound = "exact"
    for option, n in counts.items():
        profile = (
            profiles.get(problem.choices[option].profile) if option in problem.choices else None
        )
        if n <= 0 or profile is None or option not in share:
            continue
        per_replica = [
            [s * r / n for s, r in zip(srow, rrow, strict=True)]
            for srow, rrow in zip(share[option], rates, strict=True)
        ]
        rate = sum(map(sum, per_replica)) * n
        if rate <= 0:
            continue
        p = cal.predicted_tpot_ms(
            cal.replica_load(profile, grid, per_replica), *cal.profile_slo_range(profile)
        )
        total += rate
        weighted += rate * p.tpot_ms
        if p.bound != "exact":
            bound = p.bound
    return cal.Prediction(weighted / total, bound) if total > 0 else None


def calibrate(
    spec: Calibration,
    previous: CalibrationStatus | None,
    obs: ObservedWorkload | None,
    *,
    problem: ServiceProblem,
    profiles: Mapping[str, GPUProfileSpec],
    grid: Workload,
    counts: Mapping[str, int],
    share: Mapping[str, list[list[float]]],
    steady: bool,
) -> CalibrationStatus | None:
    """This pass's `status.calibration` (None when nothing was ever observed)."""
    if obs is None or obs.histogram is None:
        return previous
    seen = previous.observed_at if previous is not None else None
    if seen is not None and round(obs.at) <= seen.timestamp():
        return previous  # one update per observation (and no bisection on every pass)
    total = sum(map(sum, obs.histogram))
    rates = [[obs.request_rate * h / total for h in row] for row in obs.histogram]
    prediction = _predict(
        problem, profiles=profiles, grid=grid, rates=rates, counts=counts, share=share
    )
    ratio = cal.latency_ratio(obs.tpot_seconds, prediction.tpot_ms if prediction else None)
    old = previous.max_tput_factor if previous is not None else 1.0
    if not steady:
        correction = cal.Correction(old, False, "the plan is not in force yet (rolling out)")
    else:
        correction = cal.maxtput_correction(
            old, ratio, requests=obs.requests,
            bound=prediction.bound if prediction else "exact",
            lo=spec.min_factor, hi=spec.max_factor,
        )  # fmt: skip
    return CalibrationStatus(
        observed_at=utc(obs.at),
        tpot_ratio=round(ratio, 3) if ratio is not None else None,
        predicted_tpot_ms=round(prediction.tpot_ms, 2) if prediction else None,
        prediction=prediction.bound if prediction else None,
        max_tput_factor=round(correction.factor, 4),
        message=correction.reason,
    )
