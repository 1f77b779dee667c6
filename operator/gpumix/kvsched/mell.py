"""MELL's online KV-cache scheduler (Liu et al., §VI): Fig. 10's Allocate / Depart /
Update, Algorithm 1's per-epoch loop and §VI-C's request-operation batching.

There is no public implementation; this one is meant to be the reference, so every rule cites the
paper. Where the paper is silent or loose, the choice is written down here and in the code:

- **Categories** (§VI-C): L (C/2, C], M (C/3, C/2], S (C/4, C/3], T (C/8, C/4]; smaller requests
  are grouped into *multi-items* of size (C/8, C/4] per pod (`_t_items`): each T-request and each
  multi-item is one *item*, moved as a unit (its members migrate together; Theorem 3 counts
  items). A pod's label is the largest category it processes (a pod of multi-items is a T-pod).
  Classes are the scheduler's view: a request's class changes only when `Update` processes it.
- **Fit** is never violated by a decision: a pod takes an item only if its KV stays ≤ C. Where
  Fig. 10 says "allocate to the most recently activated X-GPU" and that pod cannot take the item,
  a pod is activated. Fig. 10 allocates S/M-requests to an L-GPU j when S_L + S_i < C, evicting
  j's T-requests; we evict only as many T-items as needed (largest first) and use ≤ C.
- **S- and M-GPUs stay separate** (Theorem 1 properties 1–2: an M-GPU processes two M-requests, an
  S-GPU three S-requests); "the most recently activated S/M-GPU" is the one of the request's class.
- **Priority** (§VI-C): fewer requests, more free KV, and (relative to a pod j) the same node rank
  a pod higher, with weights set by the operator (`PriorityWeights`); ties go to the lower pod id.
- **Overload** (Update cases 2–3): an L-GPU overloaded by growth re-allocates all its other
  requests (Fig. 10); a non-L pod overloaded by growth inside a class (which Fig. 10 does not list)
  evicts its smallest items until it fits.
- An activation reuses a pod that an earlier operation of the same epoch left empty (it is still
  active until Algorithm 1's last step terminates it).

**Where Fig. 10 and §VII disagree we follow §VII** (Theorem 1's properties are what Theorem 2's
4/3 bound rests on; Fig. 10 read literally breaks property 3 on chat-like traffic, where T-GPUs
averaged 59% full):

- T-GPUs stay ≥ 3/4 (property 3): a departure refills its pod with T-items from newer T-GPUs
  *until* ≥ 3/4, not with one T-request (`_fill_t`); Allocate T tries a non-latest T-GPU under
  3/4 before the latest one (`_alloc_t`).
- L/M-GPUs stay ≥ 3/4 while T-GPUs exist (property 5): a new L-GPU, a pod that just became a full
  M-GPU, and an L/M-GPU that lost a T-request take T-items until ≥ 3/4 — also on the latest pod
  (Depart 1's 'just remove i' is kept only for an L-request: the other repairs take from newer
  pods, a no-op there, or are ones Theorem 1 needs on every pod).
- S/M-GPUs keep three S / two M (properties 1–2): the refill repeats until the pod is whole and
  takes only from pods activated after it (from an older one it would leave that one short);
  a pod left with T-items only gives them up (`_settle`).
- An L-GPU without S/M-request pulls one (property 4) after Update 2–3 too, not only on Depart.
- After the epoch's operations a repair pass (`_repair`) re-runs these refills oldest pod first
  with every class up to date: Algorithm 1 handles one request at a time while the epoch's sizes
  are all known, so an operation can act on a class a later Update of the epoch changes.

`tests/unit/kvsched/test_properties.py` checks after every epoch that only the newest pod of a
label breaks a property, on random and on chat-like traffic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpumix.kvsched.state import (
    Cluster,
    EpochResult,
    Move,
    Pod,
    RequestClass,
    classify,
    sm_like,
    t_like,
)

L, M, S, T, TINY = (RequestClass.L, RequestClass.M, RequestClass.S, RequestClass.T,
                    RequestClass.TINY)  # fmt: skip


@dataclass(frozen=True)
class PriorityWeights:
    """§VI-C: 'a GPU j' that handles fewer requests, has more GPU memory, or is on the same machine
    as GPU j will be assigned a higher priority for GPU j. The weights … are set by the LLM service
    provider.' Score = −requests·n + free·(free KV / C) + same_node·[same node]."""

    requests: float = 1.0
    free: float = 1.0
    same_node: float = 0.5


