"""`spec.scaling` in the planner pass: forecast peak (SageServe §6.4), pacing (§6.5.1) and
MaxTput calibration, on realistic snapshots with the real joint ILP."""

import math
from typing import Any

import pytest

from gpumix.api import LLMServiceStatus
from gpumix.observe import PodLoad
from gpumix.observe.history import RateHistory
from gpumix.reconcile.cluster import plan_cluster
from gpumix.reconcile.service import Running, ServiceDecision
from gpumix.reconcile.workload import ServiceObservation

from .test_cluster_observe import KEY, T, observed, prometheus_service, replicas, unavailable
from .test_cluster_pass import cond, snap

HOUR = 3600


def scaled_service(scaling: dict[str, Any], rate: float = 0.5, **kw: Any) -> dict[str, Any]:
    return prometheus_service(rate, scaling=scaling, **kw)


def with_status(body: dict[str, Any], status: LLMServiceStatus) -> dict[str, Any]:
    return {**body, "status": status.model_dump(by_alias=True, mode="json", exclude_none=True)}


def decide(
    body: dict[str, Any], obs: ServiceObservation | None, running: Running | None = None
) -> ServiceDecision:
    observations = {KEY: obs} if obs is not None else {}
    runs = {KEY: running} if running is not None else {}
    return plan_cluster(snap(services=[body], observations=observations, running=runs)).services[
        KEY
    ]


def diurnal(days: int, *, low: float, high: float, phase_h: float = 0.0) -> RateHistory:
    """Hourly rates over `days`, lowest at midnight, ending `phase_h` hours into a day."""
    n = days * 24
    values = tuple(
        low + (high - low) * 0.5 * (1 - math.cos(2 * math.pi * ((k + phase_h - n) % 24) / 24))
        for k in range(n)
    )
    end = math.floor(T / HOUR) * HOUR
    return RateHistory(end=end, step_seconds=HOUR, values=values)


FORECAST = {"forecast": {"enabled": True, "stepSeconds": HOUR, "horizonSeconds": 3 * HOUR}}


def test_forecast_plans_for_the_coming_peak_not_the_rate_now() -> None:
    # 05:00 after two days that peak at 12:00: the next three hours climb well above now.
    history = diurnal(2, low=1.0, high=8.0, phase_h=5)
    now_rate = history.values[-1]
    plain = decide(scaled_service({}), ServiceObservation(result=observed(now_rate)))
    sd = decide(
        scaled_service(FORECAST), ServiceObservation(result=observed(now_rate), history=history)
    )
    fc = sd.status.forecast
    assert fc is not None
    assert fc.method == "holt-winters"
    assert fc.history_points == 48
    assert fc.peak_rate > 1.5 * now_rate
    assert fc.planned_rate >= 1.1 * fc.peak_rate - 1e-9  # peak + the default 10% buffer
    assert sd.status.workload is not None
    assert sd.status.workload.request_rate >= fc.planned_rate
    assert sum(replicas(sd).values()) > sum(replicas(plain).values())
    assert plain.status.forecast is None


def test_forecast_without_history_plans_the_observed_rate_plus_buffer() -> None:
    sd = decide(scaled_service(FORECAST), ServiceObservation(result=observed(3.0)))
    fc = sd.status.forecast
    assert fc is not None
    assert (fc.method, fc.history_points, fc.planned_rate) == ("none", 0, 3.3)


def test_forecast_never_replaces_the_spec_fallback() -> None:
    """Nothing observed, no last good: the spec's numbers, not a forecast of them."""
    history = diurnal(2, low=1.0, high=8.0, phase_h=5)
    sd = decide(
        scaled_service(FORECAST, rate=2.0),
        ServiceObservation(result=unavailable(), history=history),
    )
    assert sd.status.forecast is None
    assert sd.status.workload is not None and sd.status.workload.request_rate == 2.0


def loaded(rate: float, kv: float, at: float = T - 5) -> ServiceObservation:
    pods = [PodLoad(pod="chat-a10g-abc", kv_usage=kv)]
    return ServiceObservation(result=observed(rate, at=at).model_copy(update={"pods": pods}))


def one_running(n: int = 1) -> Running:
    return Running(replicas={"a10g": n}, ready={"a10g": n}, names={"a10g": "chat-a10g"})


LT_U = {"pacing": "Utilisation"}


