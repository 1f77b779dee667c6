"""Writes to the Kubernetes API: server-side apply of owned objects, status, events, deletes.

Blocking calls of the kubernetes client; the planner runs them in a worker thread. The client's
dynamic module and config loaders are untyped, hence a mypy override in pyproject.toml.
"""

import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from gpumix.api import GROUP, VERSION
from gpumix.operator import metrics
from gpumix.render import FIELD_MANAGER

log = logging.getLogger("gpumix.kube")


def digest(value: Any) -> str:
    """Of JSON-able objects (what we apply): equal for equal content, whatever the key order."""
    return hashlib.blake2b(json.dumps(value, sort_keys=True).encode(), digest_size=16).hexdigest()


ObjectRef = tuple[str, str, str, str]
"""(apiVersion, kind, namespace, name)."""


class Applied:
    """Per object, the digest of what was last applied: the objects themselves, thousands of
    Deployments and ConfigMaps at fleet size, would be kept for nothing else."""

    def __init__(self) -> None:
        self._digests: dict[ObjectRef, str] = {}

    @staticmethod
    def ref(obj: dict[str, Any]) -> ObjectRef:
        meta = obj["metadata"]
        return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]

    def unchanged(self, obj: dict[str, Any], known: str | None = None) -> bool:
        """Whether ``obj`` (of digest ``known`` when the caller holds it) was last applied."""
        return self._digests.get(self.ref(obj)) == (known or digest(obj))

    def record(self, obj: dict[str, Any], known: str | None = None) -> None:
        self._digests[self.ref(obj)] = known or digest(obj)

    def forget(self, ref: ObjectRef) -> None:
        self._digests.pop(ref, None)


class KubeWriter:
    """``guard(verb)`` runs before every write: the Lease check of `gpumix.operator.election`,
    which ends the process when this replica may no longer write. Writes sent are counted
    (``gpumix_cluster_writes_total``). Threads may write at once (the planner's pass does,
    :data:`gpumix.operator.loop.WRITERS`)."""

    def __init__(self, api: client.ApiClient, guard: Callable[[str], None] | None = None) -> None:
        self._api = api
        self._guard = guard
        self._dynamic = DynamicClient(api)
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._apis = client.ApisApi(api)
        self._applied = Applied()
        self._lock = threading.Lock()
        """Over the count and the dynamic client's discovery (which may refresh its cache)."""
        self.sent = 0
        """Writes sent so far (what the planner's pass log reports)."""

    def apply(self, obj: dict[str, Any], known: str | None = None) -> bool:
        """Server-side apply with our field manager; skipped when identical to our last apply
        (a restart re-applies once, which the apiserver treats as a no-op). ``known``: the
        object's digest when the caller holds it (the planner keeps its rendered objects'),
        so that an unchanged object is not serialised again to be found unchanged."""
        self._before("apply")
        if self._applied.unchanged(obj, known):
            return False
        self._count("apply")
        resource = self._resource(obj["apiVersion"], obj["kind"])
        self._dynamic.server_side_apply(
            resource,
            body=obj,
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        self._applied.record(obj, known)
        return True

    def remember(self, obj: dict[str, Any], known: str | None = None) -> None:
        """Take ``obj`` (of digest ``known``, when held) as applied already (status says so):
        :meth:`apply` skips it unchanged."""
        self._applied.record(obj, known)

    def _before(self, verb: str) -> None:
        if self._guard is not None:
            self._guard(verb)

    def _count(self, label: str) -> None:
        with self._lock:
            self.sent += 1
        metrics.WRITES.labels(label).inc()

    def _resource(self, api_version: str, kind: str) -> Any:
        with self._lock:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)

    def _write(self, verb: str, label: str) -> None:
        self._before(verb)
        self._count(label)

    def serves(self, api_version: str) -> bool:
        """Whether the apiserver serves the API group version ``group/version`` (one GET /apis,
        where a miss in the dynamic client's discovery would re-read every group)."""
        group, _, version = api_version.partition("/")
        groups = self._apis.get_api_versions().groups or []
        return any(
            g.name == group and any(v.version == version for v in g.versions) for g in groups
        )

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete one namespaced object (of any kind we apply); one already gone, or of a kind
        the apiserver does not serve (a CRD since removed), is fine."""
        self._write("delete", "delete")
        try:
            resource = self._resource(api_version, kind)
        except ResourceNotFoundError:
            return
        try:
            self._dynamic.delete(resource, name=name, namespace=namespace)
        except ApiException as err:
            if err.status != 404:
                raise
        self._applied.forget((api_version, kind, namespace, name))

    def patch_service_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._write("patch_service_status", "patch_status")
        self._custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "llmservices", name, {"status": status}
        )

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch of a pod's metadata (the KV loop's pod-deletion-cost annotation)."""
        self._write("patch_pod", "patch_pod")
        self._core.patch_namespaced_pod(name, namespace, patch)

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        self._write("patch_pool_status", "patch_status")
        self._custom.patch_cluster_custom_object_status(
            GROUP, VERSION, "gpupools", name, {"status": status}
        )

    def event(self, owner: dict[str, Any], type_: str, reason: str, message: str, now: str) -> None:
        self._write("event", "event")
        meta = owner["metadata"]
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": "gpumix"},
            "reportingComponent": "gpumix",
            "reportingInstance": "gpumix",
        }
        self._core.create_namespaced_event(meta["namespace"], body)
