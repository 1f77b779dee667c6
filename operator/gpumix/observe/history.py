"""A service's request-rate history from Prometheus, the series a forecast is fitted on.

Prometheus is the history store (SageServe §6.4 fits on the past weeks' traffic): the operator
keeps no series of its own, so a restart loses nothing. The range is aligned to whole steps, so
that every pass within one step asks for — and caches — the same points.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from gpumix.observe import promql
from gpumix.observe.observation import ObservationUnknown, UnknownReason
from gpumix.observe.promql import ServiceSelector
from gpumix.observe.source import MetricsUnavailableError, QueryFailedError, RangeSource

MAX_POINTS = 2016
"""A week at 5-minute steps; Prometheus refuses ranges over 11,000 points."""


class RateHistory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    end: float
    """Unix time of the last point (a multiple of the step)."""
    step_seconds: float
    values: tuple[float, ...]
    """Oldest first, one per step; NaN where nothing was observed (never 0)."""

    @property
    def points(self) -> int:
        return sum(1 for v in self.values if not math.isnan(v))


def history_points(step_s: int, season_s: int, horizon_s: int) -> int:
    """Two seasons (what Holt-Winters needs), else two horizons; at least an hour of steps."""
    want = 2 * season_s if season_s else 2 * horizon_s
    return max(2, min(MAX_POINTS, max(want, 3600) // step_s))


def aligned_end(now: float, step_s: float) -> float:
    return math.floor(now / step_s) * step_s


def observe_history(
    source: RangeSource, sel: ServiceSelector, *, now: float, step_s: int, points: int
) -> RateHistory | ObservationUnknown:
    """The finished-request rate at each of the last `points` whole steps before `now`."""
    end = aligned_end(now, step_s)
    start = end - (points - 1) * step_s
    try:
        raw = source.query_range(promql.rate_history(sel, step_s), start, end, step_s)
    except MetricsUnavailableError as err:
        reason, message = UnknownReason.PROMETHEUS_UNAVAILABLE, f"Prometheus: {err}"
        return ObservationUnknown(at=now, reason=reason, message=message)
    except QueryFailedError as err:
        return ObservationUnknown(at=now, reason=UnknownReason.QUERY_FAILED, message=str(err))
    values = [math.nan] * points
    for t, v in raw:
        k = round((t - start) / step_s)
        if 0 <= k < points and math.isfinite(v):
            values[k] = max(0.0, v)
    return RateHistory(end=end, step_seconds=step_s, values=tuple(values))
