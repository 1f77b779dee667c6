"""Property tests over random arrival / departure / growth sequences (hypothesis, bounded):

- no pod's KV ever exceeds C, every running request is placed exactly once;
- Theorem 1's properties hold after each operation except on the latest pod of each label (3),
  on arbitrary sizes and on chat-like traffic (short prompts that grow long while decoding:
  most requests are T or smaller on arrival and cross T → S → M → L as they grow, the traffic
  on which Fig. 10 read literally left T-GPUs under 3/4);
- no single operation migrates more than 10 items (Theorem 3);
- on small instances the pods stay within 4/3 of the offline optimum plus a constant (Theorem 2;
  the optimum of the bin packing at that moment, from an ILP on HiGHS).
"""

from __future__ import annotations

import pulp
from hypothesis import given
from hypothesis import strategies as st

from gpumix.kvsched import Mell, make_baseline
from gpumix.kvsched.theorem import violations
from proptest import budget

C = 120
EXCEPTIONS = 3
"""Theorem 1's 'constant number of exceptions' after each operation: the latest pod of each
label still being filled — an M-pod with one M-request, an S-pod with fewer than three
S-requests, a T-pod under 75% (the "latest GPUs" of Theorem 2's proof, case 1)."""
CONSTANT = 2

Epoch = tuple[list[int], list[bool], list[int]]
epochs = st.lists(
    st.tuples(
        st.lists(st.integers(1, C), max_size=4),  # arrivals' sizes
        st.lists(st.booleans(), max_size=12),  # which running requests complete
        st.lists(st.sampled_from([0, 0, 1, 5, 15, 40]), max_size=12),  # growth per request
    ),
    min_size=1,
    max_size=25,
)


def drive(m: Mell | object, plan: list[Epoch], check: object = None) -> None:
    """Run the epochs; `check(m)` after each."""
    alive: dict[int, int] = {}
    rid = 0
    for arrivals, done, growth in plan:
        arr = {}
        for size in arrivals:
            arr[rid] = size
            rid += 1
        order = sorted(alive)
        gone = [r for r, d in zip(order, done, strict=False) if d]
        sizes = {
            r: min(C, alive[r] + g)
            for r, g in zip(order, [*growth, *([0] * len(order))], strict=False)
            if r not in gone
        }
        m.epoch(arr, gone, sizes)  # type: ignore[attr-defined]
        for r in gone:
            del alive[r]
        alive.update(sizes)
        alive.update(arr)
        c = m.c  # type: ignore[attr-defined]
        # the baselines' preempted requests wait, KV dropped, in their pod's queue
        queued = {r for q in getattr(m, "queue", {}).values() for r in q}
        assert set(c.where) | queued == set(alive) and not set(c.where) & queued
        assert all(p.used <= C for p in c.pods.values()), c.overloaded()
        assert all(p.reqs for p in c.pods.values()), "empty pods are released"
        assert all(c.size[r] == s for r, s in alive.items() if r in c.where)
        if callable(check):
            check(m)


@budget(50)
@given(plan=epochs, batching=st.booleans())
def test_mell_never_overflows_and_bounds_migrations_per_operation(
    plan: list[Epoch], batching: bool
) -> None:
    m = Mell(C, pods_per_node=2, batching=batching)

    def check(m: Mell) -> None:
        assert all(units <= 10 for _, _, units in m.op_units), m.op_units  # Theorem 3
        m.op_units.clear()

    drive(m, plan, check)


one_operation = st.lists(
    st.one_of(
        st.tuples(st.lists(st.integers(1, C), min_size=1, max_size=1), st.just([]), st.just([])),
        st.tuples(st.just([]), st.lists(st.booleans(), max_size=12), st.just([])),
        st.tuples(st.just([]), st.just([]), st.lists(st.sampled_from([0, 1, 5, 15, 40]))),
    ),
    min_size=1,
    max_size=40,
)
"""Epochs of one kind of operation (one arrival, or departures, or growth), as §VI-C batches
them: the granularity Theorem 1 speaks of."""


def only_latest_pods_break_theorem1(m: Mell) -> None:
    """At most EXCEPTIONS pods break a property, and each is the most recently activated pod of
    its label (the theorem's exceptions), never an older one."""
    bad = violations(m)
    pods = {pid for pid, _ in bad}
    assert len(pods) <= EXCEPTIONS, bad
    for pid in pods:
        lab = m.label(pid)
        newest = max(p.seq for q, p in m.c.pods.items() if m.label(q) == lab)
        assert m.c.pods[pid].seq == newest, (pid, lab, bad)


