"""Benchmark: the operator at fleet scale (#19 item 1) — offline planner passes and a live run.

**Fleet.** ``--services`` LLMServices (Llama-2 7B / 13B / 70B, 60 % / 25 % / 15 %) with
heterogeneous request rates (lognormal, median 3 req/s, 0.3–40 req/s), TPOT SLOs (60–200 ms),
histograms (short / long / mixed chat shapes, each perturbed per service) and a few with
``minReplicas``, priority Batch or a budget; over ``--nodes`` GPU nodes in 6 pools (L4 ×1,
A10G ×4, A40 ×4, L40 ×4, A100-80GB ×8, H100 ×8 GPUs per node; 30/22/6/12/18/12 % of the
nodes, so that the A40 pool, the cheapest per GPU and the one most services want, is scarce),
GPUProfiles from the calibrated roofline for every (model, GPU type, TP degree) that fits.
Everything is seeded (``--seed``).

**Offline** (``--mode offline``, no cluster): the operator's pure pass
(:func:`gpumix.reconcile.cluster.plan_cluster`) on a synthetic snapshot, as the operator runs it: a
cold pass (nothing runs), a steady pass (the plan applied and ready, statuses written back), a quiet
pass (nothing changed since) against the same pass preparing every service again
(:func:`quiet_passes`), then one service's rate is changed and the pass that replans it is timed —
the planner part of "workload change → plan applied". The joint instance of the cold pass is
captured and solved again alone (``solve_joint`` at the operator's 1 % gap and ``--time-limit``),
against the baseline in the same run: the services planned one at a time in what the ones before
them left (``solve_sequential``, same gap and time limit, like for like), and against the solver's
bound (the objective less the reported relative gap). ``--profile`` prints where a pass spends its
time (cProfile, top functions by cumulative time). After the passes, the planner's caches
(:class:`gpumix.digestcache.DigestCache`, values kept packed, the most recently used also as
objects): entries, bytes kept, and the same values unpacked into objects as the pass had kept them
before (``tracemalloc``), with the time a hit on a packed value spends unpacking.

**Live** (``--mode live``): a local control plane from ``hack/`` (etcd, kube-apiserver,
scheduler, controller-manager, KWOK; no Docker; node Leases long enough that KWOK renews about
50 a second, :func:`node_lease_s`) with the same pools as KWOK nodes, the CRDs,
GPUPools, GPUProfiles and LLMServices, and ``gpumix run`` as a subprocess. Measured: the time
from the last object created to every service planned, then ``--changes`` times a rate patch
on one service → its Deployments carry the new replica counts (p50 / p99), and → its search
ended (one cut at its slice, ``gpumix run --search-slice``, ends in a later pass), the
operator's peak RSS and CPU seconds (``/proc``), apiserver requests by verb over the run and
per pass (``apiserver_request_total``: list/watch against get, writes only where something
changed) and ``gpumix_cluster_writes_total``. Each window starts once the operator has
settled (run a whole pass that wrote nothing), so it counts what its own event caused, rollout
included, and not the tail of the one before; the restart comes after the last change has
settled.

``--quick``: a smoke run of every phase, not a measurement: 10 services over 100 nodes (live:
one change); the default sizes are 50 × 500, 200 × 2,000 and 500 × 5,000.
``--json`` prints one JSON object as the last line.

Usage: ``.venv/bin/python bench/scale.py [--mode offline|live|both] [--quick] [--json]
[--sizes 50x500,200x2000,500x5000] [--profile] [--time-limit S] [--changes N]``
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import functools
import io
import itertools
import json
import math
import os
import pstats
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpumix.digestcache import DigestCache
from gpumix.operator import memory
from gpumix.plan.joint import JointInstance, solve_joint, solve_sequential
from gpumix.plan.joint import solve as joint_solve
from gpumix.problem import replica_fits
from gpumix.profiles import CATALOG
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import estimate_profile
from gpumix.reconcile import cluster as rc
from gpumix.reconcile import service as rs
from gpumix.reconcile.capacity import NodeInfo
from gpumix.reconcile.service import Running

INPUT_EDGES = [1, 256, 512, 1024, 2048, 3072]
OUTPUT_EDGES = [1, 64, 128, 256, 512, 1001]
TPOTS = [40.0, 60.0, 80.0, 120.0, 160.0, 200.0]
NOW = "2026-11-21T12:00:00Z"
GAP = rc.GAP_REL
SIZES = "50x500,200x2000,500x5000"
QUICK_SIZES = "10x100"
"""``--quick``: a smoke run of every phase (22 s offline on the 2-core VM), not a measurement:
the cold pass runs the whole derating search, 456 s at 50 × 500 on the same VM."""
QUICK_CHANGES = 1


@dataclass(frozen=True)
class Pool:
    name: str
    gpus_per_node: int
    share: float
    """Share of the fleet's nodes."""
    product: str
    memory_mib: int


