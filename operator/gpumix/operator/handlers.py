"""kopf registrations: watch events only update the view; the planner loop does the rest.

No change handlers means kopf adds no finalizers and writes no annotations on our objects; its
storage prefixes are still set under gpumix.io so nothing kopf might write is anonymous.
"""

import logging
from typing import Any

import kopf

from gpumix.api import GROUP, VERSION
from gpumix.operator.view import ClusterView

WATCHES: dict[str, tuple[str, str, str, dict[str, str] | None]] = {
    "services": (GROUP, VERSION, "llmservices", None),
    "pools": (GROUP, VERSION, "gpupools", None),
    "profiles": (GROUP, VERSION, "gpuprofiles", None),
    "nodes": ("", "v1", "nodes", None),
    "pods": ("", "v1", "pods", None),
    "deployments": ("apps", "v1", "deployments", {"app.kubernetes.io/managed-by": "gpumix"}),
    "hpas": ("autoscaling", "v2", "horizontalpodautoscalers", None),
    "configmaps": ("", "v1", "configmaps", None),  # spec.model.config: gpumix.reconcile.modelshape
}


LIST_CHUNK = 500
"""Objects per page of a watch's initial listing (client-go's pager: 500)."""
WORKER_IDLE_S = 0.5
"""Seconds kopf keeps an object's worker after its last event (kopf's default: 5)."""
BATCH_WINDOW_S = 0.01
"""Seconds kopf waits for more events of an object before handling the latest (default 0.1)."""


def configure(settings: kopf.OperatorSettings, log_json: bool) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    # The server ends each watch after a minute and kopf resumes it from the last
    # resourceVersion (no re-list), so a stream dropped silently on the way (a proxy, a load
    # balancer) costs at most a minute of a stale view; the client timeout covers a server
    # that never ends the stream.
    settings.watching.server_timeout = 60
    # The initial listings in pages, as client-go's informers list: 5,000 nodes are 22 MB of
    # JSON in one GET, a page 2 MB.
    settings.watching.chunk_size = LIST_CHUNK
    # kopf runs one worker task per object while its events come, and keeps it for the idle
    # timeout (5 s) after: listing 5,000 nodes held up to 5,600 tasks and took a watcher of
    # nodes alone from 86 to 185 MB, which stayed. Our handler only stores the latest body
    # (level-based), so a worker may end at once and a burst needs no long batching window:
    # the same listing peaked at 120 MB with about 800 tasks.
    settings.batching.idle_timeout = WORKER_IDLE_S
    settings.batching.batch_window = BATCH_WINDOW_S
    settings.watching.client_timeout = 90
    settings.networking.request_timeout = 60
    if log_json:
        settings.posting.enabled = True


def register(registry: kopf.OperatorRegistry, view: ClusterView, log_json: bool) -> None:
    for kind, (group, version, plural, labels) in WATCHES.items():
        # A coroutine, so kopf calls it on the event loop: a plain function runs in kopf's
        # thread pool, one hop per watch event (thousands in a fleet's rollout), and from there
        # it mutated the view while the loop read it and set an asyncio.Event off its loop.
        async def on_event(event: kopf.RawEvent, _kind: str = kind, **_: Any) -> None:
            view.update(_kind, event.get("type"), dict(event["object"]))

        kopf.on.event(group, version, plural, labels=labels, registry=registry)(on_event)

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, log_json)
