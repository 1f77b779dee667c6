"""Fuzzing the API on the real apiserver with the operator running (issue #19, item 4).

Hypothesis draws LLMService, GPUPool and GPUProfile bodies, valid, borderline and invalid
(tests/e2e/fuzz_objects.py), and each is created with the kubernetes client (strict field
validation, as kubectl). Every one must be either refused at create with a message naming the
field or rule, or accepted and then, within a bounded time, either planned by the operator
(an LLMService with ``Planned=True``; a GPUPool with its status for the current generation; a
GPUProfile that gpumix's model reads) or flagged by a ``Ready=False`` condition whose message
names a field or the numbers at fault. Meanwhile a sentinel LLMService must keep being planned
(a spec change made after the fuzzing is followed), the operator must not exit, and its
resident memory must stay bounded.

Objects are created one per Hypothesis example and checked in flushes of ``FLUSH`` accepted
objects (one planner pass handles a flush), then deleted in bulk by label.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_objects import RUN_LABEL, any_object
from hypothesis import HealthCheck, Phase, given, settings
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_harness import GROUP, VERSION, Operator, running_operator, wait

from gpumix.manifests import ManifestError, parse_object
from gpumix_e2e import KubeTarget
from proptest import budget

pytestmark = pytest.mark.e2e

OBJECTS = 1000
"""Objects created per run (the issue asks for at least 1,000)."""
FLUSH = 60
"""Accepted objects checked per planner pass."""
SETTLE_S = 120
"""Longest a flush may wait for the operator to reach every accepted object."""
RSS_GROWTH_MB = 150
"""Bound on the operator's RSS growth over the run. The view keeps every watched body and the
planner caches its last 64 joint solves and the predictions of the plans in force, so the RSS
grows with what is alive in the cluster, not with what has been created: after the fuzzed
objects are deleted only those caches remain (a few MB). 150 MB is far above that and far below
what a leak of 1,000 objects' status, solves and simulations would hold."""
FIELD = re.compile(r"\bspec\.[A-Za-z]|\b(?:bucket|TPOT|TTFT|budget|pool|GPUProfile)\b")
"""A Ready=False message names a field (``spec.workload.histogram: ...``) or the numbers at
fault: the bucket and SLO no GPU meets, the budget or the pools that bind, the profile missing."""
PLURALS = {"LLMService": "llmservices", "GPUPool": "gpupools", "GPUProfile": "gpuprofiles"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture(scope="module")
def operator(kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(kube, tmp_path_factory.mktemp("operator-fuzz")) as op:
        yield op


class Fuzz:
    """Creates fuzzed objects, checks them in flushes and keeps the counts."""

    def __init__(self, kube: KubeTarget, namespace: str, run: str) -> None:
        self.kube, self.ns, self.run = kube, namespace, run
        self.custom = client.CustomObjectsApi(kube.api_client)
        self.counts: Counter[str] = Counter()
        self.pending: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def create(self, body: dict[str, Any]) -> None:
        n = self.counts["applied"]
        self.counts["applied"] += 1
        self.counts[f"applied {body['kind']}"] += 1
        # Unique in the run and across runs (GPUPools and GPUProfiles are cluster-scoped).
        body["metadata"]["name"] = str(body["metadata"]["name"]).replace("{i}", f"{n}z{self.run}")
        plural = PLURALS[body["kind"]]
        try:
            if body["kind"] == "LLMService":
                created = self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, self.ns, plural, body, field_validation="Strict"
                )
            else:
                created = self.custom.create_cluster_custom_object(
                    GROUP, VERSION, plural, body, field_validation="Strict"
                )
        except ApiException as err:
            self.rejected(body, err)
        except ValueError as err:  # the client refuses a body it cannot encode
            self.counts["rejected at apply"] += 1
            if not str(err):
                self.problems.append(f"refused by the client without a message: {body}")
        else:
            self.counts["accepted"] += 1
            self.pending.append(created)
            if len(self.pending) >= FLUSH:
                self.flush()

    def rejected(self, body: dict[str, Any], err: ApiException) -> None:
        self.counts["rejected at apply"] += 1
        message = str(err.body or "")
        if err.status not in (400, 422) or not message:
            self.problems.append(f"{body['kind']} {body['metadata']['name']!r}: refused with "
                                 f"HTTP {err.status} {message[:300]} for {body}")  # fmt: skip
            return
        # The apiserver names the field (spec.x.y: ...; unknown field "spec.z"), the rule's
        # message, metadata.name, or the JSON it could not decode.
        if not re.search(r"spec|metadata|name|json|decode|invalid|unknown|Invalid", message):
            self.problems.append(f"{body['kind']} refused without naming a field: {message}")

    def flush(self) -> None:
        """Wait until the operator reached every pending object; classify; delete them."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        verdicts: dict[tuple[str, str], str | None] = {}

        def settled() -> bool:
            services = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.ns, "llmservices", label_selector=f"{RUN_LABEL}={self.run}"
            )["items"]
            pools = self.custom.list_cluster_custom_object(
                GROUP, VERSION, "gpupools", label_selector=f"{RUN_LABEL}={self.run}"
            )["items"]
            current = {("LLMService", b["metadata"]["name"]): b for b in services}
            current |= {("GPUPool", b["metadata"]["name"]): b for b in pools}
            for body in pending:
                key = (body["kind"], body["metadata"]["name"])
                verdicts[key] = verdict(current.get(key, body))
            return all(v is not None for v in verdicts.values())

        with contextlib.suppress(AssertionError):  # reported below, object by object
            wait("the operator to reach every accepted object", settled, SETTLE_S, every=1.0)
        for body in pending:
            key = (body["kind"], body["metadata"]["name"])
            v = verdicts.get(key)
            if v is None or v.startswith("BUG"):
                self.problems.append(f"{key}: {v or 'not reached'}: {body.get('spec')}"[:1500])
            else:
                self.counts[v] += 1
        self.delete()

    def delete(self) -> None:
        selector = f"{RUN_LABEL}={self.run}"
        self.custom.delete_collection_namespaced_custom_object(
            GROUP, VERSION, self.ns, "llmservices", label_selector=selector
        )
        for plural in ("gpupools", "gpuprofiles"):
            self.custom.delete_collection_cluster_custom_object(
                GROUP, VERSION, plural, label_selector=selector
            )


def verdict(body: dict[str, Any]) -> str | None:
    """'planned', 'flagged by condition', 'BUG: ...', or None while the operator has not
    reached the object's current generation."""
    kind = body["kind"]
    if kind == "GPUProfile":  # no status: the planner reads it through gpumix's model
        try:
            parse_object(body, "fuzz")
        except ManifestError as err:
            return f"BUG: accepted but gpumix cannot read it: {err}"
        return "planned"
    status = body.get("status") or {}
    if status.get("observedGeneration") != body["metadata"].get("generation"):
        return None
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    ready = conditions.get("Ready")
    if ready is None:
        return "BUG: status without a Ready condition"
    if kind == "GPUPool":
        return "planned" if ready.get("message") else "BUG: Ready without a message"
    if conditions.get("Planned", {}).get("status") == "True":
        return "planned"
    if ready["status"] == "False" and FIELD.search(ready.get("message", "")):
        return "flagged by condition"
    return f"BUG: neither planned nor flagged naming a field: Ready={ready}"


def sentinel_body(namespace: str, rate: float) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LLMService",
        "metadata": {"name": "sentinel", "namespace": namespace},
        "spec": {
            "model": {"name": "meta-llama/Llama-2-7b-hf"},
            "slo": {"tpotMs": 120},
            "weight": 1000,
            "routing": {"mode": "Service"},
            "workload": {
                "requestRate": rate,
                "inputEdges": [1, 256, 512, 1024, 2048, 3072],
                "outputEdges": [1, 64, 128, 256, 512, 1001],
                "histogram": [
                    [337, 668, 1555, 34, 7],
                    [550, 3948, 528, 13, 2],
                    [136, 465, 58, 1389, 105],
                    [368, 793, 747, 4515, 445],
                    [207, 505, 182, 5, 0],
                ],
            },
        },
    }


