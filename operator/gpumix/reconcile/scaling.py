"""`spec.scaling` in one planner pass: forecast the rate (§6.4), pace the replicas (§6.5.1) and
calibrate MaxTput — the glue between the observation in the `Snapshot` and the pure parts in
`forecasting`, `pacing` and `calibration`."""

import dataclasses

from gpumix.api import ForecastStatus, LLMServiceSpec
from gpumix.observe import ObservedWorkload, WorkloadDecision
from gpumix.reconcile.forecasting import forecast_plan, in_final_window
from gpumix.reconcile.pacing import PacingInput
from gpumix.reconcile.workload import ServiceObservation, round_up


def observed(observation: ServiceObservation | None) -> ObservedWorkload | None:
    """This pass's observation, if it is one (not an "unknown")."""
    if observation is not None and isinstance(observation.result, ObservedWorkload):
        return observation.result
    return None


def with_forecast(
    spec: LLMServiceSpec, decision: WorkloadDecision, observation: ServiceObservation | None
) -> tuple[WorkloadDecision, ForecastStatus | None]:
    """The decision with its rate raised to the forecast plan (forecasting services planning
    with an observation, current or last good; the spec's static fallback is left alone)."""
    fc = spec.scaling.forecast
    if not fc.enabled or decision.origin == "spec":
        return decision, None
    history = observation.history if observation is not None else None
    rate, status = forecast_plan(fc, history, decision.workload.request_rate)
    workload = decision.workload.model_copy(update={"request_rate": round_up(rate)})
    return dataclasses.replace(decision, workload=workload), status


def pacing_input(
    spec: LLMServiceSpec,
    observation: ServiceObservation | None,
    forecast: ForecastStatus | None,
    now: float,
) -> PacingInput | None:
    mode = spec.scaling.pacing
    if mode == "Immediate":
        return None
    obs = observed(observation)
    return PacingInput(
        mode=mode,
        utilisation=obs.kv_utilisation if obs is not None else None,
        observed_at=obs.at if obs is not None else None,
        observed_rate=obs.request_rate if obs is not None else None,
        forecast_rate=forecast.next_rate if forecast is not None else None,
        in_final_window=in_final_window(spec.scaling.forecast, now),
    )
