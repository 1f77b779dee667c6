"""Calibration: observed latencies against what the profile predicted for the plan in force.

The planner sizes a pool so that each replica's load `L(s) = Σ_b r_b / MaxTput_b(s)` is ≤ 1 at
the SLO s (Mélange §5.4). Read backwards, the profile *predicts* the TPOT a replica carrying the
bucket rates r sees: the tightest s with L(s) ≤ 1 (`predicted_tpot_ms`). The observed/predicted
ratio tells whether the GPUs are slower (> 1) or faster (< 1) than profiled, and
`maxtput_correction` turns a run of such ratios into a bounded factor for MaxTput: MaxTput × c,
c moved towards 1/ratio by exponential smoothing, clamped to [lo, hi], frozen when the window
had too few requests or the prediction is only a bound. The same ratio is exposed for TTFT when
the profile carries TTFT samples; the correction uses TPOT only (the SLO MaxTput is defined by).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpumix.api import BucketGrid, GPUProfileSpec
from gpumix.profiles.maxtput import max_tput_for_grid

Bound = Literal["exact", "at-most", "at-least"]


@dataclass(frozen=True)
class Prediction:
    tpot_ms: float
    bound: Bound
    """`exact`: inside the profile's SLO range; `at-most`: even the tightest SLO holds (the load
    is light, the prediction is an upper bound); `at-least`: the loosest SLO is exceeded."""


def predicted_tpot_ms(
    load_at: Callable[[float], float], lo_ms: float, hi_ms: float, tol_ms: float = 0.05
) -> Prediction:
    """The tightest TPOT s in [lo_ms, hi_ms] at which `load_at(s)` ≤ 1 (load falls as s grows)."""
    if load_at(lo_ms) <= 1.0:
        return Prediction(lo_ms, "at-most")
    if load_at(hi_ms) > 1.0:
        return Prediction(hi_ms, "at-least")
    a, b = lo_ms, hi_ms
    while b - a > tol_ms:
        m = 0.5 * (a + b)
        a, b = (a, m) if load_at(m) <= 1.0 else (m, b)
    return Prediction(b, "exact")


def replica_load(
    profile: GPUProfileSpec, grid: BucketGrid, bucket_rates: Sequence[Sequence[float]]
) -> Callable[[float], float]:
    """L(s) for one replica of the profile's GPU type carrying `bucket_rates` (req/s per bucket
    of the service grid): Σ r_b / MaxTput_b(s); infinite if a bucket with load cannot be served."""

    def load(tpot_ms: float) -> float:
        table = max_tput_for_grid(profile, grid, tpot_ms)
        total = 0.0
        for row_r, row_m in zip(bucket_rates, table, strict=True):
            for r, m in zip(row_r, row_m, strict=True):
                if r > 0:
                    total += r / m if m > 0 else float("inf")
        return total

    return load


def profile_slo_range(profile: GPUProfileSpec) -> tuple[float, float]:
    """The TPOT range the profile's tables cover (samples: their observed TPOT range)."""
    if profile.tables:
        slos = [t.tpot_ms for t in profile.tables]
    else:
        slos = [p.tpot_ms for s in profile.samples or [] for p in s.points if p.tpot_ms > 0]
    return min(slos), max(slos)


def latency_ratio(observed_s: float | None, predicted_ms: float | None) -> float | None:
    """Observed / predicted (both present and positive), else None."""
    if observed_s is None or predicted_ms is None or observed_s <= 0 or predicted_ms <= 0:
        return None
    return observed_s * 1000.0 / predicted_ms


@dataclass(frozen=True)
class Correction:
    factor: float
    updated: bool
    reason: str


def maxtput_correction(
    previous: float,
    ratio: float | None,
    *,
    requests: float,
    bound: Bound = "exact",
    alpha: float = 0.3,
    lo: float = 0.5,
    hi: float = 1.25,
    min_requests: float = 200.0,
    deadband: float = 0.05,
) -> Correction:
    """The next MaxTput multiplier (see module docstring). Geometric smoothing towards 1/ratio:
    c' = c^(1-α) · (1/ratio)^α, clamped to [lo, hi]. Ratios within `deadband` of 1 leave c as is
    (noise); a prediction that is only a bound, a missing ratio or fewer than `min_requests`
    finished requests in the window freeze it."""
    c = min(hi, max(lo, previous))
    if ratio is None or ratio <= 0:
        return Correction(c, False, "no latency observed or predicted")
    if requests < min_requests:
        return Correction(c, False, f"{requests:.0f} requests < {min_requests:.0f} in the window")
    if bound != "exact":
        return Correction(c, False, f"prediction is {bound} the profile's SLO range")
    if abs(ratio - 1.0) <= deadband:
        return Correction(c, False, f"ratio {ratio:.3f} within ±{deadband:g} of 1")
    target = 1.0 / ratio
    new = c ** (1.0 - alpha) * target**alpha
    clamped = min(hi, max(lo, new))
    why = f"ratio {ratio:.3f}: {c:.3f} → {clamped:.3f}"
    if clamped != new:
        why += f" (clamped to [{lo:g}, {hi:g}])"
    return Correction(clamped, True, why)
