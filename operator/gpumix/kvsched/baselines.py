"""MELL §VIII-B's baselines: BF and WF (placement only) and LB (Llumnix-style load balancing).

MELL §VIII-B: 'BF: dispatches each incoming request to the GPU with the least but sufficient
memory (Best-Fit) and does not migrate running requests between GPUs. WF: … to the least memory
[used] (Worst-Fit) and does not migrate … LB: dispatches incoming requests to the GPU with the
least memory (worst fit) and achieves Load-Balancing via request migration by transferring the
KV cache between GPUs, adopted by Llumnix. These algorithms activate a new GPU if no GPU can
handle an incoming request and terminate a GPU if it is idle.' §III: Llumnix balances 'by
swapping with the lowest load and highest load repeatedly'.

- **Growth past C** (every baseline; the paper does not say, the engines it runs on do): vLLM's
  recompute preemption. The pod drops the KV of its most recently admitted request, which waits
  in *that pod's* queue (no other pod sees it: BF and WF never move a request) and re-prefills
  there when the pod has room again (`EpochResult.preempted`, then `.resumed`). A pod's queued
  requests count against its free KV for dispatch (vLLM admits in order behind them), and a pod
  with a queue is never idle.
- **BF / WF**: the feasible pod (free KV minus its queue ≥ the request) with the least / most
  free KV; a pod is activated when none fits.
- **LB** (Llumnix, OSDI'24, `AlibabaPAI/llumnix` `global_scheduler/`): every tick the migration
  load of a pod is −(free blocks − watermark) / running requests (Llumnix's `remaining_steps`
  metric, negated so that higher is more loaded). Sources: pods with preempted requests or load
  above the threshold −3 (`migrate_out_threshold` 3 × −1: fewer than 3 free blocks per running
  request); destinations: no preempted requests and load below −3. Sources most loaded first
  and destinations least loaded first are paired index by index ('Balanced' policy); a pair
  migrates the source's shortest running request if the destination's load after stays ≤ −3
  and the load gap shrinks without changing sign; one migration per pod per tick; migration is
  a KV transfer. Llumnix ticks every 50–100 ms: up to `ticks_per_epoch` ticks run every epoch
  (10 for 1 s epochs), before vLLM preempts what still overflows and again after. Dispatch
  goes to the pod with the most free blocks per request (queue included).
  An arrival that fits no pod queues at the freest pod, which makes that pod a source for the
  epoch's ticks (Llumnix's de-fragmentation: the head of the queue counts against freeness);
  if they do not make room, a pod is activated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from gpumix.kvsched.state import Cluster, EpochResult, Move


class _Base:
    name = "base"

    def __init__(self, cap: int, *, pods_per_node: int = 8) -> None:
        self.c = Cluster(cap, pods_per_node)
        self._admitted: dict[int, int] = {}
        self._tick = 0
        self.queue: dict[int, dict[int, int]] = {}
        """pod → its preempted requests (rid → KV tokens to re-prefill), in preemption order."""

    @property
    def name_full(self) -> str:
        return self.name

    def queued(self, pid: int) -> int:
        return sum(self.queue.get(pid, {}).values())

    def room(self, pid: int) -> int:
        """Free KV a dispatch can use: what the pod's queue will take first is not free."""
        return self.c.free(pid) - self.queued(pid)

    def _pick(self, size: int) -> int | None:
        raise NotImplementedError

    def _admit(self, rid: int, size: int, pid: int) -> None:
        self.c.put(rid, size, pid)
        self._tick += 1
        self._admitted[rid] = self._tick

    def _place(self, rid: int, size: int) -> int:
        pid = self._pick(size)
        if pid is None:
            pid = self.c.activate().pid
        self._admit(rid, size, pid)
        return pid

    def _preempt(self, res: EpochResult) -> None:
        """vLLM's recompute preemption on every overloaded pod: drop the most recently admitted
        requests until it fits; they wait in the pod's own queue."""
        for pid in self.c.overloaded():
            pod = self.c.pods[pid]
            while pod.used > self.c.cap and len(pod.reqs) > 1:
                rid = max(pod.reqs, key=lambda r: self._admitted[r])
                self.queue.setdefault(pid, {})[rid] = self.c.size[rid]
                self.c.take(rid)
                res.preempted.append(rid)

    def _resume(self, res: EpochResult) -> None:
        """Re-admit queued requests, in order, on their own pod while they fit (they re-prefill:
        `res.resumed`)."""
        for pid, q in list(self.queue.items()):
            for rid, size in list(q.items()):
                if size > self.c.free(pid):
                    break
                del q[rid]
                self._admit(rid, size, pid)
                res.resumed.append(rid)
            if not q:
                del self.queue[pid]

    def _common(
        self, departures: Iterable[int], sizes: Mapping[int, int], res: EpochResult
    ) -> dict[int, int]:
        before = {pid: p.seq for pid, p in self.c.pods.items()}
        for rid in departures:
            if rid in self.c.where:
                self.c.take(rid)
            else:  # completed while queued (a caller that lets queued requests finish)
                for q in self.queue.values():
                    q.pop(rid, None)
            self._admitted.pop(rid, None)
        for rid, size in sizes.items():
            if rid in self.c.where:
                self.c.resize(rid, size)
            else:
                for q in self.queue.values():
                    if rid in q:
                        q[rid] = size
        self._resume(res)
        return before

    def _finish(self, res: EpochResult, before: dict[int, int]) -> EpochResult:
        self._resume(res)
        res.released = [p for p in self.c.release_empty() if p in before]
        res.activated = sorted(p for p, pod in self.c.pods.items() if before.get(p) != pod.seq)
        return res


