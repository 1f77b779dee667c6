"""The planner pass's observation step: Prometheus → per-service observations in the `Snapshot`.

I/O only. For every LLMService with `spec.workload.source: Prometheus`, `observe_service` (all
PromQL is in `gpumix.observe.promql`) runs in a worker thread, never on the event loop. Bounded:
each query times out after `timeout_s`, and the first answer that Prometheus is unreachable
marks it unavailable for the rest of the pass (one timeout per pass, not one per query).

A service is re-observed once its observation is `refresh_s` old (about one `--interval`), not
on every watch event: passes between observations plan with the same numbers, so status does
not change and the loop settles. The last good observation per service lives here, in memory;
`plan_cluster` decides what to plan with and hands back what to remember (`last_good`).
"""

import argparse
import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpumix.api import Forecast, LLMService
from gpumix.api.workload import Workload
from gpumix.cliargs import positive_float
from gpumix.observe import (
    ObservationResult,
    ObservationUnknown,
    ObservedWorkload,
    PrometheusSource,
    ServiceSelector,
    UnknownReason,
    observe_service,
)
from gpumix.observe.history import RateHistory, aligned_end, history_points, observe_history
from gpumix.observe.source import RangeSource
from gpumix.reconcile.cluster import ObjectKey, Snapshot
from gpumix.reconcile.workload import ServiceObservation
from gpumix.render.names import label_value

log = logging.getLogger("gpumix.observe")


@dataclass(frozen=True)
class _Job:
    key: ObjectKey
    workload: Workload
    grid: str
    """What the observation depends on in the spec (edges, prior): a change re-observes."""
    forecast: Forecast


