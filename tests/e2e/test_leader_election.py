"""Two `gpumix run` replicas on one Lease, on the real control plane.

Exactly one holds the Lease and only it writes (each replica counts its writes in
`gpumix_cluster_writes_total`; the follower's stays 0). SIGKILL the leader in the middle of a
make-before-break rollout: the follower takes the Lease within the lease duration (plus its
retry period), nothing writes the Deployments in between, the new leader finishes the rollout,
and no shrinking pool is scaled down before the growing pools serve — checked on every
Deployment event of a watch that runs through the whole handover. Short timings (3 s lease)
through the flags; the Lease has a name of its own so that no other module's operator meets it.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from operator_harness import SAMPLES, Env, Operator, wait
from prometheus_client.parser import text_string_to_metric_families

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

LEASE_S, RENEW_S, RETRY_S = 3, 2.0, 0.5
LEASE_NS = "default"  # where the harness puts every operator's Lease
NO_CHURN = {"churn": {"penalty": 0}, "slo": {"tpotMs": 120, "attainmentTarget": 0.5}}


def metric(op: Operator, name: str) -> float:
    """The sum of a metric's samples on the replica's /metrics (0 when it has none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


class DeploymentWatch(threading.Thread):
    """Every state of one service's Deployments (replicas and available per pool), one entry
    per watch event, with the monotonic time it arrived."""

    def __init__(self, env: Env, service: str) -> None:
        super().__init__(daemon=True)
        self.env, self.service = env, service
        self.states: list[tuple[float, dict[str, int], dict[str, int]]] = []
        self._done = threading.Event()

    def run(self) -> None:
        current: dict[str, tuple[int, int]] = {}
        version = None
        while not self._done.is_set():
            stream = watch.Watch().stream(
                self.env.apps.list_namespaced_deployment,
                self.env.ns,
                label_selector=f"gpumix.io/service={self.service}",
                resource_version=version,
                timeout_seconds=2,
            )
            for event in stream:
                d = event["object"]
                version = d.metadata.resource_version
                pool = d.metadata.labels["gpumix.io/pool"]
                if event["type"] == "DELETED":
                    current.pop(pool, None)
                else:
                    current[pool] = (d.spec.replicas, d.status.available_replicas or 0)
                self.states.append((
                    time.monotonic(),
                    {p: r for p, (r, _) in current.items()},
                    {p: a for p, (_, a) in current.items()},
                ))  # fmt: skip

    def latest(self) -> tuple[dict[str, int], dict[str, int]]:
        return (self.states[-1][1], self.states[-1][2]) if self.states else ({}, {})

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)


@dataclass
class Replicas:
    lease: str
    ops: dict[str, Operator]
    """By identity."""


@pytest.fixture
def replicas(kube: KubeTarget, tmp_path: Path) -> Iterator[Replicas]:
    """Two operators campaigning for a fresh Lease."""
    kube.kubectl("apply", "-f", str(SAMPLES / "gpupools.yaml"),
                 "-f", str(SAMPLES / "profiles-llama-2-7b.yaml"))  # fmt: skip
    lease = f"gpumix-e2e-{uuid.uuid4().hex[:6]}"
    flags = ["--leader-elect-resource-name", lease,
             "--leader-elect-lease-duration", str(LEASE_S),
             "--leader-elect-renew-deadline", str(RENEW_S),
             "--leader-elect-retry-period", str(RETRY_S)]  # fmt: skip
    ops = {}
    for identity in ("replica-a", "replica-b"):
        (tmp_path / identity).mkdir()
        ops[identity] = Operator(kube, tmp_path / identity, identity=identity, extra_args=flags)
        ops[identity].start()
    try:
        yield Replicas(lease, ops)
    finally:
        for identity in ("replica-a", "replica-b"):
            ops[identity].stop()
        coordination = client.CoordinationV1Api(kube.api_client)
        coordination.delete_namespaced_lease(lease, LEASE_NS)