class FitScheduler(_Base):
    """BF (best fit) or WF (worst fit) on arrival; no migration."""

    def __init__(self, cap: int, *, worst: bool, pods_per_node: int = 8) -> None:
        super().__init__(cap, pods_per_node=pods_per_node)
        self.worst = worst
        self.name = "WF" if worst else "BF"

    def _pick(self, size: int) -> int | None:
        fits = [p for p in self.c.pods.values() if self.room(p.pid) >= size]
        if not fits:
            return None
        if self.worst:
            return max(fits, key=lambda p: (self.room(p.pid), -p.pid)).pid
        return min(fits, key=lambda p: (self.room(p.pid), p.pid)).pid

    def epoch(
        self, arrivals: Mapping[int, int], departures: Iterable[int], sizes: Mapping[int, int]
    ) -> EpochResult:
        res = EpochResult()
        before = self._common(departures, sizes, res)
        self._preempt(res)
        for rid, size in arrivals.items():
            res.placed[rid] = self._place(rid, size)
        return self._finish(res, before)


class LoadBalancer(_Base):
    """LB: Llumnix's dispatch and 'Balanced' migration pairing (see the module docstring)."""

    name = "LB"

    def __init__(
        self,
        cap: int,
        *,
        pods_per_node: int = 8,
        block_size: int = 16,
        watermark: float = 0.01,
        threshold: float = -3.0,
        ticks_per_epoch: int = 10,
    ) -> None:
        super().__init__(cap, pods_per_node=pods_per_node)
        self.bs = block_size
        self.watermark_blocks = int(watermark * (cap // block_size))
        self.threshold = threshold
        self.ticks = ticks_per_epoch
        self._head: dict[int, int] = {}
        """pod → blocks of an arrival queued at its head this epoch (de-fragmentation)."""

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def load(self, pid: int, running_delta: int = 0, used_delta: int = 0) -> float:
        """Llumnix's migration load: −(free blocks − watermark − queue head) / running."""
        pod = self.c.pods[pid]
        head = self._head.get(pid, 0)
        running = len(pod.reqs) + running_delta + (head > 0)
        if running <= 0:
            return -math.inf
        free = self._blocks(self.c.cap) - self._blocks(pod.used + used_delta)
        return -(free - self.watermark_blocks - head) / running

    def freeness(self, pid: int) -> float:
        """Dispatch: free blocks (queue excluded) per request, +∞ for an idle pod."""
        pod = self.c.pods[pid]
        n = len(pod.reqs) + len(self.queue.get(pid, {}))
        if n == 0:
            return math.inf
        return (self._blocks(self.c.cap) - self._blocks(pod.used + self.queued(pid))) / n

    def _pick(self, size: int) -> int | None:
        fits = [p for p in self.c.pods.values() if self.room(p.pid) >= size]
        if not fits:
            return None
        return max(fits, key=lambda p: (self.freeness(p.pid), -p.pid)).pid

    def _tick_once(self, res: EpochResult) -> int:
        """One Llumnix migration tick; returns the migrations it made."""
        load = {pid: self.load(pid) for pid in self.c.pods if self.c.pods[pid].reqs}
        killed = {pid for pid in load if self.queue.get(pid)}
        srcs = sorted((p for p in load if p in killed or load[p] > self.threshold),
                      key=lambda p: (-load[p], p))  # fmt: skip
        dsts = sorted((p for p in load if p not in killed and load[p] < self.threshold),
                      key=lambda p: (load[p], p))  # fmt: skip
        made = 0
        for src, dst in zip(srcs, dsts, strict=False):
            if src == dst:
                continue
            pod = self.c.pods[src]
            rid = min(pod.reqs, key=lambda r: (pod.reqs[r], r))
            size = pod.reqs[rid]
            if self.room(dst) < size:
                continue
            dst_after = self.load(dst, 1, size)
            src_after = self.load(src, -1, -size)
            gap, gap_after = load[src] - load[dst], src_after - dst_after
            if dst_after > self.threshold or not 0 < gap_after < gap:
                continue
            self.c.relocate(rid, dst)
            res.moves.append(Move(rid, src, dst, size, len(res.moves) + 1))
            made += 1
        return made

    def _balance(self, res: EpochResult) -> None:
        for _ in range(self.ticks):
            if not self._tick_once(res):
                break
            self._resume(res)

    def epoch(
        self, arrivals: Mapping[int, int], departures: Iterable[int], sizes: Mapping[int, int]
    ) -> EpochResult:
        res = EpochResult()
        before = self._common(departures, sizes, res)
        # Llumnix migrates out of a pod before it runs out of blocks (an overflowing pod has the
        # highest load); vLLM preempts only what the ticks could not move.
        self._balance(res)
        self._preempt(res)
        self._balance(res)
        self._resume(res)
        for rid, size in arrivals.items():
            pick = self._pick(size)
            if pick is None and self.c.pods:
                head = max(self.c.pods, key=lambda p: (self.freeness(p), -p))
                self._head = {head: self._blocks(size)}
                self._balance(res)
                self._head = {}
                if self.room(head) >= size:
                    pick = head
            pid = self.c.activate().pid if pick is None else pick
            self._admit(rid, size, pid)
            res.placed[rid] = pid
        return self._finish(res, before)


def make_baseline(name: str, cap: int, *, pods_per_node: int = 8) -> FitScheduler | LoadBalancer:
    if name == "BF":
        return FitScheduler(cap, worst=False, pods_per_node=pods_per_node)
    if name == "WF":
        return FitScheduler(cap, worst=True, pods_per_node=pods_per_node)
    if name == "LB":
        return LoadBalancer(cap, pods_per_node=pods_per_node)
    raise ValueError(f"unknown baseline {name!r} (BF, WF, LB)")