class Mell:
    """The scheduler's state and operations. Drive it with `epoch()` (Algorithm 1); the single
    operations are public for tests and for callers that apply one event at a time."""

    name = "MELL"

    def __init__(
        self,
        cap: int,
        *,
        pods_per_node: int = 8,
        weights: PriorityWeights | None = None,
        batching: bool = True,
    ) -> None:
        self.c = Cluster(cap, pods_per_node)
        self.w = weights or PriorityWeights()
        self.batching = batching
        self.cls: dict[int, RequestClass] = {}
        """Each placed (or pending) request's class as the scheduler last saw it."""
        self._pending: dict[int, int] = {}
        """Requests between a Depart and their re-allocation (or new): rid → size."""
        self._origin: dict[int, int] = {}
        self._log: list[Move] = []
        self._unit = 0
        self.op_units: list[tuple[str, int, int]] = []
        """(operation, request, items migrated) for every operation run (Theorem 3's count)."""

    @property
    def name_full(self) -> str:
        return "MELL" if self.batching else "MELL (no batching)"

    # ---------------------------------------------------------------- views
    @property
    def cap(self) -> int:
        return self.c.cap

    def klass(self, size: int) -> RequestClass:
        return classify(size, self.c.cap)

    def label(self, pid: int) -> RequestClass | None:
        """§VI-C: a GPU is an L/M/S/T-GPU by the largest category it processes (None if empty)."""
        pod = self.c.pods[pid]
        if not pod.reqs:
            return None
        top = max(self.cls[r] for r in pod.reqs)
        return T if top == TINY else top

    def big(self, pid: int) -> int:
        """KV of the pod's requests that are not T-like (what an S/M placement cannot evict)."""
        return sum(s for r, s in self.c.pods[pid].reqs.items() if not t_like(self.cls[r]))

    def has_sm(self, pid: int) -> bool:
        return any(sm_like(self.cls[r]) for r in self.c.pods[pid].reqs)

    def priority(self, pid: int, ref: int | None = None) -> tuple[float, int]:
        pod = self.c.pods[pid]
        score = -self.w.requests * len(pod.reqs) + self.w.free * (self.c.free(pid) / self.c.cap)
        if ref is not None and self.c.pods[ref].node == pod.node:
            score += self.w.same_node
        return score, -pid

    def _latest(self, labels: Iterable[RequestClass], avoid: Iterable[int] = ()) -> Pod | None:
        """The most recently activated pod whose label is in `labels` (not in `avoid`)."""
        want, skip = set(labels), set(avoid)
        best: Pod | None = None
        for p in self.c.pods.values():
            eligible = p.pid not in skip and p.reqs and self.label(p.pid) in want
            if eligible and (best is None or p.seq > best.seq):
                best = p
        return best

    def _t_items(self, pid: int) -> list[list[int]]:
        """The pod's T-items: each T-request alone, and its TINY requests grouped (by id) into
        multi-items of size (C/8, C/4] — the last group may be smaller (§VI-C)."""
        pod = self.c.pods[pid]
        # Membership by current size: a TINY request that grew past C/8 (T-like → T-like is no
        # Update) is an item of its own, so a multi-item stays within (C/8, C/4].
        tiny = {r for r in pod.reqs if t_like(self.cls[r]) and 8 * pod.reqs[r] <= self.c.cap}
        items = [[r] for r in sorted(pod.reqs) if t_like(self.cls[r]) and r not in tiny]
        group: list[int] = []
        total = 0
        for r in sorted(pod.reqs):
            if r not in tiny:
                continue
            group.append(r)
            total += pod.reqs[r]
            if 8 * total > self.c.cap:
                items.append(group)
                group, total = [], 0
        if group:
            items.append(group)
        return items

    def _size(self, rids: Iterable[int]) -> int:
        return sum(self.c.size[r] if r in self.c.where else self._pending[r] for r in rids)

    # ---------------------------------------------------------------- primitive moves
    def _fresh(self, avoid: Iterable[int] = ()) -> int:
        """Activate a pod (Fig. 10: 'Activate a new GPU j, J = J ∪ {j}'); an empty pod left by an
        earlier operation of this epoch is reactivated instead of adding one."""
        skip = set(avoid)
        for p in sorted(self.c.pods.values(), key=lambda p: p.pid):
            if not p.reqs and p.pid not in skip:
                self.c._seq += 1
                p.seq = self.c._seq
                return p.pid
        return self.c.activate().pid

    def _assign(self, rids: list[int], pid: int) -> None:
        """Place an item (one unit) on `pid`: new requests are put, placed ones migrate."""
        self._unit += 1
        for rid in rids:
            if rid in self.c.where:
                src = self.c.relocate(rid, pid)
            else:
                self.c.put(rid, self._pending.pop(rid), pid)
                src = self._origin.pop(rid, pid)
            if src != pid:
                self._log.append(Move(rid, src, pid, self.c.size[rid], self._unit))

    def _lift(self, rids: Iterable[int]) -> int:
        """Take requests off their pod into the pending set (a Depart before a re-allocation)."""
        src = -1
        for rid in rids:
            size = self.c.size[rid]
            src = self.c.take(rid)
            self._origin.setdefault(rid, src)
            self._pending[rid] = size
        return src

    def _make_room(self, pid: int, need: int) -> list[list[int]]:
        """Evict T-items from `pid`, largest first, until `need` tokens are free (Fig. 10
        Allocate S/M: 'Depart and re-allocate any T-request that exists in j')."""
        out: list[list[int]] = []
        items = sorted(self._t_items(pid), key=self._size, reverse=True)
        while self.c.free(pid) < need and items:
            item = items.pop(0)
            self._lift(item)
            out.append(item)
        return out

    # ---------------------------------------------------------------- Fig. 10: Allocate
    def _alloc_t(self, item: list[int], avoid: Iterable[int] = ()) -> None:
        """Fig. 10 Allocate 1: an L-GPU (or full M-GPU, `_takes_t`) with room, highest priority;
        else a T-GPU below 3/4 that is not the latest (the oldest first: §VII property 3,
        see `_fill_t`); else the most recently activated T-GPU; else a new one (the latest T-GPU
        then cannot take an item ≤ C/4, so it is > 3/4 full)."""
        skip = set(avoid)
        size = self._size(item)
        cands = [
            p.pid
            for p in self.c.pods.values()
            if p.pid not in skip and self._takes_t(p.pid) and self.c.free(p.pid) >= size
        ]
        if cands:
            self._assign(item, max(cands, key=self.priority))
            return
        t = self._latest([T], skip)
        under = [
            p
            for p in self.c.pods.values()
            if p.pid not in skip
            and p.reqs
            and (t is None or p.pid != t.pid)
            and self.label(p.pid) == T
            and self._short(p.pid)
            and self.c.free(p.pid) >= size
        ]
        if under:
            self._assign(item, min(under, key=lambda p: p.seq).pid)
        elif t is not None and self.c.free(t.pid) >= size:
            self._assign(item, t.pid)
        else:
            self._assign(item, self._fresh(skip))

    def _short(self, pid: int) -> bool:
        """Under 3/4 full (Theorem 1 properties 3 and 5)."""
        return 4 * self.c.pods[pid].used < 3 * self.c.cap

    def _fill_t(self, j: int) -> None:
        """Refill pod j with T-items until it is ≥ 3/4 full (§VII, Theorem 1 properties 3 and 5),
        taking them from the T-GPUs activated after j, the most recent first; stops when no
        such T-GPU has an item that fits.

        Fig. 10's Depart 2 moves *one* T-request 'from the most recently activated T/M-GPU';
        read literally that does not keep property 3: a departed T-item of size s is replaced
        by one of any size in (C/8, C/4], so a T-GPU drifts below 3/4 and stays there. §VII's
        proof (Theorem 2, case 1: 'all the GPUs are at least 3/4 full except a constant number
        of latest GPUs') needs the property, so we follow §VII: j takes items until it is ≥ 3/4
        (at most two items > C/8 when j was ≥ 3/4 before losing one ≤ C/4 — Theorem 3's two
        migrations for a T departure). Sources are T-GPUs only, not M-GPUs: an M-GPU giving up
        its T-item could fall under property 5's 3/4. For a T-GPU j the sources are the T-GPUs
        newer than j, so items flow towards the oldest pods and a newer pod is the one left
        short; an L/M-GPU j takes from any T-GPU (property 5: no L/M-GPU under 3/4 while T-GPUs
        exist), the most recent first."""
        pod = self.c.pods.get(j)
        if pod is None or not pod.reqs:
            return
        t_pod = self.label(j) == T
        while self._short(j):
            srcs = sorted(
                (
                    p
                    for p in self.c.pods.values()
                    if p.pid != j
                    and p.reqs
                    and (p.seq > pod.seq or not t_pod)
                    and self.label(p.pid) == T
                ),
                key=lambda p: -p.seq,
            )
            for src in srcs:
                fit = [it for it in self._t_items(src.pid) if self._size(it) <= self.c.free(j)]
                if fit:
                    self._assign(max(fit, key=lambda it: (self._size(it), -min(it))), j)
                    break
            else:
                return

    def _takes_t(self, pid: int) -> bool:
        """An L-GPU, or an M-GPU with its two M-requests (Theorem 1 property 1: 'possibly one
        T-request'; Fig. 10 Depart 2 takes T-requests from 'T/M-GPUs', so M-GPUs hold them)."""
        lab = self.label(pid)
        if lab == L:
            return True
        return lab == M and sum(self.cls[r] == M for r in self.c.pods[pid].reqs) == 2

    def _top_up(self, j: int) -> None:
        """Fill a new L-GPU with T-items from the most recently activated T-GPUs until it is
        ≥ 3/4 full (our addition to Fig. 10 Allocate 3, which only pulls an S/M-request: without
        it T-GPUs outlive L-GPUs with room, against Theorem 1 property 5). j is the newest pod,
        so every T-GPU is a source (`_fill_t` takes only from pods newer than j)."""
        while self._short(j):
            src = self._latest([T], avoid=[j])
            if src is None:
                return
            fit = [it for it in self._t_items(src.pid) if self._size(it) <= self.c.free(j)]
            if not fit:
                return
            self._assign(max(fit, key=lambda it: (self._size(it), -min(it))), j)

    def _place_evicting(self, rid: int, pid: int, avoid: set[int]) -> None:
        """Place an S/M-request on `pid`, departing and re-allocating T-items to make room (Fig. 10
        Allocate 2). A pod that becomes a full M-GPU (two M-requests, > 2/3 full) then takes
        T-items until ≥ 3/4 (§VII property 5, which Fig. 10 does not act on)."""
        evicted = self._make_room(pid, self._pending[rid])
        self._assign([rid], pid)
        for item in evicted:
            self._alloc_t(item, avoid | {pid})
        if not evicted and self.label(pid) == M and self._takes_t(pid):
            self._fill_t(pid)

    def _allocate(self, rid: int, avoid: Iterable[int] = ()) -> None:
        """Fig. 10 J.Allocate(i) for a pending request."""
        skip = set(avoid)
        c, size = self.cls[rid], self._pending[rid]
        if t_like(c):
            self._alloc_t([rid], skip)
            return
        if sm_like(c):
            # 2: an L-GPU j with S_iL + S_i ≤ C (and no S/M-request yet: property 4 needs one),
            # highest priority; T-requests in j are departed and re-allocated.
            cands = [
                p.pid
                for p in self.c.pods.values()
                if p.pid not in skip
                and p.reqs
                and self.label(p.pid) == L
                and not self.has_sm(p.pid)
                and self.big(p.pid) + size <= self.c.cap
            ]
            if cands:
                self._place_evicting(rid, max(cands, key=self.priority), skip)
                return
            # … otherwise the most recently activated GPU of its class (properties 1–2).
            k = self._latest([c], skip)
            if k is not None and self.big(k.pid) + size <= self.c.cap:
                self._place_evicting(rid, k.pid, skip)
            else:
                self._assign([rid], self._fresh(skip))
            return
        # 3: an L-request activates a new GPU j …
        j = self._fresh(skip)
        self._assign([rid], j)
        # … and takes an S/M-request from the S/M-GPU j' with the highest priority for j …
        pulls: list[tuple[tuple[float, int], int, int]] = []
        for p in self.c.pods.values():
            if p.pid == j or p.pid in skip or self.label(p.pid) not in (S, M):
                continue
            for r, s in p.reqs.items():
                if sm_like(self.cls[r]) and s <= self.c.free(j):
                    pulls.append((self.priority(p.pid, ref=j), s, -r))
        if pulls:
            r = -max(pulls)[2]
            jp = self.c.where[r]
            jp_label = self.label(jp)
            self._assign([r], j)
            # … then fulfils j' with an S/M-request from the most recently activated S/M-GPU.
            if jp_label is not None:
                self._refill(jp, jp_label, self.cls[r], avoid={j, *skip})
            self._settle(jp, {j, *skip})
        self._top_up(j)

    def _refill(self, pid: int, pod_label: RequestClass, c: RequestClass, avoid: set[int]) -> None:
        """Move one request of class `c` from the most recently activated `pod_label`-GPU (not
        `pid`) into `pid` if it fits (the 'fulfil j'' steps of Fig. 10). Only from a pod
        activated after `pid`: when `pid` is itself the latest of its label, filling it from an
        older pod would leave that one short (Theorem 1 properties 1–2 exempt only the latest)."""
        # One request per Fig. 10; we repeat while `pid` is short of its two M- or three
        # S-requests (properties 1–2) — it can be short by more than one when an earlier
        # operation of the same epoch took a request from it.
        want = 2 if c == M else 3
        pod = self.c.pods[pid]
        # When the latest such pod has nothing that fits (sizes near a class boundary), the next
        # most recent one is tried.
        while pod.reqs and sum(self.cls[r] == c for r in pod.reqs) < want:
            srcs = sorted(
                (
                    q
                    for q in self.c.pods.values()
                    if q.pid != pid and q.pid not in avoid and q.reqs and q.seq > pod.seq
                    and self.label(q.pid) == pod_label
                ),
                key=lambda q: -q.seq,
            )  # fmt: skip
            found = None
            for src in srcs:
                fit = [
                    r
                    for r, s in src.reqs.items()
                    if self.cls[r] == c and self.big(pid) + s <= self.c.cap
                ]
                if fit:
                    found = src, max(fit, key=lambda r: (src.reqs[r], -r))
                    break
            if found is None:
                return
            src, r = found
            self._lift([r])
            self._place_evicting(r, pid, avoid)
            self._settle(src.pid, avoid | {pid})

    def _settle(self, pid: int, avoid: set[int]) -> None:
        """A pod left with T-items only after giving up its S/M-request is not a T-GPU that
        Allocate filled: its T-items are re-allocated (Fig. 10 Depart 3: 'Re-allocate any
        T-request that may exist in j'), so a short T-GPU does not appear beside the latest."""
        pod = self.c.pods.get(pid)
        if pod is not None and pod.reqs and all(t_like(self.cls[r]) for r in pod.reqs):
            items = sorted(self._t_items(pid), key=self._size, reverse=True)
            self._lift([r for it in items for r in it])
            for it in items:
                self._alloc_t(it, avoid | {pid})

    # ---------------------------------------------------------------- Fig. 10: Depart
    def _depart(self, rid: int, *, completed: bool) -> None:
        """Fig. 10 J.Depart(i): remove i from its pod j and repair j. With `completed` false the
        request stays pending for a re-allocation (Update's 'depart i and re-allocate i')."""
        j = self.c.where[rid]
        c0, lab = self.cls[rid], self.label(j)
        latest = self.c.latest()
        if completed:
            self.c.take(rid)
            self.cls.pop(rid)
        else:
            self._lift([rid])
        # 1: j is the most recently activated GPU: just remove i. We keep this shortcut for an
        # L-request only: every other repair below takes from pods newer than j (a no-op on
        # the latest pod) or is one that Theorem 1 needs on any pod — an L/M-GPU refilled with
        # T-items (property 5) and an L-GPU given an S/M-request (property 4); skipped on the
        # latest pod, such a pod stays short once a newer one of its label is activated.
        if c0 == L and latest is not None and latest.pid == j:
            return
        if t_like(c0):
            # 2: j takes T-requests from the most recently activated T-GPUs — until it is
            # ≥ 3/4 full, as §VII's properties 3 and 5 need (see `_fill_t` for where this
            # departs from Fig. 10's single T-request).
            self._fill_t(j)
            return
        if sm_like(c0):
            if lab in (S, M):
                # 3: an S/M-GPU takes an S/M-request from the latest S/M-GPU of its class …
                self._refill(j, lab, lab, avoid=set())
                # … and re-allocates its T-requests if it no longer holds an S/M-request.
                if self.c.pods[j].reqs and not any(
                    not t_like(self.cls[r]) for r in self.c.pods[j].reqs
                ):
                    self._realloc_all(j)
                return
            if lab == L:
                self._pull_sm(j)
            return
        # 4: an L-request departs: depart and re-allocate all other requests in j.
        self._realloc_all(j)

    def _pull_sm(self, j: int) -> None:
        """Fig. 10 Depart 3 for an L-GPU j: j takes the S/M-request of the S/M-GPU j' with the
        highest priority for j, then j' is refilled from the latest S/M-GPU. Also run after an
        L-GPU loses its S/M-request to growth (Update 2–3), which Fig. 10 leaves out and
        property 4 needs ('an L-GPU processes no S/M-request only if none fits')."""
        if self.has_sm(j):
            return
        found: list[tuple[tuple[float, int], int, int]] = []
        for p in self.c.pods.values():
            if p.pid == j or self.label(p.pid) not in (S, M):
                continue
            for r, s in p.reqs.items():
                if sm_like(self.cls[r]) and self.big(j) + s <= self.c.cap:
                    found.append((self.priority(p.pid, ref=j), s, -r))
        if found:
            r = -max(found)[2]
            jp = self.c.where[r]
            jp_label = self.label(jp)
            self._lift([r])
            self._place_evicting(r, j, set())
            if jp_label is not None:
                self._refill(jp, jp_label, self.cls[r], avoid={j})
            self._settle(jp, {j})

    def _realloc_all(self, j: int) -> None:
        """Depart every request on j and re-allocate it elsewhere (largest first; multi-items
        stay together)."""
        pod = self.c.pods[j]
        singles = sorted(
            (r for r in pod.reqs if not t_like(self.cls[r])), key=lambda r: (-pod.reqs[r], r)
        )
        items = sorted(self._t_items(j), key=self._size, reverse=True)
        self._lift([*singles, *(r for it in items for r in it)])
        for r in singles:
            self._allocate(r, avoid={j})
        for it in items:
            self._alloc_t(it, avoid={j})

    # ---------------------------------------------------------------- Fig. 10: Update
    def _update(self, rid: int) -> None:
        """Fig. 10 J.Update(i) after i's KV grew (its new size is already recorded)."""
        j = self.c.where[rid]
        c0, c1 = self.cls[rid], self.klass(self.c.size[rid])
        if c1 > c0 and not (t_like(c0) and t_like(c1)):
            if sm_like(c1) or (c1 == L and c0 != M):
                # 1: T/S → S/M (and a jump straight to L): depart i and re-allocate i.
                self._depart(rid, completed=False)
                self.cls[rid] = c1
                self._allocate(rid)
                return
            # 2: M → L. On an L-GPU: depart and re-allocate i; on an M-GPU i becomes its L.
            if self.label(j) == L:
                self._depart(rid, completed=False)
                self.cls[rid] = c1
                self._allocate(rid)
                return
        self.cls[rid] = max(c0, c1)
        self._relieve(j, keep=rid)
        if self.c.pods[j].reqs and self.label(j) == L:
            # j is an L-GPU that may have lost its other requests to growth, or just became one
            # (M → L): give it an S/M-request and T-items as a departure would (§VII
            # properties 4 and 5; Fig. 10 stops after the re-allocation).
            self._pull_sm(j)
            self._fill_t(j)

    def _relieve(self, j: int, keep: int | None = None) -> bool:
        """Fig. 10 Update 2–3: 'if overload occurs after growth, depart and re-allocate all other
        requests in j' (for an L-GPU: all but `keep`, the request that grew, else its largest).
        A non-L pod evicts its smallest items until it fits. Whether j was overloaded."""
        pod = self.c.pods[j]
        if pod.used <= self.c.cap:
            return False
        if self.label(j) == L:
            top = keep
            if top is None or top not in pod.reqs or self.cls[top] != L:
                top = max(pod.reqs, key=lambda r: (pod.reqs[r], -r))
            singles = sorted(
                (r for r in pod.reqs if r != top and not t_like(self.cls[r])),
                key=lambda r: (-pod.reqs[r], r),
            )
            items = self._t_items(j)
            self._lift([*singles, *(r for it in items for r in it)])
            for r in singles:
                self._allocate(r, avoid={j})
            for it in items:
                self._alloc_t(it, avoid={j})
            return True
        # Members that outgrew their class are updated first (they depart and are re-allocated
        # anyway, Update 1); evicting an S- or M-request that kept its class would leave this
        # S/M-GPU short of properties 1–2.
        for r in sorted(pod.reqs, key=lambda r: (-pod.reqs[r], r)):
            if pod.used <= self.c.cap:
                return True
            if r in pod.reqs and self._outgrew(r):
                self._update(r)
        if pod.used <= self.c.cap:
            return True
        items = sorted(self._t_items(j), key=self._size)
        items += [[r] for r in sorted(pod.reqs, key=lambda r: (pod.reqs[r], r))
                  if not t_like(self.cls[r])]  # fmt: skip
        for it in items:
            if pod.used <= self.c.cap:
                break
            self._lift(it)
            if len(it) == 1 and not t_like(self.cls[it[0]]):
                self._allocate(it[0], avoid={j})
            else:
                self._alloc_t(it, avoid={j})
        return True

    # ---------------------------------------------------------------- operations (counted)
    def _op(self, kind: str, rid: int) -> None:
        before = len(self._log)
        if kind == "allocate":
            self._allocate(rid)
        elif kind == "depart":
            self._depart(rid, completed=True)
        else:
            self._update(rid)
        self.op_units.append((kind, rid, len({m.unit for m in self._log[before:]})))

    def allocate(self, rid: int, size: int) -> None:
        """Fig. 10 J.Allocate(i) for a new request (one operation, migrations logged)."""
        if rid in self.cls:
            raise ValueError(f"request {rid} is already known")
        self._pending[rid] = size
        self.cls[rid] = self.klass(size)
        self._op("allocate", rid)

    def depart(self, rid: int) -> None:
        self._op("depart", rid)

    def grow(self, rid: int, size: int) -> None:
        """Record i's new KV size; run Update if its class changed or its pod overflowed."""
        if size < self.c.size[rid]:
            raise ValueError(f"request {rid}: KV size only grows (§VI-A)")
        self.c.resize(rid, size)
        if self._needs_update(rid):
            self._op("update", rid)

    def _outgrew(self, rid: int) -> bool:
        """Its KV crossed into a larger category (T-like → T-like is no change, §VI-C)."""
        c0, c1 = self.cls[rid], self.klass(self.c.size[rid])
        return c1 > c0 and not (t_like(c0) and t_like(c1))

    def _needs_update(self, rid: int) -> bool:
        return self._outgrew(rid) or self.c.pods[self.c.where[rid]].used > self.c.cap

    def _repair(self) -> None:
        """Restore Theorem 1 on every pod but the latest of each label, oldest pod first, once
        the epoch's operations are done (counted as one operation per pod repaired).

        Algorithm 1 runs the operations one request at a time while every size of the epoch is
        already known, so an operation can act on a class that a later Update of the same
        epoch changes (two S-requests that are M by now do not fit beside a third; an M-GPU
        refilled with a request that is L by now). §VII claims the properties after every
        operation; this pass re-runs the Depart repairs of Fig. 10 with the classes up to date:
        S/M-GPUs are refilled from newer S/M-GPUs, L-GPUs take an S/M-request, and T-, L- and
        M-GPUs take T-items until ≥ 3/4 (`_fill_t`). Sources are newer pods, so a pod that gives
        is repaired in its turn and what stays short is the newest pod of a label."""
        for pod in sorted(self.c.pods.values(), key=lambda p: p.seq):
            if not pod.reqs or pod.pid not in self.c.pods:
                continue
            before = len(self._log)
            lab = self.label(pod.pid)
            if lab in (S, M):
                self._refill(pod.pid, lab, lab, avoid=set())
                self._settle(pod.pid, set())
            elif lab == L:
                self._pull_sm(pod.pid)
            if pod.reqs and self.label(pod.pid) in (T, L, M):
                self._fill_t(pod.pid)
            if len(self._log) > before:
                units = len({m.unit for m in self._log[before:]})
                self.op_units.append(("repair", pod.pid, units))
        assert not self._pending, f"requests left unplaced: {sorted(self._pending)}"

    # ---------------------------------------------------------------- Algorithm 1 + §VI-C
    def epoch(
        self,
        arrivals: Mapping[int, int],
        departures: Iterable[int],
        sizes: Mapping[int, int],
    ) -> EpochResult:
        """One epoch of Algorithm 1: `arrivals` (rid → KV size) are allocated, `departures`
        (completed requests) depart, `sizes` (rid → current KV size of running requests) drive
        Update; then pods processing no request are terminated.

        With batching (§VI-C), operations run as (1) all Depart, (2) all Update, (3) all Allocate,
        with the migrations they cause buffered; (4) the buffer is executed with redundant moves
        removed — a request moved several times migrates once, from its pod at the start of the
        epoch to its final pod, and one that returns home does not migrate. Without batching,
        Algorithm 1 visits the requests in id order and every migration is executed as issued.
        """
        start = dict(self.c.where)
        pods_before = {pid: p.seq for pid, p in self.c.pods.items()}
        self._log = []
        gone = set(departures)
        for rid, size in sizes.items():
            if rid not in gone and size != self.c.size[rid]:
                if size < self.c.size[rid]:
                    raise ValueError(f"request {rid}: KV size only grows (§VI-A)")
                self.c.resize(rid, size)
        for rid, size in arrivals.items():
            self._pending[rid] = size
            self.cls[rid] = self.klass(size)
        if self.batching:
            for rid in sorted(gone):
                self._op("depart", rid)
            for rid in sorted(sizes):
                if rid not in gone and rid in self.c.where and self._needs_update(rid):
                    self._op("update", rid)
            for rid in arrivals:
                self._op("allocate", rid)
        else:
            for rid in sorted({*gone, *sizes, *arrivals}):
                if rid in gone:
                    self._op("depart", rid)
                elif rid in arrivals:
                    self._op("allocate", rid)
                elif rid in self.c.where and self._needs_update(rid):
                    self._op("update", rid)
        assert not self._pending, f"requests left unplaced: {sorted(self._pending)}"
        self._repair()
        if self.batching:
            last: dict[int, Move] = {m.rid: m for m in self._log}
            moves = [
                Move(rid, start[rid], self.c.where[rid], self.c.size[rid], m.unit)
                for rid, m in last.items()
                if rid in start and rid in self.c.where and start[rid] != self.c.where[rid]
            ]
            moves.sort(key=lambda m: m.unit)
        else:
            moves = list(self._log)
        released = self.c.release_empty()
        return EpochResult(
            placed={rid: self.c.where[rid] for rid in arrivals},
            moves=moves,
            activated=sorted(
                pid for pid, p in self.c.pods.items() if pods_before.get(pid) != p.seq
            ),
            released=[pid for pid in released if pid in pods_before],
        )
