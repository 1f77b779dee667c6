"""The KV-migration loop end to end (MELL, issue #7 step 5): KWOK pods run nothing, so each pod of
the service is pointed (annotation `gpumix.io/admin-url`) at a simulated engine of `gpumix sim
serve` on 127.0.0.1; requests go straight to those engines. The operator must migrate the newest
pod's requests onto the others through the admin endpoints, mark that pod with the lowest
pod-deletion-cost and scale its Deployment in, so that exactly that pod is removed — and the
planner must not scale it back up.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import Env, Operator, running_operator, wait
from test_router import MODEL as SERVED
from test_router import RouterProcess, SimEngines

from gpumix.reconcile.kvmigration import ADMIN_URL_ANNOTATION
from gpumix.route.engines import ENGINE_URL_ANNOTATION
from gpumix.sim.server import detokenize, generate
from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

MODEL = "meta-llama/Llama-2-7b-hf"


@pytest.fixture(scope="module")
def operator(kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(kube, tmp_path_factory.mktemp("operator")) as op:
        yield op


@pytest.fixture
def sim_pods() -> Iterator[list[str]]:
    """Three simulated A10G engines; their base URLs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumix.cli", "sim", "serve", "--model", MODEL,
         "--pods", "a10g=3", "--speed", "1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        urls = [json.loads(proc.stdout.readline())["url"] for _ in range(3)]
        yield urls
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()


def complete(url: str, prompt: int, output: int, out: list[str]) -> None:
    body = json.dumps({"model": MODEL, "prompt": [1] * prompt, "max_tokens": output}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=150) as resp:
            out.append(json.loads(resp.read())["choices"][0]["finish_reason"])
    except OSError as err:  # the sim server stops at the end of the test
        out.append(f"error: {err}")


def send(url: str, prompt: int, output: int, n: int, out: list[str]) -> None:
    for _ in range(n):
        threading.Thread(target=complete, args=(url, prompt, output, out), daemon=True).start()


def requests(url: str) -> list[dict[str, Any]]:
    """Every request on an engine (running, prefilling or waiting)."""
    with urllib.request.urlopen(f"{url}/admin/requests", timeout=5) as resp:
        listing: dict[str, Any] = json.loads(resp.read())
    found: list[dict[str, Any]] = listing["requests"]
    return found


def running(url: str) -> int:
    return sum(1 for r in requests(url) if r["state"] == "running")


def live_pods(env: Env, service: str) -> list[Any]:
    pods = env.core.list_namespaced_pod(env.ns, label_selector=f"gpumix.io/service={service}")
    return sorted(
        (p for p in pods.items if not p.metadata.deletion_timestamp),
        key=lambda p: (p.metadata.creation_timestamp, p.metadata.name),
    )


