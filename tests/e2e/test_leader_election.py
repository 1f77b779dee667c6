"""Two `gpumix run` replicas on one Lease, on the real control plane.

Exactly one holds the Lease and only it writes (each replica counts its writes in
`gpumix_cluster_writes_total`; the follower's stays 0). SIGKILL the leader in the middle of a
make-before-break rollout: the follower takes the Lease within the lease duration (plus its
retry period), nothing writes the Deployments in between, the new leader finishes the rollout,
and no shrinking pool is scaled down before the growing pools serve, none to zero and no
pool's Deployment twice — checked on every Deployment event of a watch that runs through the
whole handover (chaos_harness.Invariants). Short timings (3 s lease) through the flags; the
Lease has a name of its own so that no other module's operator meets it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chaos_harness import Invariants, metric, mid_rollout
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_harness import SAMPLES, Env, Operator, wait

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

LEASE_S, RENEW_S, RETRY_S = 3, 2.0, 0.5
LEASE_NS = "default"  # where the harness puts every operator's Lease
NO_CHURN = {"churn": {"penalty": 0}, "slo": {"tpotMs": 120, "attainmentTarget": 0.5}}


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

    deployments = Invariants(env, "chat").begin()
    try:
        env.apply(env.service("chat", 4, **NO_CHURN))
        env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
        before = env.allocation("chat")
        # Only the leader wrote; the follower, campaigning all along, wrote nothing.
        assert metric(leader, "gpumix_cluster_writes_total") > 0
        assert metric(follower, "gpumix_cluster_writes_total") == 0
        assert holder() == leader_id

        # The rate change moves replicas between pools: kill the leader once a pool has grown
        # and before any has shrunk (make-before-break keeps them until the new ones serve).
        replanned = time.monotonic()
        env.apply(env.service("chat", 5.5, **NO_CHURN))
        wait("a pool to grow (the rollout to start)", lambda: mid_rollout(deployments, before),
             timeout=60, every=0.02)  # fmt: skip
        assert leader.proc is not None
        leader.proc.kill()
        killed = time.monotonic()
        leader.proc.wait()
        mid = deployments.states[-1]
        assert metric(follower, "gpumix_cluster_writes_total") == 0  # still following

        wait(f"{follower_id} to take the Lease", lambda: holder() == follower_id,
             timeout=LEASE_S + 10, every=0.05)  # fmt: skip
        takeover = time.monotonic() - killed
        print(f"\nleader SIGKILLed mid-rollout at {mid.replicas}: {follower_id} took the Lease "
              f"after {takeover:.2f} s (lease {LEASE_S} s, retry {RETRY_S} s)")  # fmt: skip
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
        between = [s for s in deployments.since(killed + 0.5) if s.at < acquired - 0.1]
        assert all(s.replicas == mid.replicas for s in between), between

        def settled() -> bool:
            c = env.condition("chat", "Ready")
            return bool(c and c["status"] == "True" and env.allocation("chat") != before)

        wait("the new leader to finish the rollout", settled, timeout=120, every=0.2)
        after = env.allocation("chat")
        wait("the old pool's Deployment to go", lambda: env.replicas("chat") == after)
        assert metric(follower, "gpumix_cluster_writes_total") > 0
    finally:
        deployments.stop()

    grew = any(n > before.get(p, 0) for p, n in after.items())
    shrank = any(after.get(p, 0) < n for p, n in before.items())
    assert grew, f"expected a pool to grow: {before} → {after}"
    assert shrank, f"expected a pool to shrink: {before} → {after}"
    # Make-before-break through the handover: no shrinking pool below its count before the
    # growing ones were available, none below its final count, none at zero, no duplicate.
    assert not deployments.violations, deployments.violations
    assert not deployments.dips(before, after, since=replanned)
    assert follower.alive()

    # A graceful stop releases the Lease: nobody holds it right away.
    env.delete_and_wait("chat")
    follower.stop()
    assert holder() == ""
