"""Benchmark: MELL's KV-cache scheduler vs BF, WF and LB (MELL §VIII) in a KV-occupancy simulation.

Setup after MELL §VIII-B:

- **Request lengths**: chat conversations as in LMSYS-Chat-1M and WildChat, scaled ×10 (MELL
  scales each conversation ×10 to mimic long-context LLMs). The datasets are not downloaded: each
  request is drawn (half and half) from a lognormal fit of one dataset's published per-turn
  statistics. LMSYS-Chat-1M (Zheng et al., ICLR'24, Table 1): mean 69.5 prompt and 214.5
  response tokens per turn. WildChat (Zhao et al., ICLR'24, Table 1): mean ± std 295.58 ±
  1,609.18 user and 441.34 ± 410.91 chatbot tokens per turn; the same table gives LMSYS-Chat-1M
  69.83 ± 143.49 user tokens. Each lognormal matches the mean and the coefficient of variation
  (σ² = ln(1 + CV²), μ = ln(mean) − σ²/2); LMSYS responses take WildChat's response CV (0.93: the
  published LMSYS response std, 1,858, comes from a few outliers and would put a lognormal's
  median near 15 tokens). Scaled requests longer than C are clipped to C (the share is printed).
- **Arrivals**: Poisson at λ = 0.5, 0.8 and 1.1 req/s, and the arrival pattern of the Azure LLM
  inference trace 2023 (conversation; MELL §VIII-B: 'traces from multiple LLM inference services
  in Azure … to simulate production-like workload arrival patterns'): the trace's inter-arrival
  gaps, from its first request, scaled to a mean of `AZURE_RATE` req/s. The trace's own rate
  (4.85 req/s over its first 1,500 requests) with requests of ~2 minutes would make the whole run
  a ramp-up of a fleet 5–6× the Poisson ones; scaled, its bursts meet the Poisson runs' load.
- **Pods**: Llama-2-13B on A100-40GB (4 per node) and Llama-2-7B on RTX-4090-24GB (8 per node).
  KV capacity C by MELL §III's arithmetic (`PAPER_CAP`): GPU memory minus the fp16 weights over
  the KV bytes per token — for 13B on A100-40GB the paper's own figure, 16 GB over 3.2 GB per
  4,096 tokens = 5 × 4,096 = 20,480 tokens ('a maximum batch of 5 requests'; by the formula
  20,690); for 7B on a 24 GB RTX 4090 (the paper gives no figure) the same formula, 23,442.
  `--capacity roofline` uses `Roofline.kv_capacity_tokens` instead (vLLM's 0.9 memory share and
  an activation reserve: 14,136 and 16,477).

The simulation advances in epochs of `--epoch` seconds (default 1). MELL §IV: 'the system's life
cycle is composed of multiple epochs'; §VIII does not give their length, so batching (§VI-C) is
also reported at 5 s (`--batching-epochs`). Each pod decodes one token per running request per
step, its step time from the roofline the discrete-event engine uses (`Roofline.decode_step_s`
at the pod's batch and mean context); a new request first waits for its prefill
(`Roofline.prefill_s`). Every epoch the scheduler sees arrivals, completions and every running
request's KV size projected to the end of the epoch (current + the most tokens a pod can decode
in one epoch; never the final output length), so a decision never lets a pod overflow during
the epoch. A migration holds its request up by its cost: MELL chooses KV transfer or re-prefill
per migration with §V's two-bin packing (first fit) over link budgets from Vidur's measured
send/recv curves (A100: NVLink within a node, DGX network across nodes; RTX 4090, no NVLink: the
A40-pairwise curves, PCIe-class) and re-prefill budgets from the roofline; LB always transfers
KV (Llumnix). BF, WF and LB preempt when growth overflows a pod (vLLM recompute): the request
waits in its own pod's queue and re-prefills there when the pod has room (`gpumix.kvsched`
baselines).

Figures per scheduler (over the arrival window, from 10% of arrivals to the last): GPUs at peak
(MELL Eq. (3): the most pods holding requests at once) and mean over time, migrations/s, mean
KV utilisation (KV in use / C over active pods), migration cost (mean ms a migrated request is
held up, share of request-time), preemptions, and the **lower bound** of the run: every epoch
⌈KV the scheduler holds / C⌉ (no placement of that KV uses fewer pods), its peak and mean. MELL
holds every running request's KV, so its bound is the workload's; a baseline's is lower by the
KV its queues dropped. Ratios are against BF, WF and LB of the same run; "batching" compares
MELL with and without §VI-C operation batching.

Each rate also runs LB, MELL and MELL-nobatch again on the same workload and seed with
**recompute migration** only, as the router does it on stock vLLM (issue #16,
`gpumix.kvsched.recompute_only`): a migration costs the destination's `Roofline.prefill_s` of the
request's prompt + generated tokens plus `ROUTER_OVERHEAD_S` (measured by bench/router.py), and
§V's computation budget is counted ("over budget"); BF and WF never migrate, so their runs serve
both modes. "dest pause" is the request-time the re-prefills would stall the destinations'
running requests (no chunked prefill), reported, not charged.

Usage: ``.venv/bin/python bench/kvsched.py [--quick] [--json] [--requests N] [--seed S]
[--epoch S] [--capacity paper|roofline] [--batching-epochs S,…]``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import numpy as np

from gpumix.datafiles import data_dir
from gpumix.kvsched import (
    EpochResult,
    LinkProfile,
    LoadBalancer,
    Mell,
    MigrationProfile,
    Move,
    kv_only,
    make_baseline,
    plan_migrations,
    recompute_only,
)
from gpumix.kvsched.state import Cluster
from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import Roofline
from gpumix.sim import traffic

RATES: tuple[float | str, ...] = (0.5, 0.8, 1.1, "azure")
"""Poisson rates (req/s) and the Azure conversation trace's arrival pattern."""
AZURE_RATE = 0.8
"""Mean rate (req/s) the Azure trace's gaps are scaled to: the middle Poisson rate."""
SCALE = 10

