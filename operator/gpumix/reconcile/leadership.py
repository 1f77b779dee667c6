"""Leader election on a `coordination.k8s.io/v1` Lease: the decisions, without the I/O.

The rules are client-go's (`k8s.io/client-go/tools/leaderelection`), so that gpumix replicas
behave like every other controller's:

- A candidate reads the Lease every `retry_period_s` (jittered) and takes it when nobody holds
  it or when its record has not changed for `leaseDurationSeconds` **measured on the
  candidate's own monotonic clock from when it first saw that record** — never by comparing
  the holder's `renewTime` with the local wall clock, so clock *offsets* between nodes do not
  matter (only their rates do).
- The holder renews every `retry_period_s`. It may act only until `renew_deadline_s` after the
  *start* of its last successful renewal: the apiserver stored that renewal after the request
  started, so any candidate saw it later still and waits at least `lease_duration_s` from
  then. The holder stops `lease_duration_s - renew_deadline_s` before anyone may take over;
  that margin absorbs clock-rate differences, a late watchdog and writes already in flight.
- Every write of the Lease is a replace conditioned on the `resourceVersion` read (optimistic
  concurrency): of two candidates taking an expired Lease at once, the apiserver lets one win
  and answers the other 409 Conflict.

Pure: monotonic seconds (`now`) and wall-clock datetimes (`wall`) are arguments, and
`gpumix.operator.election` does the reading, writing, sleeping and exiting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum

JITTER_FACTOR = 1.2
"""client-go's: a candidate waits `retry_period_s * (1 + JITTER_FACTOR * u)`, u ∈ [0, 1)."""


@dataclass(frozen=True)
class Timing:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""

    lease_duration_s: int = 15
    """How long candidates wait after the last renewal they saw (the Lease's
    `leaseDurationSeconds`, a whole number of seconds)."""
    renew_deadline_s: float = 10.0
    """How long the holder may act after the start of its last successful renewal."""
    retry_period_s: float = 2.0
    """Between attempts to renew (holder) or to acquire (candidates, jittered)."""

    def problems(self) -> list[str]:
        """Why these timings cannot give mutual exclusion (empty when they can)."""
        out = []
        if self.lease_duration_s < 1:
            out.append("the lease duration must be at least 1 s")
        if self.retry_period_s <= 0:
            out.append("the retry period must be positive")
        if self.lease_duration_s <= self.renew_deadline_s:
            out.append(
                f"the lease duration ({self.lease_duration_s} s) must exceed the renew deadline "
                f"({self.renew_deadline_s:g} s): the holder must stop before others may take over"
            )
        if self.renew_deadline_s <= JITTER_FACTOR * self.retry_period_s:
            out.append(
                f"the renew deadline ({self.renew_deadline_s:g} s) must exceed "
                f"{JITTER_FACTOR} × the retry period ({self.retry_period_s:g} s), leaving room "
                f"for a retry"
            )
        return out


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec."""

    holder: str
    """`holderIdentity`; empty when released."""
    lease_duration_s: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    """`leaseTransitions`: how often the holder changed."""


@dataclass(frozen=True)
class Observed:
    """A record and the local monotonic time when it was first seen (client-go's
    `observedTime`): the lease runs from then, whatever its `renewTime` says."""

    record: LeaseRecord
    at: float


def observe(previous: Observed | None, record: LeaseRecord, now: float) -> Observed:
    """The observation after reading `record` at `now`: unchanged records keep their first
    sighting, so a holder that stopped renewing runs out."""
    if previous is not None and previous.record == record:
        return previous
    return Observed(record, now)


def expired(observed: Observed, now: float) -> bool:
    """Whether a candidate may take the Lease: nobody holds it, or its record has not changed
    for its `leaseDurationSeconds` since this candidate first saw it."""
    rec = observed.record
    return not rec.holder or now >= observed.at + rec.lease_duration_s


class Verdict(Enum):
    CREATE = "create"
    """No Lease yet: create it, holding it."""
    ACQUIRE = "acquire"
    """Released or expired: replace it (conditioned on its resourceVersion), holding it."""
    RENEW = "renew"
    """Ours: replace it with a new `renewTime`."""
    WAIT = "wait"
    """Another holder's and still valid."""


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    record: LeaseRecord | None
    """What to write (None for WAIT)."""
    reason: str


def decide(
    observed: Observed | None, me: str, timing: Timing, now: float, wall: datetime
) -> Decision:
    """What candidate `me` does after reading the Lease (`observed` None: there is none)."""
    if observed is None:
        return Decision(
            Verdict.CREATE, LeaseRecord(me, timing.lease_duration_s, wall, wall, 0), "no Lease"
        )
    rec = observed.record
    if rec.holder == me:
        renewed = replace(
            rec,
            lease_duration_s=timing.lease_duration_s,
            acquire_time=rec.acquire_time or wall,
            renew_time=wall,
        )
        return Decision(Verdict.RENEW, renewed, "held by this replica")
    if not expired(observed, now):
        left = observed.at + rec.lease_duration_s - now
        return Decision(Verdict.WAIT, None, f"held by {rec.holder} (valid {left:.1f} s more)")
    why = f"expired (held by {rec.holder})" if rec.holder else "released"
    taken = LeaseRecord(me, timing.lease_duration_s, wall, wall, rec.transitions + 1)
    return Decision(Verdict.ACQUIRE, taken, why)


def released(rec: LeaseRecord, wall: datetime) -> LeaseRecord:
    """The record a holder leaves when it stops on purpose (client-go's ReleaseOnCancel):
    no holder, so that a candidate takes over at its next attempt instead of a lease later."""
    return LeaseRecord("", 1, wall, wall, rec.transitions)


def may_act(renewed_at: float | None, timing: Timing, now: float) -> bool:
    """Whether the holder may still write: `renewed_at` is the monotonic time when its last
    successful acquire or renew request *started* (None: it does not hold the Lease)."""
    return renewed_at is not None and now < renewed_at + timing.renew_deadline_s


def request_timeout(renewed_at: float | None, timing: Timing, now: float) -> float:
    """How long one Lease request may take: a holder's must end by its renew deadline (a
    renewal that hangs past it is worthless), a candidate's within a renew deadline."""
    if renewed_at is None:
        return timing.renew_deadline_s
    return max(0.0, renewed_at + timing.renew_deadline_s - now)


def next_attempt(last_attempt: float, leading: bool, timing: Timing, jitter: float) -> float:
    """Monotonic time of the next attempt after one that started at `last_attempt`; `jitter`
    ∈ [0, 1) spreads the candidates (the holder renews on the period)."""
    if leading:
        return last_attempt + timing.retry_period_s
    return last_attempt + timing.retry_period_s * (1 + JITTER_FACTOR * jitter)
