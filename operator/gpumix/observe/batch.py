"""Interactive and batch work sharing one service's replicas (SageServe §3.3, §6.2–6.3).

Interactive (IW) requests need their latency SLO now; batch (NIW) requests need only to finish
before a deadline (hours). Batch work is served from the spare capacity the interactive load
leaves: a replica carries batch requests while its utilisation is under a threshold (SageServe
uses 60%: below it one queued request is released, below 50% two; a request older than 10 h is
promoted to interactive priority). The capacity question the planner asks is the one
`reserve_for_batch` answers: how much capacity beyond the spare must be reserved so that a
backlog of batch jobs with deadlines all finish in time (EDF, earliest deadline first, which is
optimal for one shared server: feasible iff for every deadline d, the work due by d ≤ the
capacity available until d).

Rates are requests per second at the service's SLO capacity (MaxTput-weighted, as the planner
counts them); `capacity_per_replica` is one replica's MaxTput for the service's mix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BATCH_THRESHOLD = 0.6
PROMOTE_AFTER_S = 10 * 3600.0


@dataclass(frozen=True)
class BatchJob:
    requests: float
    deadline_s: float
    """Seconds from now until the job expires."""


def spare_rate(
    replicas: int, capacity_per_replica: float, interactive_rate: float,
    threshold: float = BATCH_THRESHOLD,
) -> float:  # fmt: skip
    """Batch req/s the replicas take while interactive + batch utilisation stays ≤ threshold."""
    return max(0.0, threshold * replicas * capacity_per_replica - interactive_rate)


def spare_profile(
    replicas: int, capacity_per_replica: float, interactive_forecast: Sequence[float],
    threshold: float = BATCH_THRESHOLD,
) -> list[float]:  # fmt: skip
    """`spare_rate` per step of an interactive forecast."""
    return [spare_rate(replicas, capacity_per_replica, r, threshold) for r in interactive_forecast]


def batch_release(
    utilisation: float | None, *, one_below: float = 0.6, two_below: float = 0.5
) -> int:
    """SageServe §6.3: queued batch requests to send to a replica reporting `utilisation`."""
    if utilisation is None:
        return 0
    if utilisation < two_below:
        return 2
    return 1 if utilisation < one_below else 0


def batch_priority(age_s: float, promote_after_s: float = PROMOTE_AFTER_S) -> int:
    """0 (interactive priority) for batch requests older than `promote_after_s`, else 1."""
    return 0 if age_s > promote_after_s else 1


def _capacity_until(spare: Sequence[float], step_s: float, t: float) -> float:
    """∫₀ᵗ spare, spare given per step (constant inside a step, the last step held after)."""
    if not spare:
        return 0.0
    full = int(t // step_s)
    total = sum(spare[: min(full, len(spare))]) * step_s
    if full < len(spare):
        total += spare[full] * (t - full * step_s)
    else:
        total += spare[-1] * (t - len(spare) * step_s)
    return total


@dataclass(frozen=True)
class Reservation:
    extra_rate: float
    """Req/s to reserve beyond the spare capacity (0: the spare suffices)."""
    extra_replicas: int | None
    """Replicas that carry `extra_rate`; None without a capacity (the planner's ILP sizes them)."""
    binding_deadline_s: float | None
    """The deadline that sets the reservation (None when nothing needs reserving)."""
    overdue_requests: float
    """Requests of jobs already past their deadline (no capacity can save them)."""


def reserve_for_batch(
    jobs: Sequence[BatchJob], spare: Sequence[float], step_s: float,
    capacity_per_replica: float | None = None,
) -> Reservation:  # fmt: skip
    """The least constant extra rate x with which EDF meets every deadline:
    x = max over deadlines d of (work due by d − spare capacity until d) / d, and the replicas
    that carry it. Jobs already overdue are reported, not reserved for."""
    live = sorted((j for j in jobs if j.deadline_s > 0), key=lambda j: j.deadline_s)
    overdue = sum(j.requests for j in jobs if j.deadline_s <= 0)
    need, binding, due = 0.0, None, 0.0
    for job in live:
        due += job.requests
        x = (due - _capacity_until(spare, step_s, job.deadline_s)) / job.deadline_s
        if x > need:
            need, binding = x, job.deadline_s
    if capacity_per_replica is None:
        return Reservation(need, None, binding, overdue)
    replicas = math.ceil(need / capacity_per_replica - 1e-9) if need > 0 else 0
    return Reservation(need, replicas, binding, overdue)


def edf_finish_times(
    jobs: Sequence[BatchJob], spare: Sequence[float], step_s: float, extra_rate: float = 0.0,
    horizon_s: float | None = None,
) -> list[float | None]:  # fmt: skip
    """When each job (in the given order) finishes under EDF with spare + extra capacity, by
    stepping time; None if not within `horizon_s` (default: the latest deadline)."""
    order = sorted(range(len(jobs)), key=lambda k: jobs[k].deadline_s)
    left = [jobs[k].requests for k in order]
    done: list[float | None] = [None] * len(jobs)
    end = horizon_s if horizon_s is not None else max((j.deadline_s for j in jobs), default=0.0)
    t, step, k = 0.0, 0, 0
    dt = step_s / 20.0
    while t < end - 1e-9 and k < len(order):
        rate = (spare[min(step, len(spare) - 1)] if spare else 0.0) + extra_rate
        budget = rate * dt
        while budget > 1e-12 and k < len(order):
            use = min(budget, left[k])
            left[k] -= use
            budget -= use
            if left[k] <= 1e-9:
                done[order[k]] = t + dt
                k += 1
        t += dt
        step = int(t // step_s)
    return done
