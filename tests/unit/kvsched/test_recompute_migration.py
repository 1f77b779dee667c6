"""`recompute_only`: the router's migration on stock vLLM (issue #16) as MELL §V's packing with
one option, a re-prefill of prompt + generated tokens on the destination."""

from __future__ import annotations

import pytest

from gpumix.kvsched import LinkProfile, MigrationProfile, Move, plan_migrations, recompute_only


def _profile(budget: int = 4096) -> MigrationProfile:
    return MigrationProfile(
        kv_bytes_per_token=512 * 1024,
        intra=LinkProfile.constant("nvlink", 280),  # a transfer would be far faster
        inter=LinkProfile.constant("net", 280),
        prefill_s=lambda n: 0.003 + n / 15_000,
        compute_budget_tokens=budget,
    )


def test_every_move_is_a_reprefill_of_its_tokens_plus_the_router_overhead() -> None:
    prof = _profile()
    moves = [Move(1, 0, 1, 1500), Move(2, 0, 2, 3000)]
    plan = recompute_only(moves, prof, overhead_s=0.002)
    assert [c.mode for c in plan.choices] == ["tokens", "tokens"]
    cost = {c.move.rid: c.seconds for c in plan.choices}
    assert cost[1] == pytest.approx(0.003 + 0.1 + 0.002)
    assert cost[2] == pytest.approx(0.003 + 0.2 + 0.002)
    assert plan.seconds == pytest.approx(0.105 + 0.205)
    # Where the KV could move instead, §V's adaptive migration would transfer it.
    adaptive = plan_migrations(moves, lambda pod: 0, prof)
    assert adaptive.count("kv") == 2 and adaptive.seconds < plan.seconds


def test_a_destination_budget_is_shared_by_every_move_of_the_epoch() -> None:
    """Three sources into one pod, 4096 tokens of re-prefill budget: the two largest fit
    (2000 + 1500), the third (1000) would pass it and is reported over budget; it still moves."""
    moves = [Move(1, 0, 3, 1000), Move(2, 1, 3, 2000), Move(3, 2, 3, 1500)]
    plan = recompute_only(moves, _profile())
    within = {c.move.rid: c.within_budget for c in plan.choices}
    assert within == {1: False, 2: True, 3: True}
    assert plan.over_budget == 1 and plan.count("tokens") == 3
    # Spread over three destinations, each has its own budget.
    spread = [Move(1, 0, 3, 1000), Move(2, 1, 4, 2000), Move(3, 2, 5, 1500)]
    assert recompute_only(spread, _profile()).over_budget == 0


def test_a_move_larger_than_the_budget_is_over_it_alone() -> None:
    plan = recompute_only([Move(1, 0, 1, 5000)], _profile(budget=4096))
    assert plan.over_budget == 1
    assert recompute_only([Move(1, 0, 1, 4096)], _profile(budget=4096)).over_budget == 0
