"""BF / WF / LB (MELL §VIII-B, Llumnix) and §V's adaptive migration on hand-built cases."""

from __future__ import annotations

from pathlib import Path

from gpumix.datafiles import data_dir
from gpumix.kvsched import (
    LinkProfile,
    LoadBalancer,
    MigrationProfile,
    Move,
    kv_only,
    make_baseline,
    plan_migrations,
)

C = 1000


def test_best_fit_and_worst_fit_choose_the_tightest_and_the_emptiest_pod() -> None:
    for name, expect in (("BF", 1), ("WF", 0)):
        s = make_baseline(name, C)
        s.epoch({1: 300}, [], {})
        s.epoch({2: 800}, [], {})  # does not fit pod 0 (700 free) → pod 1
        assert s.c.where == {1: 0, 2: 1}
        s.epoch({3: 150}, [], {})  # pod 0: 700 free, pod 1: 200 free
        assert s.c.where[3] == expect, name


def test_fit_baselines_preempt_on_overflow_into_the_pods_own_queue() -> None:
    """vLLM's recompute preemption: the most recently admitted request loses its KV and waits on
    its own pod (BF and WF never move a request); it resumes there once the pod has room."""
    s = make_baseline("BF", C)
    s.epoch({1: 500, 2: 400}, [], {})
    res = s.epoch({}, [], {1: 650, 2: 400})
    assert res.preempted == [2] and not s.c.overloaded()
    assert s.queue == {0: {2: 400}} and s.c.where == {1: 0}
    res = s.epoch({3: 300}, [], {1: 660})  # 340 free, but the queue holds 400: a new pod
    assert res.placed == {3: 1} and not res.moves
    res = s.epoch({}, [1], {2: 410})
    assert res.resumed == [2] and s.c.where[2] == 0 and not s.queue
    res = s.epoch({}, [2, 3], {})
    assert sorted(res.released) == [0, 1] and not s.c.pods


def test_lb_pairs_the_queued_pod_with_the_freest_and_moves_its_shortest_request() -> None:
    lb = LoadBalancer(C, ticks_per_epoch=1)
    lb.epoch({1: 800}, [], {})  # pod 0
    lb.epoch({2: 450}, [], {})  # pod 1 (pod 0 has 200 free)
    lb.epoch({3: 50}, [], {})  # freest pod: 1
    # 700 fits nowhere; it queues on the freest pod (1), whose load rises above −3: the pair
    # (1 → 0) moves pod 1's shortest request; still no room → a pod is activated.
    res = lb.epoch({4: 700}, [], {})
    assert [(m.rid, m.src, m.dst) for m in res.moves] == [(3, 1, 0)]
    assert lb.c.where[4] == 2


def test_lb_migrates_from_a_nearly_full_pod_to_an_emptier_one() -> None:
    """Llumnix's threshold: a pod with fewer than 3 free blocks (of 16 tokens) per running
    request is a source; a pod that keeps more than 3 per request after the move takes one."""
    lb = LoadBalancer(C)
    lb.epoch({1: 400, 2: 300, 3: 250}, [], {})  # pod 0: 950
    lb.epoch({4: 300}, [], {})  # fits nowhere → pod 1
    res = lb.epoch({}, [], {1: 410})  # pod 0: 960 of 1000, 2 free blocks for 3 requests
    assert [(m.rid, m.src, m.dst) for m in res.moves] == [(3, 0, 1)]
    assert not lb.c.overloaded()


def test_lb_without_pressure_does_not_migrate() -> None:
    lb = LoadBalancer(C)
    lb.epoch({1: 100, 2: 100, 3: 100}, [], {})
    assert lb.epoch({4: 100}, [], {1: 120}).moves == []


def _profile(fast_intra: bool = True) -> MigrationProfile:
    return MigrationProfile(
        kv_bytes_per_token=512 * 1024,
        intra=LinkProfile.constant("nvlink", 280 if fast_intra else 2),
        inter=LinkProfile.constant("net", 1.25),
        prefill_s=lambda n: 0.003 + n / 15_000,
        comm_budget_s=0.5,
        compute_budget_tokens=4096,
    )


def test_adaptive_migration_transfers_over_nvlink_and_reprefills_over_a_slow_network() -> None:
    node = {0: 0, 1: 0, 2: 1}.__getitem__
    plan = plan_migrations([Move(1, 0, 1, 2000), Move(2, 0, 2, 2000)], node, _profile())
    modes = {c.move.rid: c.mode for c in plan.choices}
    assert modes == {1: "kv", 2: "tokens"}
    assert plan.over_budget == 0


def test_global_consensus_keeps_a_shared_link_within_its_budget() -> None:
    """Three senders into one node over a 1.25 GB/s link, 0.5 s budget (625 MB ≈ 1192 tokens of
    512 KiB): transfers would be faster than re-prefill for short KV, but only one fits the link."""
    prof = MigrationProfile(
        kv_bytes_per_token=512 * 1024,
        intra=LinkProfile.constant("bus", 1.25),
        inter=LinkProfile.constant("net", 1.25),
        prefill_s=lambda n: 0.5 + n / 1000,  # slow re-prefill: transfer preferred
        comm_budget_s=0.5,
        compute_budget_tokens=4096,
    )
    node = {0: 0, 1: 0, 2: 0, 3: 1}.__getitem__
    moves = [Move(r, r, 3, 1000) for r in range(3)]
    plan = plan_migrations(moves, node, prof)
    assert plan.count("kv") == 1 and plan.count("tokens") == 2 and plan.over_budget == 0
    best = plan_migrations(moves, node, prof, strategy="best_fit")
    assert best.count("kv") == 1 and best.over_budget == 0
    assert kv_only(moves, node, prof).count("kv") == 3


def test_vidur_send_recv_curves_give_the_documented_bandwidths() -> None:
    net = data_dir() / "profiles" / "vidur" / "network"
    inter = LinkProfile.from_vidur(net / "a100_dgx" / "send_recv.csv", devices_per_node=1)
    intra = LinkProfile.from_vidur(Path(net / "a100_pairwise_nvlink" / "send_recv.csv"),
                                   devices_per_node=2)  # fmt: skip
    assert 7 < inter.gbytes_per_s < 9  # notes: ≈ 7.8 GB/s across nodes
    assert 250 < intra.gbytes_per_s < 320  # ≈ 286 GB/s over NVLink
    assert inter.seconds_for(2 * inter.sizes[-1]) > inter.seconds[-1]
