"""The rate a forecasting service is planned for (SageServe §6.4).

A replica takes minutes to start, so the plan must already hold for the traffic of the next
horizon: the forecast peak over it (never below what is observed now) plus the buffer. The
forecast is fitted on Prometheus' rate history (`gpumix.observe.history`); it is a pure function
of that history, so it is cached and every pass within one step gives the same plan.
"""

import functools
import math

from gpumix.api import Forecast, ForecastStatus
from gpumix.observe import forecast as fc
from gpumix.observe.history import RateHistory

FINAL_WINDOW = 2.0 / 3.0
"""LT-UA acts in the last third of each horizon window (SageServe: the last 20 min of the hour)."""


@functools.lru_cache(maxsize=128)
def _forecast(values: tuple[float, ...], season: int, horizon: int) -> fc.Forecast:
    return fc.forecast_rate(values, season=season, horizon=horizon)


def forecast_plan(
    spec: Forecast, history: RateHistory | None, observed_rate: float
) -> tuple[float, ForecastStatus]:
    """The rate to plan for and what status says about it. Without history (not fetched yet,
    Prometheus down before the first fetch) the forecast is "none" and the plan is the observed
    rate plus the buffer."""
    step = spec.step_seconds
    forecast = fc.Forecast((), "none")
    if history is not None and history.points:
        season = spec.season_seconds // step
        horizon = max(1, math.ceil(spec.horizon_seconds / step))
        forecast = _forecast(history.values, season, horizon)
    rate = fc.planning_rate(forecast, observed_rate, spec.buffer)
    status = ForecastStatus(
        method=forecast.method,
        history_points=history.points if history is not None else 0,
        observed_rate=round(observed_rate, 4),
        peak_rate=round(forecast.peak, 4),
        next_rate=round(forecast.values[0], 4) if forecast.values else None,
        horizon_seconds=spec.horizon_seconds,
        planned_rate=round(rate, 4),
    )
    return rate, status


def in_final_window(spec: Forecast, now: float) -> bool:
    """Whether `now` is in the last third of its horizon window (windows aligned on the clock,
    like SageServe's hours)."""
    return (now % spec.horizon_seconds) >= FINAL_WINDOW * spec.horizon_seconds
