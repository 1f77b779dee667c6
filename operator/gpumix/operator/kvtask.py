"""The KV-migration loop (MELL, issue #7 step 5): a task next to the planner loop.

A separate task rather than a step of the planner pass: its cadence is each service's
`kvMigration.intervalSeconds` (MELL's epoch, seconds) while the planner runs on changes and every
`--interval`; its I/O is HTTP to every pod, whose timeouts must not hold up a joint solve; and a
pod that does not answer must not fail the planner's pass. What it decides is pure
(`gpumix.reconcile.kvmigration`); here: read the routers' ledgers and the engines' `/metrics`
(`via: Router`) or each live pod's admin listing (`via: Engine`), issue the migrations
(`gpumix.operator.kvloop.execute`), annotate the emptied pods with the lowest
`pod-deletion-cost`, then merge-patch `status.kvScheduler` only. The planner reads `scaledIn` on
its next pass (the status change is a watch event) and scales the Deployment in, so the
ReplicaSet removes exactly the annotated pods. Blocking HTTP and API calls run in threads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from gpumix.api import LLMService, LLMServiceStatus
from gpumix.kvsched import LinkProfile, MigrationProfile
from gpumix.operator import metrics
from gpumix.operator.kube import KubeWriter
from gpumix.operator.kvloop import DRAINED, Post, _post, choose_modes, deletion_cost_patch, execute
from gpumix.operator.loop import KV_FIELD, now_rfc3339
from gpumix.operator.view import ClusterView
from gpumix.profiles.hfconfig import ModelConfigError
from gpumix.profiles.shape import ModelShape
from gpumix.reconcile.digest import running_services
from gpumix.reconcile.kvmigration import (
    KvPod,
    PodSample,
    decide_pass,
    engine_gauges,
    ledger_samples,
    live_pods,
    next_status,
    router_urls,
    sample,
)
from gpumix.reconcile.modelshape import service_shape

log = logging.getLogger("gpumix.kv")
T = TypeVar("T")

Fetch = Callable[[str], dict[str, Any]]
ADMIN_TIMEOUT_S = 2.0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=ADMIN_TIMEOUT_S) as resp:
        return str(resp.read().decode())


def _fetch(url: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(_get(f"{url}/admin/requests"))
    return body


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"


def migration_profile(shape: ModelShape | None) -> MigrationProfile:
    """§V's boundaries without a profiled cluster: NVLink-class links inside a node, 100 Gb/s
    between nodes, 10k tokens/s re-prefill; the KV size per token from the model's shape
    (:func:`gpumix.reconcile.modelshape.service_shape`; None: unknown, taken as a 7B model's)."""
    per_token = 512 * 1024 if shape is None else shape.kv_bytes_per_token  # 7B in fp16
    return MigrationProfile(
        kv_bytes_per_token=per_token,
        intra=LinkProfile.constant("intra-node", 150),
        inter=LinkProfile.constant("network", 12.5),
        prefill_s=lambda n: n / 10_000,
    )


class KvLoop:
    def __init__(
        self,
        view: ClusterView,
        writer: KubeWriter,
        *,
        fetch: Fetch = _fetch,
        get: Callable[[str], str] = _get,
        post: Post = _post,
        tick_s: float = 1.0,
        after: asyncio.Event | None = None,
    ) -> None:
        self.view, self.writer = view, writer
        self.after = after
        """Set once the planner's first pass ran (`Planner.ready`): the view is listed by then
        (`Planner.listed`), so no step reads Deployments or pods kopf has not listed yet."""
        self.fetch, self.get, self.post, self.tick_s = fetch, get, post, tick_s
        self._parsed: dict[tuple[str, str], tuple[dict[str, Any], LLMService | None]] = {}
        """By service: the body last validated (the view's, held) and what it gave."""
        self._last: dict[tuple[str, str], float] = {}

    async def run(self) -> None:
        if self.after is not None:
            await self.after.wait()
        while True:
            await asyncio.sleep(self.tick_s)
            services = list(self.view.objects["services"].items())
            for gone in self._parsed.keys() - {key for key, _ in services}:
                del self._parsed[gone]
            for key, body in services:
                service = self._service(key, body)
                if service is None:
                    continue  # the planner reports InvalidSpec
                kv = service.spec.kv_migration
                if not kv.enabled:
                    self._last.pop(key, None)
                    continue
                now = time.monotonic()
                if now - self._last.get(key, -1e9) < kv.interval_seconds:
                    continue
                self._last[key] = now
                pods = list(self.view.objects["pods"].values())
                deployments = list(self.view.objects["deployments"].values())
                try:
                    await asyncio.to_thread(self.pass_service, body, service, pods, deployments)
                except Exception:
                    metrics.ERRORS.labels(stage="kv").inc()
                    log.exception("KV pass of %s/%s failed", *key)

    def _service(self, key: tuple[str, str], body: dict[str, Any]) -> LLMService | None:
        """``body`` validated (``None``: invalid), again only when the view holds another body
        for it (it replaces a body that changes): validating 500 services every tick was a
        twelfth of the operator's CPU, on the event loop (live 500 × 5,000, py-spy)."""
        parsed = self._parsed.get(key)
        if parsed is not None and parsed[0] is body:
            return parsed[1]
        try:
            service: LLMService | None = LLMService.model_validate({**body, "status": None})
        except ValidationError:
            service = None
        self._parsed[key] = (body, service)
        return service

    def pass_service(
        self,
        body: dict[str, Any],
        service: LLMService,
        pods: list[dict[str, Any]],
        deployments: list[dict[str, Any]],
    ) -> None:
        meta = body.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            status = LLMServiceStatus.model_validate(body.get("status") or {})
        except ValidationError:
            return
        if not status.allocation:
            return  # nothing planned yet
        groups = live_pods(pods, ns, name)
        kv = service.spec.kv_migration
        profile = migration_profile(self._shape(service))
        if kv.via == "Router":
            samples = self._through_routers(groups, router_urls(pods, ns, name))
        else:
            samples = self._from_engines(groups)
        running = running_services(deployments).get((ns, name))
        step = decide_pass(
            service.spec.kv_migration,
            status=status,
            deployment_replicas=running.replicas if running else {},
            pods=groups,
            samples=samples,
            min_replicas=service.spec.min_replicas,
            recompute_budget=profile.compute_budget_tokens if kv.via == "Router" else None,
        )
        migrated, drained = 0, []
        for action in step.actions:
            modes = None
            if kv.via == "Engine":
                modes = [c.mode for c in choose_modes(action.decision, action.loads, profile)]
            try:
                migrated += execute(action.decision, action.loads, modes, namespace=ns,
                                    service=name, post=self.post)  # fmt: skip
            except Exception as err:  # a pod refused: do not remove it
                metrics.ERRORS.labels(stage="kv-migrate").inc()
                step.notes.append(f"{action.option}: migration failed ({err}); pod kept")
                target, removed = step.scaled_in.get(action.option, (0, 0))
                step.scaled_in[action.option] = (target, removed - len(action.decision.drained))
                continue
            for pod_name, patch in deletion_cost_patch(action.decision.drained).items():
                self.writer.patch_pod(ns, pod_name, patch)
            drained += action.decision.drained
            log.info("%s/%s %s: %d migrations, emptied %s", ns, name, action.option,
                     len(action.decision.moves), ", ".join(action.decision.drained))  # fmt: skip
        DRAINED.labels(ns, name).set(len(drained))
        new = next_status(
            status.kv_scheduler,
            step.scaled_in,
            migrations=migrated,
            drained=drained,
            now=now_rfc3339(),
            message="; ".join(step.notes) or None,
        )
        dumped = new.model_dump(by_alias=True, mode="json", exclude_none=True)
        old = (body.get("status") or {}).get(KV_FIELD) or {}
        if {k: v for k, v in dumped.items() if k != "lastPass"} == {
            k: v for k, v in old.items() if k != "lastPass"
        } and not drained:
            return  # nothing new: no status write every epoch
        # scaledIn is replaced as a whole (a merge patch replaces lists).
        self.writer.patch_service_status(ns, name, {KV_FIELD: {**dumped, "message": new.message}})

    def _shape(self, service: LLMService) -> ModelShape | None:
        """The model's shape as the planner sees it (its ConfigMap's, else built in); None when
        unknown or the ConfigMap gives none (the planner's status says why)."""
        try:
            return service_shape(service, self.view.objects["configmaps"])
        except ModelConfigError:
            return None

    def _from_engines(self, groups: dict[str, list[KvPod]]) -> dict[str, PodSample | str]:
        """Each pod's admin listing (``via: Engine``)."""
        return _per_pod(groups, lambda p: p.url, lambda p, url: sample(p, self.fetch(url)),
                        "no pod IP or admin-url annotation")  # fmt: skip

    def _through_routers(
        self, groups: dict[str, list[KvPod]], routers: list[str]
    ) -> dict[str, PodSample | str]:
        """Every router replica's ledger and every engine's gauges (``via: Router``)."""
        ledgers: dict[str, dict[str, Any] | str] = {}
        for url in routers:
            try:
                ledgers[url] = json.loads(self.get(f"{url}/admin/inflight"))
            except Exception as err:  # a replica that does not answer: no data
                ledgers[url] = _why(err)
        gauges = _per_pod(groups, lambda p: p.engine_url,
                          lambda _, url: engine_gauges(self.get(f"{url}/metrics")),
                          "no pod IP or engine-url annotation")  # fmt: skip
        return ledger_samples(groups, ledgers, gauges)


def _per_pod(
    groups: dict[str, list[KvPod]],
    url_of: Callable[[KvPod], str | None],
    read: Callable[[KvPod, str], T],
    no_url: str,
) -> dict[str, T | str]:
    """``read`` each pod at its URL; for a pod without one, or whose read fails, why not."""
    out: dict[str, T | str] = {}
    for group in groups.values():
        for pod in group:
            url = url_of(pod)
            if url is None:
                out[pod.name] = no_url
                continue
            try:
                out[pod.name] = read(pod, url)
            except Exception as err:  # any failure is "no data"
                out[pod.name] = _why(err)
    return out
