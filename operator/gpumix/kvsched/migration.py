"""MELL §V: adaptive request migration — each migration goes as a KV-cache transfer or as tokens
re-prefilled on the destination, within per-link communication and per-pod computation budgets.

- **Boundary profiling** (§V): a link's *communication boundary* is the data it can carry within
  `comm_budget_s` (KV held by a migrating request is not freed before the copy ends); a pod's
  *computation boundary* is the tokens it may re-prefill per epoch without interfering with its
  running batch (`compute_budget_tokens`). Both come from a profile: link speed from Vidur's
  measured `send_recv.csv` curves (`LinkProfile.from_vidur`), prefill speed from the roofline
  (`gpumix.profiles.roofline.Roofline.prefill_s`).
- **Hybrid migration** (§V): the split of migrations into KV transfers and token transfers is a
  two-bin packing solved greedily (first fit or best fit, largest migration first).
- **Global consensus** (§V): the packing runs over *all* migrations of the epoch at once, so
  several sources sharing a link or a destination never exceed its boundary together.

Links: a migration inside a node uses that node's GPU interconnect (`("node", n)`); across nodes
it uses the destination node's network ingress (`("nic", n)`), which senders to one node share.
A migration that fits no bin still happens (the scheduler needs it) in its faster mode and is
reported `within_budget=False`.

On stock vLLM only one mode exists: the router continues a stream on the destination from its
prompt + generated token IDs (issue #16), a re-prefill of all of them, plus what the router adds
to the handover. `recompute_only` is §V's packing with that one option (`kv_only` is Llumnix's).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpumix.kvsched.state import Move

Mode = Literal["kv", "tokens"]
Strategy = Literal["first_fit", "best_fit"]


@dataclass(frozen=True)
class LinkProfile:
    """Transfer time vs size (bytes → seconds), piecewise linear between measured points and
    extrapolated at the last segment's bandwidth."""

    name: str
    sizes: tuple[float, ...]
    seconds: tuple[float, ...]

    @classmethod
    def constant(cls, name: str, gbytes_per_s: float, latency_s: float = 1e-4) -> LinkProfile:
        b = gbytes_per_s * 1e9
        return cls(name, (0.0, b), (latency_s, latency_s + 1.0))

    @classmethod
    def from_vidur(cls, path: Path, *, devices_per_node: int) -> LinkProfile:
        """Median send/recv times from Vidur's profiling (`size` bytes, times in ms) for two
        workers; `devices_per_node` 2 = both GPUs in one node, 1 = across nodes."""
        pts: dict[float, float] = {}
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if (
                    int(row["num_workers"]) == 2
                    and int(row["devices_per_node"]) == devices_per_node
                ):
                    pts[float(row["size"])] = float(row["time_stats.send_recv.median"]) / 1e3
        if len(pts) < 2:
            raise ValueError(f"{path}: fewer than 2 points for devices_per_node={devices_per_node}")
        sizes = tuple(sorted(pts))
        where = "intra-node" if devices_per_node > 1 else "inter-node"
        return cls(f"{path.parent.name} {where}", sizes, tuple(pts[s] for s in sizes))

    def seconds_for(self, nbytes: float) -> float:
        xs, ys = self.sizes, self.seconds
        if nbytes <= xs[0]:
            return ys[0]
        for k in range(1, len(xs)):
            if nbytes <= xs[k]:
                t = (nbytes - xs[k - 1]) / (xs[k] - xs[k - 1])
                return ys[k - 1] + t * (ys[k] - ys[k - 1])
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + (nbytes - xs[-1]) * slope

    @property
    def gbytes_per_s(self) -> float:
        return self.sizes[-1] / self.seconds[-1] / 1e9


@dataclass(frozen=True)
class MigrationProfile:
    """What §V's boundary profiling yields for one deployment."""

    kv_bytes_per_token: int
    intra: LinkProfile
    inter: LinkProfile
    prefill_s: Callable[[int], float]
    comm_budget_s: float = 0.5
    compute_budget_tokens: int = 8192

    def transfer_s(self, tokens: int, same_node: bool) -> float:
        link = self.intra if same_node else self.inter
        return link.seconds_for(tokens * self.kv_bytes_per_token)


