"""What the chaos scenarios (test_chaos.py) share: an observer of the serving invariants that
samples every Deployment event while a fault runs, a convergence probe, an error-loop check and
the recovery table.

The invariants, for one LLMService:
- no serving Deployment is scaled to zero, and none goes below what serves: a pool that keeps or
  grows its replicas never drops below its count before the fault; a pool that shrinks drops
  only once every growing pool has its target available (make-before-break), and never below
  its final count;
- no duplicate objects: at most one Deployment per (service, pool) at every event, and no more
  pods per pool than planned once converged;
- status converges: Ready=True Serving for the current generation, and the allocation in status
  equals the Deployments' replicas, their available replicas and the Running pods per pool;
- no error loop: the operator stays up, and after recovery neither its error counter nor its log
  repeats an error.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from operator_harness import Env, Operator, wait
from prometheus_client.parser import text_string_to_metric_families

from gpumix.render.names import POOL_LABEL, SERVICE_LABEL


@dataclass(frozen=True)
class State:
    """The service's engine Deployments at one event: names, replicas and available per pool."""

    at: float
    names: dict[str, tuple[str, ...]]
    replicas: dict[str, int]
    available: dict[str, int]


class Invariants(threading.Thread):
    """A watch on one service's Deployments for as long as it runs: every state, and each
    violation of "nothing at zero, no duplicates" as it happens. Survives apiserver and etcd
    outages (lists again and resumes; nothing changes while they are down)."""

    def __init__(self, env: Env, service: str) -> None:
        super().__init__(daemon=True)
        self.env, self.service = env, service
        self.states: list[State] = []
        self.violations: list[str] = []
        self.outages = 0
        """Times the watch failed and had to list again."""
        self._current: dict[str, dict[str, Any]] = {}
        self._done = threading.Event()
        self._started = threading.Event()

    def _record(self) -> None:
        names: dict[str, list[str]] = {}
        replicas: dict[str, int] = {}
        available: dict[str, int] = {}
        for name, d in sorted(self._current.items()):
            pool = d.metadata.labels[POOL_LABEL]
            names.setdefault(pool, []).append(name)
            replicas[pool] = replicas.get(pool, 0) + (d.spec.replicas or 0)
            available[pool] = available.get(pool, 0) + (d.status.available_replicas or 0)
            if not d.spec.replicas:
                self.violations.append(f"{name} scaled to {d.spec.replicas}")
        for pool, ns in names.items():
            if len(ns) > 1:
                self.violations.append(f"duplicate Deployments of pool {pool}: {ns}")
        pools = {p: tuple(n) for p, n in names.items()}
        self.states.append(State(time.monotonic(), pools, replicas, available))

    def _list(self) -> str:
        items = self.env.apps.list_namespaced_deployment(
            self.env.ns, label_selector=f"{SERVICE_LABEL}={self.service},{POOL_LABEL}"
        )
        self._current = {d.metadata.name: d for d in items.items}
        self._record()
        return str(items.metadata.resource_version)

    def run(self) -> None:
        version: str | None = None
        while not self._done.is_set():
            try:
                if version is None:
                    version = self._list()
                    self._started.set()
                stream = watch.Watch().stream(
                    self.env.apps.list_namespaced_deployment,
                    self.env.ns,
                    label_selector=f"{SERVICE_LABEL}={self.service},{POOL_LABEL}",
                    resource_version=version,
                    timeout_seconds=2,
                    _request_timeout=5,
                )
                for event in stream:
                    d = event["object"]
                    if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                        version = None
                        break
                    version = d.metadata.resource_version
                    if event["type"] == "DELETED":
                        self._current.pop(d.metadata.name, None)
                    else:
                        self._current[d.metadata.name] = d
                    self._record()
            except Exception:  # the apiserver or etcd is down: list again once it is back
                self.outages += 1
                version = None
                time.sleep(0.2)

    def begin(self) -> Invariants:
        self.start()
        wait("the invariants watch to list", self._started.is_set, timeout=30, every=0.05)
        return self

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=15)

    def since(self, t: float) -> list[State]:
        return [s for s in self.states if s.at >= t]

    def dips(self, before: dict[str, int], after: dict[str, int], since: float) -> list[str]:
        """States since `since` that served less than make-before-break allows on the way
        from plan `before` to plan `after`."""
        growing = {p: n for p, n in after.items() if n > before.get(p, 0)}
        out = []
        states = self.since(since)
        for i, s in enumerate(states):
            # The states that led here (replicas/available per pool), for the post-mortem.
            led = [(round(x.at - since, 2), x.replicas, x.available) for x in states[i - 4 : i]]
            for pool, n in before.items():
                have, final = s.replicas.get(pool, 0), after.get(pool, 0)
                if have < min(n, final) or (final >= n and have < n):
                    out.append(f"{pool} at {have} (plans {n}→{final}): {s}; after {led}")
                elif have < n and not all(s.available.get(g, 0) >= m for g, m in growing.items()):
                    out.append(f"{pool} shrank to {have} before {growing} were available: "
                               f"{s}; after {led}")  # fmt: skip
        return out


