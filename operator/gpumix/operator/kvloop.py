"""The KV-migration loop of a service (issue #7, step 5): observe per-pod KV load, run MELL, act.

Per pass, for one service, through its routers (``kvMigration.via: Router``, stock vLLM: the
router's ledger and recompute migration, issue #16) or through engines that expose the admin
contract of `gpumix/sim/SERVER.md` (``via: Engine``: `GET /admin/requests`,
`POST /admin/migrate_out`, `POST /admin/migrate_in`, what a vLLM sidecar must implement):

1. **observe**: each pod's KV capacity and its running requests' KV sizes (the router's
   ``/admin/inflight`` and the engine's ``/metrics``, or the engine's admin listing);
2. **decide** (`plan_consolidation`, pure): the pods become a MELL cluster (activation order =
   the order given, oldest first; requests keep their pods). MELL's scale-in step is Fig. 10's
   Depart of an L-request generalised to a pod: the most recently activated pod whose requests can
   all be re-allocated onto the other pods (Fig. 10 Allocate, never activating a pod) is emptied;
   at most `max_migrations` per pass (Theorem 3's bound of 10 per operation). Each migration is
   then sent as KV transfer or re-prefill by §V's two-bin packing (`plan_migrations`);
3. **act** (`execute`): migrate_out at the source, migrate_in at the destination; the emptied pods
   get `controller.kubernetes.io/pod-deletion-cost: "-1000"` (`deletion_cost_patch`) so that the
   Deployment's scale-in removes exactly them; decisions are counted in Prometheus metrics.

Wired by `gpumix.operator.kvtask` (the loop, `spec.kvMigration`) and
`gpumix.reconcile.kvmigration` (when to act, the replica decrement the planner applies, the
`status.kvScheduler` summary).
"""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Gauge

from gpumix.kvsched import Mell, MigrationProfile, Move, PriorityWeights, plan_migrations
from gpumix.kvsched.migration import Choice

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
DRAINED_COST = "-1000"

MIGRATIONS = Counter(
    "gpumix_kv_migrations_total", "KV-cache migrations issued", ["namespace", "service", "mode"]
)
DRAINED = Gauge(
    "gpumix_kv_pods_drained", "Pods emptied by the KV scheduler, awaiting scale-in",
    ["namespace", "service"],
)  # fmt: skip


@dataclass(frozen=True)
class PodRequest:
    id: str
    kv_tokens: int
    prompt_tokens: int
    generated_tokens: int
    output_tokens: int
    via: str = ""
    """The router replica that holds the request's stream (its admin URL; ``""``: the engine's
    admin contract moves it)."""
    movable: bool = True


@dataclass(frozen=True)
class PodLoad:
    """One pod as `GET /admin/requests` reports it."""

    name: str
    url: str
    node: str
    kv_tokens: int
    requests: tuple[PodRequest, ...] = ()
    pinned: bool = False
    """Never emptied: it holds a request that cannot move (or one no router knows of)."""


@dataclass
class KvDecision:
    moves: list[tuple[PodRequest, str, str]] = field(default_factory=list)
    """(request, source pod, destination pod)."""
    drained: list[str] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)


def parse_admin_listing(name: str, url: str, node: str, body: dict[str, Any]) -> PodLoad:
    reqs = tuple(
        PodRequest(
            id=str(r["id"]),
            kv_tokens=int(r["kv_tokens"]),
            prompt_tokens=int(r["prompt_tokens"]),
            generated_tokens=int(r["generated_tokens"]),
            output_tokens=int(r["output_tokens"]),
        )
        for r in body.get("requests", [])
        if r.get("state") == "running"
    )
    return PodLoad(name, url, node, int(body["kv_blocks"]) * int(body["block_size"]), reqs)


