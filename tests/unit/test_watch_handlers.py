"""kopf calls the watch handlers on its event loop: a plain function would run in kopf's thread
pool, one thread hop per watch event, mutating the view while the planner reads it on the loop
(kopf awaits a coroutine handler and sends a plain one to its executor)."""

import asyncio
import inspect

import kopf
from prometheus_client import REGISTRY

from gpumix.operator.handlers import WATCHES, register
from gpumix.operator.view import ClusterView


def test_every_watch_handler_is_a_coroutine_that_updates_the_view() -> None:
    registry, view = kopf.OperatorRegistry(), ClusterView()
    register(registry, view, log_json=False)
    handlers = list(registry._watching.get_all_handlers())
    assert len(handlers) == len(WATCHES)
    assert all(inspect.iscoroutinefunction(h.fn) for h in handlers)

    async def deliver() -> None:
        for h in handlers:
            await h.fn(event={"type": "ADDED", "object": {"metadata": {"name": "x"}}})

    asyncio.run(deliver())
    assert all(list(view.objects[kind]) == [("", "x")] for kind in WATCHES)


def _node(heartbeat: str, *, gpus: str = "8", label: str = "a40") -> dict[str, object]:
    return {
        "metadata": {"name": "n1", "resourceVersion": heartbeat, "labels": {"pool": label}},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
        },
    }


def test_a_node_heartbeat_does_not_wake_the_planner_but_a_change_it_reads_does() -> None:
    def counted() -> float:
        return REGISTRY.get_sample_value("gpumix_view_changes_total", {"kind": "nodes"}) or 0.0

    before = counted()
    view = ClusterView()
    view.update("nodes", "ADDED", _node("1"))
    assert view.changed.is_set()
    view.changed.clear()
    view.update("nodes", "MODIFIED", _node("2"))  # status renewed, nothing the view keeps
    assert not view.changed.is_set()
    for changed in (_node("3", gpus="7"), _node("4", gpus="7", label="l40")):
        view.update("nodes", "MODIFIED", changed)
        assert view.changed.is_set()
        view.changed.clear()
    view.update("nodes", "DELETED", _node("5"))
    assert view.changed.is_set() and not view.objects["nodes"]
    view.changed.clear()
    view.update("nodes", "DELETED", _node("6"))  # already gone
    assert not view.changed.is_set()
    assert counted() - before == 4  # gpumix_view_changes_total: the wakes, not every event