class Observer:
    """Observes services for the planner; without a source (no `--prometheus-url`) observes
    nothing, and the planner reports `PrometheusNotConfigured`."""

    def __init__(
        self,
        source: RangeSource | None,
        *,
        window_s: float = 300.0,
        refresh_s: float = 30.0,
    ) -> None:
        self.source = source
        self.window_s, self.refresh_s = window_s, refresh_s
        self._results: dict[ObjectKey, tuple[str, ObservationResult]] = {}
        self.last_good: dict[ObjectKey, ObservedWorkload] = {}
        self._history: dict[ObjectKey, tuple[str, RateHistory]] = {}
        """Per service forecasting, the rate history of the current step (and its forecast
        settings); kept when Prometheus fails, refetched at the next whole step."""

    @classmethod
    def from_url(cls, url: str | None, *, timeout_s: float, **kw: Any) -> "Observer":
        return cls(PrometheusSource(url, timeout_s=timeout_s) if url else None, **kw)

    async def attach(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with this pass's observations of its Prometheus-sourced services."""
        if self.source is None:
            return snapshot
        jobs = _jobs(snapshot.services)
        now = time.time()
        stale = [
            j
            for j in jobs
            if j.key not in self._results
            or self._results[j.key][0] != j.grid
            or now - self._results[j.key][1].at >= self.refresh_s
        ]
        histories = [j for j in jobs if j.forecast.enabled and self._history_stale(j, now)]
        if stale or histories:
            fresh = await asyncio.to_thread(self._observe, stale, histories, now)
            for job in stale:
                self._results[job.key] = (job.grid, fresh[job.key])
        keys = {j.key for j in jobs}
        forecasting = {j.key for j in jobs if j.forecast.enabled}
        for cache in (self._results, self.last_good):
            for gone in set(cache) - keys:
                del cache[gone]
        for gone in set(self._history) - forecasting:
            del self._history[gone]
        observations = {
            k: ServiceObservation(
                result=self._results[k][1],
                last_good=self.last_good.get(k),
                history=self._history[k][1] if k in self._history else None,
            )
            for k in sorted(keys)
        }
        return snapshot.model_copy(update={"observations": observations})

    def remember(self, last_good: dict[ObjectKey, ObservedWorkload]) -> None:
        self.last_good.update(last_good)

    def _history_stale(self, job: _Job, now: float) -> bool:
        held = self._history.get(job.key)
        settings = job.forecast.model_dump_json()
        step = job.forecast.step_seconds
        return held is None or held[0] != settings or held[1].end < aligned_end(now, step)

    def _observe(
        self, jobs: list[_Job], histories: list[_Job], now: float
    ) -> dict[ObjectKey, ObservationResult]:
        """Blocking: one service after the other, in the worker thread."""
        assert self.source is not None
        out: dict[ObjectKey, ObservationResult] = {}
        down: ObservationUnknown | None = None
        for job in histories:
            fc = job.forecast
            sel = selector(job.key)
            points = history_points(fc.step_seconds, fc.season_seconds, fc.horizon_seconds)
            got = observe_history(self.source, sel, now=now, step_s=fc.step_seconds, points=points)
            if isinstance(got, RateHistory):
                self._history[job.key] = (fc.model_dump_json(), got)
                log.info("%s: rate history of %d points", "/".join(job.key), got.points)
            else:
                log.warning("%s: no rate history (%s): %s", "/".join(job.key), got.reason.value,
                            got.message)  # fmt: skip
                if got.reason == UnknownReason.PROMETHEUS_UNAVAILABLE:
                    down = got
                    break
        for job in jobs:
            if down is not None:
                out[job.key] = down
                continue
            wl = job.workload
            result = observe_service(
                self.source, selector(job.key),
                wl.input_edges, wl.output_edges, now=now, window_s=self.window_s,
                prior=wl.histogram,
            )  # fmt: skip
            if (
                isinstance(result, ObservationUnknown)
                and result.reason == UnknownReason.PROMETHEUS_UNAVAILABLE
            ):
                down = result
            out[job.key] = result
            _log(job.key, result)
        return out


def selector(key: ObjectKey) -> ServiceSelector:
    """The pods' `gpumix.io/service` label as the renderer writes it (names past 63 characters
    are shortened with a hash), so long service names are observed too."""
    return ServiceSelector(namespace=key[0], service=label_value(key[1]))


def _jobs(services: list[dict[str, Any]]) -> list[_Job]:
    jobs = []
    for body in services:
        spec = (body.get("spec") or {}).get("workload") or {}
        if spec.get("source") != "Prometheus":
            continue
        try:  # an invalid spec is the planner's to report (InvalidSpec)
            service = LLMService.model_validate({**body, "status": None})
        except ValidationError:
            continue
        meta = body.get("metadata", {})
        wl = service.spec.workload
        grid = wl.model_dump_json(include={"input_edges", "output_edges", "histogram"})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        jobs.append(_Job(key, wl, grid, service.spec.scaling.forecast))
    return jobs


def _log(key: ObjectKey, result: ObservationResult) -> None:
    name = "/".join(key)
    if isinstance(result, ObservedWorkload):
        log.info("%s: observed %s", name, result.summary())
    else:
        log.warning("%s: workload unknown (%s): %s", name, result.reason.value, result.message)


def add_observe_arguments(run: argparse.ArgumentParser) -> None:
    """`gpumix run`'s observation flags."""
    run.add_argument(
        "--prometheus-url",
        default=None,
        help="Prometheus that scrapes the vLLM pods (observe/README.md); without it, services "
        "with workload source Prometheus plan with their spec (WorkloadObserved=False)",
    )
    run.add_argument(
        "--prometheus-timeout",
        type=positive_float,
        default=5.0,
        help="seconds per Prometheus query",
    )
    run.add_argument(
        "--observe-window",
        type=positive_float,
        default=300.0,
        help="seconds of metrics an observation averages over (PromQL rate window)",
    )


def observer_from_args(args: argparse.Namespace) -> Observer:
    """Re-observe every pass of the interval timer (a little earlier, so no timer pass reuses
    the previous observation), not on every watch event."""
    return Observer.from_url(
        args.prometheus_url,
        timeout_s=args.prometheus_timeout,
        window_s=args.observe_window,
        refresh_s=0.8 * args.interval,
    )
