"""MELL §VIII-B's baselines: BF and WF (placement only) and LB (Llumnix-style load balancing).

Facts from shared/notes/kv-migration-baselines.md (Llumnix, OSDI'24, AlibabaPAI/llumnix):

- **BF / WF**: an arriving request goes to the feasible pod with the least (BF) or most (WF)
  remaining KV; a pod is activated when none fits and released when empty; no migration.
- **LB**: Llumnix's freeness F = (free blocks − watermark − blocks of the first waiting request) /
  max(1, running + [waiting]) (+∞ for an empty pod). Dispatch goes to the freest pod. Every tick,
  pods with F ≤ −3 (or preempted requests) are sources, pods with F > −3 destinations; sources
  most-loaded first are paired index by index with destinations least-loaded first; a pair
  migrates the source's shortest running request if the destination stays above −3 and the gap
  shrinks without flipping sign; one migration per pod per tick; migration = KV transfer.

Growth past C is what vLLM handles by preemption (recompute): the pod drops the KV of its most
recently admitted request, which is dispatched again and pays a re-prefill (`preempted`). LB turns
such pods into migration sources first (Llumnix). An arrival that fits nowhere waits on the
freest pod as Llumnix's queue head (it makes that pod a source for the tick); if the tick's
migrations do not make room, a pod is activated — MELL §VIII-B: 'these algorithms activate a new
GPU if no GPU can handle an incoming request and terminate a GPU if it is idle.'
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

    @property
    def name_full(self) -> str:
        return self.name

    def _pick(self, size: int, avoid: int | None) -> int | None:
        raise NotImplementedError

    def _place(self, rid: int, size: int, avoid: int | None = None) -> int:
        pid = self._pick(size, avoid)
        if pid is None:
            pid = self.c.activate().pid
        self.c.put(rid, size, pid)
        self._tick += 1
        self._admitted[rid] = self._tick
        return pid

    def _preempt(self, pid: int) -> list[tuple[int, int]]:
        """vLLM's recompute preemption: drop the most recently admitted requests until fits."""
        out: list[tuple[int, int]] = []
        pod = self.c.pods[pid]
        while pod.used > self.c.cap and len(pod.reqs) > 1:
            rid = max(pod.reqs, key=lambda r: self._admitted[r])
            out.append((rid, self.c.size[rid]))
            self.c.take(rid)
        return out

    def _common(
        self, departures: Iterable[int], sizes: Mapping[int, int]
    ) -> tuple[dict[int, int], set[int]]:
        before = {pid: p.seq for pid, p in self.c.pods.items()}
        for rid in departures:
            self.c.take(rid)
            self._admitted.pop(rid, None)
        for rid, size in sizes.items():
            if rid in self.c.where:
                self.c.resize(rid, size)
        return before, set(before)

    def _finish(self, res: EpochResult, before: dict[int, int]) -> EpochResult:
        res.released = [p for p in self.c.release_empty() if p in before]
        res.activated = sorted(p for p, pod in self.c.pods.items() if before.get(p) != pod.seq)
        return res


class FitScheduler(_Base):
    """BF (best fit) or WF (worst fit) on arrival; no migration."""

    def __init__(self, cap: int, *, worst: bool, pods_per_node: int = 8) -> None:
        super().__init__(cap, pods_per_node=pods_per_node)
        self.worst = worst
        self.name = "WF" if worst else "BF"

    def _pick(self, size: int, avoid: int | None) -> int | None:
        fits = [p for p in self.c.pods.values() if p.pid != avoid and self.c.free(p.pid) >= size]
        if not fits:
            return None
        if self.worst:
            return max(fits, key=lambda p: (self.c.free(p.pid), -p.pid)).pid
        return min(fits, key=lambda p: (self.c.free(p.pid), p.pid)).pid

    def epoch(
        self, arrivals: Mapping[int, int], departures: Iterable[int], sizes: Mapping[int, int]
    ) -> EpochResult:
        before, _ = self._common(departures, sizes)
        res = EpochResult()
        for pid in self.c.overloaded():
            for rid, size in self._preempt(pid):
                res.preempted.append(rid)
                self._place(rid, size, avoid=pid)
        for rid, size in arrivals.items():
            res.placed[rid] = self._place(rid, size)
        return self._finish(res, before)


