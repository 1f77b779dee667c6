"""Mélange §5.3 offline profiling: per bucket, raise the request rate until the GPU saturates,
recording mean TPOT and TTFT at each rate; MaxTput at an SLO is then derived from the samples
(`gpumix.profiles.maxtput.max_rate_within`).

Two targets: the simulator (one pod of a catalog GPU type; no hardware needed) and any
OpenAI-compatible endpoint (a real vLLM server, or `gpumix sim serve`). A bucket is represented
by its midpoint request size. Rates grow geometrically from a start rate until the mean TPOT
exceeds `stop_tpot_ms`, the pod stops keeping up (completions fall below 90% of the offered
rate), or `max_points` rates were tried, so runs stay bounded.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from gpumix import __version__
from gpumix.api import BucketSamples, GPUProfile, GPUProfileSpec, RatePoint, SloTable
from gpumix.api.gpuprofile import TPDegree
from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.maxtput import max_rate_within
from gpumix.profiles.models import ModelShape
from gpumix.profiles.roofline import Roofline
from gpumix.sim.cluster import run
from gpumix.sim.engine import Engine, EngineConfig
from gpumix.sim.routing import RoundRobin
from gpumix.sim.traffic import make_requests, poisson_times


class Measurement(Protocol):
    def __call__(self, prompt: int, output: int, rate: float, seed: int) -> tuple[RatePoint, bool]:
        """Offer `rate` req/s of (prompt, output)-sized requests; the mean TPOT/TTFT and whether
        the target kept up."""
        ...


class SimTarget:
    """One simulated pod of a GPU type (k GPUs) running a model."""

    def __init__(
        self,
        gpu: str,
        model: ModelShape,
        gpus: int = 1,
        config: EngineConfig | None = None,
        requests: int = 200,
    ) -> None:
        self.roof = Roofline(gpu_type(gpu), model, gpus)
        self.config = config
        self.requests = requests

    def fits(self, prompt: int, output: int) -> bool:
        return prompt + output <= self.roof.context_limit

    def __call__(self, prompt: int, output: int, rate: float, seed: int) -> tuple[RatePoint, bool]:
        n = int(min(max(self.requests, rate * 60), 20 * self.requests))  # ≥ a minute of load
        reqs = make_requests(poisson_times(rate, n, seed), np.full(n, prompt), np.full(n, output))
        run([Engine("profile", self.roof, self.config)], RoundRobin(), reqs)
        steady = reqs[n // 5 :]  # drop the warm-up
        tpot = float(np.mean([r.tpot for r in steady])) * 1e3
        ttft = float(np.mean([r.ttft for r in steady])) * 1e3
        # saturated: latency keeps growing through the run (the queue is unstable)
        early = np.mean([r.latency for r in reqs[n // 5 : n // 2]])
        late = np.mean([r.latency for r in reqs[4 * n // 5 :]])
        point = RatePoint(rate=round(rate, 6), tpot_ms=round(tpot, 4), ttft_ms=round(ttft, 4))
        return point, bool(late <= 1.5 * early)


class EndpointTarget:
    """An OpenAI-compatible server: streamed `/v1/completions` with `max_tokens` = output and
    `ignore_eos`, Poisson arrivals in wall time; TTFT from the first streamed chunk."""

    def __init__(self, url: str, model: str, requests: int = 40, timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.requests = requests
        self.timeout = timeout_s
        self._failed: list[BaseException] = []

    def _one(self, prompt: int, output: int, out: list[tuple[float, float]]) -> None:
        """One request in its own thread; a failure is kept for `__call__` to raise."""
        try:
            self._request(prompt, output, out)
        except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors
            self._failed.append(err)

    def _request(self, prompt: int, output: int, out: list[tuple[float, float]]) -> None:
        body = json.dumps(
            {
                "model": self.model,
                "prompt": " ".join(["hi"] * prompt),
                "max_tokens": output,
                "min_tokens": output,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()
        req = urllib.request.Request(
            f"{self.url}/v1/completions", body, {"Content-Type": "application/json"}
        )
        start = time.monotonic()
        first = None
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            for line in resp:
                if line.startswith(b"data:") and first is None:
                    first = time.monotonic()
        end = time.monotonic()
        out.append(((end - start) / output, (first or end) - start))

    def __call__(self, prompt: int, output: int, rate: float, seed: int) -> tuple[RatePoint, bool]:
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, self.requests)
        results: list[tuple[float, float]] = []
        threads = []
        self._failed.clear()
        t0 = time.monotonic()
        for at in np.cumsum(gaps):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            if self._failed and not results:  # nothing got through: stop, and say why
                break
            t = threading.Thread(target=self._one, args=(prompt, output, results), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(self.timeout)
        if not results:  # a failed request among finished ones only means not keeping up
            if self._failed:
                err = self._failed[0]
                reason = getattr(err, "reason", None) or err  # URLError: the socket's error
                raise OSError(f"no request finished: {reason}")
            raise OSError(f"no request finished within --timeout {self.timeout:g} s")
        steady = results[len(results) // 5 :] or results
        tpot = float(np.mean([a for a, _ in steady])) * 1e3
        ttft = float(np.mean([b for _, b in steady])) * 1e3
        point = RatePoint(rate=round(rate, 6), tpot_ms=round(tpot, 4), ttft_ms=round(ttft, 4))
        return point, len(results) == self.requests


def profile_bucket(
    measure: Measurement,
    prompt: int,
    output: int,
    *,
    start_rate: float,
    growth: float = 1.5,
    stop_tpot_ms: float,
    max_points: int = 12,
    seed: int = 0,
) -> list[RatePoint]:
    """§5.3 for one bucket: the latency-vs-rate samples up to saturation."""
    points: list[RatePoint] = []
    rate = start_rate
    for k in range(max_points):
        point, kept_up = measure(prompt, output, rate, seed + k)
        points.append(point)
        if not kept_up or point.tpot_ms > stop_tpot_ms:
            break
        rate *= growth
    return points


def bucket_mids(edges: Sequence[int]) -> list[int]:
    """Each bucket's midpoint size: the size the profilers measure a bucket at."""
    return [max(1, (a + b) // 2) for a, b in itertools.pairwise(edges)]


def profile_grid(
    measure: Measurement,
    input_edges: list[int],
    output_edges: list[int],
    *,
    stop_tpot_ms: float,
    start_rate: float | None = None,
    estimate: Roofline | None = None,
    fits: object = None,
    max_points: int = 12,
    seed: int = 0,
) -> list[BucketSamples]:
    """Samples for every bucket of the grid. The start rate per bucket is `start_rate`, else a
    quarter of the roofline's MaxTput estimate at `stop_tpot_ms`."""
    samples = []
    for i, prompt in enumerate(bucket_mids(input_edges)):
        for j, output in enumerate(bucket_mids(output_edges)):
            if callable(fits) and not fits(prompt, output):
                continue
            r0 = start_rate
            if r0 is None:
                est = estimate.max_tput(prompt, output, stop_tpot_ms) if estimate else 0.0
                r0 = max(est / 4, 0.01)
            points = profile_bucket(
                measure,
                prompt,
                output,
                start_rate=r0,
                stop_tpot_ms=stop_tpot_ms,
                max_points=max_points,
                seed=seed,
            )
            samples.append(BucketSamples(input_bucket=i, output_bucket=j, points=points))
    return samples


def make_profile(
    model: str,
    gpu: str,
    *,
    gpus: TPDegree,
    input_edges: list[int],
    output_edges: list[int],
    samples: list[BucketSamples],
    source: str,
    tables_at: list[float] | None = None,
) -> GPUProfile:
    """A GPUProfile in samples form, or in tables form at the given TPOT SLOs."""
    tables = None
    if tables_at:
        rows, cols = len(input_edges) - 1, len(output_edges) - 1
        tables = []
        for slo in sorted(tables_at):
            grid = [[0.0] * cols for _ in range(rows)]
            for s in samples:
                grid[s.input_bucket][s.output_bucket] = round(
                    max_rate_within(s.points, slo, None), 4
                )
            tables.append(SloTable(tpot_ms=slo, max_tput=grid))
    short = model.rsplit("/", 1)[-1].lower()
    return GPUProfile(
        metadata={"name": f"{short}-{gpu}-tp{gpus}"},
        spec=GPUProfileSpec(
            model=model,
            gpu_type=gpu,
            gpus_per_replica=gpus,
            input_edges=input_edges,
            output_edges=output_edges,
            samples=None if tables else samples,
            tables=tables,
            source=f"{source} (gpumix {__version__}, Mélange §5.3 procedure)",
        ),
    )
