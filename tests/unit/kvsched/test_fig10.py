"""One test per case of MELL Fig. 10 (Allocate / Depart / Update) on hand-built states, C = 1200:
L (600, 1200], M (400, 600], S (300, 400], T (150, 300], TINY ≤ 150."""

from __future__ import annotations

import pytest

from gpumix.kvsched import Mell, RequestClass, classify
from gpumix.kvsched.state import Move

C = 1200
L, M, S, T, TINY = (RequestClass.L, RequestClass.M, RequestClass.S, RequestClass.T,
                    RequestClass.TINY)  # fmt: skip


def pods(m: Mell) -> dict[int, dict[int, int]]:
    return {pid: dict(p.reqs) for pid, p in m.c.pods.items()}


def one(m: Mell, arrivals: dict[int, int] | None = None, departures: list[int] | None = None,
        sizes: dict[int, int] | None = None) -> list[Move]:  # fmt: skip
    return m.epoch(arrivals or {}, departures or [], sizes or {}).moves


@pytest.mark.parametrize(
    ("size", "cls"),
    [(1200, L), (601, L), (600, M), (401, M), (400, S), (301, S), (300, T), (151, T), (150, TINY),
     (1, TINY)],
)  # fmt: skip
def test_classes_follow_the_paper_boundaries(size: int, cls: RequestClass) -> None:
    assert classify(size, C) == cls


def test_allocate_t_prefers_an_l_pod_with_room_then_the_latest_t_pod() -> None:
    m = Mell(C)
    one(m, {1: 800})  # L-pod 0 (400 free)
    one(m, {2: 200})  # T fits on the L-pod
    assert pods(m) == {0: {1: 800, 2: 200}}
    one(m, {3: 250, 4: 250})  # 3 fits no L-pod (200 free) → new T-pod 1; 4 joins it
    assert pods(m) == {0: {1: 800, 2: 200}, 1: {3: 250, 4: 250}}


def test_allocate_t_opens_a_pod_when_the_latest_t_pod_is_full() -> None:
    m = Mell(C)
    one(m, dict.fromkeys(range(4), 300))  # four T's fill T-pod 0 exactly
    one(m, {9: 200})
    assert pods(m) == {0: {0: 300, 1: 300, 2: 300, 3: 300}, 1: {9: 200}}


def test_allocate_s_m_goes_to_an_l_pod_and_evicts_its_t_requests() -> None:
    m = Mell(C)
    one(m, {1: 700})
    one(m, {2: 280, 3: 200})  # T's on the L-pod: 700 + 280 + 200 = 1180
    assert pods(m) == {0: {1: 700, 2: 280, 3: 200}}
    moves = one(m, {4: 450})  # M: 700 + 450 ≤ C; evict T 2 (largest) → a new T-pod
    assert pods(m)[0] == {1: 700, 4: 450}  # 700 + 200 + 450 > C: both T's leave
    assert all(mv.src == 0 for mv in moves)
    assert m.c.pods[0].used <= C


def test_allocate_m_without_an_l_pod_goes_to_the_latest_m_pod_else_a_new_one() -> None:
    m = Mell(C)
    one(m, {1: 500})
    one(m, {2: 550})
    one(m, {3: 450})
    assert pods(m) == {0: {1: 500, 2: 550}, 1: {3: 450}}
    one(m, {4: 350, 5: 350, 6: 350})  # S's: own S-pod, three of them
    assert pods(m)[2] == {4: 350, 5: 350, 6: 350}


def test_allocate_l_activates_a_pod_and_pulls_an_s_m_request_then_refills() -> None:
    m = Mell(C)
    one(m, {1: 450, 2: 450})  # M-pod 0
    one(m, {3: 420})  # M-pod 1 (latest M-pod)
    moves = one(m, {4: 700})  # L-pod 2 pulls an M (priority: pod 1 has fewer requests)
    assert m.label(2) == L and m.has_sm(2)
    assert len(moves) == 1 and moves[0].dst == 2
    assert all(p.used <= C for p in m.c.pods.values())


def test_depart_on_the_latest_pod_moves_nothing() -> None:
    m = Mell(C)
    one(m, {1: 700})
    one(m, {2: 700})
    assert one(m, departures=[2]) == []
    assert pods(m) == {0: {1: 700}}


