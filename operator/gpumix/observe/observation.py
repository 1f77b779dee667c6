"""One service's workload and load as observed from vLLM metrics — or an explicit "unknown".

`observe_service` runs the queries of `promql` through a `MetricsSource` and returns either an
`ObservedWorkload` (rate, joint histogram on the service's edges, latencies, per-pod load) or an
`ObservationUnknown` with a reason. It never returns a zero rate for missing data: no series, a
target down, or an unreachable Prometheus are "unknown"; a rate of 0 means the series exist and
no request finished in the window.

The joint histogram is the router's when it has one on the service's grid (it counts each request
in its (input, output) bucket: exact); otherwise it is reconstructed from vLLM's two marginals
(`histograms.combine`, an approximation), and `router_fallback` says why.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from enum import StrEnum
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumix.observe import promql
from gpumix.observe.histograms import Marginals, combine, counts_on_edges
from gpumix.observe.promql import ServiceSelector
from gpumix.observe.source import MetricsSource, MetricsUnavailableError, QueryFailedError, Sample


class UnknownReason(StrEnum):
    """Why nothing could be observed; these are also the condition reasons the operator shows."""

    PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"
    QUERY_FAILED = "QueryFailed"
    NO_TARGETS = "NoScrapeTargets"
    TARGETS_DOWN = "ScrapeTargetsDown"
    NO_SERIES = "NoVLLMMetrics"
    NOT_CONFIGURED = "PrometheusNotConfigured"
    """The operator has no Prometheus to ask (`gpumix run` without `--prometheus-url`)."""


HistogramSource = Literal["router", "vllm-marginals"]

_MIN_REQUESTS = 0.5
"""Requests a window must count to have a histogram: increase() extrapolates, so a window in
which nothing finished may still count a fraction of one."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PodLoad(_Frozen):
    pod: str
    kv_usage: float | None = None
    running: float | None = None
    waiting: float | None = None


class ObservedWorkload(_Frozen):
    """What the pods did over the last `window_seconds` before `at` (unix seconds)."""

    at: float
    window_seconds: float
    request_rate: float
    finished_rate: float
    requests: float
    """Requests behind `histogram` in the window (the routers' count when they are its source)."""
    input_edges: list[int]
    output_edges: list[int]
    histogram: list[list[float]] | None
    """Joint shares (sum 1); None when no request finished in the window."""
    histogram_source: HistogramSource | None = None
    """Where `histogram` came from; None without one (or recovered from status, which does not
    keep it)."""
    router_fallback: str | None = None
    """Why the routers' joint histogram was not used (no router series, no request through a
    router in the window, buckets off the grid); None when it was."""
    outside_fraction: float = 0.0
    """Share of the requests vLLM counted outside the edges (clamped into the end buckets)."""
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    tpot_p90_seconds: float | None = None
    pods: list[PodLoad] = []

    @property
    def kv_utilisation(self) -> float | None:
        """Mean KV-cache usage over the pods that report it (SageServe's effective memory
        utilisation), None if none does."""
        values = [p.kv_usage for p in self.pods if p.kv_usage is not None]
        return sum(values) / len(values) if values else None

    def summary(self) -> str:
        rate, window = self.request_rate, self.window_seconds
        text = f"{rate:.3g} req/s over {window:.0f} s ({len(self.pods)} pods)"
        if self.histogram_source is not None:
            text += f", histogram from {self.histogram_source}"
        if self.router_fallback is not None:
            text += f" (router histogram not used: {self.router_fallback})"
        return text


class ObservationUnknown(_Frozen):
    at: float
    reason: UnknownReason
    message: str


ObservationResult = ObservedWorkload | ObservationUnknown


def _one(source: MetricsSource, query: str) -> float | None:
    samples = source.query(query)
    if not samples or math.isnan(samples[0].value) or math.isinf(samples[0].value):
        return None
    return samples[0].value


def _by_group(samples: list[Sample], key: str) -> dict[str, list[tuple[float, float]]]:
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if "le" in s.labels and not math.isnan(s.value):
            groups[s.labels.get(key, "")].append((float(s.labels["le"]), s.value))
    return groups


def observe_service(
    source: MetricsSource,
    sel: ServiceSelector,
    input_edges: Sequence[int],
    output_edges: Sequence[int],
    *,
    now: float,
    window_s: float = 300.0,
    prior: Sequence[Sequence[float]] | None = None,
) -> ObservationResult:
    """Observe one service (module docstring). `prior` (the spec's histogram) shapes the joint
    histogram by raking, see `histograms.combine`; without it, per-pod independence."""
    try:
        return _observe(source, sel, input_edges, output_edges, now, window_s, prior)
    except MetricsUnavailableError as err:
        return ObservationUnknown(
            at=now, reason=UnknownReason.PROMETHEUS_UNAVAILABLE, message=f"Prometheus: {err}"
        )
    except QueryFailedError as err:
        return ObservationUnknown(at=now, reason=UnknownReason.QUERY_FAILED, message=str(err))


