"""Observe and forecast: a service's workload from vLLM's Prometheus metrics, what to plan with
when nothing can be observed, calibration of profiles, forecasting and pacing, batch capacity.

Everything here is pure except `source.PrometheusSource` (HTTP). See observe/README.md.
"""

from gpumix.observe.decision import (
    CONDITION_TYPE,
    WorkloadCondition,
    WorkloadDecision,
    decide_workload,
)
from gpumix.observe.observation import (
    ObservationResult,
    ObservationUnknown,
    ObservedWorkload,
    PodLoad,
    UnknownReason,
    observe_service,
)
from gpumix.observe.promql import ServiceSelector
from gpumix.observe.source import (
    MetricsSource,
    MetricsUnavailableError,
    PrometheusSource,
    QueryFailedError,
    Sample,
)

__all__ = [
    "CONDITION_TYPE",
    "MetricsSource",
    "MetricsUnavailableError",
    "ObservationResult",
    "ObservationUnknown",
    "ObservedWorkload",
    "PodLoad",
    "PrometheusSource",
    "QueryFailedError",
    "Sample",
    "ServiceSelector",
    "UnknownReason",
    "WorkloadCondition",
    "WorkloadDecision",
    "decide_workload",
    "observe_service",
]