POOLS = [
    Pool("l4", 1, 0.30, "NVIDIA-L4", 23034),
    Pool("a10g", 4, 0.22, "NVIDIA-A10G", 23028),
    Pool("a40", 4, 0.06, "NVIDIA-A40", 46068),
    Pool("l40", 4, 0.12, "NVIDIA-L40", 46068),
    Pool("a100-80gb", 8, 0.18, "NVIDIA-A100-SXM4-80GB", 81920),
    Pool("h100", 8, 0.12, "NVIDIA-H100-80GB-HBM3", 81559),
]
MODELS = [  # (model, share of services)
    ("meta-llama/Llama-2-7b-hf", 0.60),
    ("meta-llama/Llama-2-13b-hf", 0.25),
    ("meta-llama/Llama-2-70b-hf", 0.15),
]
SLOS = {  # model → TPOT SLOs (ms) its services draw from
    "meta-llama/Llama-2-7b-hf": [60, 80, 120, 160, 200],
    "meta-llama/Llama-2-13b-hf": [80, 120, 160, 200],
    "meta-llama/Llama-2-70b-hf": [120, 160, 200],
}
SHAPES = {  # histogram counts over 5 × 5 buckets (inputs × outputs)
    "short": [[40, 60, 30, 8, 2], [30, 50, 25, 6, 1], [10, 20, 10, 3, 1], [3, 6, 4, 2, 0],
              [1, 2, 1, 0, 0]],
    "long": [[1, 3, 5, 3, 1], [3, 8, 12, 6, 2], [6, 14, 20, 12, 4], [8, 18, 24, 14, 5],
             [4, 8, 10, 6, 2]],
    "chat": [[337, 668, 1555, 34, 7], [550, 3948, 528, 13, 2], [136, 465, 58, 1389, 105],
             [368, 793, 747, 4515, 445], [207, 505, 182, 5, 0]],
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The fleet: pools, nodes, profiles, services (plain API bodies, as the apiserver holds them)
# ---------------------------------------------------------------------------------------------


def node_counts(nodes: int) -> dict[str, int]:
    """Nodes per pool: each pool's share, at least one node each, summing to ``nodes``."""
    counts = {p.name: max(1, math.floor(p.share * nodes)) for p in POOLS}
    counts[POOLS[0].name] += nodes - sum(counts.values())
    return counts


def pool_bodies() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "gpumix.io/v1alpha1", "kind": "GPUPool",
         "metadata": {"name": p.name, "generation": 1},
         "spec": {"gpuType": p.name, "nodeSelector": {"gpumix.io/gpu-class": p.name}}}
        for p in POOLS
    ]  # fmt: skip


def node_infos(nodes: int) -> list[NodeInfo]:
    by_name = {p.name: p for p in POOLS}
    return [
        NodeInfo(
            name=f"gpu-{pool}-{i}",
            labels={"gpumix.io/gpu-class": pool},
            allocatable_gpus=by_name[pool].gpus_per_node,
        )
        for pool, n in node_counts(nodes).items()
        for i in range(n)
    ]


@functools.cache
def profile_bodies() -> tuple[dict[str, Any], ...]:
    """One GPUProfile per (model, GPU type, TP degree) whose weights fit, roofline tables at
    every TPOT in :data:`TPOTS` (the planner interpolates between them)."""
    out = []
    for (model, _), pool in itertools.product(MODELS, POOLS):
        shape, spec = model_shape(model), CATALOG[pool.name]
        for k in (1, 2, 4, 8):
            if k > pool.gpus_per_node or not replica_fits(spec, shape, k):
                continue
            profile = estimate_profile(
                spec, shape, input_edges=INPUT_EDGES, output_edges=OUTPUT_EDGES,
                tpots_ms=TPOTS, gpus=k,
            )  # fmt: skip
            body = profile.model_dump(by_alias=True, mode="json", exclude_none=True)
            body.update(apiVersion="gpumix.io/v1alpha1", kind="GPUProfile")
            out.append(body)
    return tuple(out)


def service_bodies(n: int, seed: int, namespace: str = "default") -> list[dict[str, Any]]:
    """``n`` heterogeneous LLMServices (model, rate, SLO, histogram, a few floors/budgets)."""
    rng = random.Random(seed)
    models = [m for m, _ in MODELS]
    weights = [w for _, w in MODELS]
    out = []
    for i in range(n):
        model = rng.choices(models, weights)[0]
        shape = rng.choice(list(SHAPES))
        hist = [[round(c * rng.uniform(0.5, 1.5), 1) for c in row] for row in SHAPES[shape]]
        rate = round(min(40.0, max(0.3, rng.lognormvariate(math.log(3.0), 1.0))), 2)
        if model.endswith("70b-hf"):
            rate = round(max(0.3, rate / 3), 2)
        spec: dict[str, Any] = {
            "model": {"name": model},
            "slo": {"tpotMs": rng.choice(SLOS[model])},
            "workload": {
                "requestRate": rate,
                "overProvision": 0.1,
                "inputEdges": INPUT_EDGES,
                "outputEdges": OUTPUT_EDGES,
                "histogram": hist,
            },
        }
        if rng.random() < 0.1:
            spec["minReplicas"] = 2
        if rng.random() < 0.1:
            spec["priority"] = "Batch"
        created = f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        out.append({
            "apiVersion": "gpumix.io/v1alpha1", "kind": "LLMService",
            "metadata": {"name": f"svc-{i:04d}", "namespace": namespace, "uid": f"uid-{i}",
                         "generation": 1, "creationTimestamp": created},
            "spec": spec,
        })  # fmt: skip
    return out