CHAT_LENGTHS = (
    # (dataset, prompt mean, prompt CV, response mean, response CV), tokens per turn
    ("LMSYS-Chat-1M", 69.5, 143.49 / 69.83, 214.5, 410.91 / 441.34),
    ("WildChat", 295.58, 1609.18 / 295.58, 441.34, 410.91 / 441.34),
)
"""Published per-turn length statistics (see the module docstring for the sources)."""

PAPER_CAP = {"llama-2-13b/a100-40gb": 5 * 4096}
"""MELL §III: 16 GB of an A100-40GB beside Llama-2-13B's weights, 3.2 GB per 4,096 tokens."""
SCHEDULERS = ("BF", "WF", "LB", "MELL", "MELL-nobatch")
BASES = ("BF", "WF", "LB")
MIGRATING = ("LB", "MELL", "MELL-nobatch")
"""The schedulers that migrate (BF and WF never do: their runs are the same in both modes)."""
Migration = Literal["kv", "recompute"]

ROUTER_OVERHEAD_S = 0.008
"""What the router adds to a recompute migration beyond the destination's prefill, from
``bench/router.py`` section 6 (``migration.router_added_ms``: the client-visible blackout − the
target's time to its first token of the continuation − the wait for the source's next token):
mean 7.6 ms over 24 moves in the full run recorded in bench/README.md (p50 0.6 ms; two moves
caught one ~84 ms stall of the shared VM), rounded up to 8 ms."""


@dataclass(frozen=True)
class Setup:
    name: str
    model: str
    gpu: str
    pods_per_node: int
    intra: tuple[str, int]
    inter: tuple[str, int]


SETUPS = (
    Setup("llama-2-13b/a100-40gb", "meta-llama/Llama-2-13b-hf", "a100-40gb", 4,
          ("a100_pairwise_nvlink", 2), ("a100_dgx", 1)),
    Setup("llama-2-7b/rtx4090", "meta-llama/Llama-2-7b-hf", "rtx4090", 8,
          ("a40_pairwise_nvlink", 2), ("a40_pairwise_nvlink", 1)),
)  # fmt: skip


class Scheduler(Protocol):
    c: Cluster

    def epoch(
        self, arrivals: dict[int, int], departures: list[int], sizes: dict[int, int]
    ) -> EpochResult: ...


