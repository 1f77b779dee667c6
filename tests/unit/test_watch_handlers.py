"""kopf calls the watch handlers on its event loop: a plain function would run in kopf's thread
pool, one thread hop per watch event, mutating the view while the planner reads it on the loop
(kopf awaits a coroutine handler and sends a plain one to its executor)."""

import asyncio
import inspect

import kopf

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
