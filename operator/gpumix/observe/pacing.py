"""When to move replicas towards the planned target: SageServe §6.5.1's pacing strategies, and
the reactive utilisation-threshold scaler they are compared against (§4, §7.2).

All are pure functions of one pool's current replicas, its utilisation (SageServe's effective
memory utilisation: mean KV-cache usage, 0–1) and the target from the forecast-driven plan; they
return the replicas to have now. Cooldowns between scaling events and startup delays are the
caller's clock. An unknown utilisation (None) never moves anything: no data is not zero load.
"""

from __future__ import annotations

HIGH = 0.7
LOW = 0.3


def _bounded(n: int, minimum: int, maximum: int | None) -> int:
    return max(minimum, n if maximum is None else min(maximum, n))


def reactive(
    current: int,
    utilisation: float | None,
    *,
    high: float = HIGH,
    low: float = LOW,
    minimum: int = 1,
    maximum: int | None = None,
) -> int:
    """The baseline: one replica out above `high`, one in below `low`; no forecast."""
    if utilisation is None:
        return current
    if utilisation > high:
        return _bounded(current + 1, minimum, maximum)
    if utilisation < low:
        return _bounded(current - 1, minimum, maximum)
    return _bounded(current, minimum, maximum)


def lt_immediate(current: int, target: int, *, minimum: int = 1) -> int:
    """LT-I: go to the plan's target at once."""
    return max(minimum, target)


def lt_utilisation(
    current: int,
    target: int,
    utilisation: float | None,
    *,
    high: float = HIGH,
    low: float = LOW,
    minimum: int = 1,
) -> int:
    """LT-U: step towards the target only when utilisation breaches the threshold on that side
    (out above `high`, in below `low`), never past the target."""
    if utilisation is None:
        return current
    if target > current and utilisation > high:
        return current + 1
    if target < current and utilisation < low:
        return max(minimum, current - 1)
    return current


def lt_utilisation_gap(
    current: int,
    target: int,
    utilisation: float | None,
    *,
    observed_rate: float | None,
    forecast_rate: float,
    in_final_window: bool,
    high: float = HIGH,
    low: float = LOW,
    up_gap: float = 5.0,
    down_gap: float = 0.5,
    minimum: int = 1,
    maximum: int | None = None,
) -> int:
    """LT-UA: LT-U, and once the target is reached, in the last part of the decision window
    (`in_final_window`, SageServe: the last 20 minutes of the hour) keep scaling past it when the
    forecast was wrong: out while utilisation > `high` and observed ≥ `up_gap` × forecast, in
    while utilisation < `low` and observed ≤ `down_gap` × forecast."""
    paced = lt_utilisation(current, target, utilisation, high=high, low=low, minimum=minimum)
    if paced != current or utilisation is None or observed_rate is None or not in_final_window:
        return _bounded(paced, minimum, maximum)
    if current >= target and utilisation > high and observed_rate >= up_gap * forecast_rate:
        return _bounded(current + 1, minimum, maximum)
    if current <= target and utilisation < low and observed_rate <= down_gap * forecast_rate:
        return _bounded(current - 1, minimum, maximum)
    return _bounded(current, minimum, maximum)