def mid_rollout(watch: Invariants, before: dict[str, int]) -> bool:
    """A pool has grown past plan ``before`` and none has shrunk yet."""
    if not watch.states:
        return False
    now = watch.states[-1].replicas
    grown = any(n > before.get(p, 0) for p, n in now.items())
    return grown and all(now.get(p, 0) >= n for p, n in before.items())


def converged(env: Env, service: str) -> dict[str, int] | None:
    """The allocation once status, Deployments and pods all agree (see the module doc), else
    None. Pods on nodes that no longer exist do not count as serving."""
    obj = env.get(service)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
    if not (ready and ready["status"] == "True" and ready["reason"] == "Serving"):
        return None
    allocation = {a["pool"]: a["replicas"] for a in status.get("allocation", []) if a["replicas"]}
    deployments = env.apps.list_namespaced_deployment(
        env.ns, label_selector=f"{SERVICE_LABEL}={service},{POOL_LABEL}"
    ).items
    pools = [d.metadata.labels[POOL_LABEL] for d in deployments]
    if len(pools) != len(set(pools)):
        return None
    replicas = {d.metadata.labels[POOL_LABEL]: d.spec.replicas for d in deployments}
    available = {d.metadata.labels[POOL_LABEL]: d.status.available_replicas for d in deployments}
    if not replicas == available == allocation:
        return None
    nodes = {n.metadata.name for n in env.core.list_node().items}
    running: dict[str, int] = {}
    pods = env.core.list_namespaced_pod(env.ns, label_selector=f"{SERVICE_LABEL}={service}")
    for pod in pods.items:
        if pod.metadata.deletion_timestamp or POOL_LABEL not in pod.metadata.labels:
            continue
        if pod.status.phase != "Running" or pod.spec.node_name not in nodes:
            return None
        pool = pod.metadata.labels[POOL_LABEL]
        running[pool] = running.get(pool, 0) + 1
    return allocation if running == allocation else None


def metric(op: Operator, name: str) -> float:
    """The sum of a metric's samples on the operator's /metrics (0 when it has none)."""
    url = f"http://127.0.0.1:{op.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


ERRORS = "gpumix_reconcile_errors_total"
_NUMBERS = re.compile(r"\d+")


def log_records(text: str) -> list[dict[str, Any]]:
    """The JSON records of an operator log (`--log-format json`); a line that is not one (a
    traceback Python printed on its way out) is an error record of its own."""
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            out.append(record)
        elif line.startswith("Traceback"):
            out.append({"severity": "fatal", "message": line})
    return out


def error_lines(text: str) -> list[str]:
    """The messages of the log's error records, numbers masked so that the same error twice
    reads the same."""
    return [
        _NUMBERS.sub("N", str(r.get("message")))
        for r in log_records(text)
        if r.get("severity") in ("error", "fatal")
    ]


def repeated_errors(text: str, at_most: int) -> dict[str, int]:
    return {line: n for line, n in Counter(error_lines(text)).items() if n > at_most}


def current_log(op: Operator) -> str:
    return (op.log_dir / f"operator-{op.runs}.log").read_text()


def assert_no_error_loop(op: Operator, window_s: float) -> None:
    """After recovery: the operator stays up over `window_s` (a few passes) and logs no error
    and counts no failed write or pass in that time."""
    wait("the operator's metrics", lambda: _metrics_up(op), timeout=30, every=0.2)
    errors, offset = metric(op, ERRORS), len(current_log(op))
    time.sleep(window_s)
    assert op.alive(), f"the operator exited: {current_log(op)[-3000:]}"
    later = current_log(op)[offset:]
    assert metric(op, ERRORS) == errors, f"errors after recovery: {error_lines(later)}"
    assert not error_lines(later), error_lines(later)


def _metrics_up(op: Operator) -> bool:
    try:
        metric(op, ERRORS)
    except OSError:
        return False
    return True


@dataclass
class Recovery:
    """One row of the reliability table."""

    scenario: str
    fault: str
    recovery_s: list[float] = field(default_factory=list)
    held: str = ""

    def line(self) -> str:
        r = sorted(self.recovery_s)
        if not r:
            times = "-"
        elif len(r) == 1:
            times = f"{r[0]:.1f} s"
        else:
            times = f"median {r[len(r) // 2]:.1f} s, max {r[-1]:.1f} s over {len(r)}"
        return f"| {self.scenario} | {self.fault} | {times} | {self.held} |"


def until(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """`wait` that treats an API error of the probe (the apiserver still coming back) as not
    yet; an assertion fails at once."""

    def safe() -> Any:
        try:
            return probe()
        except (ApiException, OSError, urllib3.exceptions.HTTPError):
            return None

    return wait(what, safe, timeout=timeout, every=every)