def test_kv_scheduler_empties_the_newest_pod_and_removes_exactly_it(
    env: Env, sim_pods: list[str]
) -> None:
    start = time.monotonic()
    kv = {"enabled": False, "via": "Engine", "intervalSeconds": 2, "maxMigrationsPerPass": 10}
    # A target the ILP's plan meets: this test is about the KV scheduler, not the attainment loop.
    slo = {"tpotMs": 120, "attainmentTarget": 0.5}
    env.apply(env.service("kv", 1.5, pools=["a10g"], kvMigration=kv, slo=slo))
    env.wait_condition("kv", "Ready", "True", "Serving", timeout=90)
    assert env.allocation("kv") == {"a10g": 3}
    wait("3 pods Running", lambda: env.pods_running_on_right_nodes("kv") == {"a10g": 3})
    pods = live_pods(env, "kv")
    names = [p.metadata.name for p in pods]  # activation order: the KV loop's, too
    for pod, url in zip(pods, sim_pods, strict=True):
        env.core.patch_namespaced_pod(
            pod.metadata.name, env.ns, {"metadata": {"annotations": {ADMIN_URL_ANNOTATION: url}}}
        )
    a, b, c = sim_pods
    results: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    # A burst: short requests everywhere, long ones on every pod. The two oldest pods keep more
    # than half of their KV each (3 × 3000+ of ~16k tokens: they never fit on one pod); the
    # newest keeps two small long-lived requests.
    for url, key in ((a, "a"), (b, "b"), (c, "c")):
        send(url, 100, 20, 4, results[key])
    for url, key in ((a, "a"), (b, "b")):
        send(url, 3000, 1000, 3, results[key])
    send(c, 200, 1500, 2, results["c"])
    wait("the burst to drain to the long requests",
         lambda: [running(u) for u in sim_pods] == [3, 3, 2] and not any(
             r["state"] != "running" for u in sim_pods for r in requests(u)),
         timeout=40, every=0.2)  # fmt: skip
    # Now let MELL loose on it.
    env.apply(env.service("kv", 1.5, pools=["a10g"], kvMigration={**kv, "enabled": True}, slo=slo))

    def drained() -> dict[str, Any] | None:
        kvs = (env.get("kv").get("status") or {}).get("kvScheduler") or {}
        return kvs if kvs.get("drainedPods") else None

    status = wait("the KV scheduler to empty a pod", drained, timeout=40)
    assert status["drainedPods"] == [names[2]], status
    assert status["migrations"] == 2
    assert status["scaledIn"] == [{"option": "a10g", "plannedReplicas": 3, "removed": 1}]
    left = lambda: [p.metadata.name for p in live_pods(env, "kv")]  # noqa: E731
    wait("the emptied pod to be removed", lambda: left() == names[:2], timeout=30)
    # The requests moved through the admin endpoints: the newest engine holds none, its two
    # clients were told `migrated`, and the two older engines run all eight.
    assert requests(c) == []
    assert results["c"].count("migrated") == 2, results["c"]
    assert len(requests(a)) + len(requests(b)) == 8
    # The planner keeps its plan (the upper bound) and does not scale back up.
    time.sleep(7)  # more than one planner pass (--interval 5) and several KV passes
    assert env.allocation("kv") == {"a10g": 3}
    assert env.replicas("kv") == {"a10g": 2}
    assert left() == names[:2]
    ready = env.condition("kv", "Ready")
    assert ready is not None and ready["status"] == "True"
    assert "the KV scheduler runs a10g=2" in ready["message"]
    print(f"\nKV consolidation e2e: {time.monotonic() - start:.1f} s")
    assert time.monotonic() - start < 120


def annotate(env: Env, pod: str, key: str, value: str) -> None:
    env.core.patch_namespaced_pod(pod, env.ns, {"metadata": {"annotations": {key: value}}})


def stream_through(url: str, prompt: list[int], output: int, out: dict[str, Any]) -> None:
    """One streamed completion through the router: its events, or the error that ended it."""
    host, port = url.removeprefix("http://").split(":")
    body = {"model": SERVED, "prompt": prompt, "max_tokens": output, "ignore_eos": True,
            "stream": True}  # fmt: skip
    conn = http.client.HTTPConnection(host, int(port), timeout=150)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        out["status"] = resp.status
        out["events"] = [json.loads(line[6:]) for line in resp if line.startswith(b"data: {")]
    except OSError as err:
        out["error"] = str(err)
    finally:
        conn.close()