def _observe(  # noqa: PLR0917 (the arguments of observe_service, passed on)
    source: MetricsSource,
    sel: ServiceSelector,
    input_edges: Sequence[int],
    output_edges: Sequence[int],
    now: float,
    window_s: float,
    prior: Sequence[Sequence[float]] | None,
) -> ObservationResult:
    where = "{" + sel.matchers() + "}"
    targets = source.query(promql.targets(sel))
    if not targets:
        return ObservationUnknown(
            at=now,
            reason=UnknownReason.NO_TARGETS,
            message=f"no scrape target matches {where}: check that Prometheus scrapes the vLLM "
            "pods and maps the pod label gpumix.io/service to gpumix_io_service (labelmap)",
        )
    down = sorted(t.labels.get(sel.group_by, "?") for t in targets if t.value < 1)
    if down:
        return ObservationUnknown(
            at=now,
            reason=UnknownReason.TARGETS_DOWN,
            message=f"{len(down)} of {len(targets)} scrape targets of {where} are down "
            f"({', '.join(down[:5])}): a partial rate would under-count the load",
        )
    finished = _one(source, promql.request_rate(sel, window_s))
    prompt = _by_group(
        source.query(promql.token_buckets(promql.PROMPT_TOKENS, sel, window_s)), sel.group_by
    )
    output = _by_group(
        source.query(promql.token_buckets(promql.OUTPUT_TOKENS, sel, window_s)), sel.group_by
    )
    if finished is None or not prompt or not output:
        missing = [
            name
            for name, ok in (
                ("vllm:request_success_total", finished is not None),
                (promql.PROMPT_TOKENS, bool(prompt)),
                (promql.OUTPUT_TOKENS, bool(output)),
            )
            if not ok
        ]
        return ObservationUnknown(
            at=now,
            reason=UnknownReason.NO_SERIES,
            message=f"targets of {where} are up but export no {', '.join(missing)} over the "
            f"last {window_s:.0f} s: is the engine vLLM with metrics enabled?",
        )
    growth = _one(source, promql.backlog_growth(sel, window_s)) or 0.0
    in_prior = out_prior = None
    if prior is not None:
        p = np.asarray(prior, dtype=float)
        if p.sum() > 0:
            in_prior, out_prior = p.sum(axis=1) / p.sum(), p.sum(axis=0) / p.sum()
    groups: dict[str, Marginals] = {}
    outside = 0.0
    for key in sorted(set(prompt) & set(output)):
        ins, out_in = counts_on_edges(prompt[key], input_edges, in_prior)
        outs, _ = counts_on_edges(output[key], output_edges, out_prior)
        groups[key] = Marginals(ins, outs)
        outside += out_in
    counted = sum(g.requests for g in groups.values())
    routed = _router_counts(
        source.query(promql.router_buckets(sel, window_s)), input_edges, output_edges
    )
    joint: np.ndarray | None = None
    hist_source: HistogramSource | None = None
    fallback: str | None = None
    if isinstance(routed, str):
        fallback, requests = routed, counted
        if requests > _MIN_REQUESTS:
            joint = combine(groups, None if prior is None else np.asarray(prior, dtype=float))
            hist_source = "vllm-marginals"
    else:
        requests = float(routed.sum())
        joint, hist_source = routed / requests, "router"
    pods = _pod_loads(source, sel)
    return ObservedWorkload(
        at=now,
        window_seconds=window_s,
        request_rate=max(0.0, finished + max(0.0, growth)),
        finished_rate=max(0.0, finished),
        requests=requests,
        input_edges=list(input_edges),
        output_edges=list(output_edges),
        histogram=None if joint is None else [[float(x) for x in row] for row in joint],
        histogram_source=hist_source,
        router_fallback=fallback,
        outside_fraction=outside / counted if counted > 0 else 0.0,
        mean_input_tokens=_one(source, promql.token_mean(promql.PROMPT_TOKENS, sel, window_s)),
        mean_output_tokens=_one(source, promql.token_mean(promql.OUTPUT_TOKENS, sel, window_s)),
        ttft_seconds=_one(source, promql.latency_mean(promql.TTFT, sel, window_s)),
        tpot_seconds=_one(source, promql.latency_mean(promql.ITL, sel, window_s)),
        tpot_p90_seconds=_one(source, promql.latency_quantile(promql.ITL, 0.9, sel, window_s)),
        pods=pods,
    )


def _router_counts(
    samples: list[Sample], input_edges: Sequence[int], output_edges: Sequence[int]
) -> np.ndarray | str:
    """The routers' request counts per grid bucket, or why there are none to use. A label must be
    one of the grid's lower edges exactly; a router keeps exporting the buckets of a grid it no
    longer routes on, so buckets with no requests in the window are skipped (a grid change falls
    back to the marginals until the window has passed it)."""
    if not samples:
        return f"no {promql.ROUTER_COMPLETED} series"
    rows = {str(edge): i for i, edge in enumerate(input_edges[:-1])}
    cols = {str(edge): j for j, edge in enumerate(output_edges[:-1])}
    counts = np.zeros((len(rows), len(cols)))
    for s in samples:
        if math.isnan(s.value) or s.value <= 0:
            continue
        i_from, o_from = s.labels.get("input_from", ""), s.labels.get("output_from", "")
        i, j = rows.get(i_from), cols.get(o_from)
        if i is None or j is None:
            return (
                f"bucket input_from={i_from} output_from={o_from} is not on the grid "
                f"{list(input_edges)} x {list(output_edges)}"
            )
        counts[i, j] += s.value
    if counts.sum() <= _MIN_REQUESTS:
        return "no request through a router in the window"
    return counts


def _pod_loads(source: MetricsSource, sel: ServiceSelector) -> list[PodLoad]:
    values: dict[str, dict[str, float]] = defaultdict(dict)
    for field, names in (
        ("kv_usage", promql.KV_USAGE),
        ("running", (promql.RUNNING,)),
        ("waiting", (promql.WAITING,)),
    ):
        for s in source.query(promql.per_pod_gauge(names, sel)):
            if not math.isnan(s.value):
                values[s.labels.get(sel.group_by, "")][field] = s.value
    return [
        PodLoad(
            pod=pod,
            kv_usage=v.get("kv_usage"),
            running=v.get("running"),
            waiting=v.get("waiting"),
        )
        for pod, v in sorted(values.items())
    ]
