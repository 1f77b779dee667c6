"""Chaos on the local control plane (issue #19 item 3): faults injected while the operator
serves and replans, each bounded in time, with the serving invariants observed throughout.

Faults: the apiserver and etcd SIGKILLed and restarted (same data) in the middle of a
make-before-break rollout; Prometheus flapping for `GPUMIX_CHAOS_FLAP_S` seconds (default 60)
under a service planned from it; the node of a growing pool's new pod deleted mid-rollout; the
operator SIGKILLed at random points of its passes (`GPUMIX_CHAOS_KILLS` runs, default 20, seed
printed and settable as `GPUMIX_CHAOS_SEED`); and, without the cluster, an engine and then the
router SIGKILLed in the middle of streams.

What must hold (chaos_harness.py): no serving Deployment at zero or below what make-before-break
allows, no duplicate Deployments or pods, status converges, no error loop after recovery. Each
recovery time (fault end → converged) is printed with the table at the end of the module; none
is asserted beyond generous timeouts.

One operator serves the whole module under its own Lease with a fixed identity, like a
StatefulSet pod: restarted after a SIGKILL it renews its own Lease at once instead of waiting a
lease duration. The fleet is restored after the node scenario (the same node name comes back).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chaos_harness import (
    Invariants,
    Recovery,
    assert_no_error_loop,
    converged,
    current_log,
    metric,
    mid_rollout,
    repeated_errors,
    until,
)
from kubernetes import client
from observe_harness import PrometheusProcess, Traffic, gpumix_command, sim_pods
from operator_harness import Env, Operator, free_port, running_operator, wait

from gpumix.render.names import POOL_LABEL, SERVICE_LABEL
from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

NO_CHURN = {"churn": {"penalty": 0}, "slo": {"tpotMs": 120, "attainmentTarget": 0.5}}
LOW, HIGH = 4.0, 5.5
"""req/s of the chat sample whose plans differ, a100-80gb×1 + l4×1 and a100-80gb×1 + a10g×3 (the
move is a make-before-break rollout: one pool grows, another goes)."""
DOWN_S = 3.0
"""How long a restarted control-plane component stays down."""
CONVERGE_S = 180.0
ERROR_WINDOW_S = 6.0
"""After recovery, more than one planner pass (--interval 5) without an error."""
RENEW_DEADLINE_S = 10.0
"""The operator's default --leader-elect-renew-deadline: a leader that cannot renew this long
ends itself (exit 1; the kubelet restarts it) — by design, not an error loop."""
WINDOW_S = 10
FLAP_S = float(os.environ.get("GPUMIX_CHAOS_FLAP_S", "60"))
KILLS = int(os.environ.get("GPUMIX_CHAOS_KILLS", "20"))


@pytest.fixture(scope="module")
def table() -> Iterator[list[Recovery]]:
    rows: list[Recovery] = []
    yield rows
    print("\n\n| scenario | fault | recovery (fault end → converged) | held |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print(row.line())


@pytest.fixture(scope="module")
def operator(
    kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory, prometheus_port: int
) -> Iterator[Operator]:
    lease = f"gpumix-chaos-{uuid.uuid4().hex[:6]}"
    extra = ["--prometheus-url", f"http://127.0.0.1:{prometheus_port}",
             "--prometheus-timeout", "2", "--observe-window", str(WINDOW_S),
             "--leader-elect-resource-name", lease,
             "--log-format", "json"]  # levels, for the error-loop check  # fmt: skip
    directory = tmp_path_factory.mktemp("operator-chaos")
    with running_operator(kube, directory, extra_args=extra, identity="chaos-0") as op:
        yield op
    with contextlib.suppress(client.ApiException):
        client.CoordinationV1Api(kube.api_client).delete_namespaced_lease(lease, "default")


def chat(env: Env, rate: float) -> dict[str, Any]:
    return env.service("chat", rate, **NO_CHURN)


def serve(env: Env, rate: float) -> dict[str, int]:
    env.apply(chat(env, rate))
    allocation: dict[str, int] = until(
        f"chat at {rate} req/s to converge", lambda: converged(env, "chat"), timeout=CONVERGE_S
    )
    return allocation


def kubelet(op: Operator, outage_s: float) -> bool:
    """Restart the operator if it exited, as the kubelet would; only allowed when it could not
    renew its Lease for longer than its renew deadline (True: it was restarted)."""
    if op.alive():
        return False
    assert op.proc is not None
    code = op.proc.returncode
    assert outage_s > RENEW_DEADLINE_S, (
        f"the operator exited ({code}) after an outage of only {outage_s:.1f} s: "
        f"{current_log(op)[-3000:]}"
    )
    op.stop()
    op.start()
    return True


def converge_after(env: Env, op: Operator, outage_s: float) -> tuple[dict[str, int], float]:
    """Wait for convergence (restarting an operator that ended itself); the allocation and
    the seconds it took."""
    start = time.monotonic()

    def probe() -> dict[str, int] | None:
        kubelet(op, outage_s)
        return converged(env, "chat")

    allocation: dict[str, int] = until("chat to converge", probe, timeout=CONVERGE_S)
    return allocation, time.monotonic() - start


# --------------------------------------------------------------------------- control plane


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restart_during_a_replan(
    kube: KubeTarget, env: Env, operator: Operator, component: str, table: list[Recovery]
) -> None:
    if kube.cluster is None:
        pytest.skip("needs the local hack/ cluster (restarts its processes)")
    cluster = kube.cluster
    before = serve(env, LOW)
    watch = Invariants(env, "chat").begin()
    try:
        replanned = time.monotonic()
        env.apply(chat(env, HIGH))
        wait("the rollout to start", lambda: mid_rollout(watch, before), timeout=60, every=0.02)
        mid = watch.states[-1].replicas
        down = time.monotonic()
        cluster.stop_component(component, signal.SIGKILL)
        time.sleep(DOWN_S)
        cluster.start_component(component)
        up = time.monotonic()
        after, recovery = converge_after(env, operator, outage_s=up - down)
    finally:
        watch.stop()
    events = sum(1 for e in env.events("chat") if e.reason == "PlanChanged")
    print(f"\n{component} SIGKILLed mid-rollout at {mid}, down {up - down:.1f} s; "
          f"{before} → {after} converged {recovery:.1f} s after it was back "
          f"(watch re-listed {watch.outages}×; PlanChanged events: {events})")  # fmt: skip
    assert not watch.violations, watch.violations
    assert not watch.dips(before, after, since=replanned)
    assert after != before, "the replan did not happen"
    assert events <= 2, "a plan change reported twice"
    assert_no_error_loop(operator, ERROR_WINDOW_S)
    table.append(Recovery(f"{component} restart during a replan", f"SIGKILL, {up - down:.0f} s "
                          "down, mid make-before-break", [recovery],
                          "no dip, no duplicate, replan finished, no error loop"))  # fmt: skip


# --------------------------------------------------------------------------- Prometheus


def test_prometheus_flapping_never_tears_the_allocation_down(
    env: Env, operator: Operator, prometheus_port: int, tmp_path: Path, table: list[Recovery]
) -> None:
    rng = random.Random(int(os.environ.get("GPUMIX_CHAOS_SEED", "19")))
    seen: set[tuple[str, str]] = set()
    ready_false: list[dict[str, Any]] = []

    def sample(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with contextlib.suppress(Exception):
                status = env.get("chat").get("status") or {}
                for c in status.get("conditions", []):
                    if c["type"] == "WorkloadObserved":
                        seen.add((c["status"], c["reason"]))
                    if c["type"] == "Ready" and c["status"] != "True":
                        ready_false.append(c)
            time.sleep(0.5)

    with (
        sim_pods("a10g=2", duration_s=FLAP_S + 180) as pods,
        Traffic([p["url"] for p in pods]) as traffic,
    ):
        prom = PrometheusProcess(tmp_path, pods, namespace=env.ns, service="chat",
                                 port=prometheus_port)  # fmt: skip
        try:
            prom.wait_ready()
            prom.wait_scraping(len(pods))
            traffic.set(3.0, 300, 100)
            time.sleep(WINDOW_S)
            body = env.service("chat", 0.5)  # the spec's rate is only the fallback
            body["spec"]["workload"]["source"] = "Prometheus"
            env.apply(body)
            env.wait_condition("chat", "WorkloadObserved", "True", "Observed", timeout=60)
            before = until("chat to converge", lambda: converged(env, "chat"), CONVERGE_S)
            watch = Invariants(env, "chat").begin()
            flaps = 0
            try:
                start = time.monotonic()
                while time.monotonic() - start < FLAP_S:
                    if flaps % 2:
                        prom.proc.kill()  # a crash
                    else:
                        prom.proc.terminate()
                    prom.stop()
                    flaps += 1
                    sample(rng.uniform(2, 5))
                    prom = PrometheusProcess(tmp_path, pods, namespace=env.ns, service="chat",
                                             port=prometheus_port)  # fmt: skip
                    prom.wait_ready()
                    sample(rng.uniform(2, 5))
                end = time.monotonic()
                env.wait_condition("chat", "WorkloadObserved", "True", "Observed", timeout=60)
                observed = time.monotonic() - end
                after, recovery = converge_after(env, operator, outage_s=0)
                recovery += observed
            finally:
                watch.stop()
        finally:
            prom.stop()
    print(f"\nPrometheus flapped {flaps}× over {end - start:.0f} s: allocation {before} → "
          f"{after}, conditions seen {sorted(seen)}, observed again {observed:.1f} s and "
          f"converged {recovery:.1f} s after; "
          f"{traffic.sent} requests sent")  # fmt: skip
    assert ("False", "PrometheusUnavailable") in seen, seen  # the fault was seen
    assert not ready_false, ready_false[:3]
    assert not watch.violations, watch.violations
    assert not watch.dips(before, after, since=start)
    assert all(sum(s.replicas.values()) > 0 for s in watch.states)
    assert not traffic.errors, traffic.errors[:3]
    assert_no_error_loop(operator, ERROR_WINDOW_S)
    table.append(Recovery("Prometheus flapping", f"{flaps} restarts (SIGTERM/SIGKILL, 2–5 s "
                          f"down, 2–5 s up) over {end - start:.0f} s", [recovery],
                          "Ready=True throughout, allocation never torn down, no dip"))  # fmt: skip


# --------------------------------------------------------------------------- GPU node


def test_gpu_node_deleted_during_a_rollout(
    kube: KubeTarget, env: Env, operator: Operator, table: list[Recovery]
) -> None:
    if kube.cluster is None:
        pytest.skip("needs the local hack/ cluster (KWOK nodes)")
    cluster = kube.cluster
    before = serve(env, LOW)
    selector = f"{SERVICE_LABEL}=chat"
    old = {
        p.metadata.name for p in env.core.list_namespaced_pod(env.ns, label_selector=selector).items
    }
    watch = Invariants(env, "chat").begin()
    node, pool = "", ""
    try:
        replanned = time.monotonic()
        env.apply(chat(env, HIGH))
        wait("the rollout to start", lambda: mid_rollout(watch, before), timeout=60, every=0.02)
        growing = {p for p, n in watch.states[-1].replicas.items() if n > before.get(p, 0)}

        def new_pod_node() -> str | None:
            for p in env.core.list_namespaced_pod(env.ns, label_selector=selector).items:
                new = p.metadata.name not in old and p.metadata.labels.get(POOL_LABEL) in growing
                if new and p.spec.node_name:
                    return str(p.spec.node_name)
            return None

        node = wait("a growing pool's pod to be scheduled", new_pod_node, timeout=30, every=0.05)
        pool = env.core.read_node(node).metadata.labels["gpumix.io/hack-pool"]
        cluster.delete_gpu_nodes([node])
        deleted = time.monotonic()
        after, recovery = converge_after(env, operator, outage_s=0)
    finally:
        watch.stop()
        if node:
            (back,) = cluster.add_gpu_nodes(pool, 1)
            assert back == node, f"restored {back}, not {node}: the fleet changed"
    print(f"\n{node} deleted mid-rollout ({before} → {sorted(growing)} growing); converged to "
          f"{after} {recovery:.1f} s later (incl. pod GC of the node's pods)")  # fmt: skip
    assert not watch.violations, watch.violations
    assert not watch.dips(before, after, since=replanned)
    assert_no_error_loop(operator, ERROR_WINDOW_S)
    table.append(Recovery("GPU node deleted during a rollout", f"{node} (hosting a new pod)",
                          [recovery], "no dip, no duplicate, converged on the nodes left; "
                          f"{deleted - replanned:.1f} s into the replan"))  # fmt: skip


# --------------------------------------------------------------------------- operator SIGKILL


def passes(op: Operator) -> float:
    """Planner passes of the operator's current incarnation (0 while it is not serving yet)."""
    try:
        return metric(op, "gpumix_planner_pass_seconds_count")
    except OSError:
        return 0