def test_depart_t_refills_from_the_latest_t_pod() -> None:
    m = Mell(C)
    one(m, {1: 800})
    one(m, {2: 250, 3: 250})  # 2 on the L-pod (150 free after), 3 → T-pod 1
    one(m, {4: 1000})  # latest pod is an L-pod with no room for a T
    moves = one(m, departures=[2])
    assert [(mv.rid, mv.src, mv.dst) for mv in moves] == [(3, 1, 0)]
    assert 1 not in m.c.pods  # emptied and released (Algorithm 1)


def test_depart_m_on_an_m_pod_refills_from_the_latest_m_pod() -> None:
    m = Mell(C)
    one(m, {1: 450, 2: 450})
    one(m, {3: 450})  # M-pod 1
    one(m, {9: 700})  # L-pod 2 pulls the M from pod 1 (which then empties)
    one(m, {5: 450, 6: 450, 7: 450})  # three M: one fills nothing (L-pod full), pods 1 and 3
    before = pods(m)
    moves = one(m, departures=[1])
    latest_m = max((p for p in m.c.pods.values() if m.label(p.pid) == M), key=lambda p: p.seq)
    assert moves and moves[0].dst == 0
    assert before != pods(m) and latest_m.pid != 0


def test_depart_s_m_from_an_l_pod_pulls_one_from_an_s_m_pod() -> None:
    m = Mell(C)
    one(m, {1: 700, 2: 450})  # L-pod 0 with M 2 (allocated after the L)
    assert pods(m) == {0: {1: 700, 2: 450}}
    one(m, {3: 450, 4: 420})  # M-pod 1 holds both
    one(m, {5: 700})  # L-pod 2 pulls an M from pod 1
    one(m, {6: 1000})  # latest pod: an L without room
    moves = one(m, departures=[2])
    assert any(mv.dst == 0 for mv in moves)
    assert m.has_sm(0)


def test_depart_l_reallocates_everything_else_on_its_pod() -> None:
    m = Mell(C)
    one(m, {1: 700})
    one(m, {2: 450})  # M joins L-pod 0
    one(m, {3: 1000})  # latest pod 1
    moves = one(m, departures=[1])
    assert [(mv.rid, mv.src) for mv in moves] == [(2, 0)]
    assert 0 not in m.c.pods or 2 not in m.c.pods[0].reqs


def test_update_t_to_s_departs_and_reallocates() -> None:
    m = Mell(C)
    one(m, {1: 250, 2: 250, 3: 250})  # T-pod 0
    one(m, {4: 1000})  # latest pod
    one(m, sizes={1: 350})  # T → S: re-allocated to an S-pod
    assert m.cls[1] == S
    assert m.label(m.c.where[1]) == S


def test_update_m_to_l_on_an_m_pod_relabels_and_relieves_overload() -> None:
    m = Mell(C)
    one(m, {1: 550, 2: 550})  # M-pod 0, 1100 used
    one(m, {3: 1000})  # latest
    moves = one(m, sizes={1: 700})  # 1 becomes L: 1250 > C → the other request leaves
    assert m.label(0) == L and m.c.pods[0].used <= C
    assert [mv.rid for mv in moves] == [2]


def test_update_l_growth_overload_moves_the_others_out() -> None:
    m = Mell(C)
    one(m, {1: 700})
    one(m, {2: 450})
    one(m, {3: 1000})
    moves = one(m, sizes={1: 800})  # 800 + 450 > C
    assert [mv.rid for mv in moves] == [2]
    assert m.c.pods[0].reqs == {1: 800}


def test_batching_cancels_a_move_that_returns_home() -> None:
    """§VI-C: the buffer keeps only net moves; without batching each move is executed."""
    for batching in (True, False):
        m = Mell(C, batching=batching)
        one(m, {1: 700, 2: 250})
        one(m, {3: 250, 4: 250})
        one(m, {5: 1000})
        moves = one(m, sizes={2: 310}, departures=[3])
        net = {(mv.rid, mv.src, mv.dst) for mv in moves}
        assert all(src != dst for _, src, dst in net)
