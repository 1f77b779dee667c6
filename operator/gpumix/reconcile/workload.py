"""The workload a service is planned with this pass, and what its status says about it.

Pure: the operator's I/O layer (`gpumix.operator.observing`) queries Prometheus and hands the
planner a `ServiceObservation` per service with `source: Prometheus` (this pass's result and the
last good observation it remembers); here `gpumix.observe.decide_workload` turns that into the
workload to plan with — the observation, else the last good one (≤ 1 h old), else the spec;
never zero for missing data — and the `WorkloadObserved` condition plus `status.workload`'s
origin fields. A service with `source: Prometheus` and no observation in the snapshot is one the
operator cannot observe: `WorkloadObserved=False reason=PrometheusNotConfigured`.
"""

import math

from pydantic import BaseModel, ConfigDict

from gpumix.api import ConditionStatus, LLMService, LLMServiceStatus, WorkloadUsed
from gpumix.api.workload import Workload
from gpumix.observe import (
    CONDITION_TYPE,
    ObservationResult,
    ObservationUnknown,
    ObservedWorkload,
    UnknownReason,
    WorkloadDecision,
    decide_workload,
)
from gpumix.observe.history import RateHistory
from gpumix.reconcile.clock import parse_time, utc
from gpumix.reconcile.conditions import condition, remove_condition, set_condition
from gpumix.reconcile.service import EventSpec, ServiceDecision

NOT_CONFIGURED_MESSAGE = (
    "the operator has no Prometheus to observe this service: start it with "
    "`gpumix run --prometheus-url URL`"
)

RATE_DIGITS = 3
"""Observed rates are rounded UP to this many significant digits: stable plans (the joint solve
is cached by instance) and readable events, never below what was observed."""


class ServiceObservation(BaseModel):
    """What the I/O layer saw of one service this pass (pure data in the `Snapshot`)."""

    model_config = ConfigDict(frozen=True)

    result: ObservationResult
    last_good: ObservedWorkload | None = None
    """The last good observation the operator remembers (from earlier passes)."""
    history: RateHistory | None = None
    """The request-rate history for forecasting (services with `scaling.forecast`)."""


def round_up(rate: float, digits: int = RATE_DIGITS) -> float:
    if rate <= 0 or not math.isfinite(rate):
        return max(0.0, rate) if math.isfinite(rate) else 0.0
    exponent = digits - 1 - math.floor(math.log10(rate))
    if exponent > 300:  # a denormal rate: 10**exponent is no float (found by test_fuzz_api.py)
        return rate
    scale = 10**exponent
    return float(math.ceil(rate * scale - 1e-9) / scale)


def decide(spec: Workload, observation: ServiceObservation | None, now: str) -> WorkloadDecision:
    """The workload to plan with. Decided as of the observation's time (not the pass's), so that
    passes between two observations produce the same status and do not rewrite it."""
    if spec.source == "Static":
        return decide_workload(spec, None, None, now=parse_time(now))
    if observation is None:
        at = parse_time(now)
        unknown = ObservationUnknown(
            at=at, reason=UnknownReason.NOT_CONFIGURED, message=NOT_CONFIGURED_MESSAGE
        )
        return decide_workload(spec, None, unknown, now=at)
    result = observation.result
    decision = decide_workload(spec, observation.last_good, result, now=result.at)
    if decision.origin == "spec":
        return decision
    rate = round_up(decision.workload.request_rate)
    workload = decision.workload.model_copy(update={"request_rate": rate})
    return WorkloadDecision(workload, decision.origin, decision.condition, decision.last_good)


def remembered(
    observation: ServiceObservation | None, previous: WorkloadUsed | None, spec: Workload
) -> ServiceObservation | None:
    """`observation` with the last good observation recovered from status when the operator
    has none in memory (it restarted): a restart while Prometheus is down must not fall back to
    the spec and shrink what serves."""
    if observation is None or observation.last_good is not None or previous is None:
        return observation
    if previous.origin not in {"observed", "last-observed"}:
        return observation
    if previous.observed_at is None or previous.observed_rate is None:
        return observation
    rate = previous.observed_rate
    last = ObservedWorkload(
        at=previous.observed_at.timestamp(), window_seconds=0.0, request_rate=rate,
        finished_rate=rate, requests=0.0, input_edges=spec.input_edges,
        output_edges=spec.output_edges, histogram=previous.observed_histogram,
        ttft_seconds=previous.ttft_seconds,
        tpot_seconds=previous.tpot_seconds,
    )  # fmt: skip
    return observation.model_copy(update={"last_good": last})


def with_workload(service: LLMService, workload: Workload) -> LLMService:
    """The service as the planner sees it: its spec with the decided workload."""
    spec = service.spec.model_copy(update={"workload": workload})
    return service.model_copy(update={"spec": spec})


def annotate(
    sd: ServiceDecision,
    decision: WorkloadDecision,
    *,
    planned: bool,
    generation: int | None,
    now: str,
) -> ServiceDecision:
    """`sd` with the `WorkloadObserved` condition (removed for Static) and, when `planned` (this
    pass made the plan in force), `status.workload`'s origin, observation time and latencies.
    A Warning event when observation starts failing (or fails for a new reason)."""
    status = sd.status
    previous = condition(status.conditions, CONDITION_TYPE)
    cond = decision.condition
    if cond is None:
        conds = remove_condition(status.conditions, CONDITION_TYPE)
    else:
        conds = set_condition(
            status.conditions, cond.type, cond.status, cond.reason, cond.message,
            generation=generation, now=now,
        )  # fmt: skip
    update: dict[str, object] = {"conditions": conds}
    if planned and status.workload is not None:
        obs = decision.last_good if decision.origin != "spec" else None
        update["workload"] = status.workload.model_copy(
            update={
                "source": decision.workload.source,
                "origin": decision.origin,
                "observed_at": utc(obs.at) if obs is not None else None,
                "observed_rate": _round(obs.request_rate) if obs is not None else None,
                "observed_histogram": _shares(obs.histogram) if obs is not None else None,
                "ttft_seconds": _round(obs.ttft_seconds) if obs is not None else None,
                "tpot_seconds": _round(obs.tpot_seconds) if obs is not None else None,
            }
        )
    events = list(sd.events)
    failing = cond is not None and cond.status == ConditionStatus.FALSE
    if cond is not None and failing and (previous is None or previous.reason != cond.reason):
        events.append(EventSpec(type="Warning", reason=cond.reason, message=cond.message))
    new_status: LLMServiceStatus = status.model_copy(update=update)
    return sd.model_copy(update={"status": new_status, "events": events})


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


def _shares(histogram: list[list[float]] | None) -> list[list[float]] | None:
    return None if histogram is None else [[round(x, 4) for x in row] for row in histogram]