def planned_at(custom: client.CustomObjectsApi, ns: str, generation: int) -> dict[str, Any] | None:
    body: dict[str, Any] = custom.get_namespaced_custom_object(
        GROUP, VERSION, ns, "llmservices", "sentinel"
    )
    status = body.get("status") or {}
    planned = any(
        c["type"] == "Planned" and c["status"] == "True" for c in status.get("conditions", [])
    )
    ok = body["metadata"]["generation"] >= generation and planned
    return (
        body if ok and status.get("observedGeneration") == body["metadata"]["generation"] else None
    )


def test_fuzzed_objects_are_refused_flagged_or_planned(
    kube: KubeTarget, operator: Operator
) -> None:
    start = time.monotonic()
    run = uuid.uuid4().hex[:8]
    ns, sentinel_ns = f"e2e-fuzz-{run}", f"e2e-fuzz-sentinel-{run}"
    kube.kubectl("create", "namespace", ns)
    kube.kubectl("create", "namespace", sentinel_ns)
    custom = client.CustomObjectsApi(kube.api_client)
    fuzz = Fuzz(kube, ns, run)
    try:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, sentinel_ns, "llmservices", sentinel_body(sentinel_ns, 2.0)
        )
        wait("the sentinel to be planned", lambda: planned_at(custom, sentinel_ns, 1), 120)
        assert operator.proc is not None
        rss_before = rss_mb(operator.proc.pid)

        @settings(
            budget(OBJECTS),
            phases=(Phase.explicit, Phase.generate),  # no shrinking on a live cluster
            suppress_health_check=list(HealthCheck),
        )
        @given(body=any_object(run))
        def create(body: dict[str, Any]) -> None:
            fuzz.create(body)

        create()
        fuzz.flush()
        assert operator.alive(), "the operator exited during the fuzzing"
        # The sentinel follows a spec change made after the fuzzing.
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, sentinel_ns, "llmservices", "sentinel",
            {"spec": {"workload": {"requestRate": 3.0}}},
        )  # fmt: skip
        try:
            body = wait(
                "the sentinel to be planned again", lambda: planned_at(custom, sentinel_ns, 2)
            )
        except AssertionError as err:
            now = custom.get_namespaced_custom_object(
                GROUP, VERSION, sentinel_ns, "llmservices", "sentinel"
            )
            raise AssertionError(f"{err}; the sentinel: {now.get('status')}") from None
        assert body["status"]["workload"]["requestRate"] == 3.0
        time.sleep(10)  # a pass or two after the bulk deletions
        rss_after = rss_mb(operator.proc.pid)
        assert operator.alive(), "the operator exited"
    finally:
        fuzz.delete()
        kube.kubectl("delete", "namespace", ns, sentinel_ns, "--wait=false")
    c = fuzz.counts
    print(f"\nfuzz: {c['applied']} objects applied ({c['applied LLMService']} LLMService, "
          f"{c['applied GPUPool']} GPUPool, {c['applied GPUProfile']} GPUProfile); "
          f"{c['rejected at apply']} rejected at apply, {c['accepted']} accepted: "
          f"{c['flagged by condition']} flagged by a condition, {c['planned']} planned; "
          f"{len(fuzz.problems)} problems; operator RSS {rss_before:.0f} → {rss_after:.0f} MB; "
          f"{time.monotonic() - start:.0f} s")  # fmt: skip
    assert not fuzz.problems, "\n".join(fuzz.problems[:20])
    assert c["applied"] >= OBJECTS
    assert rss_after - rss_before < RSS_GROWTH_MB, (rss_before, rss_after)
