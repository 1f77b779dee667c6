"""Forecasting a service's request rate (SageServe §6.4) and the rate to plan for.

`forecast_rate` predicts the next `horizon` steps from a history sampled every step: Holt-Winters
(statsmodels' ExponentialSmoothing, additive seasonality — diurnal traffic) once the history
holds two seasons, seasonal-naive (the same step one season ago) with one season, and naive (the
mean of the last few steps) below that. `planning_rate` is what the planner sizes for: the
forecast peak over the horizon (never below what is observed now) plus a buffer — SageServe takes
the next hour's maximum and adds β.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Method = Literal["holt-winters", "seasonal-naive", "naive", "none"]


@dataclass(frozen=True)
class Forecast:
    values: tuple[float, ...]
    method: Method

    @property
    def peak(self) -> float:
        return max(self.values) if self.values else 0.0


def _holt_winters(y: np.ndarray, season: int, horizon: int) -> np.ndarray | None:
    from statsmodels.tsa.holtwinters import (  # type: ignore[import-untyped]  # noqa: PLC0415
        ExponentialSmoothing,  # imported here: statsmodels takes a second to import
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter; a bad fit is caught below
        try:
            fit = ExponentialSmoothing(
                y, trend=None, seasonal="add", seasonal_periods=season,
                initialization_method="estimated",
            ).fit()  # fmt: skip
            out = np.asarray(fit.forecast(horizon), dtype=float)
        except (ValueError, np.linalg.LinAlgError):
            return None
    return out if np.all(np.isfinite(out)) else None


def forecast_rate(
    history: Sequence[float], *, season: int, horizon: int, naive_window: int = 3
) -> Forecast:
    """Forecast the next `horizon` values of `history` (oldest first, evenly spaced, NaN = not
    observed: dropped from the end, interpolated inside). Forecasts are clipped at 0."""
    y = np.asarray(history, dtype=float)
    while len(y) and np.isnan(y[-1]):
        y = y[:-1]
    if len(y) == 0 or horizon <= 0:
        return Forecast((), "none")
    if np.isnan(y).any():
        idx = np.arange(len(y))
        ok = ~np.isnan(y)
        y = np.interp(idx, idx[ok], y[ok])
    values: np.ndarray | None = None
    method: Method = "naive"
    if season >= 2 and len(y) >= 2 * season:
        values = _holt_winters(y, season, horizon)
        method = "holt-winters"
    if values is None and season >= 1 and len(y) >= season:
        idx = len(y) - season + (np.arange(horizon) % season)
        values, method = y[idx], "seasonal-naive"
    if values is None:
        values, method = np.full(horizon, float(np.mean(y[-naive_window:]))), "naive"
    return Forecast(tuple(float(v) for v in np.maximum(values, 0.0)), method)


def planning_rate(forecast: Forecast, observed: float | None, buffer: float = 0.1) -> float:
    """The rate to plan for: max(forecast peak, observed now) × (1 + buffer)."""
    base = max(forecast.peak, observed or 0.0)
    return base * (1.0 + buffer)