def snapshot(
    services: list[dict[str, Any]],
    nodes: int,
    time_limit_s: float,
    running: dict[rc.ObjectKey, Running] | None = None,
) -> rc.Snapshot:
    return rc.Snapshot(
        services=services, pools=pool_bodies(), profiles=list(profile_bodies()),
        nodes=node_infos(nodes), pods=[], running=running or {}, autoscalers={}, now=NOW,
        time_limit_s=time_limit_s,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Offline: planner passes, the joint solve alone, one-at-a-time and the bound
# ---------------------------------------------------------------------------------------------


class Captured:
    """The joint instances the pass hands to the solver (``gpumix.reconcile.cluster._solve``),
    and the seconds spent in it (the joint solve, cache misses only)."""

    def __init__(self) -> None:
        self.instances: list[str] = []
        self.solve_s = 0.0
        self.calls = 0
        self._inner = rc._solve

    def __call__(self, instance: JointInstance, time_limit_s: float) -> Any:
        self.calls += 1
        self.instances.append(instance.model_dump_json())
        start = time.perf_counter()
        try:
            return self._inner(instance, time_limit_s)
        finally:
            self.solve_s += time.perf_counter() - start


def applied(
    services: list[dict[str, Any]], decision: rc.ClusterDecision
) -> tuple[list[dict[str, Any]], dict[rc.ObjectKey, Running]]:
    """The fleet after the operator wrote ``decision``: statuses written, Deployments ready."""
    bodies, running = [], {}
    for body in services:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        sd = decision.services[key]
        new = copy.deepcopy(body)
        new["status"] = sd.status.model_dump(by_alias=True, mode="json", exclude_none=True)
        bodies.append(new)
        if sd.target:
            live = {o: n for o, n in sd.target.items() if n}
            gpus = {o: sd.choices[o].gpus_per_replica for o in live if o in sd.choices}
            running[key] = Running(replicas=live, ready=live, gpus_per_replica=gpus)
    return bodies, running


def timed_pass(snap: rc.Snapshot, profile: bool) -> tuple[rc.ClusterDecision, float, str]:
    captured = Captured()
    rc._solve = captured  # type: ignore[assignment]
    profiler = cProfile.Profile() if profile else None
    try:
        start = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        decision = rc.plan_cluster(snap)
        if profiler is not None:
            profiler.disable()
        seconds = time.perf_counter() - start
    finally:
        rc._solve = captured._inner
    report = ""
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(35)
        report = out.getvalue()
    timed_pass.last = captured  # type: ignore[attr-defined]
    return decision, seconds, report


CACHES: dict[str, DigestCache[Any]] = {
    "joint plans": rc._solved,
    "joint plans rolling out": rc._rolling,
    "one-service plans": joint_solve._own,
    "balanced splits": joint_solve._splits,
    "predictions": rs._predictions,
    "single-type baselines": rs._baselines_kept,
}
"""The planner's caches, filled by the passes of a run."""


def cache_memory() -> dict[str, Any]:
    """Per cache: entries, bytes kept packed, the bytes of the same values as objects
    (``tracemalloc`` while unpacking them all) and the time a hit spends unpacking (timed
    without ``tracemalloc``)."""
    out: dict[str, Any] = {}
    for name, cache in CACHES.items():
        t0 = time.perf_counter()
        cache.values()
        unpack_s = time.perf_counter() - t0
        tracemalloc.start()
        values = cache.values()
        as_objects = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del values
        out[name] = {
            "entries": len(cache),
            "hot": min(len(cache), cache.hot),
            "packed_mb": round(cache.packed_bytes() / 1e6, 2),
            "objects_mb": round(as_objects / 1e6, 2),
            "unpack_us_per_hit": round(unpack_s / len(cache) * 1e6) if len(cache) else None,
        }
    packed = sum(c["packed_mb"] for c in out.values())
    objects = sum(c["objects_mb"] for c in out.values())
    ratio = round(objects / packed, 1) if packed else None
    out["total"] = {"packed_mb": round(packed, 2), "objects_mb": round(objects, 2),
                    "objects_per_packed": ratio}  # fmt: skip
    return out


def promises(decision: rc.ClusterDecision) -> dict[str, Any]:
    """What a pass's plan promises: services whose status says their SLO is not at risk (the
    predicted attainment meets the target), the predicted attainment's spread, the fleet's
    cost."""
    statuses = [sd.status for sd in decision.services.values()]
    risk = [next((c for c in s.conditions if c.type == rs.SLO_AT_RISK), None) for s in statuses]
    met = [s.predicted_attainment for s in statuses if s.predicted_attainment is not None]
    spread = (
        {q: round(float(np.percentile(met, p)), 4) for q, p in (("min", 0), ("p10", 10),
                                                                 ("median", 50))}
        if met
        else None
    )  # fmt: skip
    return {
        "on_target": sum(c is not None and c.status.value == "False" for c in risk),
        "predicted_attainment": spread,
        "cost_per_hour": round(sum(s.cost_per_hour or 0.0 for s in statuses), 2),
    }


def bound_of(cost: float, gap: float | None) -> float | None:
    return None if gap is None else cost * (1 - gap)


QUIET_RUNS = 3
"""Quiet passes timed each way (:func:`quiet_passes`)."""


def quiet_passes(snap: rc.Snapshot) -> dict[str, float]:
    """A pass in which nothing changed (the statuses the steady pass wrote, read back), as the
    operator runs it, against the same pass preparing every service again (the last pass's
    preparations forgotten, ``gpumix.reconcile.cluster._PreparedLastPass``): medians of
    :data:`QUIET_RUNS` each, alternated."""
    rc.plan_cluster(snap)  # what it prepares is kept for the next
    kept, again = [], []
    for _ in range(QUIET_RUNS):
        for times, forget in ((kept, False), (again, True)):
            if forget:
                rc._PREPARED.clear()
            t0 = time.perf_counter()
            rc.plan_cluster(snap)
            times.append(time.perf_counter() - t0)
    median_kept, median_again = float(np.median(kept)), float(np.median(again))
    return {
        "pass_quiet_s": round(median_kept, 3),
        "pass_quiet_prepared_again_s": round(median_again, 3),
        "quiet_prepared_again_vs_kept": round(median_again / median_kept, 2),
    }


def offline(
    n_services: int, n_nodes: int, seed: int, time_limit_s: float, *, profile: bool,
    sequential: bool,
) -> dict[str, Any]:  # fmt: skip
    for cache in CACHES.values():  # each size starts cold
        cache.clear()
    rc._PREPARED.clear()
    memory.collect_less()  # as `gpumix run` collects garbage
    services = service_bodies(n_services, seed)
    t0 = time.perf_counter()
    profile_bodies()
    profiles_s = time.perf_counter() - t0
    cold, cold_s, cold_prof = timed_pass(snapshot(services, n_nodes, time_limit_s), profile)
    cap = timed_pass.last  # type: ignore[attr-defined]
    instance_json = cap.instances[0]
    cold_solves, cold_solve_s = cap.calls, cap.solve_s
    bodies, running = applied(services, cold)
    steady, steady_s, _ = timed_pass(snapshot(bodies, n_nodes, time_limit_s, running), False)
    steady_solve_s = timed_pass.last.solve_s  # type: ignore[attr-defined]
    # One service's workload changes: its rate ×1.8 (spec change: a new generation).
    changed = copy.deepcopy(bodies)
    victim = changed[len(changed) // 2]
    victim["spec"]["workload"]["requestRate"] = round(
        victim["spec"]["workload"]["requestRate"] * 1.8, 2
    )
    victim["metadata"]["generation"] += 1
    bodies2, _ = applied(bodies, steady)
    for b, c in zip(bodies2, changed, strict=True):
        c["status"] = b["status"]
    quiet = quiet_passes(snapshot(bodies2, n_nodes, time_limit_s, running))
    change, change_s, change_prof = timed_pass(
        snapshot(changed, n_nodes, time_limit_s, running), profile
    )
    change_cap = timed_pass.last  # type: ignore[attr-defined]
    key = (victim["metadata"]["namespace"], victim["metadata"]["name"])
    replanned = change.services[key].target != steady.services[key].target
    # Plans that moved with nothing changed for them: the steady pass against the cold plan
    # applied, and the change pass's other services (what would be rollouts for nothing).
    steady_moved = sum(steady.services[k].target != cold.services[k].target for k in cold.services)
    others_moved = sum(
        change.services[k].target != steady.services[k].target for k in steady.services if k != key
    )

    # The joint solve alone on the cold pass's instance, against one-at-a-time and the bound.
    instance = JointInstance.model_validate_json(instance_json)
    t0 = time.perf_counter()
    joint = solve_joint(instance, time_limit_s=time_limit_s, gap_rel=GAP)
    joint_s = time.perf_counter() - t0
    assert joint is not None
    seq: dict[str, Any] = {}
    if sequential:
        t0 = time.perf_counter()
        one = solve_sequential(instance, time_limit_s=time_limit_s, gap_rel=GAP)
        seq_s = time.perf_counter() - t0
        seq = {
            "sequential_s": round(seq_s, 3),
            "sequential_cost": round(one.cost_per_hour, 3),
            "sequential_served_in_full": one.served,
            "joint_vs_sequential_cost": round(joint.cost_per_hour / one.cost_per_hour, 4)
            if one.cost_per_hour
            else None,
        }
    objective = joint.cost_per_hour + joint.churn_cost
    gap = joint.result.gap
    bound = bound_of(objective, gap)
    served = sum(not a.short for a in joint.services.values())
    out = {
        "services": n_services,
        "nodes": n_nodes,
        "gpus": {
            p: sum(
                x.allocatable_gpus
                for x in node_infos(n_nodes)
                if x.labels["gpumix.io/gpu-class"] == p
            )
            for p in node_counts(n_nodes)
        },
        "options": sum(len(s.options) for s in instance.services),
        "profiles_build_s": round(profiles_s, 3),
        "pass_cold_s": round(cold_s, 3),
        "pass_cold_joint_solves": cold_solves,
        "pass_cold_solve_s": round(cold_solve_s, 3),
        "pass_steady_s": round(steady_s, 3),
        **quiet,
        "steady_promises": promises(steady),
        "pass_steady_solve_s": round(steady_solve_s, 3),
        "pass_change_s": round(change_s, 3),
        "pass_change_solve_s": round(change_cap.solve_s, 3),
        "pass_change_joint_solves": change_cap.calls,
        "change_replanned": replanned,
        "steady_plans_moved": steady_moved,
        "change_other_plans_moved": others_moved,
        "joint_s": round(joint_s, 3),
        "joint_status": joint.result.status,
        "joint_gap": gap,
        "joint_message": joint.result.message,
        "joint_cost": round(joint.cost_per_hour, 3),
        "joint_objective": round(objective, 3),
        "bound": None if bound is None else round(bound, 3),
        "joint_vs_bound": None if not bound else round(objective / bound, 4),
        "joint_served_in_full": served,
        "caches": cache_memory(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        **seq,
    }
    if profile:
        out["profile_cold"] = cold_prof
        out["profile_change"] = change_prof
    return out


# ---------------------------------------------------------------------------------------------
# Live: a local control plane with KWOK nodes, `gpumix run` as a subprocess
# ---------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
GROUP = "/apis/gpumix.io/v1alpha1"
IMAGE_MALLOC_ARENA_MAX = int(
    re.search(r"MALLOC_ARENA_MAX=(\d+)", (ROOT / "Dockerfile").read_text()).group(1)  # type: ignore[union-attr]
)
"""The operator image's glibc arena cap: the live operator runs as the image would."""


def _proc_stats(pid: int) -> tuple[float, float, float]:
    """(peak RSS in MB, RSS now in MB, CPU seconds user+system) of a process, from /proc."""
    mb = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmHWM:", "VmRSS:")):
            mb[line.split(":")[0]] = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return mb["VmHWM"], mb["VmRSS"], (int(fields[11]) + int(fields[12])) / ticks


def _children_stats(pid: int) -> tuple[float, float]:
    """(summed peak RSS in MB, summed CPU seconds) of ``pid``'s child processes (its simulation
    workers and their resource tracker), from /proc; the RSS is an upper bound of what they
    held at once."""
    rss = cpu = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                peak, _, used = _proc_stats(int(stat.parent.name))
                rss, cpu = rss + peak, cpu + used
        except (OSError, ValueError, KeyError):
            continue  # it ended while being read
    return rss, cpu


def _requests(api: Any) -> dict[str, float]:
    """apiserver_request_total summed by (verb, resource), from the apiserver's /metrics."""
    text = api.get("/metrics")["raw"]
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(
            kv.split("=", 1) for kv in line[line.index("{") + 1 : line.rindex("}")].split(",")
        )
        key = f"{labels.get('verb', '').strip(chr(34))} {labels.get('resource', '').strip(chr(34))}"
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _operator_metric(port: int, name: str) -> dict[str, float]:
    """The samples of the operator's metric ``name``. Only its family is asked for
    (prometheus_client's ``name[]``): the bench reads a metric or two every 2 s, and the whole
    exposition of a 500-service fleet (a series per service and pool) took a fifth of the
    operator's CPU while its passes ran (py-spy), where Prometheus scrapes every 15-30 s."""
    query = urllib.parse.urlencode({"name[]": name})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=10) as resp:
        text = resp.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name)
    }


