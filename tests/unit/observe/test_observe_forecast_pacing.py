"""Forecasts (Holt-Winters with fallbacks) and SageServe's pacing strategies."""

import math

import numpy as np
import pytest

from gpumix.observe.forecast import forecast_rate, planning_rate
from gpumix.observe.pacing import lt_immediate, lt_utilisation, lt_utilisation_gap, reactive


def diurnal(n: int, season: int) -> np.ndarray:
    t = np.arange(n)
    return 10 + 5 * np.sin(2 * np.pi * t / season)


def test_holt_winters_follows_a_diurnal_cycle() -> None:
    season = 24
    y = diurnal(season * 4, season) + np.random.default_rng(0).normal(0, 0.2, season * 4)
    f = forecast_rate(y, season=season, horizon=6)
    assert f.method == "holt-winters"
    truth = diurnal(season * 4 + 6, season)[-6:]
    assert np.abs(np.array(f.values) - truth).max() < 1.0
    assert f.peak == pytest.approx(truth.max(), abs=1.0)


def test_short_histories_fall_back() -> None:
    y = list(diurnal(30, 24))
    f = forecast_rate(y, season=24, horizon=3)
    assert f.method == "seasonal-naive"
    assert f.values == pytest.approx(y[6:9])
    f = forecast_rate([4.0, 5.0, 6.0, 7.0], season=24, horizon=2)
    assert (f.method, f.values) == ("naive", (6.0, 6.0))
    assert forecast_rate([], season=24, horizon=2).method == "none"


def test_missing_points_are_not_zeros() -> None:
    f = forecast_rate([5.0, math.nan, 7.0, math.nan], season=24, horizon=1)
    assert f.values == (6.0,)  # mean of 5, 6 (interpolated), 7; the trailing NaN dropped


def test_planning_rate_is_peak_plus_buffer_never_below_now() -> None:
    f = forecast_rate([1.0, 2.0, 3.0], season=24, horizon=1)
    assert planning_rate(f, observed=1.0, buffer=0.1) == pytest.approx(2.2)
    assert planning_rate(f, observed=10.0, buffer=0.1) == pytest.approx(11.0)


def test_reactive_and_immediate() -> None:
    assert reactive(3, 0.8) == 4
    assert reactive(3, 0.2) == 2
    assert reactive(1, 0.1) == 1
    assert reactive(3, 0.5) == 3
    assert reactive(3, None) == 3
    assert reactive(5, 0.9, maximum=5) == 5
    assert lt_immediate(3, 7) == 7
    assert lt_immediate(3, 0) == 1


def test_lt_u_waits_for_the_threshold_and_stops_at_the_target() -> None:
    assert lt_utilisation(3, 6, 0.5) == 3  # target higher but no pressure yet
    assert lt_utilisation(3, 6, 0.75) == 4
    assert lt_utilisation(6, 6, 0.95) == 6  # target reached: stop
    assert lt_utilisation(6, 3, 0.5) == 6
    assert lt_utilisation(6, 3, 0.2) == 5
    assert lt_utilisation(6, 3, None) == 6


def test_lt_ua_goes_past_the_target_when_the_forecast_was_wrong() -> None:
    kw = {"forecast_rate": 10.0, "in_final_window": True}
    assert lt_utilisation_gap(6, 6, 0.9, observed_rate=60.0, **kw) == 7  # type: ignore[arg-type]
    assert lt_utilisation_gap(6, 6, 0.9, observed_rate=20.0, **kw) == 6  # type: ignore[arg-type]
    assert lt_utilisation_gap(3, 3, 0.1, observed_rate=4.0, **kw) == 2  # type: ignore[arg-type]
    early = {"forecast_rate": 10.0, "in_final_window": False}
    assert lt_utilisation_gap(6, 6, 0.9, observed_rate=60.0, **early) == 6  # type: ignore[arg-type]
    assert lt_utilisation_gap(3, 6, 0.8, observed_rate=5.0, **early) == 4  # type: ignore[arg-type]