def test_one_leader_writes_and_the_follower_finishes_its_rollout(
    kube: KubeTarget, namespace: str, replicas: Replicas
) -> None:
    lease_name = replicas.lease
    leases = client.CoordinationV1Api(kube.api_client)
    env = Env(kube, namespace)

    def holder() -> str:
        try:
            spec = leases.read_namespaced_lease(lease_name, LEASE_NS).spec
        except ApiException:
            return ""
        return spec.holder_identity or ""

    def up(op: Operator) -> bool:
        try:
            return metric(op, "gpumix_leader") in (0, 1)
        except OSError:
            return False

    for op in replicas.ops.values():  # a loaded machine may start one long after the other
        wait("both replicas to serve metrics", lambda op=op: up(op), timeout=60, every=0.2)
    leader_id = wait("a replica to hold the Lease", holder, timeout=30, every=0.1)
    (follower_id,) = set(replicas.ops) - {leader_id}
    leader, follower = replicas.ops[leader_id], replicas.ops[follower_id]
    assert metric(leader, "gpumix_leader") == 1
    assert metric(follower, "gpumix_leader") == 0
    transitions = leases.read_namespaced_lease(lease_name, LEASE_NS).spec.lease_transitions

    deployments = DeploymentWatch(env, "chat")
    deployments.start()
    try:
        env.apply(env.service("chat", 5.5, **NO_CHURN))
        env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
        before = env.allocation("chat")
        # Only the leader wrote; the follower, campaigning all along, wrote nothing.
        assert metric(leader, "gpumix_cluster_writes_total") > 0
        assert metric(follower, "gpumix_cluster_writes_total") == 0
        assert holder() == leader_id

        # The rate change moves replicas between pools: kill the leader once a pool has grown
        # and before any has shrunk (make-before-break keeps them until the new ones serve).
        replanned = time.monotonic()
        env.apply(env.service("chat", 7, **NO_CHURN))

        def mid_rollout() -> bool:
            replicas_now, _ = deployments.latest()
            grown = any(n > before.get(p, 0) for p, n in replicas_now.items())
            kept = all(replicas_now.get(p, 0) >= n for p, n in before.items())
            return grown and kept

        wait("a pool to grow (the rollout to start)", mid_rollout, timeout=60, every=0.02)
        assert leader.proc is not None
        leader.proc.kill()
        killed = time.monotonic()
        leader.proc.wait()
        mid = deployments.latest()
        assert metric(follower, "gpumix_cluster_writes_total") == 0  # still following

        wait(f"{follower_id} to take the Lease", lambda: holder() == follower_id,
             timeout=LEASE_S + 10, every=0.05)  # fmt: skip
        takeover = time.monotonic() - killed
        print(f"\nleader SIGKILLed mid-rollout at {mid}: {follower_id} took the Lease after "
              f"{takeover:.2f} s (lease {LEASE_S} s, retry {RETRY_S} s)")  # fmt: skip
        # Not before the lease ran out: the leader acted until at most RENEW_S after its last
        # renewal, and the follower waited LEASE_S from when it saw that renewal. At most a
        # lease after that renewal (itself at most a retry period before the kill), plus the
        # follower's jittered retry period and some slack for a loaded machine.
        assert LEASE_S - RENEW_S <= takeover <= LEASE_S + (1 + 2.2) * RETRY_S + 2
        spec = leases.read_namespaced_lease(lease_name, LEASE_NS).spec
        assert spec.lease_transitions == transitions + 1
        assert metric(follower, "gpumix_leader") == 1
        acquired = killed + takeover
        # Nobody wrote the Deployments between the kill and the takeover.
        between = [s for s in deployments.states if killed + 0.5 < s[0] < acquired - 0.1]
        assert all(s[1] == mid[0] for s in between), between

        def settled() -> bool:
            c = env.condition("chat", "Ready")
            return bool(c and c["status"] == "True" and env.allocation("chat") != before)

        wait("the new leader to finish the rollout", settled, timeout=120, every=0.2)
        after = env.allocation("chat")
        wait("the old pool's Deployment to go", lambda: env.replicas("chat") == after)
        assert metric(follower, "gpumix_cluster_writes_total") > 0
    finally:
        deployments.stop()

    growing = {p: n for p, n in after.items() if n > before.get(p, 0)}
    shrinking = {p for p, n in before.items() if after.get(p, 0) < n}
    assert growing, f"expected a pool to grow: {before} → {after}"
    assert shrinking, f"expected a pool to shrink: {before} → {after}"
    rollout = [(r, a) for t, r, a in deployments.states if t >= replanned]
    for replicas_now, available in rollout:
        if any(replicas_now.get(p, 0) < before[p] for p in shrinking):
            assert all(available.get(p, 0) >= n for p, n in growing.items()), (
                f"a pool shrank before the growing pools were available: {replicas_now} {available}"
            )
    assert follower.alive()

    # A graceful stop releases the Lease: nobody holds it right away.
    env.delete_and_wait("chat")
    follower.stop()
    assert holder() == ""