def _settle(port: int, api: Any, namespace: str, timeout_s: float = 600.0) -> float:
    """Seconds until every Deployment in ``namespace`` runs its replicas, all available, and
    the operator has then run a whole pass that wrote nothing: what it planned is rolled out
    and the statuses have caught up. A window measured before that counts the tail of the
    last plan's rollout (pods turning Ready, old pools removed), not what comes next. A pass
    that wrote nothing alone was not enough: a fleet's pods turn Ready in waves, and passes
    between two make-before-break steps write nothing (session 27: 21 services' second step
    fell in a change's window)."""
    start = time.perf_counter()

    def read() -> tuple[float, float]:
        passes = _operator_metric(port, "gpumix_planner_pass_seconds_count")
        writes = _operator_metric(port, "gpumix_cluster_writes_total")
        return sum(passes.values()), sum(writes.values())

    passes, _ = read()
    mark: float | None = None  # the writes when a pass was last seen ending, rolled out
    while time.perf_counter() - start < timeout_s:
        time.sleep(2)
        now_passes, writes = read()
        if now_passes > passes:
            if mark is not None and writes == mark:
                return round(time.perf_counter() - start, 1)
            mark = writes if _rolled_out(api, namespace) else None
        passes = now_passes
    behind, unplaced = _behind(api, namespace), _unplaced(api, namespace)
    raise RuntimeError(
        f"not settled after {timeout_s:.0f} s: {len(behind)} Deployments not rolled out "
        f"{behind[:10]}; {len(unplaced)} pods unschedulable {unplaced[:5]}"
        if behind
        else f"the operator still wrote after {timeout_s:.0f} s"
    )


