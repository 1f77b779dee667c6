"""Leader election's decisions (gpumix.reconcile.leadership): client-go's rules on a clock we
drive, and the safety argument — the holder stops acting before any candidate may take over."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from gpumix.cli import build_parser
from gpumix.reconcile.leadership import (
    JITTER_FACTOR,
    LeaseRecord,
    Observed,
    Timing,
    Verdict,
    decide,
    expired,
    may_act,
    next_attempt,
    observe,
    released,
    request_timeout,
)

T = Timing(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
WALL = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def held_by(holder: str, renewed: datetime = WALL, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, 15, WALL - timedelta(hours=1), renewed, transitions)


def test_default_timings_are_client_gos_and_valid() -> None:
    assert Timing() == Timing(15, 10.0, 2.0)
    assert Timing().problems() == []


@pytest.mark.parametrize(
    ("timing", "fragment"),
    [
        (Timing(10, 10, 2), "must exceed the renew deadline"),
        (Timing(15, 12, 11), "1.2 × the retry period"),
        (Timing(0, 0.5, 0.1), "at least 1 s"),
        (Timing(15, 10, 0), "retry period must be positive"),
    ],
)
def test_timings_that_cannot_exclude_are_refused(timing: Timing, fragment: str) -> None:
    assert any(fragment in p for p in timing.problems()), timing.problems()


def test_no_lease_is_created_held_by_me() -> None:
    d = decide(None, "me", T, now=100.0, wall=WALL)
    assert d.verdict is Verdict.CREATE
    assert d.record == LeaseRecord("me", 15, WALL, WALL, 0)


def test_anothers_lease_is_valid_for_its_duration_from_when_i_first_saw_it() -> None:
    # Its renewTime is an hour old by my wall clock: clock offsets between nodes do not count,
    # only how long the record stayed the same on my monotonic clock.
    stale_looking = held_by("other", renewed=WALL - timedelta(hours=1))
    seen = observe(None, stale_looking, now=100.0)
    assert decide(seen, "me", T, now=100.0, wall=WALL).verdict is Verdict.WAIT
    assert decide(seen, "me", T, now=114.9, wall=WALL).verdict is Verdict.WAIT
    taken = decide(seen, "me", T, now=115.0, wall=WALL)
    assert taken.verdict is Verdict.ACQUIRE
    assert taken.record == LeaseRecord("me", 15, WALL, WALL, 4)  # one more transition
    assert "expired (held by other)" in taken.reason


def test_a_renewal_restarts_the_wait_and_an_unchanged_record_does_not() -> None:
    seen = observe(None, held_by("other"), now=100.0)
    assert observe(seen, held_by("other"), now=110.0) is seen  # same record: still from 100
    renewed = observe(seen, held_by("other", renewed=WALL + timedelta(seconds=2)), now=110.0)
    assert renewed.at == 110.0
    assert not expired(renewed, now=124.9)
    assert expired(renewed, now=125.0)


def test_the_records_own_duration_counts() -> None:
    seen = observe(None, LeaseRecord("other", 30, WALL, WALL), now=0.0)
    assert decide(seen, "me", T, now=20.0, wall=WALL).verdict is Verdict.WAIT
    assert decide(seen, "me", T, now=30.0, wall=WALL).verdict is Verdict.ACQUIRE


def test_a_released_lease_is_taken_at_once() -> None:
    rec = released(held_by("other"), WALL)
    assert rec == LeaseRecord("", 1, WALL, WALL, 3)
    d = decide(observe(None, rec, now=100.0), "me", T, now=100.0, wall=WALL)
    assert d.verdict is Verdict.ACQUIRE
    assert d.reason == "released"
    assert d.record is not None
    assert d.record.transitions == 4


def test_my_own_lease_is_renewed_keeping_its_acquire_time() -> None:
    mine = held_by("me")
    d = decide(observe(None, mine, now=5.0), "me", T, now=5.0, wall=WALL + timedelta(seconds=2))
    assert d.verdict is Verdict.RENEW
    assert d.record == LeaseRecord(
        "me", 15, mine.acquire_time, WALL + timedelta(seconds=2), mine.transitions
    )


def test_the_holder_acts_until_its_renew_deadline_from_the_request_start() -> None:
    assert not may_act(None, T, now=0.0)
    assert may_act(100.0, T, now=109.99)
    assert not may_act(100.0, T, now=110.0)
    assert request_timeout(100.0, T, now=104.0) == pytest.approx(6.0)
    assert request_timeout(100.0, T, now=111.0) == 0.0
    assert request_timeout(None, T, now=0.0) == T.renew_deadline_s


def test_attempts_holder_on_the_period_candidates_jittered() -> None:
    assert next_attempt(10.0, leading=True, timing=T, jitter=0.9) == 12.0
    assert next_attempt(10.0, leading=False, timing=T, jitter=0.0) == 12.0
    assert next_attempt(10.0, leading=False, timing=T, jitter=0.5) == pytest.approx(
        10.0 + 2.0 * (1 + JITTER_FACTOR * 0.5)
    )


@pytest.mark.parametrize("seed", range(20))
def test_no_two_replicas_ever_may_act_at_once(seed: int) -> None:
    """Replicas share one Lease (a compare-and-swap register, as the apiserver's resourceVersion
    makes it); each request takes a random time and is stored at a random instant inside it;
    holders pause and stop renewing at random. At every instant at most one replica may act."""
    rng = random.Random(seed)
    timing = Timing(lease_duration_s=3, renew_deadline_s=2.0, retry_period_s=0.5)
    names = ["a", "b", "c"]
    lease: tuple[int, LeaseRecord] | None = None  # (version, record)
    observed: dict[str, Observed | None] = dict.fromkeys(names)
    renewed_at: dict[str, float | None] = dict.fromkeys(names)
    due = {n: rng.uniform(0, 1) for n in names}
    frozen_until = dict.fromkeys(names, 0.0)  # a paused process (GC, a slow node): no attempts
    offset = {n: timedelta(minutes=rng.uniform(-60, 60)) for n in names}  # wall clocks disagree
    now, leaders_seen = 0.0, set()
    while now < 120:
        now = round(now + 0.01, 2)
        acting = [n for n in names if may_act(renewed_at[n], timing, now)]
        assert len(acting) <= 1, (now, acting)
        leaders_seen.update(acting)
        for n in names:
            if now < due[n] or now < frozen_until[n]:
                continue
            if rng.random() < 0.03:
                frozen_until[n] = now + rng.uniform(0, 8)
            started = now
            read = lease  # the request reads at `started` and lands somewhat later
            seen = observe(observed[n], read[1], started) if read else None
            observed[n] = seen
            d = decide(seen, n, timing, started, WALL + offset[n] + timedelta(seconds=started))
            if d.verdict is not Verdict.WAIT and rng.random() > 0.1:  # 10%: the request fails
                version = read[0] if read else 0
                if (lease[0] if lease else 0) == version:  # the CAS holds: nobody wrote between
                    assert d.record is not None
                    lease = (version + 1, d.record)
                    renewed_at[n] = started
                    observed[n] = Observed(d.record, now)
            holds = renewed_at[n] is not None and lease is not None and lease[1].holder == n
            due[n] = next_attempt(started, holds, timing, rng.random())
    assert len(leaders_seen) >= 2, "the simulation never moved the Lease"


def test_run_flags_default_and_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["run"])
    assert args.leader_elect is True
    assert args.leader_elect_resource_name == "gpumix-operator"
    assert args.leader_elect_resource_namespace is None  # $POD_NAMESPACE, SA file, gpumix-system
    assert (
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    ) == (15, 10.0, 2.0)
    monkeypatch.setenv("GPUMIX_LEADER_ELECT_LEASE_DURATION", "4")
    monkeypatch.setenv("GPUMIX_LEADER_ELECT_RESOURCE_NAME", "mine")
    args = build_parser().parse_args(["run", "--no-leader-elect"])
    assert args.leader_elect is False
    assert args.leader_elect_lease_duration == 4
    assert args.leader_elect_resource_name == "mine"
