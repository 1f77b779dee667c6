"""Batch work from the spare capacity of interactive replicas, with deadlines."""

import pytest

from gpumix.observe.batch import (
    BatchJob,
    batch_priority,
    batch_release,
    edf_finish_times,
    reserve_for_batch,
    spare_profile,
    spare_rate,
)


def test_spare_rate_and_release() -> None:
    assert spare_rate(4, 2.0, 3.0) == pytest.approx(0.6 * 8 - 3)
    assert spare_rate(1, 2.0, 5.0) == 0
    assert spare_profile(2, 1.0, [0.2, 2.0]) == pytest.approx([1.0, 0.0])
    assert [batch_release(u) for u in (0.3, 0.55, 0.7, None)] == [2, 1, 0, 0]
    assert batch_priority(11 * 3600) == 0
    assert batch_priority(60) == 1


def test_no_reservation_when_spare_suffices() -> None:
    r = reserve_for_batch([BatchJob(100, 3600)], [1.0] * 4, 900.0, 2.0)
    assert (r.extra_rate, r.extra_replicas, r.binding_deadline_s) == (0.0, 0, None)


def test_reservation_is_the_tightest_deadline_demand() -> None:
    # Spare 0.5 req/s for the first hour, 2 req/s after; 3000 requests due in 1 h, 3000 in 4 h.
    spare = [0.5, 2.0, 2.0, 2.0]
    jobs = [BatchJob(3000, 4 * 3600), BatchJob(3000, 3600)]
    r = reserve_for_batch(jobs, spare, 3600.0, capacity_per_replica=0.25)
    assert r.binding_deadline_s == 3600
    assert r.extra_rate == pytest.approx((3000 - 1800) / 3600)
    assert r.extra_replicas == 2  # 0.333 req/s at 0.25 req/s per replica
    # The reservation is sufficient and tight: EDF meets every deadline with it, not without.
    done = edf_finish_times(jobs, spare, 3600.0, r.extra_rate)
    assert all(t is not None and t <= j.deadline_s * 1.01 for t, j in zip(done, jobs, strict=True))
    late = edf_finish_times(jobs, spare, 3600.0, 0.9 * r.extra_rate)
    assert late[1] is None or late[1] > 3600


def test_overdue_jobs_are_reported_not_reserved() -> None:
    r = reserve_for_batch([BatchJob(50, 0), BatchJob(10, 100)], [1.0], 60.0, 1.0)
    assert r.overdue_requests == 50
    assert r.extra_rate == 0