def plan_consolidation(
    pods: Sequence[PodLoad],
    *,
    max_migrations: int = 10,
    weights: PriorityWeights | None = None,
    recompute_budget: int | None = None,
) -> KvDecision:
    """Pure: which requests to move so that the most recently activated drainable pods empty.

    ``recompute_budget``: tokens a destination may re-prefill in this pass (MELL §V's
    computation boundary), for moves that are all recomputed (through the router); a pod whose
    emptying would exceed it at any destination is left for a later pass."""
    if not pods:
        return KvDecision()
    cap = min(p.kv_tokens for p in pods)
    nodes = {n: k for k, n in enumerate(dict.fromkeys(p.node for p in pods))}
    m = Mell(cap, weights=weights)
    names: dict[int, PodLoad] = {}
    byid: dict[int, PodRequest] = {}
    rid = 0
    local: dict[int, int] = {}
    for pid, load in enumerate(pods):
        m.c.adopt(pid, nodes[load.node])
        names[pid] = load
        for r in load.requests:
            m.c.put(rid, r.kv_tokens, pid)
            m.cls[rid] = m.klass(r.kv_tokens)
            byid[rid] = r
            local[rid] = pid
            rid += 1
    decision = KvDecision()
    budget = max_migrations
    immovable = {k for k, r in byid.items() if not r.movable}
    pinned = {pid for pid, load in names.items() if load.pinned} | {local[k] for k in immovable}
    for pod in sorted(m.c.pods.values(), key=lambda p: -p.seq):
        if not pod.reqs or len(pod.reqs) > budget or pod.pid in pinned:
            continue
        trial = copy.deepcopy(m)
        before = set(trial.c.pods)
        trial._log = []
        trial._realloc_all(pod.pid)
        if set(trial.c.pods) - before or trial.c.overloaded() or trial.c.pods[pod.pid].reqs:
            continue  # would activate a pod or could not empty this one
        net = {mv.rid for mv in trial._log}
        if len(net) > budget or any(trial.c.where[k] != local[k] for k in net & immovable):
            continue
        if recompute_budget is not None and _over(trial, local, byid, recompute_budget):
            continue
        m = trial
        m.c.release_empty()
        budget -= len(net)
        decision.drained.append(names[pod.pid].name)
    for key, req in sorted(byid.items()):
        dst = m.c.where[key]
        if dst != local[key]:
            decision.moves.append((req, names[local[key]].name, names[dst].name))
    return decision


def _over(trial: Mell, local: dict[int, int], byid: dict[int, PodRequest], budget: int) -> bool:
    """Whether the moves so far make some destination re-prefill more than ``budget`` tokens."""
    spent: dict[int, int] = {}
    for k, req in byid.items():
        dst = trial.c.where[k]
        if dst != local[k]:
            spent[dst] = spent.get(dst, 0) + req.kv_tokens
    return any(tokens > budget for tokens in spent.values())


def choose_modes(
    decision: KvDecision, pods: Sequence[PodLoad], profile: MigrationProfile
) -> list[Choice]:
    """§V: KV transfer or re-prefill for every move of the pass, all at once; one choice per
    move, in the order of `decision.moves`."""
    index = {p.name: k for k, p in enumerate(pods)}
    node_ids = {n: k for k, n in enumerate(dict.fromkeys(p.node for p in pods))}
    moves = [Move(k, index[s], index[d], r.kv_tokens) for k, (r, s, d) in enumerate(decision.moves)]
    choices = plan_migrations(moves, lambda pid: node_ids[pods[pid].node], profile).choices
    return sorted(choices, key=lambda c: c.move.rid)


def deletion_cost_patch(drained: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Metadata patches so a ReplicaSet scale-in removes exactly the drained pods first."""
    return {name: {"metadata": {"annotations": {DELETION_COST: DRAINED_COST}}} for name in drained}


Post = Callable[[str, dict[str, Any]], dict[str, Any]]


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def execute(
    decision: KvDecision,
    pods: Sequence[PodLoad],
    modes: Sequence[str] | None = None,
    *,
    namespace: str = "",
    service: str = "",
    post: Post = _post,
) -> int:
    """Issue the migrations, each through the router replica that holds its stream (a
    recompute) or else over the engines' admin contract; returns how many succeeded. A move that
    fails raises: the pod it was to empty is kept."""
    url = {p.name: p.url for p in pods}
    done = 0
    for k, (r, src, dst) in enumerate(decision.moves):
        if r.via:
            post(f"{r.via}/admin/migrate", {"id": r.id, "to": dst})
            MIGRATIONS.labels(namespace, service, "tokens").inc()
            done += 1
            continue
        mode = modes[k] if modes else "kv"
        moved = post(f"{url[src]}/admin/migrate_out", {"id": r.id})
        post(
            f"{url[dst]}/admin/migrate_in",
            {
                "prompt_tokens": moved["prompt_tokens"],
                "output_tokens": moved["output_tokens"],
                "generated_tokens": moved["generated_tokens"],
                "kv": "transfer" if mode == "kv" else "recompute",
            },
        )
        MIGRATIONS.labels(namespace, service, mode).inc()
        done += 1
    DRAINED.labels(namespace, service).set(len(decision.drained))
    return done