@budget(50)
@given(plan=one_operation)
def test_theorem1_properties_hold_after_each_operation_but_for_the_latest_pods(
    plan: list[Epoch],
) -> None:
    drive(Mell(C, pods_per_node=2), plan, only_latest_pods_break_theorem1)


Chat = list[tuple[int, int, int]]
chat_like = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, C // 10), st.integers(1, C)),
    min_size=20,
    max_size=60,
)
"""Chat-like requests (MELL §VIII-B's LMSYS-Chat-1M / WildChat workload): (epochs since the
previous arrival, prompt ≤ C/10, output up to C). Prompts arrive T or smaller and grow a few
tokens an epoch for many epochs (long answers), so requests cross T → S → M → L while they run
and complete at their own pace — the traffic on which Fig. 10 read literally left T-GPUs under
3/4 and older S/M-GPUs short."""


def drive_chat(m: Mell, reqs: Chat, step: int, check: object) -> None:
    """Arrivals at their epochs, every running request grows by `step` tokens an epoch up to
    prompt + output (≤ C), and completes the epoch after it gets there."""
    arrive: dict[int, list[int]] = {}
    t = 0
    for rid, (gap, _, _) in enumerate(reqs):
        t += gap
        arrive.setdefault(t, []).append(rid)
    final = {rid: min(C, p + o) for rid, (_, p, o) in enumerate(reqs)}
    alive: dict[int, int] = {}
    epoch = 0
    while epoch <= t or alive:
        arr = {rid: reqs[rid][1] for rid in arrive.get(epoch, [])}
        gone = [r for r, s in alive.items() if s >= final[r]]
        sizes = {r: min(final[r], s + step) for r, s in alive.items() if r not in gone}
        m.epoch(arr, gone, sizes)
        for r in gone:
            del alive[r]
        alive.update(sizes)
        alive.update(arr)
        assert set(m.c.where) == set(alive)
        assert all(p.used <= C for p in m.c.pods.values()), m.c.overloaded()
        if callable(check):
            check(m)
        epoch += 1


@budget(40)
@given(reqs=chat_like, step=st.sampled_from([2, 4, 8]), batching=st.booleans())
def test_theorem1_holds_on_chat_like_traffic(reqs: Chat, step: int, batching: bool) -> None:
    m = Mell(C, pods_per_node=2, batching=batching)

    def check(m: Mell) -> None:
        only_latest_pods_break_theorem1(m)
        assert all(units <= 10 for _, _, units in m.op_units), m.op_units  # Theorem 3
        m.op_units.clear()

    drive_chat(m, reqs, step, check)


def optimum(sizes: list[int]) -> int:
    """Fewest pods of capacity C holding `sizes` (bin-packing ILP, HiGHS)."""
    if not sizes:
        return 0
    n = len(sizes)
    prob = pulp.LpProblem("opt", pulp.LpMinimize)
    y = [prob.add_variable(f"y{j}", 0, 1, cat="Binary") for j in range(n)]
    x = [[prob.add_variable(f"x{i}_{j}", 0, 1, cat="Binary") for j in range(n)] for i in range(n)]
    prob += pulp.lpSum(y)
    for i in range(n):
        prob += pulp.lpSum(x[i]) == 1
    for j in range(n):
        prob += pulp.lpSum(sizes[i] * x[i][j] for i in range(n)) <= C * y[j]
        if j:
            prob += y[j] <= y[j - 1]
    prob.solve(pulp.HiGHS(msg=False))
    assert pulp.LpStatus[prob.status] == "Optimal"
    return round(pulp.value(prob.objective))


small_epochs = st.lists(
    st.tuples(
        st.lists(st.integers(1, C), max_size=3),
        st.lists(st.booleans(), max_size=8),
        st.lists(st.sampled_from([0, 3, 20]), max_size=8),
    ),
    min_size=1,
    max_size=6,
)


@budget(50)
@given(plan=small_epochs)
def test_pods_within_four_thirds_of_the_offline_optimum(plan: list[Epoch]) -> None:
    m = Mell(C, pods_per_node=2)

    def check(m: Mell) -> None:
        sizes = list(m.c.size.values())
        if len(sizes) <= 10:
            assert len(m.c.pods) <= 4 / 3 * optimum(sizes) + CONSTANT

    drive(m, plan, check)


@budget(30)
@given(plan=epochs, name=st.sampled_from(["BF", "WF", "LB"]))
def test_baselines_never_overflow(plan: list[Epoch], name: str) -> None:
    drive(make_baseline(name, C, pods_per_node=2), plan)