def progress(op: Operator) -> str:
    """Where the current incarnation is, read just before the kill: passes and writes done."""
    try:
        done, writes = passes(op), metric(op, "gpumix_cluster_writes_total")
    except OSError:
        return "starting up"
    return f"{done:.0f} passes, {writes:.0f} writes"


def test_operator_sigkilled_at_random_points_of_a_pass(
    env: Env, operator: Operator, table: list[Recovery]
) -> None:
    seed = int(os.environ.get("GPUMIX_CHAOS_SEED") or random.randrange(2**31))
    print(f"\nGPUMIX_CHAOS_SEED={seed} GPUMIX_CHAOS_KILLS={KILLS}")
    rng = random.Random(seed)
    allocation = serve(env, LOW)
    rate = LOW
    recoveries: list[float] = []
    watch = Invariants(env, "chat").begin()
    try:
        for run in range(KILLS):
            before, rate = allocation, HIGH if rate == LOW else LOW
            changed = time.monotonic()
            env.apply(chat(env, rate))
            # A pass starts about a second after the change (debounce) and writes within a few:
            # the kill lands before, in or after its solve and writes; a third of the runs
            # also kill the restarted operator during its start-up or first pass.
            delay = rng.uniform(0.0, 4.0)
            time.sleep(delay)
            assert operator.proc is not None and operator.alive(), current_log(operator)[-3000:]
            kills = [f"{delay:.2f} s after the change ({progress(operator)})"]
            operator.proc.kill()
            operator.stop()
            if rng.random() < 1 / 3:
                operator.start()
                again = rng.uniform(0.5, 6.0)
                time.sleep(again)
                kills.append(f"restarted, killed again {again:.2f} s later ({progress(operator)})")
                operator.proc.kill()
                operator.stop()
            restarted = time.monotonic()
            operator.start()

            def recovered() -> dict[str, int] | None:
                # The new incarnation has made a pass (it leads and has seen everything) and
                # the service has converged.
                return converged(env, "chat") if passes(operator) >= 1 else None

            allocation = until(f"run {run}: chat to converge", recovered, CONVERGE_S)
            recoveries.append(time.monotonic() - restarted)
            print(f"run {run:2d}: {rate} req/s; kill {'; '.join(kills)}; {before} → {allocation} "
                  f"in {recoveries[-1]:.1f} s")  # fmt: skip
            assert not watch.violations, (run, watch.violations)
            assert not watch.dips(before, allocation, since=changed), run
            assert not repeated_errors(current_log(operator), at_most=2), current_log(operator)
    finally:
        watch.stop()
    events = sum(1 for e in env.events("chat") if e.reason == "PlanChanged")
    print(f"{events} PlanChanged events for {KILLS + 1} plan changes")
    assert events <= KILLS + 1, "a plan change reported twice"
    assert_no_error_loop(operator, ERROR_WINDOW_S)
    held = "no dip, no duplicate, converged every run, no repeated error"
    fault = f"{KILLS} runs, seed {seed}, a replan each"
    table.append(Recovery("operator SIGKILL at random points of a pass", fault, recoveries, held))