def _make(name: str, cap: int, per_node: int, epoch_s: float) -> Scheduler:
    if name == "MELL":
        return Mell(cap, pods_per_node=per_node)
    if name == "MELL-nobatch":
        return Mell(cap, pods_per_node=per_node, batching=False)
    if name == "LB":  # Llumnix ticks every 50–100 ms
        return LoadBalancer(
            cap, pods_per_node=per_node, ticks_per_epoch=max(1, round(epoch_s / 0.1))
        )
    return make_baseline(name, cap, pods_per_node=per_node)


def capacity(setup: Setup, roof: Roofline, how: str) -> int:
    """KV tokens per pod: MELL §III's arithmetic (GPU memory − fp16 weights) / KV bytes per
    token, the paper's own figure where it gives one; or the roofline's vLLM capacity."""
    if how == "roofline":
        return roof.kv_capacity_tokens
    if setup.name in PAPER_CAP:
        return PAPER_CAP[setup.name]
    free = roof.gpu.memory_gib * 2**30 - roof.model.weight_bytes
    return int(free // roof.model.kv_bytes_per_token)


def chat_sizes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of `n` chat turns: each from one of `CHAT_LENGTHS` (alternating
    at random), a lognormal matching the published mean and CV; ≥ 1 token."""
    rng = np.random.default_rng(seed)
    which = rng.integers(0, len(CHAT_LENGTHS), n)
    prompts = np.empty(n)
    outputs = np.empty(n)
    for k, (_, pm, pcv, om, ocv) in enumerate(CHAT_LENGTHS):
        idx = which == k
        for out, mean, cv in ((prompts, pm, pcv), (outputs, om, ocv)):
            s2 = math.log(1 + cv * cv)
            out[idx] = rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), int(idx.sum()))
    return np.maximum(1, np.round(prompts)).astype(int), np.maximum(1, np.round(outputs)).astype(
        int
    )


def _profile(setup: Setup, roof: Roofline) -> MigrationProfile:
    net = data_dir() / "profiles" / "vidur" / "network"
    intra = LinkProfile.from_vidur(net / setup.intra[0] / "send_recv.csv",
                                   devices_per_node=setup.intra[1])  # fmt: skip
    inter = LinkProfile.from_vidur(net / setup.inter[0] / "send_recv.csv",
                                   devices_per_node=setup.inter[1])  # fmt: skip
    # computation boundary: tokens a pod re-prefills within 0.25 s (§V: short prefills use idle
    # compute; long ones interfere with the running batch).
    budget = 256
    while roof.prefill_s(budget * 2) <= 0.25 and budget < 1 << 16:
        budget *= 2
    return MigrationProfile(
        kv_bytes_per_token=roof.model.kv_bytes_per_token,
        intra=intra,
        inter=inter,
        prefill_s=roof.prefill_s,
        comm_budget_s=0.5,
        compute_budget_tokens=budget,
    )


def workload(
    trace: traffic.Trace, rate: float | str, n: int, cap: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Arrivals (Poisson at `rate`, or for "azure" the trace's gaps at a mean of `AZURE_RATE`)
    and chat lengths ×10."""
    if rate == "azure":
        own = np.asarray(trace.times[:n], dtype=float)
        times = (own - own[0]) * ((n - 1) / (own[-1] - own[0]) / AZURE_RATE) + 1e-3
    else:
        times = traffic.poisson_times(float(rate), n, seed)
    prompts, outputs = chat_sizes(n, seed + 1)
    prompts, outputs = prompts * SCALE, outputs * SCALE
    clipped = float(np.mean(prompts + outputs > cap))
    prompts = np.minimum(prompts, cap - 1)
    outputs = np.maximum(1, np.minimum(outputs, cap - prompts))
    return times, prompts, outputs, clipped


def simulate(
    sched_name: str,
    *,
    setup: Setup,
    cap: int,
    roof: Roofline,
    prof: MigrationProfile,
    times: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    epoch_s: float,
    migration: Migration = "kv",
) -> dict[str, Any]:
    """One scheduler over one workload. ``migration``: ``kv``, MELL's §V choice between KV
    transfer and re-prefill (LB: always KV transfer, Llumnix); ``recompute``, every scheduler's
    migrations re-prefill prompt + generated tokens on the destination plus the router's
    overhead (stock vLLM through the router, issue #16), §V's budget still counted."""
    sched = _make(sched_name, cap, setup.pods_per_node, epoch_s)
    look = math.ceil(epoch_s / roof.decode_step_s(1, 0)) + 1
    n = len(times)
    gen = np.zeros(n)
    stall = np.zeros(n)  # seconds the request must still wait (prefill, migration)
    seen: dict[int, int] = {}
    running: set[int] = set()
    nxt = 0
    t = 0.0
    pods_t: list[int] = []
    util_t: list[float] = []
    floor_t: list[int] = []
    window = (float(times[n // 10]), float(times[-1]))
    moves = preempts = 0
    move_s = 0.0
    over_budget = 0
    modes = {"kv": 0, "tokens": 0}
    req_time = 0.0
    paused = 0.0  # request-seconds of decode paused on destinations by re-prefills
    finish = np.full(n, np.nan)
    while nxt < n or running:
        t += epoch_s
        arrivals: dict[int, int] = {}
        while nxt < n and times[nxt] <= t:
            arrivals[nxt] = min(cap, int(prompts[nxt]) + look)
            stall[nxt] = roof.prefill_s(int(prompts[nxt])) + (t - times[nxt])
            nxt += 1
        done = [r for r in running if gen[r] >= outputs[r]]
        for r in done:
            running.discard(r)
            finish[r] = t
        sizes: dict[int, int] = {}
        for r in running:
            proj = min(cap, int(prompts[r] + gen[r]) + look)
            sizes[r] = max(seen[r], proj)
            seen[r] = sizes[r]
        for r, s in arrivals.items():
            seen[r] = s
        res = sched.epoch(arrivals, done, sizes)
        running.update(arrivals)
        # migration costs
        if res.moves:
            node = {pid: p.node for pid, p in sched.c.pods.items()}
            for mv in res.moves:
                node.setdefault(mv.src, mv.src // setup.pods_per_node)

            def node_of(pid: int, node: dict[int, int] = node) -> int:
                return node.get(pid, pid // setup.pods_per_node)

            if migration == "recompute":
                plan = recompute_only(_actual(res.moves, prompts, gen), prof, ROUTER_OVERHEAD_S)
            elif sched_name == "LB":
                plan = kv_only(res.moves, node_of, prof)
            else:
                plan = plan_migrations(res.moves, node_of, prof)
            for ch in plan.choices:
                stall[ch.move.rid] += ch.seconds
                modes[ch.mode] += 1
                if ch.mode == "tokens":  # no chunked prefill: the destination's decodes wait
                    dst = sched.c.pods.get(ch.move.dst)  # None: emptied again this epoch
                    others = len(dst.reqs) - 1 if dst is not None else 0
                    paused += max(0, others) * prof.prefill_s(ch.move.tokens)
            moves += len(plan.choices)
            move_s += plan.seconds
            over_budget += plan.over_budget
        # a preempted request stops decoding (its KV is gone; it is off its pod's batch) and
        # re-prefills prompt + generated tokens when its pod resumes it
        preempts += len(res.preempted)
        for r in res.resumed:
            stall[r] += roof.prefill_s(int(prompts[r] + gen[r]))
        held = sum(p.used for p in sched.c.pods.values())
        # decode one epoch on every pod
        used = 0
        for pod in sched.c.pods.values():
            if not pod.reqs:
                continue
            ctx = [prompts[r] + gen[r] for r in pod.reqs]
            step = roof.decode_step_s(len(ctx), float(np.mean(ctx)))
            for r in pod.reqs:
                avail = epoch_s - stall[r]
                if avail > 0:
                    stall[r] = 0.0
                    gen[r] = min(outputs[r], gen[r] + avail / step)
                else:
                    stall[r] = -avail
                used += int(prompts[r] + gen[r])
            req_time += epoch_s * len(pod.reqs)
        if window[0] <= t <= window[1] + epoch_s:
            active = sum(1 for p in sched.c.pods.values() if p.reqs)
            pods_t.append(active)
            util_t.append(used / (cap * active) if active else 0.0)
            floor_t.append(-(-held // cap))
    span = window[1] - window[0]
    lat = finish - times
    return {
        "gpus_peak": int(max(pods_t)),
        "gpus_mean": round(float(np.mean(pods_t)), 2),
        "bound_peak": int(max(floor_t)),
        "bound_mean": round(float(np.mean(floor_t)), 2),
        "migrations": moves,
        "migrations_per_s": round(moves / span, 3),
        "kv_util_mean": round(float(np.mean(util_t)), 4),
        "migration_ms_mean": round(1e3 * move_s / moves, 1) if moves else 0.0,
        "migration_share_of_request_time": round(move_s / req_time, 5) if req_time else 0.0,
        "kv_transfers": modes["kv"],
        "reprefills": modes["tokens"],
        "over_budget": over_budget,
        "destination_pause_share_of_request_time": round(paused / req_time, 5) if req_time else 0.0,
        "preemptions": preempts,
        "latency_mean_s": round(float(np.nanmean(lat)), 2),
    }


def _actual(moves: list[Move], prompts: np.ndarray, gen: np.ndarray) -> list[Move]:
    """The moves with the tokens a re-prefill computes: the request's prompt + generated tokens
    now (the scheduler's sizes are projected to the end of the epoch)."""
    return [replace(mv, tokens=int(prompts[mv.rid] + gen[mv.rid])) for mv in moves]


def _ratios(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    mell = runs["MELL"]
    return {
        f"gpus_{kind}_vs_{b}": round(mell[f"gpus_{kind}"] / runs[b][f"gpus_{kind}"], 3)
        for kind in ("mean", "peak")
        for b in BASES
    }


def _table(runs: dict[str, dict[str, Any]]) -> None:
    print(
        "    scheduler     GPUs peak  mean  bound peak  mean   migr/s  KV util  migr ms  migr share"
        "  KV/re-prefill  over budget  dest pause  preempt  latency s"
    )
    for s, r in runs.items():
        print(
            f"    {s:<13} {r['gpus_peak']:>8} {r['gpus_mean']:>6.1f} "
            f"{r['bound_peak']:>10} {r['bound_mean']:>5.1f} "
            f"{r['migrations_per_s']:>8.3f} {100 * r['kv_util_mean']:>7.1f}% "
            f"{r['migration_ms_mean']:>8.1f} "
            f"{100 * r['migration_share_of_request_time']:>9.2f}%"
            f"  {r['kv_transfers']:>6}/{r['reprefills']:<6} {r['over_budget']:>11} "
            f"{100 * r['destination_pause_share_of_request_time']:>10.2f}% "
            f"{r['preemptions']:>8} {r['latency_mean_s']:>9.1f}"
        )


def _pct(a: float, b: float) -> str:
    return f"{100 * (a - b) / b:+.1f}%" if b else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--quick", action="store_true", help="300 requests per run")
    parser.add_argument("--requests", type=int, default=None, help="per run (default 1500)")
    parser.add_argument("--epoch", type=float, default=1.0, help="seconds per epoch")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--capacity",
        choices=("paper", "roofline"),
        default="paper",
        help="KV capacity: MELL §III's arithmetic (default) or the roofline's",
    )
    parser.add_argument(
        "--batching-epochs",
        default="5",
        help="other epoch lengths (s, comma-separated) at which MELL is run with "
        "and without §VI-C batching; empty: none",
    )
    parser.add_argument(
        "--rates", default=None, help="comma-separated Poisson rates and/or 'azure' (default: all)"
    )
    args = parser.parse_args()
    rates: tuple[float | str, ...] = RATES
    if args.rates:
        rates = tuple(r if r == "azure" else float(r) for r in args.rates.split(","))
    extra_epochs = [float(e) for e in args.batching_epochs.split(",") if e.strip()]
    n = args.requests or (300 if args.quick else 1500)
    t0 = time.perf_counter()
    trace = traffic.load_trace("azure-conv")
    results: dict[str, Any] = {}
    for setup in SETUPS:
        roof = Roofline(gpu_type(setup.gpu), model_shape(setup.model))
        prof = _profile(setup, roof)
        cap = capacity(setup, roof, args.capacity)
        print(
            f"\n{setup.name}: C = {cap} tokens ({args.capacity}); links {prof.intra.name} "
            f"{prof.intra.gbytes_per_s:.1f} GB/s, {prof.inter.name} {prof.inter.gbytes_per_s:.1f}"
            f" GB/s; re-prefill budget {prof.compute_budget_tokens} tokens/epoch/pod"
        )
        per_rate: dict[str, Any] = {}
        for rate in rates:
            times, prompts, outputs, clipped = workload(trace, rate, n, cap, args.seed)
            run = {"setup": setup, "cap": cap, "roof": roof, "prof": prof, "times": times,
                   "prompts": prompts, "outputs": outputs, "epoch_s": args.epoch}  # fmt: skip
            runs = {s: simulate(s, **run) for s in SCHEDULERS}
            # The same workload and seed with the router's recompute migration (stock vLLM).
            recompute = {s: runs[s] for s in BASES if s not in MIGRATING} | {
                s: simulate(s, **run, migration="recompute") for s in MIGRATING
            }
            recompute = {s: recompute[s] for s in SCHEDULERS}
            assert all(runs[s]["migrations"] == 0 for s in BASES if s not in MIGRATING)
            mell, nob = runs["MELL"], runs["MELL-nobatch"]
            ratios: dict[str, float | None] = dict(_ratios(runs))
            ratios["migrations_batching_vs_nobatch"] = (
                round(mell["migrations"] / nob["migrations"], 3) if nob["migrations"] else None
            )
            batching = {}
            for e in extra_epochs:
                at = run | {"epoch_s": e}
                b, nb = simulate("MELL", **at), simulate("MELL-nobatch", **at)
                batching[str(e)] = {
                    "migrations": b["migrations"], "migrations_nobatch": nb["migrations"],
                    "gpus_mean": b["gpus_mean"], "gpus_mean_nobatch": nb["gpus_mean"],
                }  # fmt: skip
            per_rate[str(rate)] = {"clipped_share": round(clipped, 3), "runs": runs,
                                   "ratios": ratios, "batching_at_epoch": batching,
                                   "recompute": {"runs": recompute,
                                                 "ratios": _ratios(recompute)}}  # fmt: skip
            what = (
                "Azure conversation trace's arrival pattern"
                if rate == "azure"
                else f"λ = {rate} req/s"
            )
            span = float(times[-1] - times[0])
            print(
                f"  {what} ({n / span:.2f} req/s), {n} requests ({100 * clipped:.1f}% clipped"
                f" to C; mean prompt {prompts.mean():.0f}, output {outputs.mean():.0f} tokens)"
            )
            print("   migration by KV transfer or re-prefill (MELL §V; LB: KV transfer)")
            _table(runs)
            print("   recompute migration through the router (stock vLLM; BF/WF do not migrate)")
            _table({s: recompute[s] for s in MIGRATING})
            rmell = recompute["MELL"]
            print(
                "    MELL mean GPUs vs BF / WF / LB, KV transfer: "
                + " / ".join(_pct(mell["gpus_mean"], runs[b]["gpus_mean"]) for b in BASES)
                + "; recompute: "
                + " / ".join(_pct(rmell["gpus_mean"], recompute[b]["gpus_mean"]) for b in BASES)
                + "\n    peak, KV transfer: "
                + " / ".join(_pct(mell["gpus_peak"], runs[b]["gpus_peak"]) for b in BASES)
                + "; recompute: "
                + " / ".join(_pct(rmell["gpus_peak"], recompute[b]["gpus_peak"]) for b in BASES)
                + "; batching changes migrations by "
                + _pct(mell["migrations"], nob["migrations"])
                + f" at {args.epoch:g} s epochs"
                + "".join(
                    f", {_pct(b['migrations'], b['migrations_nobatch'])} at {e} s"
                    for e, b in batching.items()
                )
                + f"\n    lower bound (MELL run): peak {mell['bound_peak']}, mean"
                f" {mell['bound_mean']:.1f}; MELL above it: peak"
                f" {_pct(mell['gpus_peak'], mell['bound_peak'])}, mean"
                f" {_pct(mell['gpus_mean'], mell['bound_mean'])}"
            )
        results[setup.name] = {"kv_capacity_tokens": cap, "rates": per_rate}
    wall = time.perf_counter() - t0
    print(f"\nwall time {wall:.1f} s")
    if args.json:
        summary = {
            "bench": "kvsched",
            "requests_per_run": n,
            "epoch_s": args.epoch,
            "capacity": args.capacity,
            "scale": SCALE,
            "seed": args.seed,
            "router_overhead_s": ROUTER_OVERHEAD_S,
            "wall_s": round(wall, 1),
            "setups": results,
        }
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
