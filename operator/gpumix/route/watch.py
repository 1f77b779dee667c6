"""The router's view of its LLMService: the plan's routing ConfigMap and the engine pods, each
kept by a list-then-watch loop, so a new plan or a pod turning ready reaches the next request
within a watch event's latency (well under a second), with no polling.

The kubernetes client is synchronous; each watch runs in a daemon thread and hands what it sees
to the proxy on the event loop (``call_soon_threadsafe``), so the proxy's state is only touched
from the loop. When the apiserver cannot be reached the router keeps the last plan and pods it
saw: routing by a slightly old plan beats refusing traffic.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpumix.render.names import SERVICE_LABEL, routing_configmap_name
from gpumix.render.routing import ROUTING_KEY
from gpumix.route.engines import ready_engines
from gpumix.route.proxy import Proxy
from gpumix.route.table import RoutingTable

log = logging.getLogger("gpumix.route")

WATCH_TIMEOUT_S = 240
"""Server-side timeout of one watch request; the loop then resumes from its resourceVersion."""
RETRY_S = 1.0


def table_of(configmap: dict[str, Any]) -> RoutingTable | None:
    """The routing table in a ConfigMap's ``routing.json``; None (and a log line saying what is
    wrong) when it is missing or malformed, so the router keeps the table it has."""
    text = (configmap.get("data") or {}).get(ROUTING_KEY)
    if text is None:
        log.error("the routing ConfigMap has no %s", ROUTING_KEY)
        return None
    try:
        return RoutingTable.model_validate(json.loads(text))
    except (ValueError, ValidationError) as err:
        log.error("the routing ConfigMap's %s is not a routing table: %s", ROUTING_KEY, err)
        return None


class _Mirror(threading.Thread):
    """Keeps ``objects`` (name → object as a dict) equal to what a list call returns, and calls
    ``changed(objects)`` on the event loop after the first list and after every event."""

    def __init__(
        self,
        *,
        name: str,
        api: client.ApiClient,
        list_call: Callable[..., Any],
        kwargs: dict[str, Any],
        changed: Callable[[dict[str, dict[str, Any]]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.api, self.list_call, self.kwargs = api, list_call, kwargs
        self.changed, self.loop = changed, loop
        self.stop = threading.Event()

    def _dict(self, obj: Any) -> dict[str, Any]:
        body: dict[str, Any] = self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        return body

    def _publish(self, objects: dict[str, dict[str, Any]]) -> None:
        self.loop.call_soon_threadsafe(self.changed, dict(objects))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._list_and_watch()
            except Exception as err:  # any failure: keep the last view, list again
                log.warning("%s: %s; relisting in %.0f s", self.name, err, RETRY_S)
                self.stop.wait(RETRY_S)

    def _list_and_watch(self) -> None:
        listed = self.list_call(**self.kwargs)
        objects = {o.metadata.name: self._dict(o) for o in listed.items}
        self._publish(objects)
        version = listed.metadata.resource_version
        while not self.stop.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self.list_call,
                resource_version=version,
                timeout_seconds=WATCH_TIMEOUT_S,
                allow_watch_bookmarks=True,
                **self.kwargs,
            )
            try:
                for event in stream:
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    if event["type"] == "BOOKMARK":
                        continue
                    body = self._dict(obj)
                    if event["type"] == "DELETED":
                        objects.pop(obj.metadata.name, None)
                    else:
                        objects[obj.metadata.name] = body
                    self._publish(objects)
            except ApiException as err:
                if err.status == 410:  # resourceVersion too old: list again
                    return
                raise


def start_watches(
    proxy: Proxy, api: client.ApiClient, namespace: str, service: str
) -> list[_Mirror]:
    """Watch ``<service>-routing`` and the service's pods; feed the proxy from the event loop."""
    loop = asyncio.get_running_loop()
    core = client.CoreV1Api(api)
    configmap = routing_configmap_name(service)

    def on_configmaps(objects: dict[str, dict[str, Any]]) -> None:
        body = objects.get(configmap)
        table = table_of(body) if body is not None else None
        if table is not None:
            proxy.set_table(table)

    def on_pods(objects: dict[str, dict[str, Any]]) -> None:
        proxy.set_engines(ready_engines(objects.values(), service))

    threads = [
        _Mirror(
            name="watch-routing",
            api=api,
            list_call=core.list_namespaced_config_map,
            kwargs={"namespace": namespace, "field_selector": f"metadata.name={configmap}"},
            changed=on_configmaps,
            loop=loop,
        ),
        _Mirror(
            name="watch-pods",
            api=api,
            list_call=core.list_namespaced_pod,
            kwargs={"namespace": namespace, "label_selector": f"{SERVICE_LABEL}={service}"},
            changed=on_pods,
            loop=loop,
        ),
    ]
    for thread in threads:
        thread.start()
    return threads
