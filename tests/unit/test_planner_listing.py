"""The first planner pass waits until the view holds what the apiserver counted (a restarted
operator once planned 50 services on 200 of 501 nodes, kopf's listing still under way, and moved
every one of them)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpumix.operator.loop import Planner
from gpumix.operator.view import ClusterView
from gpumix.reconcile.digest import node_info


def node(i: int) -> dict[str, object]:
    return {"metadata": {"name": f"n{i}"}}


def planner(view: ClusterView, listing: object, timeout_s: float = 30.0) -> Planner:
    return Planner(view, object(), 5, 5, router_image="x", listing=listing,  # type: ignore[arg-type]
                   listing_timeout_s=timeout_s)  # fmt: skip


async def trickle(view: ClusterView, n: int) -> None:
    """kopf's listing: one node at a time."""
    for i in range(n):
        await asyncio.sleep(0.01)
        view.update("nodes", None, node(i))


def test_the_first_pass_waits_for_every_counted_object() -> None:
    async def scenario() -> int:
        view = ClusterView()
        filling = asyncio.create_task(trickle(view, 30))
        await planner(view, lambda: {"nodes": 30, "pods": 0}).listed(poll_s=0.005)
        held = len(view.objects["nodes"])
        await filling
        return held

    assert asyncio.run(scenario()) == 30


def test_a_count_that_fails_is_asked_again() -> None:
    calls: list[int] = []

    def listing() -> dict[str, int]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("apiserver not ready")
        return {"nodes": 2}

    async def scenario() -> int:
        view = ClusterView()
        view.update("nodes", None, node(0))
        asyncio.get_running_loop().call_later(0.05, view.update, "nodes", None, node(1))
        await planner(view, listing).listed(poll_s=0.005, recount_s=0.02)
        return len(view.objects["nodes"])

    assert asyncio.run(scenario()) == 2
    assert len(calls) >= 2  # asked again after the failure (and while the view was short)


def test_a_view_that_never_fills_is_planned_after_the_timeout_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    view = ClusterView()
    view.update("nodes", None, node(0))
    with caplog.at_level(logging.WARNING, logger="gpumix.planner"):
        asyncio.run(planner(view, lambda: {"nodes": 3}, timeout_s=0.1).listed(poll_s=0.01))
    assert "nodes 1 of 3" in caplog.text


def test_the_view_keeps_of_a_node_what_the_planner_reads() -> None:
    """A node's images and every object's managedFields are not kept; the snapshot reads the same
    node (`node_info`) from what is."""
    body = {
        "metadata": {"name": "n1", "labels": {"gpumix.io/pool": "a10g"},
                     "managedFields": [{"manager": "kubelet"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"},
                   "images": [{"names": ["vllm"], "sizeBytes": 10**10}]},
    }  # fmt: skip
    pod = {"metadata": {"name": "p", "namespace": "ns", "managedFields": [{}]}, "spec": {}}
    view = ClusterView()
    view.update("nodes", None, body)
    view.update("pods", None, pod)
    kept = view.objects["nodes"]["", "n1"]
    assert "images" not in kept["status"] and "managedFields" not in kept["metadata"]
    assert "managedFields" not in view.objects["pods"]["ns", "p"]["metadata"]
    assert pod["metadata"]["managedFields"] == [{}]  # the event's body is left as it was
    assert node_info(kept) == node_info(body)
    assert view.snapshot("now", 5).nodes == [node_info(body)]


def test_objects_deleted_after_the_count_do_not_hold_the_first_pass_back() -> None:
    """A namespace torn down as the operator starts: the first count holds pods that are gone
    before kopf lists them. Counted again, the view is whole."""
    counts = iter([{"pods": 3}])

    def listing() -> dict[str, int]:
        return next(counts, {"pods": 1})

    async def scenario() -> float:
        view = ClusterView()
        view.update("pods", None, {"metadata": {"namespace": "a", "name": "p0"}})
        start = asyncio.get_running_loop().time()
        await planner(view, listing, timeout_s=30.0).listed(poll_s=0.005, recount_s=0.05)
        return asyncio.get_running_loop().time() - start

    assert asyncio.run(scenario()) < 5.0  # not the 30 s timeout


async def changing(view: ClusterView, n: int | None, every_s: float = 0.01) -> None:
    """Watch events every ``every_s``: ``n`` of them (None: without end)."""
    i = 0
    while n is None or i < n:
        await asyncio.sleep(every_s)
        view.changed.set()
        i += 1


def test_a_pass_waits_for_a_burst_of_changes_to_end() -> None:
    async def scenario() -> bool:
        view = ClusterView()
        burst = asyncio.create_task(changing(view, 30))
        await planner(view, None).settled(quiet_s=0.5, most_s=60)
        return burst.done()

    assert asyncio.run(scenario())


def test_a_lone_change_is_planned_without_waiting_the_longest_settle() -> None:
    async def scenario() -> None:
        view = ClusterView()
        view.changed.set()
        await asyncio.wait_for(planner(view, None).settled(quiet_s=0.05, most_s=600), 30)

    asyncio.run(scenario())  # a wait of most_s would time out


def test_changes_without_end_wait_at_most_the_longest_settle() -> None:
    async def scenario() -> None:
        view = ClusterView()
        endless = asyncio.create_task(changing(view, None))
        await asyncio.wait_for(planner(view, None).settled(quiet_s=600, most_s=0.2), 30)
        endless.cancel()

    asyncio.run(scenario())
