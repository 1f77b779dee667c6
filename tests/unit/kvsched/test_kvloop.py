"""The KV-migration loop's pure core: consolidation plan, §V modes, deletion-cost patches, and the
admin calls it issues (a recorded fake for the HTTP contract of sim/SERVER.md)."""

from __future__ import annotations

from typing import Any

from gpumix.kvsched import LinkProfile, MigrationProfile
from gpumix.operator.kvloop import (
    DELETION_COST,
    PodLoad,
    PodRequest,
    choose_modes,
    deletion_cost_patch,
    execute,
    parse_admin_listing,
    plan_consolidation,
)

C = 1600


def req(i: int, kv: int) -> PodRequest:
    return PodRequest(id=str(i), kv_tokens=kv, prompt_tokens=kv - 10, generated_tokens=10,
                      output_tokens=kv + 100)  # fmt: skip


def test_after_a_burst_drains_the_newest_pod_is_emptied_onto_the_others() -> None:
    pods = [
        PodLoad("svc-a", "http://a", "n0", C, (req(1, 900), req(2, 200))),
        PodLoad("svc-b", "http://b", "n0", C, (req(1, 1000),)),
        PodLoad("svc-c", "http://c", "n1", C, (req(1, 300), req(2, 250))),  # newest
    ]
    d = plan_consolidation(pods)
    assert d.drained == ["svc-c"]
    assert {(r.kv_tokens, src) for r, src, _ in d.moves} == {(300, "svc-c"), (250, "svc-c")}
    assert all(dst != "svc-c" for _, _, dst in d.moves)
    load: dict[str, int] = {p.name: sum(r.kv_tokens for r in p.requests) for p in pods}
    for r, src, dst in d.moves:
        load[src] -= r.kv_tokens
        load[dst] += r.kv_tokens
    assert load["svc-c"] == 0 and max(load.values()) <= C
    assert deletion_cost_patch(d.drained) == {
        "svc-c": {"metadata": {"annotations": {DELETION_COST: "-1000"}}}
    }


def test_nothing_moves_when_no_pod_can_be_emptied() -> None:
    pods = [
        PodLoad("a", "http://a", "n0", C, (req(1, 1500),)),
        PodLoad("b", "http://b", "n0", C, (req(1, 1400),)),
    ]
    d = plan_consolidation(pods)
    assert d.moves == [] and d.drained == []


def test_modes_and_admin_calls_follow_the_contract() -> None:
    pods = [
        PodLoad("a", "http://a", "n0", C, (req(1, 900),)),
        PodLoad("b", "http://b", "n1", C, (req(7, 400),)),
    ]
    d = plan_consolidation(pods)
    assert d.drained == ["b"]
    prof = MigrationProfile(
        kv_bytes_per_token=512 * 1024,
        intra=LinkProfile.constant("nvlink", 280),
        inter=LinkProfile.constant("net", 0.1),
        prefill_s=lambda n: n / 20_000,
    )
    modes = [c.mode for c in choose_modes(d, pods, prof)]
    assert modes == ["tokens"]  # a slow network: re-prefill on the destination
    calls: list[tuple[str, dict[str, Any]]] = []

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        calls.append((url, body))
        if url.endswith("migrate_out"):
            return {"id": body["id"], "prompt_tokens": 390, "output_tokens": 500,
                    "generated_tokens": 10}  # fmt: skip
        return {"id": 99}

    assert execute(d, pods, modes, post=post) == 1
    assert calls == [
        ("http://b/admin/migrate_out", {"id": "7"}),
        ("http://a/admin/migrate_in", {"prompt_tokens": 390, "output_tokens": 500,
                                       "generated_tokens": 10, "kv": "recompute"}),
    ]  # fmt: skip


def test_admin_listing_counts_running_requests_only() -> None:
    body = {"kv_blocks": 100, "block_size": 16, "requests": [
        {"id": 1, "state": "running", "prompt_tokens": 5, "output_tokens": 9,
         "generated_tokens": 2, "kv_tokens": 7, "kv_blocks": 1},
        {"id": 2, "state": "waiting", "prompt_tokens": 5, "output_tokens": 9,
         "generated_tokens": 0, "kv_tokens": 0, "kv_blocks": 0},
    ]}  # fmt: skip
    pod = parse_admin_listing("p", "http://p", "n", body)
    assert pod.kv_tokens == 1600 and [r.id for r in pod.requests] == ["1"]
