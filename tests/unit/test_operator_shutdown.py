"""The operator's tasks at shutdown: a stop is not a failure, a failure is still raised."""

from __future__ import annotations

import asyncio

import pytest

from gpumix.operator.run import until_first_ends


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
