"""The operator's tasks at shutdown: a stop is not a failure, a failure is still raised."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from gpumix.api import LLMServiceStatus
from gpumix.operator import loop
from gpumix.operator.loop import WRITERS, Planner
from gpumix.operator.run import until_first_ends
from gpumix.operator.view import ClusterView
from gpumix.reconcile.cluster import ClusterDecision
from gpumix.reconcile.service import ServiceDecision


async def _forever() -> None:
    await asyncio.Event().wait()


def test_tasks_cancelled_by_kopfs_shutdown_end_the_operator_quietly() -> None:
    async def kopf_stopping(theirs: asyncio.Task[None]) -> None:
        await asyncio.sleep(0.01)
        theirs.cancel()  # kopf's stop cancels the tasks it finds, and waits for them
        await asyncio.wait([theirs])

    async def main() -> list[bool]:
        planner = asyncio.create_task(_forever(), name="planner")
        kopf = asyncio.create_task(kopf_stopping(planner), name="kopf")
        other = asyncio.create_task(_forever(), name="kv-migration")
        await until_first_ends([kopf, planner, other])
        return [t.done() for t in (kopf, planner, other)]

    assert asyncio.run(main()) == [True, True, True]


def test_a_task_that_fails_still_fails_the_operator() -> None:
    async def broken() -> None:
        raise RuntimeError("planner broke")

    async def main() -> None:
        await until_first_ends([asyncio.create_task(broken()), asyncio.create_task(_forever())])

    with pytest.raises(RuntimeError, match="planner broke"):
        asyncio.run(main())


# --- the planner loop, cancelled by kopf's stop mid-pass -------------------------------------

BODY = {"apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
        "metadata": {"namespace": "ns", "uid": "u"}, "spec": {}}  # fmt: skip


def _stopped_mid_pass(
    planner: Planner, busy: threading.Event, then: Callable[[], None] = lambda: None
) -> None:
    """Run ``planner`` until ``busy`` is set (from a thread of the pass), cancel it as kopf's
    stop does, then call ``then``; ``asyncio.run`` returns once every default-executor thread
    has ended."""

    async def main() -> None:
        task = asyncio.create_task(planner.run(settle_s=0.01, quiet_s=0.01))
        assert await asyncio.to_thread(busy.wait, 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        then()

    asyncio.run(main())


def test_a_stop_while_planning_does_not_wait_for_the_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planning, release, finished = threading.Event(), threading.Event(), []

    def plan_cluster(_snapshot: object) -> ClusterDecision:  # a pass of minutes (500 services)
        planning.set()
        release.wait(30)
        finished.append(True)
        return ClusterDecision(pool_status={}, services={})

    monkeypatch.setattr(loop, "plan_cluster", plan_cluster)
    planner = Planner(ClusterView(), object(), 5, 5, router_image="x")  # type: ignore[arg-type]
    try:
        _stopped_mid_pass(planner, planning)
        assert finished == []  # the operator's loop ended while the plan still ran
    finally:
        release.set()


class _SlowWriter:
    """Status patches: the first ``WRITERS`` are held until ``release``."""

    def __init__(self) -> None:
        self.sent, self.patched = 0, 0
        self.held, self.release = threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def patch_service_status(self, *_: object) -> None:
        with self._lock:
            self.patched += 1
            if self.patched == WRITERS:
                self.held.set()
        self.release.wait(30)

    def event(self, *_: object) -> None:
        pass


def test_a_stop_while_writing_sends_only_the_writes_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"s{i:02d}" for i in range(20)]
    view = ClusterView()
    for name in names:
        meta = {**BODY["metadata"], "name": name, "uid": name}
        view.update("services", "ADDED", {**BODY, "metadata": meta})
    status = LLMServiceStatus(observed_generation=1)
    decision = ClusterDecision(
        pool_status={},
        services={("ns", n): ServiceDecision(apply=None, status=status) for n in names},
    )
    monkeypatch.setattr(loop, "plan_cluster", lambda _snapshot: decision)
    writer = _SlowWriter()
    planner = Planner(view, writer, 5, 5, router_image="x")  # type: ignore[arg-type]
    try:
        _stopped_mid_pass(planner, writer.held, then=writer.release.set)
    finally:
        writer.release.set()
    # asyncio.run waited for the writing threads: what they sent is all they will send
    assert writer.patched == WRITERS  # of 20 statuses to write