@dataclass(frozen=True)
class Choice:
    move: Move
    mode: Mode
    seconds: float
    """Time the request is held up by the migration in the chosen mode."""
    within_budget: bool


@dataclass
class _Bin:
    cap: float
    used: float = 0.0

    def left(self) -> float:
        return self.cap - self.used


@dataclass
class MigrationPlan:
    choices: list[Choice] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.choices)

    def count(self, mode: Mode) -> int:
        return sum(c.mode == mode for c in self.choices)

    @property
    def over_budget(self) -> int:
        return sum(not c.within_budget for c in self.choices)


def plan_migrations(
    moves: Sequence[Move],
    node_of: Callable[[int], int],
    profile: MigrationProfile,
    strategy: Strategy = "first_fit",
) -> MigrationPlan:
    """Split an epoch's migrations into KV transfers and token re-prefills (§V, global consensus).

    Largest migration first; each has two options: its bytes into the communication bin of its
    link, or its tokens into the computation bin of its destination. First fit takes the faster
    option that fits, else the other; best fit takes, of the options that fit, the one leaving
    the least room (as a share of its bin). Neither fits: the faster one, over budget.
    """
    comm: dict[tuple[str, int], _Bin] = {}
    comp: dict[int, _Bin] = {}
    plan = MigrationPlan()
    for mv in sorted(moves, key=lambda m: (-m.tokens, m.rid)):
        sn, dn = node_of(mv.src), node_of(mv.dst)
        same = sn == dn
        link_key = ("node", dn) if same else ("nic", dn)
        link = profile.intra if same else profile.inter
        nbytes = mv.tokens * profile.kv_bytes_per_token
        cbin = comm.setdefault(link_key, _Bin(profile.comm_budget_s * link.gbytes_per_s * 1e9))
        pbin = comp.setdefault(mv.dst, _Bin(float(profile.compute_budget_tokens)))
        options: list[tuple[Mode, _Bin, float, float]] = [
            ("kv", cbin, float(nbytes), profile.transfer_s(mv.tokens, same)),
            ("tokens", pbin, float(mv.tokens), profile.prefill_s(mv.tokens)),
        ]
        options.sort(key=lambda o: o[3])
        fitting = [o for o in options if o[1].left() >= o[2]]
        if fitting:
            if strategy == "best_fit":
                pick = min(fitting, key=lambda o: ((o[1].left() - o[2]) / o[1].cap, o[3]))
            else:
                pick = fitting[0]
            ok = True
        else:
            pick, ok = options[0], False
        mode, b, cost, secs = pick
        b.used += cost
        plan.choices.append(Choice(mv, mode, secs, ok))
    return plan


def kv_only(
    moves: Sequence[Move], node_of: Callable[[int], int], profile: MigrationProfile
) -> MigrationPlan:
    """Llumnix's migration: always a KV transfer (for the LB baseline's cost)."""
    plan = MigrationPlan()
    for mv in moves:
        same = node_of(mv.src) == node_of(mv.dst)
        plan.choices.append(Choice(mv, "kv", profile.transfer_s(mv.tokens, same), True))
    return plan


def recompute_only(
    moves: Sequence[Move], profile: MigrationProfile, overhead_s: float = 0.0
) -> MigrationPlan:
    """Every migration as a re-prefill on its destination (the router's recompute migration on
    stock vLLM): ``move.tokens`` (the request's prompt + generated tokens) prefilled in
    ``profile.prefill_s(tokens)``, plus ``overhead_s``, the router's own share of the handover.

    §V's packing with only the computation bins: largest migration first, each destination's
    re-prefilled tokens counted against its ``compute_budget_tokens`` over all migrations of the
    epoch (global consensus); one that does not fit still happens, ``within_budget=False``."""
    comp: dict[int, _Bin] = {}
    plan = MigrationPlan()
    for mv in sorted(moves, key=lambda m: (-m.tokens, m.rid)):
        pbin = comp.setdefault(mv.dst, _Bin(float(profile.compute_budget_tokens)))
        ok = pbin.left() >= mv.tokens
        pbin.used += mv.tokens
        seconds = profile.prefill_s(mv.tokens) + overhead_s
        plan.choices.append(Choice(mv, "tokens", seconds, ok))
    return plan