def _rolled_out(api: Any, namespace: str) -> bool:
    """Every Deployment's replicas, the engines' and the routers', are up to date and
    available, none more or fewer (a router's first ready pod changes its service's objects)."""
    return not _behind(api, namespace)


def _behind(api: Any, namespace: str) -> list[str]:
    """The Deployments not rolled out (:func:`_rolled_out`), each with its replicas wanted,
    current, up to date and available."""
    items = api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]
    out = []
    for i in items:
        st, want = i.get("status") or {}, i["spec"].get("replicas", 0)
        seen = [st.get(k, 0) for k in ("replicas", "updatedReplicas", "availableReplicas")]
        if seen != [want] * 3:
            out.append(f"{i['metadata']['name']} (wanted {want}, current/updated/available "
                       f"{'/'.join(map(str, seen))})")  # fmt: skip
    return out


def _unplaced(api: Any, namespace: str) -> list[str]:
    """Pods the scheduler could not place, with its reason."""
    items = api.get(f"/api/v1/namespaces/{namespace}/pods?fieldSelector=spec.nodeName%3D")["items"]
    return [
        f"{i['metadata']['name']}: {c.get('message', '')}"
        for i in items
        for c in (i.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
    ]


def _operator_metric_or_none(port: int, name: str) -> dict[str, float] | None:
    """:func:`_operator_metric`, ``None`` while the operator does not answer (starting)."""
    try:
        return _operator_metric(port, name)
    except OSError:
        return None


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted ``values`` (``None`` when empty)."""
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))], 2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post_all(api: Any, path: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        api.request("POST", path, {k: v for k, v in body.items() if k != "status"})


def _planned(api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    items = api.get(f"{GROUP}/namespaces/{namespace}/llmservices")["items"]
    return {i["metadata"]["name"]: i for i in items}


def _changed_fields(
    before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]
) -> dict[str, int]:
    """Services whose status changed, by field (a condition by its type), between two reads."""
    out: dict[str, int] = {}
    for name, body in now.items():
        old, new = before.get(name, {}), body.get("status") or {}
        fields = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        if "conditions" in fields:
            fields.discard("conditions")
            conds = {c["type"]: c for c in old.get("conditions", [])}
            fields |= {f"condition {c['type']}" for c in new.get("conditions", [])
                       if conds.get(c["type"]) != c}  # fmt: skip
        for field in fields:
            out[field] = out.get(field, 0) + 1
    return out


def _applied(
    api: Any, namespace: str, service: str, old: dict[str, int], *, generation: int, since: float
) -> bool:
    """Until ``service``'s rate change is applied; whether its plan was kept. A new plan is
    applied when its Deployments' replicas differ from ``old``; a kept plan (the change fits
    the replicas it has) when the status observes ``generation``, which the operator writes
    after the objects of the same pass. Before, the bench waited only for the Deployments, and
    a change that kept its plan counted the full 600 s of the wait."""
    path = f"{GROUP}/namespaces/{namespace}/llmservices/{service}"
    while time.perf_counter() < since + 600:
        if _deployed(api, namespace, service) != old:
            return False
        observed = (api.get(path).get("status") or {}).get("observedGeneration") or 0
        if observed >= generation:
            return _deployed(api, namespace, service) == old
        time.sleep(0.2)
    raise RuntimeError(f"{service}: rate change not applied within 600 s")


def _search_ended(
    api: Any, namespace: str, service: str, *, generation: int, since: float
) -> tuple[bool, float]:
    """Whether ``service``'s search for ``generation`` was cut at its slice (status
    ``derating.searching`` once it observes the generation), and the seconds from ``since``
    until it had ended: a cut search's final plan is applied in the pass that ends it, objects
    before status."""
    path = f"{GROUP}/namespaces/{namespace}/llmservices/{service}"
    cut = None
    while time.perf_counter() < since + 600:
        status = api.get(path).get("status") or {}
        if (status.get("observedGeneration") or 0) >= generation:
            searching = bool((status.get("derating") or {}).get("searching"))
            cut = searching if cut is None else cut
            if not searching:
                return cut, time.perf_counter() - since
        time.sleep(0.2)
    raise RuntimeError(f"{service}: search for generation {generation} not ended within 600 s")


def _deployed(api: Any, namespace: str, service: str) -> dict[str, int]:
    query = urllib.parse.urlencode({"labelSelector": f"gpumix.io/service={service}"})
    items = api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments?{query}")["items"]
    return {i["metadata"]["name"]: i["spec"].get("replicas", 0) for i in items}


LEASE_RENEWALS_PER_S = 50
"""Node Lease renewals per second the live bench allows KWOK (:func:`node_lease_s`)."""


def node_lease_s(nodes: int) -> int:
    """The node Lease duration (hack/'s default 40 s, or longer) that keeps KWOK's renewals
    (every quarter of it) near ``LEASE_RENEWALS_PER_S``: at 5,000 nodes and 40 s they were
    14,474 PUTs in a quiet 30 s, the apiserver's busiest client, on the same 2 cores as the
    operator. On a real cluster the kubelets' heartbeats load its control plane, not the
    operator's node."""
    return max(40, math.ceil(4 * nodes / LEASE_RENEWALS_PER_S))


SERVICES_PER_SYSTEM_NODE = 40
"""Services whose routers (2 pods of 100m CPU each, `gpumix.render.router`) one CPU-only node
of 16 CPUs and 110 pods holds, with room to spare. With one 4-CPU node for every fleet, most of
500 services' 1,000 router pods stayed Pending, and routers turning ready one by one kept
rewriting their services' objects long after the engines had rolled out (session 27)."""


def live(
    n_services: int,
    n_nodes: int,
    seed: int,
    changes: int,
    time_limit_s: float,
    *,
    keep: bool,
    malloc_arena_max: int,
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "hack"))
    import gpumix_testcluster as tc  # noqa: PLC0415 - hack/ is not a package

    pools = [
        tc.GpuPool(name=p.name, gpu_class=p.name, product=p.product,
                   gpus_per_node=p.gpus_per_node, gpu_memory_mib=p.memory_mib, nodes=n,
                   instance_type=f"bench-{p.name}", cpu="96", memory="1024Gi")
        for p in POOLS
        for n in [node_counts(n_nodes)[p.name]]
    ] + [tc.GpuPool(name="system", gpu_class=None, product=None, gpus_per_node=0,
                    gpu_memory_mib=0, nodes=math.ceil(n_services / SERVICES_PER_SYSTEM_NODE),
                    instance_type="m6i.4xlarge", cpu="16", memory="64Gi")]  # fmt: skip
    directory = Path(tempfile.mkdtemp(prefix="gpumix-scale-"))
    t0 = time.perf_counter()
    cluster = tc.Cluster.start(
        directory, tc.build_binaries(), pools, timeout=1800.0, node_lease_s=node_lease_s(n_nodes)
    )
    cluster_s = time.perf_counter() - t0
    api = cluster.api()
    operator: subprocess.Popen[bytes] | None = None
    try:
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                doc)  # fmt: skip
        time.sleep(5)  # CRDs Established
        ns = "default"
        _post_all(api, f"{GROUP}/gpupools", pool_bodies())
        _post_all(api, f"{GROUP}/gpuprofiles", list(profile_bodies()))
        services = service_bodies(n_services, seed, ns)
        for body in services:
            body["metadata"] = {"name": body["metadata"]["name"], "namespace": ns}
        _post_all(api, f"{GROUP}/namespaces/{ns}/llmservices", services)
        port = _free_port()
        # Outside the cluster's directory, which stopping it removes: the log outlives the run.
        log_fd, log_path = tempfile.mkstemp(prefix="gpumix-scale-operator-", suffix=".log")
        log = os.fdopen(log_fd, "w")
        before = _requests(api)
        start = time.perf_counter()
        command = [
            sys.executable, "-m", "gpumix.cli", "run", "--kubeconfig", str(cluster.kubeconfig),
            "--interval", "60", "--bind", "127.0.0.1", "--metrics-port", str(port),
            "--health-port", str(_free_port()), "--log-format", "plain", "--no-leader-elect",
            "--solver-time-limit", str(time_limit_s),
        ]  # fmt: skip
        env = dict(os.environ)
        env.pop("MALLOC_ARENA_MAX", None)
        if malloc_arena_max:
            env["MALLOC_ARENA_MAX"] = str(malloc_arena_max)
        operator = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

        def sample() -> tuple[float, float, float]:
            assert operator is not None
            return _proc_stats(operator.pid)

        def all_planned() -> bool:
            got = _planned(api, ns)
            return len(got) == n_services and all(
                any(c["type"] == "Planned" for c in (b.get("status") or {}).get("conditions", []))
                for b in got.values()
            )

        while not all_planned():
            if operator.poll() is not None:
                raise RuntimeError(f"operator exited {operator.returncode}; see {log_path}")
            time.sleep(2)
        first_s = time.perf_counter() - start
        _, _, cpu_first = sample()
        settle_s = _settle(port, api, ns, timeout_s=1200.0)  # a whole fleet rolls out
        settle_req = _requests(api)
        settle_writes = _operator_metric(port, "gpumix_cluster_writes_total")
        settle_passes = _operator_metric(port, "gpumix_planner_pass_seconds_count")
        settle_views = _operator_metric(port, "gpumix_view_changes_total")
        statuses = {n: b.get("status") or {} for n, b in _planned(api, ns).items()}
        time.sleep(30)  # a quiet window: what the operator sends when nothing changes
        quiet_changed = _changed_fields(statuses, _planned(api, ns))
        quiet_req = _delta(_requests(api), settle_req)
        quiet_writes = _delta(_operator_metric(port, "gpumix_cluster_writes_total"),
                              settle_writes)  # fmt: skip
        quiet_passes = _delta(_operator_metric(port, "gpumix_planner_pass_seconds_count"),
                              settle_passes)  # fmt: skip
        quiet_views = _delta(_operator_metric(port, "gpumix_view_changes_total"), settle_views)
        rng = random.Random(seed + 1)
        latencies: list[float] = []
        kept: list[bool] = []
        cut: list[bool] = []
        ended: list[float] = []
        change_req: list[dict[str, float]] = []
        change_writes: list[dict[str, float]] = []
        change_others: list[dict[str, int]] = []
        settled: list[float] = []
        for _ in range(changes):
            body = _planned(api, ns)
            candidates = [
                n for n, b in body.items()
                if (b.get("status") or {}).get("replicas")
            ]  # fmt: skip
            name = rng.choice(sorted(candidates or body))
            old_rate = body[name]["spec"]["workload"]["requestRate"]
            old = _deployed(api, ns, name)
            others = {n: b.get("status") or {} for n, b in body.items() if n != name}
            req0, w0 = _requests(api), _operator_metric(port, "gpumix_cluster_writes_total")
            t_change = time.perf_counter()
            patched = api.request("PATCH", f"{GROUP}/namespaces/{ns}/llmservices/{name}",
                                  {"spec": {"workload": {"requestRate": round(old_rate * 2.5, 2)}}},
                                  content_type="application/merge-patch+json")  # fmt: skip
            generation = patched["metadata"]["generation"]
            kept.append(_applied(api, ns, name, old, generation=generation, since=t_change))
            latencies.append(time.perf_counter() - t_change)
            was_cut, end_s = _search_ended(api, ns, name, generation=generation, since=t_change)
            cut.append(was_cut)
            ended.append(end_s)
            settled.append(_settle(port, api, ns))
            change_req.append(_delta(_requests(api), req0))
            change_writes.append(_delta(_operator_metric(port, "gpumix_cluster_writes_total"), w0))
            after = {n: b for n, b in _planned(api, ns).items() if n != name}
            change_others.append(_changed_fields(others, after))
        rss, rss_now, cpu = sample()
        workers_rss, workers_cpu = _children_stats(operator.pid)
        passes = _operator_metric(port, "gpumix_planner_pass_seconds")
        stages = _operator_metric(port, "gpumix_planner_stage_seconds_sum")
        total_req = _delta(_requests(api), before)
        by_change = [round(x, 2) for x in latencies]
        latencies.sort()
        by_end = [round(x, 2) for x in ended]
        ended.sort()
        # A restart (a new leader's start alike): its passes must find everything as planned.
        operator.terminate()
        operator.wait(timeout=60)
        log.write("--- bench: the operator restarts ---\n")
        log.flush()
        t_restart = time.perf_counter()
        operator = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        count = "gpumix_planner_pass_seconds_count"
        while ((_operator_metric_or_none(port, count) or {}).get(count) or 0) < 1:
            if operator.poll() is not None:
                raise RuntimeError(f"operator exited {operator.returncode}; see {log_path}")
            time.sleep(1)
        restart_first_s = time.perf_counter() - t_restart
        time.sleep(30)
        restart_writes = _operator_metric(port, "gpumix_cluster_writes_total")
        restart_rss, _, _ = sample()
        return {
            "services": n_services,
            "nodes": n_nodes,
            "cluster_start_s": round(cluster_s, 1),
            "node_lease_s": node_lease_s(n_nodes),
            "first_plan_all_s": round(first_s, 1),
            "cpu_s_to_first_plan": round(cpu_first, 1),
            "change_to_applied_s": [round(x, 2) for x in latencies],
            "per_change_applied_s": by_change,
            "per_change_plan_kept": kept,
            "change_to_applied_p50_s": _quantile(latencies, 0.5),
            "change_to_applied_p99_s": _quantile(latencies, 0.99),
            "per_change_search_cut": cut,
            "per_change_search_ended_s": by_end,
            "change_to_search_ended_p50_s": _quantile(ended, 0.5),
            "change_to_search_ended_p99_s": _quantile(ended, 0.99),
            "operator_peak_rss_mb": round(rss, 1),
            "operator_rss_after_changes_mb": round(rss_now, 1),
            "simulation_workers_peak_rss_mb": round(workers_rss, 1),
            "simulation_workers_cpu_s": round(workers_cpu, 1),
            "malloc_arena_max": malloc_arena_max or None,
            "operator_cpu_s": round(cpu, 1),
            "passes": {k: v for k, v in passes.items() if k.endswith(("_count", "_sum"))},
            "pass_stage_seconds": {k.split('"')[1]: round(v, 2) for k, v in stages.items()},
            "restart_first_pass_s": round(restart_first_s, 1),
            "restart_writes": restart_writes,
            "restart_peak_rss_mb": round(restart_rss, 1),
            "quiet_30s_requests": quiet_req,
            "quiet_30s_writes": quiet_writes,
            "quiet_30s_passes": quiet_passes,
            "quiet_30s_view_changes": quiet_views,
            "quiet_30s_status_changes": quiet_changed,
            "per_change_requests": change_req,
            "per_change_writes": change_writes,
            "per_change_other_status_changes": change_others,
            "per_change_settled_s": settled,
            "first_plan_settled_s": settle_s,
            "requests_total": total_req,
            "operator_log": log_path,
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                operator.kill()
        if not keep:
            cluster.stop()


def print_live(r: dict[str, Any]) -> None:
    print(f"live {r['services']} services × {r['nodes']} KWOK nodes (cluster up in "
          f"{r['cluster_start_s']} s, node Leases {r['node_lease_s']} s), load "
          f"{r['load_average_1m']}")  # fmt: skip
    print(f"  every service planned {r['first_plan_all_s']} s after the operator started; its "
          f"rollout settled {r['first_plan_settled_s']} s later")  # fmt: skip
    print(f"  rate change → applied (Deployments changed, or the plan kept): p50 "
          f"{r['change_to_applied_p50_s']} s, p99 {r['change_to_applied_p99_s']} s "
          f"({r['change_to_applied_s']})")  # fmt: skip
    print(
        f"  rate change → its search ended (cut at the slice in {sum(r['per_change_search_cut'])}"
        f" of {len(r['per_change_search_cut'])}, then searched on): p50 "
        f"{r['change_to_search_ended_p50_s']} s, p99 {r['change_to_search_ended_p99_s']} s"
    )
    print(f"  operator peak RSS {r['operator_peak_rss_mb']} MB (after the changes "
          f"{r['operator_rss_after_changes_mb']} MB; MALLOC_ARENA_MAX "
          f"{r['malloc_arena_max'] or 'unset'}), CPU {r['operator_cpu_s']} s; its simulation "
          f"workers' peak RSS {r['simulation_workers_peak_rss_mb']} MB, CPU "
          f"{r['simulation_workers_cpu_s']} s")  # fmt: skip
    print(f"  pass stages (s, summed): {r['pass_stage_seconds']}")
    print(f"  restarted: first pass {r['restart_first_pass_s']} s after the start; writes "
          f"until 30 s after it: {r['restart_writes'] or 'none'}; peak RSS "
          f"{r['restart_peak_rss_mb']} MB")  # fmt: skip
    print(f"  operator log (both operators): {r['operator_log']}")
    print(f"  quiet 30 s: passes {r['quiet_30s_passes']} (view changes by kind "
          f"{r['quiet_30s_view_changes']}), writes {r['quiet_30s_writes']}, "
          f"apiserver requests {r['quiet_30s_requests']}; services whose status changed, by "
          f"field: {r['quiet_30s_status_changes']}")  # fmt: skip
    for i, (req, w, others) in enumerate(zip(r["per_change_requests"], r["per_change_writes"],
                                             r["per_change_other_status_changes"],
                                             strict=True)):  # fmt: skip
        what = "plan kept" if r["per_change_plan_kept"][i] else "Deployments changed"
        print(f"  change {i}: applied in {r['per_change_applied_s'][i]} s ({what}), settled "
              f"{r['per_change_settled_s'][i]} s later: writes {w}; other services whose status "
              f"changed, by field: {others or 'none'}; apiserver requests {req}")  # fmt: skip


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        s, n = part.lower().split("x")
        sizes.append((int(s), int(n)))
    return sizes


def print_offline(r: dict[str, Any]) -> None:
    print(f"offline {r['services']} services × {r['nodes']} nodes ({r['options']} options; "
          f"GPUs {r['gpus']}), load {r['load_average_1m']}")  # fmt: skip
    print(f"  pass: cold {r['pass_cold_s']:.2f} s ({r['pass_cold_joint_solves']} joint solves, "
          f"{r['pass_cold_solve_s']:.2f} s in them), steady {r['pass_steady_s']:.2f} s, "
          f"after one rate change {r['pass_change_s']:.2f} s "
          f"({r['pass_change_solve_s']:.2f} s solving; "
          f"replanned: {r['change_replanned']})")  # fmt: skip
    print(f"  a quiet pass (nothing changed): {r['pass_quiet_s']:.2f} s; preparing every "
          f"service again {r['pass_quiet_prepared_again_s']:.2f} s "
          f"({r['quiet_prepared_again_vs_kept']}×)")  # fmt: skip
    p = r["steady_promises"]
    print(f"  the plan applied: {p['on_target']}/{r['services']} services on target "
          f"(predicted attainment min / p10 / median {p['predicted_attainment']}), "
          f"{p['cost_per_hour']:.2f} $/h")  # fmt: skip
    print(f"  plans moved with nothing changed for them: {r['steady_plans_moved']} in the steady "
          f"pass, {r['change_other_plans_moved']} besides the changed service")  # fmt: skip
    print(f"  joint solve alone: {r['joint_s']:.2f} s, {r['joint_status']}, gap "
          f"{r['joint_gap']}, {r['joint_cost']:.2f} $/h, bound {r['bound']} "
          f"(objective/bound {r['joint_vs_bound']}); {r['joint_message']}")  # fmt: skip
    if "sequential_cost" in r:
        print(f"  one at a time: {r['sequential_s']:.2f} s, {r['sequential_cost']:.2f} $/h, "
              f"{r['sequential_served_in_full']}/{r['services']} served in full; "
              f"joint/one-at-a-time cost {r['joint_vs_sequential_cost']}")  # fmt: skip
    total = r["caches"]["total"]
    print(f"  planner caches: {total['packed_mb']} MB kept packed; the same values as objects "
          f"{total['objects_mb']} MB ({total['objects_per_packed']}×)")  # fmt: skip
    for name, c in r["caches"].items():
        if name != "total":
            print(
                f"    {name}: {c['entries']} entries ({c['hot']} also as objects), "
                f"{c['packed_mb']} MB packed, "
                f"{c['objects_mb']} MB as objects, {c['unpack_us_per_hit']} µs a hit"
            )
    for k in ("profile_cold", "profile_change"):
        if k in r:
            print(f"  --- {k} ---")
            print(r[k])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_SIZES}, live {QUICK_CHANGES} change")  # fmt: skip
    parser.add_argument("--mode", choices=["offline", "live", "both"], default="offline")
    parser.add_argument("--sizes", help="services x nodes, comma-separated (e.g. 50x500)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=30.0, help="joint solve limit (s)")
    parser.add_argument("--profile", action="store_true", help="cProfile the passes")
    parser.add_argument("--no-sequential", action="store_true",
                        help="skip the one-at-a-time baseline")  # fmt: skip
    parser.add_argument("--changes", type=int, default=0, help="live: rate changes (default "
                        f"{QUICK_CHANGES} with --quick, else 10)")  # fmt: skip
    parser.add_argument("--keep-cluster", action="store_true", help="live: leave it running")
    parser.add_argument("--malloc-arena-max", type=int, default=IMAGE_MALLOC_ARENA_MAX,
                        help="live: the operator's MALLOC_ARENA_MAX (default: the image's, "
                             "from the Dockerfile; 0: unset, glibc's default)")  # fmt: skip
    args = parser.parse_args()
    args.changes = args.changes or (QUICK_CHANGES if args.quick else 10)
    sizes = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    result: dict[str, Any] = {"offline": [], "live": []}
    if args.mode in ("offline", "both"):
        for s, n in sizes:
            r = offline(
                s,
                n,
                args.seed,
                args.time_limit,
                profile=args.profile,
                sequential=not args.no_sequential,
            )
            print_offline(r)
            result["offline"].append({k: v for k, v in r.items() if not k.startswith("profile_")})
    if args.mode in ("live", "both"):
        for s, n in sizes:
            r = live(
                s,
                n,
                args.seed,
                args.changes,
                args.time_limit,
                keep=args.keep_cluster,
                malloc_arena_max=args.malloc_arena_max,
            )
            print_live(r)
            result["live"].append(r)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
