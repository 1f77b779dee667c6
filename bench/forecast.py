"""Benchmark: forecast-driven scaling (SageServe §6.4–6.5) vs reactive utilisation thresholds.

Workload: a multi-day diurnal request rate, sampled every 15 s. The envelope is synthetic and
documented here (SageServe's week-long trace is not public): a daily curve
`peak × (0.15 + 0.85 · ((1 − cos(2π (h − 3)/24)) / 2)^1.5)` (trough at 03:00, peak at 15:00),
weekends (days 6–7) at 60%. Short-term burstiness is time-warped from the Azure LLM inference
trace 2023 (conversation): its per-minute request counts, normalised to mean 1, are tiled over
the days as a multiplicative factor; arrivals per step are Poisson. Two unforecast bursts
(×2.5 for 20 minutes) per simulated week test the strategies' reaction.

Model (capacity vs demand, not the discrete-event simulator: days of 15 s steps would take
hours there): a replica carries `--capacity` req/s at the SLO (MaxTput); a new replica costs
GPU time from the moment it is requested but serves only after `--startup` seconds. Per step,
requests up to the ready capacity meet the SLO, the excess does not (SLO attainment = served
within capacity / offered). Utilisation (SageServe's effective memory utilisation) = offered
rate / capacity of the replicas counted.

Strategies, all with a 15 s cooldown between scaling events and at least 1 replica:
- reactive (SageServe §4/§7.2 baseline): +1 above 70% utilisation, −1 below 30%, every 15 s.
  Utilisation counts starting replicas as capacity (as Kubernetes' HPA does), which is kinder
  to the baseline than counting only ready ones.
- LT-I / LT-U / LT-UA (§6.5.1, `gpumix.observe.pacing`): every hour, a Holt-Winters forecast of
  the next hour (`gpumix.observe.forecast`, 10-minute bins, daily season, up to 4 days of
  history) gives the target `ceil(peak × (1 + buffer) / capacity)`; LT-I jumps to it, LT-U
  steps to it when utilisation crosses 70%/30%, LT-UA also goes past it in the last 20 minutes
  of the hour when observed ≥ 5× / ≤ 0.5× forecast.
The first day is history only (forecasts need it); figures cover the remaining days.

Usage: ``.venv/bin/python bench/forecast.py [--days 7] [--quick] [--json]``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpumix.observe.forecast import forecast_rate, planning_rate
from gpumix.observe.pacing import lt_immediate, lt_utilisation, lt_utilisation_gap, reactive
from gpumix.sim.traffic import load_trace

STEP_S = 15.0
DAY = 86400.0
BIN_S = 600.0


def diurnal_rates(days: int, peak: float, seed: int) -> np.ndarray:
    """Offered request rate per 15 s step (module docstring)."""
    n = int(days * DAY / STEP_S)
    t = np.arange(n) * STEP_S
    hours = (t % DAY) / 3600.0
    shape = ((1 - np.cos(2 * np.pi * (hours - 3) / 24)) / 2) ** 1.5
    rate = peak * (0.15 + 0.85 * shape)
    weekday = (t // DAY).astype(int) % 7
    rate = rate * np.where(weekday >= 5, 0.6, 1.0)
    trace = load_trace("azure-conv")
    per_min = np.bincount((trace.times // 60).astype(int)).astype(float)
    per_min = per_min[: len(per_min) - 1] if len(per_min) > 1 else per_min  # drop partial minute
    per_min /= per_min.mean()
    rate = rate * per_min[(t // 60).astype(int) % len(per_min)]
    rng = np.random.default_rng(seed)
    for week in range(max(1, days // 7)):
        for _ in range(2):
            start = int(((1 + rng.uniform(0, 5)) * DAY + week * 7 * DAY) / STEP_S)
            if start < n:
                rate[start : start + int(1200 / STEP_S)] *= 2.5
    return rng.poisson(rate * STEP_S) / STEP_S


@dataclass
class Fleet:
    ready: int
    starting: list[float] = field(default_factory=list)  # ready-at times
    last_event: float = -math.inf
    outs: int = 0
    ins: int = 0

    @property
    def total(self) -> int:
        return self.ready + len(self.starting)

    def advance(self, now: float) -> None:
        done = [s for s in self.starting if s <= now]
        self.ready += len(done)
        self.starting = [s for s in self.starting if s > now]

    def scale_to(self, n: int, now: float, startup: float) -> None:
        while self.total < n:
            self.starting.append(now + startup)
            self.outs += 1
        while self.total > n and self.total > 1:
            if self.starting:
                self.starting.pop()  # cancel the youngest start first
            else:
                self.ready -= 1
            self.ins += 1


Policy = Callable[[Fleet, float, float, int], int]
"""(fleet, now, offered rate, step index) → replicas wanted."""


def run(
    rates: np.ndarray, policy: Policy, start: int, capacity: float, startup: float
) -> dict[str, float]:
    fleet = Fleet(ready=max(1, math.ceil(rates[start] / capacity / 0.5)))
    gpu_s = startup_s = offered = served = 0.0
    for k in range(start, len(rates)):
        now = k * STEP_S
        fleet.advance(now)
        want = policy(fleet, now, float(rates[k]), k)
        if want != fleet.total and now - fleet.last_event >= STEP_S:
            fleet.scale_to(want, now, startup)
            fleet.last_event = now
        gpu_s += fleet.total * STEP_S
        startup_s += len(fleet.starting) * STEP_S
        demand = rates[k] * STEP_S
        offered += demand
        served += min(demand, fleet.ready * capacity * STEP_S)
    return {
        "gpu_hours": gpu_s / 3600,
        "slo_attainment": served / offered,
        "scale_outs": fleet.outs,
        "scale_ins": fleet.ins,
        "startup_gpu_hours": startup_s / 3600,
    }


class Forecaster:
    """Hourly target from a Holt-Winters forecast of the next hour (10-minute bins)."""

    def __init__(self, rates: np.ndarray, capacity: float, buffer: float) -> None:
        per_bin = int(BIN_S / STEP_S)
        self.bins = rates[: len(rates) // per_bin * per_bin].reshape(-1, per_bin).mean(axis=1)
        self.capacity, self.buffer = capacity, buffer
        self.cache: dict[int, tuple[int, float]] = {}
        self.fit_seconds = 0.0
        self.methods: dict[str, int] = {}

    def target(self, now: float) -> tuple[int, float]:
        hour = int(now // 3600)
        if hour not in self.cache:
            end = int(hour * 3600 / BIN_S)
            season = int(DAY / BIN_S)
            history = self.bins[max(0, end - 4 * season) : end]
            t0 = time.perf_counter()
            f = forecast_rate(history, season=season, horizon=int(3600 / BIN_S))
            self.fit_seconds += time.perf_counter() - t0
            self.methods[f.method] = self.methods.get(f.method, 0) + 1
            rate = planning_rate(f, None, self.buffer)
            self.cache[hour] = (max(1, math.ceil(rate / self.capacity)), f.peak)
        return self.cache[hour]


def policies(fc: Forecaster, capacity: float) -> dict[str, Policy]:
    def util(fleet: Fleet, rate: float, count_starting: bool = False) -> float:
        n = fleet.total if count_starting else fleet.ready
        return rate / (max(n, 1) * capacity)

    def p_reactive(fleet: Fleet, now: float, rate: float, k: int) -> int:
        return reactive(fleet.total, util(fleet, rate, count_starting=True))

    def p_lti(fleet: Fleet, now: float, rate: float, k: int) -> int:
        return lt_immediate(fleet.total, fc.target(now)[0])

    def p_ltu(fleet: Fleet, now: float, rate: float, k: int) -> int:
        return lt_utilisation(fleet.total, fc.target(now)[0], util(fleet, rate, True))

    def p_ltua(fleet: Fleet, now: float, rate: float, k: int) -> int:
        target, peak = fc.target(now)
        return lt_utilisation_gap(
            fleet.total, target, util(fleet, rate, True),
            observed_rate=rate, forecast_rate=peak, in_final_window=now % 3600 >= 2400,
        )  # fmt: skip

    return {"reactive": p_reactive, "LT-I": p_lti, "LT-U": p_ltu, "LT-UA": p_ltua}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=7, help="simulated days incl. 1 of history")
    ap.add_argument("--peak", type=float, default=50.0, help="weekday peak rate, req/s")
    ap.add_argument("--capacity", type=float, default=2.5, help="req/s per replica at the SLO")
    ap.add_argument("--startup", type=float, default=180.0, help="replica startup delay, s")
    ap.add_argument("--buffer", type=float, default=0.1, help="forecast buffer β")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 days (1 of history)")
    ap.add_argument("--json", action="store_true", help="one JSON object as the last line")
    args = ap.parse_args()
    days = 3 if args.quick else args.days
    t0 = time.perf_counter()
    rates = diurnal_rates(days, args.peak, args.seed)
    start = int(DAY / STEP_S)
    fc = Forecaster(rates, args.capacity, args.buffer)
    results = {
        name: run(rates, policy, start, args.capacity, args.startup)
        for name, policy in policies(fc, args.capacity).items()
    }
    base = results["reactive"]
    for r in results.values():
        r["gpu_hours_vs_reactive"] = r["gpu_hours"] / base["gpu_hours"]
        events = r["scale_outs"] + r["scale_ins"]
        r["scaling_events_vs_reactive"] = events / max(1, base["scale_outs"] + base["scale_ins"])
        r["startup_gpu_hours_vs_reactive"] = r["startup_gpu_hours"] / base["startup_gpu_hours"]
    print(
        f"{days - 1} days evaluated (+1 of history), 15 s steps, peak {args.peak:g} req/s, "
        f"{args.capacity:g} req/s per replica, startup {args.startup:g} s, buffer {args.buffer:g}"
    )
    print(
        f"{'strategy':9} {'GPU-h':>8} {'vs reactive':>11} {'SLO att.':>9} {'outs':>6} "
        f"{'ins':>6} {'events vs r.':>12} {'startup GPU-h':>13} {'vs reactive':>11}"
    )
    for name, r in results.items():
        print(
            f"{name:9} {r['gpu_hours']:8.1f} {r['gpu_hours_vs_reactive']:10.3f}× "
            f"{100 * r['slo_attainment']:8.2f}% {r['scale_outs']:6d} {r['scale_ins']:6d} "
            f"{r['scaling_events_vs_reactive']:11.3f}× {r['startup_gpu_hours']:13.2f} "
            f"{r['startup_gpu_hours_vs_reactive']:10.3f}×"
        )
    methods = ", ".join(f"{k} {v}" for k, v in sorted(fc.methods.items()))
    print(
        f"forecasts: {methods}; fitting {fc.fit_seconds:.1f} s; "
        f"run {time.perf_counter() - t0:.1f} s"
    )
    if args.json:
        out: dict[str, Any] = {
            "days_evaluated": days - 1,
            "params": {
                k: getattr(args, k) for k in ("peak", "capacity", "startup", "buffer", "seed")
            },
            "forecast_methods": fc.methods,
            "strategies": results,
        }
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
