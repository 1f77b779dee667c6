"""What a simulation run shows: SLO attainment, latency percentiles, utilisation, cost, and why
requests missed the SLO.

Violation causes. Mélange §6.3 attributes 84% of its violations to request-rate bursts or
co-location with large requests. Each request that misses its TPOT SLO is classified:

- **alone**: it would miss the SLO even on an idle pod — its own prefill plus decodes, divided
  by its output tokens, exceeds the SLO (a long prompt with a few output tokens; Mélange's SLO is
  the *mean* TPOT of a bucket, so such requests can sit in a bucket that meets it on average).
- **burst**: it arrived behind a queue on its pod, or its pod received more requests in the
  `window_s` seconds before it than the 99th percentile of a Poisson count at the pod's mean
  arrival rate (λW + 2.33·√(λW)).
- **large co-location**: while it was on its pod, the pod's time-averaged KV-cache usage, or the
  share of the time the pod spent prefilling other requests (vLLM pauses decodes for prefills),
  was in the top 20% of what the pod's requests saw; or it was preempted (the cache ran full).

Violators that are not `alone` land in one of `burst`, `large_colocation`, `both`, `neither`;
the same tests over all requests give the base rates to compare against.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumix.sim.engine import Engine
from gpumix.sim.request import Request


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        if not values:
            return cls(mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
        a = np.asarray(values)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(
            mean=round(float(a.mean()), 4),
            p50=round(float(p50), 4),
            p90=round(float(p90), 4),
            p99=round(float(p99), 4),
            max=round(float(a.max()), 4),
        )


class PoolStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu_type: str
    pods: int
    requests: int
    utilisation: float
    """Mean share of time the pods were running a step."""
    kv_usage: float
    """Time-averaged KV-cache usage (0–1) over the run."""
    peak_kv_usage: float
    preemptions: int
    attainment_tpot: float
    cost_per_hour: float


class Violations(BaseModel):
    model_config = ConfigDict(frozen=True)

    count: int
    alone: int
    burst: int
    large_colocation: int
    both: int
    neither: int
    explained: float
    """Share of violations that are not `neither` (Mélange reports 84% for bursts and
    co-location)."""
    base_rate_burst: float
    """Share of *all* requests flagged as burst (to compare with violators)."""
    base_rate_large_colocation: float
    window_s: float


class SimReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    requests: int
    completed: int
    dropped: int
    tpot_slo_ms: float
    ttft_slo_ms: float
    attainment_tpot: float
    """Share of requests (dropped ones count as misses) with TPOT ≤ the SLO."""
    attainment_ttft: float
    attainment_both: float
    tpot_ms: Percentiles
    ttft_ms: Percentiles
    itl_ms: Percentiles
    e2e_s: Percentiles
    simulated_seconds: float
    throughput_rps: float
    cost_per_hour: float
    preemptions: int
    pools: dict[str, PoolStats]
    violations: Violations
    drop_reasons: dict[str, int]


def _pool_of(pod: Engine) -> str:
    return pod.name.rsplit("-", 1)[0]


def _burst_flags(requests: Sequence[Request], window: float) -> list[bool]:
    arrivals: dict[int, list[float]] = {}
    for r in requests:
        arrivals.setdefault(r.pod, []).append(r.arrival)
    thresholds: dict[int, float] = {}
    for k, times in arrivals.items():
        span = max(times[-1] - times[0], window)
        lam = len(times) / span * window
        thresholds[k] = lam + 2.33 * math.sqrt(lam)
    flags = []
    for r in requests:
        times = arrivals[r.pod]
        count = bisect.bisect_right(times, r.arrival) - bisect.bisect_left(
            times, r.arrival - window
        )
        flags.append(r.queue_at_arrival > 0 or count > thresholds[r.pod])
    return flags


def _colocation_flags(requests: Sequence[Request]) -> list[bool]:
    kv: dict[int, list[float]] = {}
    pf: dict[int, list[float]] = {}
    for r in requests:
        if r.finish is not None:
            kv.setdefault(r.pod, []).append(r.mean_kv_load)
            pf.setdefault(r.pod, []).append(_prefill_share(r))
    top_kv = {k: float(np.percentile(v, 80)) for k, v in kv.items()}
    top_pf = {k: float(np.percentile(v, 80)) for k, v in pf.items()}
    return [
        r.finish is not None
        and (
            r.preemptions > 0 or r.mean_kv_load > top_kv[r.pod] or _prefill_share(r) > top_pf[r.pod]
        )
        for r in requests
    ]


def _prefill_share(r: Request) -> float:
    """Share of the request's latency its pod spent on prefill steps, its own prefill excluded
    (approximately: its first prefill step is part of the TTFT)."""
    own = (r.first_token or r.arrival) - (r.admitted or r.arrival)
    return max(0.0, r.prefill_load - own) / r.latency if r.latency > 0 else 0.0


def summarise(
    requests: Sequence[Request],
    pods: Sequence[Engine],
    *,
    tpot_slo_ms: float,
    ttft_slo_ms: float,
    end: float,
    window_s: float = 10.0,
) -> SimReport:
    done = [r for r in requests if r.finish is not None]
    n = len(requests)
    tpot_ok = [r.tpot * 1e3 <= tpot_slo_ms for r in done]
    ttft_ok = [r.ttft * 1e3 <= ttft_slo_ms for r in done]
    share = (lambda k: k / n) if n else (lambda k: 0.0)
    routed = [r for r in requests if r.pod >= 0 and r.drop_reason is None]
    bursts = _burst_flags(routed, window_s) if routed else []
    colocated = _colocation_flags(routed)
    causes = {"alone": 0, "burst": 0, "large_colocation": 0, "both": 0, "neither": 0}
    for r, b, c in zip(routed, bursts, colocated, strict=True):
        if r.finish is None or r.tpot * 1e3 <= tpot_slo_ms:
            continue
        if pods[r.pod].roof.alone_s(r.prompt, r.output)[1] * 1e3 > tpot_slo_ms:
            causes["alone"] += 1
            continue
        causes["both" if b and c else "burst" if b else "large_colocation" if c else "neither"] += 1
    missed = sum(causes.values())
    pool_stats = pools_of(pods, done, tpot_slo_ms=tpot_slo_ms, end=end)
    reasons: dict[str, int] = {}
    for r in requests:
        if r.drop_reason is not None:
            key = r.drop_reason.split(" exceeds ")[0].split(" = ")[0]
            reasons[key] = reasons.get(key, 0) + 1
    return SimReport(
        requests=n,
        completed=len(done),
        dropped=sum(r.drop_reason is not None for r in requests),
        tpot_slo_ms=tpot_slo_ms,
        ttft_slo_ms=ttft_slo_ms,
        attainment_tpot=round(share(sum(tpot_ok)), 6),
        attainment_ttft=round(share(sum(ttft_ok)), 6),
        attainment_both=round(
            share(sum(a and b for a, b in zip(tpot_ok, ttft_ok, strict=True))), 6
        ),
        tpot_ms=Percentiles.of([r.tpot * 1e3 for r in done]),
        ttft_ms=Percentiles.of([r.ttft * 1e3 for r in done]),
        itl_ms=Percentiles.of([r.itl * 1e3 for r in done if r.output > 1]),
        e2e_s=Percentiles.of([r.latency for r in done]),
        simulated_seconds=round(end, 3),
        throughput_rps=round(len(done) / max(end, 1e-9), 4),
        cost_per_hour=round(sum(p.price_per_hour for p in pods), 6),
        preemptions=sum(p.preemptions for p in pods),
        pools=pool_stats,
        violations=Violations(
            count=missed,
            explained=round((missed - causes["neither"]) / missed, 4) if missed else 1.0,
            base_rate_burst=round(sum(bursts) / len(routed), 4) if routed else 0.0,
            base_rate_large_colocation=round(sum(colocated) / len(routed), 4) if routed else 0.0,
            window_s=window_s,
            **causes,
        ),
        drop_reasons=reasons,
    )


def pools_of(
    pods: Sequence[Engine], done: Sequence[Request], *, tpot_slo_ms: float, end: float
) -> dict[str, PoolStats]:
    """Per pool: utilisation, KV usage, preemptions and TPOT attainment of its ``done``
    requests. A function of its own because the attainment loop reads only these: the
    violation causes `summarise` adds took a quarter of each simulation's time."""
    pools: dict[str, list[Engine]] = {}
    for pod in pods:
        pools.setdefault(_pool_of(pod), []).append(pod)
    per_pod: dict[int, list[Request]] = {}
    for r in done:
        per_pod.setdefault(r.pod, []).append(r)
    horizon = max(end, 1e-9)
    pool_stats = {}
    for name, group in pools.items():
        served = [r for p in group for r in per_pod.get(p.index, [])]
        pool_stats[name] = PoolStats(
            gpu_type=group[0].gpu_type,
            pods=len(group),
            requests=len(served),
            utilisation=round(sum(p.busy_time for p in group) / (len(group) * horizon), 4),
            kv_usage=round(sum(p.kv_integral for p in group) / (len(group) * horizon), 4),
            peak_kv_usage=round(
                max((p.peak_used / p.kv_blocks if p.kv_blocks else 0.0) for p in group), 4
            ),
            preemptions=sum(p.preemptions for p in group),
            attainment_tpot=round(sum(r.tpot * 1e3 <= tpot_slo_ms for r in served) / len(served), 6)
            if served
            else 1.0,
            cost_per_hour=round(sum(p.price_per_hour for p in group), 6),
        )
    return pool_stats