# --------------------------------------------------------------------------- router


MODEL = "llama"
OUTPUT = 200
"""Tokens per streamed answer: a few seconds at the simulated A10G's speed."""
STREAMS = 8
STREAM_TIMEOUT_S = 30.0
"""A read that waits this long is a hang."""


class Engine:
    """One simulated vLLM pod in a process of its own (so that it can be killed alone)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [gpumix_command(), "sim", "serve", "--model", "meta-llama/Llama-2-7b-hf",
             "--served-name", MODEL, "--pods", "a10g=1", "--speed", "1"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.url = str(json.loads(self.proc.stdout.readline())["url"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Router:
    """`gpumix route` with a static routing file over `engines` (one pool, a10g)."""

    def __init__(self, directory: Path, engines: list[Engine], migratable: bool) -> None:
        routing = {"inputEdges": [1, 4096], "outputEdges": [1, 4096],
                   "pools": {"a10g": {"replicas": len(engines), "share": [[1.0]]}}}  # fmt: skip
        (directory / "routing.json").write_text(json.dumps(routing))
        self.port, self.admin = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [gpumix_command(), "route", "--routing-file", str(directory / "routing.json"),
                     *[f for e in engines for f in ("--engine", f"a10g={e.url}")],
                     "--bind", "127.0.0.1", "--port", str(self.port),
                     "--admin-port", str(self.admin), "--log-format", "plain",
                     *(["--migratable"] if migratable else [])]  # fmt: skip
        self.log_path = directory / "router.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log_path.read_text()
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait("the router to be ready", ready, timeout=30, every=0.1)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


@dataclass
class Stream:
    """One streamed completion through the router and how it ended."""

    tokens: int = 0
    outcome: str = "running"
    """complete ([DONE] after all tokens), error (an error event, an HTTP error or a closed
    connection), hang (a read waited STREAM_TIMEOUT_S) or running."""
    detail: str = ""
    ended: float = 0.0

    def run(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        body = {"model": MODEL, "prompt": [7] * 50, "max_tokens": OUTPUT, "ignore_eos": True,
                "stream": True}  # fmt: skip
        conn = http.client.HTTPConnection(host, int(port), timeout=STREAM_TIMEOUT_S)
        try:
            conn.request("POST", "/v1/completions", json.dumps(body),
                         {"Content-Type": "application/json"})  # fmt: skip
            resp = conn.getresponse()
            if resp.status != 200:
                self.outcome, self.detail = "error", f"HTTP {resp.status}: {resp.read()[:200]!r}"
                return
            done = errored = False
            for line in resp:
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: {"):
                    event = json.loads(line[6:])
                    if "error" in event:
                        errored, self.detail = True, str(event["error"])[:200]
                    else:
                        self.tokens += 1
            if errored:
                self.outcome = "error"
            elif done and self.tokens == OUTPUT:
                self.outcome = "complete"
            else:  # no [DONE] or missing tokens without saying why
                self.outcome, self.detail = "truncated", f"{self.tokens} tokens, [DONE]={done}"
        except TimeoutError:
            self.outcome = "hang"
        except (OSError, http.client.HTTPException) as err:
            self.outcome, self.detail = "error", f"{type(err).__name__}: {err}"
        finally:
            self.ended = time.monotonic()
            conn.close()


def streams_through(url: str, n: int) -> tuple[list[Stream], list[threading.Thread]]:
    streams = [Stream() for _ in range(n)]
    threads = [threading.Thread(target=s.run, args=(url,), daemon=True) for s in streams]
    for t in threads:
        t.start()
    wait("every stream to be under way", lambda: all(s.tokens > 0 for s in streams),
         timeout=30, every=0.02)  # fmt: skip
    return streams, threads


def complete(url: str) -> str:
    body = {"model": MODEL, "prompt": [7] * 20, "max_tokens": 4, "ignore_eos": True}
    req = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=STREAM_TIMEOUT_S) as r:
        return str(json.loads(r.read())["choices"][0]["text"])


@pytest.mark.parametrize("migratable", [False, True], ids=["relay", "migratable"])
def test_engine_and_router_killed_mid_stream(
    tmp_path: Path, migratable: bool, table: list[Recovery]
) -> None:
    engines = [Engine(), Engine()]
    router = None
    try:
        router = Router(tmp_path, engines, migratable)
        # 1. An engine dies mid-stream: its streams end with an error event (or complete, if
        # moved), promptly; the others complete; new requests go to the engine left.
        streams, threads = streams_through(router.url, STREAMS)
        killed = time.monotonic()
        engines[0].stop()
        for t in threads:
            t.join(STREAM_TIMEOUT_S + 10)
        outcomes = [s.outcome for s in streams]
        assert set(outcomes) <= {"complete", "error"}, [(s.outcome, s.detail) for s in streams]
        failed = [s for s in streams if s.outcome == "error"]
        to_error = max((s.ended - killed for s in failed), default=0.0)
        served = time.monotonic()
        answers = [complete(router.url) for _ in range(5)]
        assert all(answers), answers
        first_after = time.monotonic() - served
        assert router.proc is not None and router.proc.poll() is None

        # 2. The router dies mid-stream: every client sees its connection end, none hangs;
        # a new router process on the same port serves again.
        streams, threads = streams_through(router.url, 4)
        router_killed = time.monotonic()
        router.kill()
        for t in threads:
            t.join(STREAM_TIMEOUT_S + 10)
        assert {s.outcome for s in streams} <= {"error", "truncated"}, streams
        cut = max(s.ended for s in streams) - router_killed
        restarted = time.monotonic()
        router.start()
        assert complete(router.url)
        back = time.monotonic() - restarted
    finally:
        if router is not None:
            router.stop()
        for e in engines:
            e.stop()
    mode = "migratable" if migratable else "relay"
    print(f"\n{mode}: engine SIGKILLed under {STREAMS} streams: {outcomes.count('complete')} "
          f"complete, {len(failed)} ended with an error event within {to_error:.2f} s "
          f"({failed[0].detail if failed else ''}); next request {first_after:.2f} s; router "
          f"SIGKILLed: clients cut within {cut:.2f} s, a new router served {back:.1f} s after "
          "its start")  # fmt: skip
    held = (f"{outcomes.count('complete')} complete, {len(failed)} clean error events, no hang; "
            "router kept serving")  # fmt: skip
    table.append(Recovery(f"engine killed mid-stream ({mode})",
                          f"SIGKILL under {STREAMS} streams", [to_error], held))  # fmt: skip
    table.append(Recovery(f"router killed mid-stream ({mode})", "SIGKILL under 4 streams",
                          [back], "every client cut at once (no hang); restarted router "
                          "serves"))  # fmt: skip