def test_lt_u_holds_below_the_threshold_and_steps_once_per_observation() -> None:
    body = scaled_service(LT_U, pools=["a10g"])
    calm = decide(body, loaded(12.0, kv=0.5), one_running())
    assert calm.target is not None and calm.target["a10g"] >= 3
    assert calm.apply == {"a10g": 1}  # the plan wants more; utilisation does not yet
    pacing = calm.status.pacing
    assert pacing is not None and pacing.mode == "Utilisation"
    assert pacing.applied_summary == "a10g=1"
    assert "holding" in (pacing.message or "")
    assert "pacing (LT-U) runs a10g=1 for now" in cond(calm.status, "Ready")[2]

    busy = decide(body, loaded(12.0, kv=0.9), one_running())
    assert busy.apply == {"a10g": 2}
    # The next pass sees the same observation (and the first step already applied): no step.
    again = decide(with_status(body, busy.status), loaded(12.0, kv=0.9), one_running(2))
    assert again.apply == {"a10g": 2}
    # A newer observation, still above 70%: one more step.
    later = decide(with_status(body, busy.status), loaded(12.0, kv=0.9, at=T), one_running(2))
    assert later.apply == {"a10g": 3}


def test_lt_u_unknown_utilisation_holds_and_a_new_service_starts_at_once() -> None:
    body = scaled_service(LT_U, pools=["a10g"])
    held = decide(body, ServiceObservation(result=observed(6.0)), one_running())
    assert held.apply == {"a10g": 1}  # no pods report KV usage: no data is not a signal
    fresh = decide(body, loaded(6.0, kv=0.1))
    assert fresh.target is not None
    assert fresh.apply == {p: n for p, n in fresh.target.items() if n}


def test_lt_u_scales_in_only_below_the_low_threshold() -> None:
    body = scaled_service(LT_U, pools=["a10g"])
    kept = decide(body, loaded(0.5, kv=0.4), one_running(3))
    assert kept.target == {"a10g": 1}
    assert kept.apply == {"a10g": 3}
    shrunk = decide(body, loaded(0.5, kv=0.1), one_running(3))
    assert shrunk.apply == {"a10g": 2}


def slow(rate: float, tpot_s: float, at: float = T - 5) -> ServiceObservation:
    return ServiceObservation(
        result=observed(rate, at=at).model_copy(update={"tpot_seconds": tpot_s})
    )


CALIBRATE = {"calibration": {"correctMaxTput": True}}


def steady(sd: ServiceDecision) -> Running:
    assert sd.target is not None
    on = {p: n for p, n in sd.target.items() if n}
    return Running(replicas=on, ready=on, names={p: f"chat-{p}" for p in on})


def test_calibration_learns_a_bounded_factor_once_per_observation() -> None:
    body = scaled_service(CALIBRATE, pools=["a10g"])
    first = decide(body, slow(6.0, 0.2))
    cal = first.status.calibration
    assert cal is not None and cal.tpot_ratio is not None and cal.tpot_ratio > 1.5
    assert cal.max_tput_factor == 1.0  # rolling out: the plan was not in force when observed
    assert "not in force" in (cal.message or "")

    body = with_status(body, first.status.model_copy(update={"calibration": None}))
    learnt = decide(body, slow(6.0, 0.2), steady(first))
    factor = learnt.status.calibration.max_tput_factor  # type: ignore[union-attr]
    assert 0.5 <= factor < 0.95
    # The same observation on the next pass does not compound the factor ...
    body = with_status(body, learnt.status)
    again = decide(body, slow(6.0, 0.2), steady(learnt))
    assert again.status.calibration == learnt.status.calibration
    # ... and MaxTput × factor makes the same traffic weigh 1/factor as much in the plan.
    load = {a.pool: a.load for a in first.status.allocation}
    grown = {a.pool: a.load for a in again.status.allocation}
    assert grown["a10g"] == pytest.approx(load["a10g"] / factor, rel=0.01)


def test_calibration_is_shown_but_not_applied_without_correct_max_tput() -> None:
    body = scaled_service({}, pools=["a10g"])
    first = decide(body, slow(6.0, 0.2))
    body = with_status(body, first.status.model_copy(update={"calibration": None}))
    sd = decide(body, slow(6.0, 0.2), steady(first))
    cal = sd.status.calibration
    assert cal is not None and cal.tpot_ratio is not None and cal.tpot_ratio > 1.5
    assert replicas(sd) == replicas(first)