class LoadBalancer(_Base):
    """LB: Llumnix's freeness-based dispatch and migration pairing (see the module docstring)."""

    name = "LB"

    def __init__(
        self,
        cap: int,
        *,
        pods_per_node: int = 8,
        block_size: int = 16,
        watermark: float = 0.01,
        threshold: float = -3.0,
        rounds_per_epoch: int = 2,
    ) -> None:
        super().__init__(cap, pods_per_node=pods_per_node)
        self.bs = block_size
        self.watermark_blocks = int(watermark * (cap // block_size))
        self.threshold = threshold
        self.rounds = rounds_per_epoch
        self._waiting: dict[int, int] = {}
        """pod → blocks of the request queued at its head (this epoch)."""

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def freeness(self, pid: int, extra_running: int = 0, freed: int = 0) -> float:
        pod = self.c.pods[pid]
        running = len(pod.reqs) + extra_running
        waiting = self._waiting.get(pid, 0)
        if running == 0 and not waiting:
            return math.inf
        free = self._blocks(self.c.cap) - self._blocks(pod.used - freed)
        return (free - self.watermark_blocks - waiting) / max(1, running + (waiting > 0))

    def _pick(self, size: int, avoid: int | None) -> int | None:
        fits = [p for p in self.c.pods.values() if p.pid != avoid and self.c.free(p.pid) >= size]
        if not fits:
            return None
        return max(fits, key=lambda p: (self.freeness(p.pid), -p.pid)).pid

    def _round(self, res: EpochResult) -> None:
        """One Llumnix migration tick: pair sources and destinations, one request per pair."""
        f = {pid: self.freeness(pid) for pid in self.c.pods}
        srcs = sorted(
            (p for p in self.c.pods if f[p] <= self.threshold or self.c.pods[p].used > self.c.cap),
            key=lambda p: (f[p], p),
        )
        dsts = sorted(
            (p for p in self.c.pods if p not in srcs and f[p] > self.threshold),
            key=lambda p: (-f[p], p),
        )
        for src, dst in zip(srcs, dsts, strict=False):
            pod = self.c.pods[src]
            if not pod.reqs:
                continue
            rid = min(pod.reqs, key=lambda r: (pod.reqs[r], r))
            size = pod.reqs[rid]
            if self.c.free(dst) < size:
                continue
            src_after = self.freeness(src, -1, size)
            dst_after = self.freeness(dst, 1, -size)
            gap, gap_after = f[dst] - f[src], dst_after - src_after
            if dst_after <= self.threshold or gap_after < 0 or gap_after >= gap:
                continue
            self.c.relocate(rid, dst)
            res.moves.append(Move(rid, src, dst, size, len(res.moves) + 1))

    def epoch(
        self, arrivals: Mapping[int, int], departures: Iterable[int], sizes: Mapping[int, int]
    ) -> EpochResult:
        before, _ = self._common(departures, sizes)
        res = EpochResult()
        for _ in range(self.rounds):
            if not self.c.overloaded():
                break
            self._round(res)
        for pid in self.c.overloaded():
            for rid, size in self._preempt(pid):
                res.preempted.append(rid)
                self._place(rid, size, avoid=pid)
        for rid, size in arrivals.items():
            pick = self._pick(size, None)
            if pick is None and self.c.pods:
                head = max(self.c.pods, key=lambda p: (self.freeness(p), -p))
                self._waiting = {head: self._blocks(size)}
                for _ in range(self.rounds):
                    self._round(res)
                self._waiting = {}
                if self.c.free(head) >= size:
                    pick = head
            pid = self.c.activate().pid if pick is None else pick
            self.c.put(rid, size, pid)
            self._tick += 1
            self._admitted[rid] = self._tick
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
