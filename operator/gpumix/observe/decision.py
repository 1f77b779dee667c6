"""What workload the planner plans with, and the `WorkloadObserved` condition that says why.

No data is not zero load (the most reported failure of comparable tools is an optimizer that
found no metrics, read that as no traffic and scaled everything to the minimum). So:

- spec `source: Static`: plan with the spec; no condition (`condition` is None: remove it).
- Prometheus, observed: plan with the observed rate and the observed histogram (else the last
  good one's, else the spec's); `WorkloadObserved=True reason=Observed`.
- Prometheus, unknown, the last good observation at most `max_age_s` old: plan with it;
  `WorkloadObserved=False reason=<why unknown>` (e.g. `PrometheusUnavailable`).
- Prometheus, unknown, no recent good observation: plan with the spec's static numbers;
  `WorkloadObserved=False reason=<why unknown>`.

Over-provisioning and the slice factor always come from the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpumix.api.base import ConditionStatus
from gpumix.api.workload import Workload
from gpumix.observe.observation import ObservationResult, ObservationUnknown, ObservedWorkload

CONDITION_TYPE = "WorkloadObserved"
REASON_OBSERVED = "Observed"

WorkloadOrigin = Literal["spec", "observed", "last-observed"]


@dataclass(frozen=True)
class WorkloadCondition:
    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class WorkloadDecision:
    workload: Workload
    origin: WorkloadOrigin
    condition: WorkloadCondition | None
    last_good: ObservedWorkload | None
    """What to remember as the last good observation for the next pass."""


def _with(spec: Workload, obs: ObservedWorkload, fallback: list[list[float]] | None) -> Workload:
    histogram = obs.histogram or fallback or spec.histogram
    same_grid = obs.input_edges == spec.input_edges and obs.output_edges == spec.output_edges
    if not same_grid or sum(map(sum, histogram)) <= 0:
        histogram = spec.histogram
    return spec.model_copy(
        update={"source": spec.source, "request_rate": obs.request_rate, "histogram": histogram}
    )


def _age(now: float, at: float) -> str:
    s = max(0.0, now - at)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def decide_workload(
    spec: Workload,
    last_good: ObservedWorkload | None,
    result: ObservationResult | None,
    *,
    now: float,
    max_age_s: float = 3600.0,
) -> WorkloadDecision:
    """The planner's workload for this pass (table in the module docstring). `result` is None
    when the spec is Static (nothing was observed)."""
    if spec.source == "Static" or result is None:
        return WorkloadDecision(spec, "spec", None, last_good)
    if isinstance(result, ObservedWorkload):
        fallback = last_good.histogram if last_good is not None else None
        workload = _with(spec, result, fallback)
        note = "" if result.histogram is not None else "; no request finished, histogram kept"
        cond = WorkloadCondition(
            CONDITION_TYPE,
            ConditionStatus.TRUE,
            REASON_OBSERVED,
            f"observed {result.summary()}{note}",
        )
        keep = result
        if result.histogram is None and last_good is not None:  # new rate, the old histogram
            keep = result.model_copy(update={"histogram": last_good.histogram})
        return WorkloadDecision(workload, "observed", cond, keep)
    assert isinstance(result, ObservationUnknown)
    if last_good is not None and now - last_good.at <= max_age_s:
        workload = _with(spec, last_good, None)
        message = (
            f"{result.message}; planning with the last observed workload from "
            f"{_age(now, last_good.at)} ago ({last_good.request_rate:.3g} req/s), not zero"
        )
        cond = WorkloadCondition(CONDITION_TYPE, ConditionStatus.FALSE, result.reason, message)
        return WorkloadDecision(workload, "last-observed", cond, last_good)
    stale = (
        f" (the last observation is {_age(now, last_good.at)} old, over {max_age_s:.0f} s)"
        if last_good is not None
        else ""
    )
    message = (
        f"{result.message}; planning with spec.workload ({spec.request_rate:.3g} req/s){stale}"
    )
    cond = WorkloadCondition(CONDITION_TYPE, ConditionStatus.FALSE, result.reason, message)
    return WorkloadDecision(spec, "spec", cond, last_good)
