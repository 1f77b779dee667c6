"""The placement state every KV-cache scheduler works on: pods, their requests and KV sizes.

MELL §VI-A's system model: a set of homogeneous pods ("GPUs" in the paper) J, each with KV
capacity C; requests i with a KV size S_i^t (tokens) that only grows while they run; a placement
x^t (request → pod). A pod is *active* while it is in the set (it may briefly be empty inside an
epoch); Algorithm 1 terminates empty pods at the end of an epoch (`release_empty`).

Pods carry an activation sequence number (MELL's "most recently activated GPU") and a node index
(the "same machine" term of the priority, and which link a migration uses). A newly activated pod
takes the lowest free slot; node = slot // pods_per_node, so a cluster of n pods fills nodes in
order, as an autoscaler adding GPUs to machines would.

Everything is pure and deterministic: pods and requests are plain integers chosen by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class RequestClass(IntEnum):
    """MELL §VI-C's request categories by KV size relative to C; TINY (≤ C/8) requests are packed
    as multi-items of size (C/8, C/4] and otherwise handled like T. Ordered small → large."""

    TINY = 0
    T = 1
    S = 2
    M = 3
    L = 4


def classify(size: int, cap: int) -> RequestClass:
    """L (C/2, C], M (C/3, C/2], S (C/4, C/3], T (C/8, C/4], TINY (0, C/8] (MELL §VI-C).
    Exact in integers: size > C/k ⇔ k·size > C. Sizes above C are still L (they overload)."""
    if 2 * size > cap:
        return RequestClass.L
    if 3 * size > cap:
        return RequestClass.M
    if 4 * size > cap:
        return RequestClass.S
    if 8 * size > cap:
        return RequestClass.T
    return RequestClass.TINY


def t_like(c: RequestClass) -> bool:
    """T-requests and (members of) multi-items are placed by the same rules (Fig. 10 T cases)."""
    return c <= RequestClass.T


def sm_like(c: RequestClass) -> bool:
    return c in (RequestClass.S, RequestClass.M)


@dataclass(frozen=True)
class Move:
    """One request migration decided in an epoch: KV of `tokens` tokens from pod `src` to `dst`.
    `unit` numbers the item moved (a multi-item's members share one unit; Theorem 3 counts
    units)."""

    rid: int
    src: int
    dst: int
    tokens: int
    unit: int = 0


@dataclass
class Pod:
    pid: int
    seq: int
    node: int
    reqs: dict[int, int] = field(default_factory=dict)
    used: int = 0

    def __len__(self) -> int:
        return len(self.reqs)


@dataclass
class EpochResult:
    """What an epoch decided: where each arrival went, the migrations (net, in execution order),
    pods activated (first used) and released (terminated), requests preempted (the baselines:
    their KV is dropped and they wait in their own pod's queue, vLLM's recompute preemption) and
    requests resumed from such a queue (they re-prefill on that pod)."""

    placed: dict[int, int] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    activated: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)


class Cluster:
    """Pods, placements and sizes. Mutations keep `used` exact; nothing here decides anything."""

    def __init__(self, cap: int, pods_per_node: int = 8) -> None:
        if cap <= 0:
            raise ValueError("KV capacity must be > 0 tokens")
        if pods_per_node < 1:
            raise ValueError("pods_per_node must be >= 1")
        self.cap = cap
        self.pods_per_node = pods_per_node
        self.pods: dict[int, Pod] = {}
        self.where: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self._seq = 0
        self._next_pid = 0

    # -- pods ---------------------------------------------------------------------------------
    def activate(self) -> Pod:
        """A new pod at the lowest free slot (pod ids are slots), most recently activated."""
        taken = {p.pid for p in self.pods.values()}
        pid = next(k for k in range(len(taken) + 1) if k not in taken)
        self._seq += 1
        pod = Pod(pid=pid, seq=self._seq, node=pid // self.pods_per_node)
        self.pods[pid] = pod
        return pod

    def adopt(self, pid: int, node: int) -> Pod:
        """Add an existing pod (observed state), activated after every pod adopted so far."""
        self._seq += 1
        pod = Pod(pid=pid, seq=self._seq, node=node)
        self.pods[pid] = pod
        return pod

    def release_empty(self) -> list[int]:
        """Algorithm 1's last step: terminate every pod processing no request."""
        gone = sorted(pid for pid, p in self.pods.items() if not p.reqs)
        for pid in gone:
            del self.pods[pid]
        return gone

    def free(self, pid: int) -> int:
        return self.cap - self.pods[pid].used

    def latest(self) -> Pod | None:
        return max(self.pods.values(), key=lambda p: p.seq, default=None)

    # -- requests -----------------------------------------------------------------------------
    def put(self, rid: int, size: int, pid: int) -> None:
        if rid in self.where:
            raise ValueError(f"request {rid} is already on pod {self.where[rid]}")
        pod = self.pods[pid]
        pod.reqs[rid] = size
        pod.used += size
        self.where[rid] = pid
        self.size[rid] = size

    def take(self, rid: int) -> int:
        """Remove a request from its pod; returns the pod it was on."""
        pid = self.where.pop(rid)
        pod = self.pods[pid]
        pod.used -= pod.reqs.pop(rid)
        del self.size[rid]
        return pid

    def relocate(self, rid: int, dst: int) -> int:
        """Move a placed request to `dst`; returns its old pod."""
        size = self.size[rid]
        src = self.take(rid)
        self.put(rid, size, dst)
        return src

    def resize(self, rid: int, size: int) -> None:
        pod = self.pods[self.where[rid]]
        pod.used += size - pod.reqs[rid]
        pod.reqs[rid] = size
        self.size[rid] = size

    def overloaded(self) -> list[int]:
        return sorted(pid for pid, p in self.pods.items() if p.used > self.cap)

    def utilisation(self) -> float:
        """KV in use over the capacity of the active pods (0 with no pods)."""
        if not self.pods:
            return 0.0
        return sum(p.used for p in self.pods.values()) / (self.cap * len(self.pods))