def test_the_kv_scheduler_empties_a_pod_through_the_router_on_stock_engines(
    env: Env, kube: KubeTarget, tmp_path: Path
) -> None:
    """``kvMigration.via: Router`` (issue #16): the engines have no admin endpoint, only the
    OpenAI API and /metrics. The router holds the streams; the KV loop reads its ledger and moves
    streams through it, empties the newest pod(s) and the Deployment removes exactly them. Every
    client sees one uninterrupted stream carrying exactly the tokens the model gives its prompt."""
    # kvMigration is on from the start, so the router runs with --migratable from the start:
    # turning it on later rolls the router, whose new pod the KV loop would then ask for the
    # ledger instead of this test's router. The first pass finds no stream; the hour between
    # passes holds the next one until the six streams are placed.
    kv = {"enabled": True, "intervalSeconds": 3600}
    slo = {"tpotMs": 120, "attainmentTarget": 0.5}
    routing = {"replicas": 1}
    env.apply(env.service("kvr", 1.5, pools=["a10g"], kvMigration=kv, slo=slo, routing=routing))
    env.wait_condition("kvr", "Ready", "True", "Serving", timeout=90)
    assert env.allocation("kvr") == {"a10g": 3}
    wait("3 pods Running", lambda: env.pods_running_on_right_nodes("kvr") == {"a10g": 3})
    pods = live_pods(env, "kvr")
    names = [p.metadata.name for p in pods]
    sim = SimEngines("a10g=3", speed=2.0)
    router = None
    try:
        for pod, url in zip(pods, sim.urls["a10g"], strict=True):
            annotate(env, pod.metadata.name, ENGINE_URL_ANNOTATION, url)
        # --migratable, as the operator runs the router of a service whose KV loop moves streams
        # through it.
        router = RouterProcess(kube, env.ns, "kvr", tmp_path / "router.log", "--migratable")
        router.wait_ready()
        [router_pod] = env.core.list_namespaced_pod(
            env.ns, label_selector="gpumix.io/router=kvr"
        ).items
        annotate(env, router_pod.metadata.name, ADMIN_URL_ANNOTATION, router.admin)
        # Six long streams, two a pod (the router sends each to the pod with the fewest tokens).
        prompts = [[10 + k] * 1500 for k in range(6)]
        results: list[dict[str, Any]] = [{} for _ in prompts]
        threads = [
            threading.Thread(target=stream_through, args=(router.url, p, 1200, r), daemon=True)
            for p, r in zip(prompts, results, strict=True)
        ]
        for t in threads:
            t.start()
            time.sleep(0.3)

        def placed() -> dict[str, int]:
            with urllib.request.urlopen(f"{router.admin}/admin/inflight", timeout=5) as resp:
                listing = json.loads(resp.read())
            return {pod: len(e["requests"]) for pod, e in listing["pods"].items()}

        wait("two streams on each pod", lambda: sorted(placed().values()) == [2, 2, 2],
             timeout=30, every=0.2)  # fmt: skip
        env.apply(env.service("kvr", 1.5, pools=["a10g"], kvMigration={**kv, "intervalSeconds": 2},
                              slo=slo, routing=routing))  # fmt: skip

        def kv_status() -> dict[str, Any]:
            return (env.get("kvr").get("status") or {}).get("kvScheduler") or {}

        status = wait("the KV scheduler to empty a pod through the router",
                      lambda: kv_status() if kv_status().get("drainedPods") else None,
                      timeout=60, about=kv_status)  # fmt: skip
        emptied = status["drainedPods"]
        assert sorted(emptied) == sorted(names[3 - len(emptied) :]), (status, names)  # newest
        assert status["migrations"] == 2 * len(emptied)
        assert all(placed().get(p, 0) == 0 for p in emptied)  # the ledger moved with them
        left = lambda: [p.metadata.name for p in live_pods(env, "kvr")]  # noqa: E731
        wait("the emptied pods to be removed", lambda: left() == names[: 3 - len(emptied)],
             timeout=30)  # fmt: skip
        for t in threads:
            t.join(150)
        for prompt, r in zip(prompts, results, strict=True):
            assert r.get("status") == 200 and "error" not in r, r.get("error")
            events = r["events"]
            assert len({e["id"] for e in events}) == 1  # one stream
            ids, _ = generate(prompt, 1200, ignore_eos=True)
            assert "".join(c["text"] for e in events for c in e["choices"]) == detokenize(ids)
            assert [c["finish_reason"] for e in events for c in e["choices"]
                    if c["finish_reason"]] == ["length"]  # fmt: skip
        metrics = urllib.request.urlopen(f"{router.url}/metrics", timeout=5).read().decode()
        assert (
            f'gpumix_router_migrations_total{{outcome="migrated"}} {2.0 * len(emptied)}' in metrics
        )
    finally:
        if router is not None:
            router.stop()
        sim.stop()
