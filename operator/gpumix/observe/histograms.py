"""Token-length histograms: vLLM's cumulative buckets → a service's (input, output) grid.

vLLM exports the prompt-length and the output-length distributions as two separate Prometheus
histograms (`vllm:request_prompt_tokens`, `vllm:request_generation_tokens`, buckets 1-2-5 up to
the context length); the planner needs their joint distribution on the service's own edges
(Mélange §5.1). Two steps, both approximations whose error `reconstruction_error` measures:

1. **Re-bucketing.** Each marginal's cumulative counts are interpolated linearly inside vLLM's
   buckets (as PromQL's `histogram_quantile` does) at the service's edges. A request of n tokens
   belongs to service bucket i when `edges[i] <= n < edges[i+1]`, i.e. `n <= edges[i+1] - 1`, so
   the cumulative count is read at `edge - 1` (exact when that is one of vLLM's `le` bounds, as
   1000 is for the edge 1001). Requests below the first edge count in the first bucket and those
   at or above the last edge in the last one (they are load all the same); the clamped share is
   reported as `outside`.
2. **Combination.** Without a joint histogram (`observation` uses the router's when it has one)
   we assume input and output lengths are independent *within each group* the metrics can be
   split by — per pod by default: pods of different GPU classes receive different request sizes
   under Mélange's routing, so the mixture of per-pod products keeps the dependence the routing
   creates. When a prior joint histogram is
   known (the spec's static histogram), `combine` instead rakes the prior onto the observed
   marginals (iterative proportional fitting), which keeps the prior's dependence structure
   (its odds ratios) and matches the observed marginals exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Cumulative = Sequence[tuple[float, float]]
"""(le, cumulative count) pairs of one Prometheus histogram; `le` may be +Inf."""


def counts_on_edges(
    cumulative: Cumulative, edges: Sequence[int], prior: Sequence[float] | np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Counts per service bucket from a Prometheus histogram's cumulative (le, count) pairs, and
    the number of requests clamped into the first or last bucket because they lie outside the
    edges. Service bucket i spans (edges[i] - 1, edges[i+1] - 1] on the token axis; each
    Prometheus bucket (lo, hi] (the lowest starts at 0; +Inf only feeds the clamped tail) splits
    its count over the service buckets it overlaps in proportion to the overlap — uniform density,
    like `histogram_quantile` — or, given `prior` shares per service bucket, in proportion to
    overlap × prior density (prior share / bucket width), which follows the prior's shape inside
    wide Prometheus buckets."""
    pts = sorted((float(le), float(c)) for le, c in cumulative)
    n = len(edges) - 1
    counts = np.zeros(n)
    if not pts:
        return counts, 0.0
    bounds = np.array([float(e) - 1.0 for e in edges])
    widths = np.diff(bounds)
    density = np.ones(n) if prior is None else np.asarray(prior, float) / widths
    outside = 0.0
    lo, below = 0.0, 0.0
    for le, cum in pts:
        c = max(0.0, cum - below)
        below = max(below, cum)
        hi = le
        if c > 0:
            ov = np.clip(np.minimum(bounds[1:], hi) - np.maximum(bounds[:-1], lo), 0.0, None)
            span = hi - lo if np.isfinite(hi) else 0.0
            inside = float(ov.sum()) / span if span > 0 else 0.0
            w = ov * density
            if w.sum() <= 0 < inside:
                w = ov  # the prior has no mass here: fall back to the uniform split
            share = c * inside if w.sum() > 0 else 0.0
            if share > 0:
                counts += share * w / w.sum()
            rest = c - share
            if rest > 0:  # the part of (lo, hi] outside the edges: clamp to the nearer end
                mid_low = max(0.0, min(hi, bounds[0]) - lo)
                mid_high = max(0.0, hi - max(lo, bounds[-1])) if np.isfinite(hi) else 1.0
                frac_low = mid_low / (mid_low + mid_high) if mid_low + mid_high > 0 else 0.0
                counts[0] += rest * frac_low
                counts[-1] += rest * (1.0 - frac_low)
                outside += rest
        lo = hi
    return counts, outside


def _normalise(x: np.ndarray) -> np.ndarray:
    s = float(x.sum())
    return x / s if s > 0 else x


def rake(
    prior: np.ndarray, rows: np.ndarray, cols: np.ndarray, iterations: int = 200
) -> np.ndarray:
    """Iterative proportional fitting: the matrix closest to `prior` (in KL divergence) whose row
    and column sums are `rows` and `cols` (both normalised first). To reach cells the prior leaves
    empty, the prior is smoothed with 1% of the independent product."""
    r, c = _normalise(rows.astype(float)), _normalise(cols.astype(float))
    seed = _normalise(np.asarray(prior, dtype=float))
    m = 0.99 * seed + 0.01 * np.outer(r, c)
    for _ in range(iterations):
        rs = m.sum(axis=1)
        m = m * np.divide(r, rs, out=np.zeros_like(r), where=rs > 0)[:, None]
        cs = m.sum(axis=0)
        m = m * np.divide(c, cs, out=np.zeros_like(c), where=cs > 0)[None, :]
        if np.abs(m.sum(axis=1) - r).max() < 1e-9:
            break
    return _normalise(m)


@dataclass(frozen=True)
class Marginals:
    """One group's (e.g. one pod's) request counts per service bucket, inputs and outputs."""

    inputs: np.ndarray
    outputs: np.ndarray

    @property
    def requests(self) -> float:
        return float(self.inputs.sum())


def combine(groups: Mapping[str, Marginals], prior: np.ndarray | None = None) -> np.ndarray:
    """The joint (input × output) shares from per-group marginals (module docstring, step 2):
    with a prior, the prior raked onto the summed marginals; otherwise the request-weighted
    mixture of each group's independent product."""
    live = [g for g in groups.values() if g.requests > 0 and g.outputs.sum() > 0]
    if not live:
        raise ValueError("no requests in any group: the joint histogram is unknown")
    if prior is not None and float(np.asarray(prior).sum()) > 0:
        rows = np.sum([g.inputs for g in live], axis=0)
        cols = np.sum([g.outputs for g in live], axis=0)
        return rake(np.asarray(prior, dtype=float), rows, cols)
    joint = np.zeros((len(live[0].inputs), len(live[0].outputs)))
    for g in live:
        joint += g.requests * np.outer(_normalise(g.inputs), _normalise(g.outputs))
    return _normalise(joint)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance between two histograms (each normalised): ½ Σ |p − q| ∈ [0, 1]."""
    return 0.5 * float(
        np.abs(_normalise(np.asarray(p, float)) - _normalise(np.asarray(q, float))).sum()
    )


# -- measuring the error on request traces ---------------------------------------------------------
VLLM_TOKEN_BUCKETS: tuple[float, ...] = tuple(
    m * 10**k for k in range(6) for m in (1, 2, 5) if m * 10**k <= 200_000
)
"""vLLM's `build_1_2_5_buckets(max_model_len)` for a 200k context: 1, 2, 5, 10, 20, 50, …"""


def _clamped_index(values: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    idx = np.searchsorted(np.asarray(edges), values, side="right") - 1
    return np.clip(idx, 0, len(edges) - 2)


def true_joint(
    prompts: np.ndarray, outputs: np.ndarray, in_edges: Sequence[int], out_edges: Sequence[int]
) -> np.ndarray:
    """The exact joint counts on the grid (out-of-range requests clamped like `counts_on_edges`)."""
    joint = np.zeros((len(in_edges) - 1, len(out_edges) - 1))
    np.add.at(joint, (_clamped_index(prompts, in_edges), _clamped_index(outputs, out_edges)), 1)
    return joint


def prometheus_cumulative(
    values: np.ndarray, buckets: Sequence[float]
) -> list[tuple[float, float]]:
    """What a Prometheus histogram with `buckets` would hold after observing `values`."""
    sorted_values = np.sort(values)
    out = [(float(b), float(np.searchsorted(sorted_values, b, side="right"))) for b in buckets]
    return [*out, (float("inf"), float(len(values)))]


def marginals_as_vllm_exports(
    prompts: np.ndarray,
    outputs: np.ndarray,
    in_edges: Sequence[int],
    out_edges: Sequence[int],
    *,
    buckets: Sequence[float] = VLLM_TOKEN_BUCKETS,
    prior: np.ndarray | None = None,
) -> Marginals:
    """The two marginals as the observation path sees them: vLLM buckets → service edges (shaped
    inside wide vLLM buckets by the prior joint's marginals when given)."""
    pin = None if prior is None else _normalise(prior.sum(axis=1))
    pout = None if prior is None else _normalise(prior.sum(axis=0))
    ins, _ = counts_on_edges(prometheus_cumulative(prompts, buckets), in_edges, pin)
    outs, _ = counts_on_edges(prometheus_cumulative(outputs, buckets), out_edges, pout)
    return Marginals(ins, outs)


@dataclass(frozen=True)
class ReconstructionError:
    """Total variation distances between a trace's true joint histogram and reconstructions.

    `rebucketing`: the product of the *true* marginals vs the product of marginals re-bucketed
    from vLLM's 1-2-5 buckets — the error of step 1 alone. `independence`: the true joint vs the
    product of the true marginals — the error of the independence assumption alone.
    `pipeline`: the true joint vs what the observation path reconstructs (both steps).
    `raked`: the second half of the trace reconstructed by raking the first half's joint onto the
    second half's re-bucketed marginals, vs the second half's true joint (a prior from the same
    source, as when the spec's static histogram was derived from past traffic).
    `raked_shaped`: the same, with the re-bucketing shaped by the prior's marginals.
    `raked_baseline`: the first half's joint used as is for the second half (no observation).
    """

    trace: str
    requests: int
    rebucketing: float
    independence: float
    pipeline: float
    raked: float
    raked_shaped: float
    raked_baseline: float


TRACE_GRIDS: dict[str, tuple[list[int], list[int]]] = {
    "azure-conv": ([1, 256, 512, 1024, 2048, 3072], [1, 64, 128, 256, 512, 1001]),
    "azure-code": ([1, 256, 512, 1024, 2048, 3072], [1, 64, 128, 256, 512, 1001]),
    "mooncake-conv": ([1, 4096, 8192, 16384, 32768, 65536], [1, 64, 128, 256, 512, 2001]),
    "mooncake-synthetic": ([1, 4096, 8192, 16384, 32768, 65536], [1, 64, 128, 256, 512, 2001]),
    "arxiv": ([1, 1024, 2048, 3072, 4097], [1, 64, 128, 256, 512, 1025]),
}
"""Service grids used to measure the error per trace: the chat sample's grid for the Azure
traces, a long-context grid for Mooncake's, a ≤4096-token grid for the arXiv lengths."""

ALIGNED_GRID: tuple[list[int], list[int]] = (
    [1, 201, 501, 1001, 2001, 5001, 10001, 20001, 50001],
    [1, 21, 51, 101, 201, 501, 1001, 2001],
)
"""A grid whose edges sit just above vLLM's bucket bounds (edge − 1 = a `le`): re-bucketing
is exact, so only the independence assumption errs."""


def reconstruction_error(
    name: str,
    prompts: np.ndarray,
    outputs: np.ndarray,
    in_edges: Sequence[int],
    out_edges: Sequence[int],
) -> ReconstructionError:
    """Measure both approximations of this module on one trace (in arrival order)."""
    joint = true_joint(prompts, outputs, in_edges, out_edges)
    exact = Marginals(joint.sum(axis=1), joint.sum(axis=0))
    observed = marginals_as_vllm_exports(prompts, outputs, in_edges, out_edges)
    exact_product = combine({"all": exact})
    pipeline = combine({"all": observed})
    half = len(prompts) // 2
    first = true_joint(prompts[:half], outputs[:half], in_edges, out_edges)
    second = true_joint(prompts[half:], outputs[half:], in_edges, out_edges)
    later = marginals_as_vllm_exports(prompts[half:], outputs[half:], in_edges, out_edges)
    shaped = marginals_as_vllm_exports(
        prompts[half:], outputs[half:], in_edges, out_edges, prior=first
    )
    raked = combine({"all": later}, prior=first)
    return ReconstructionError(
        trace=name,
        requests=len(prompts),
        rebucketing=total_variation(exact_product, pipeline),
        independence=total_variation(joint, exact_product),
        pipeline=total_variation(joint, pipeline),
        raked=total_variation(second, raked),
        raked_shaped=total_variation(second, combine({"all": shaped}, prior=first)),
        raked_baseline=total_variation(second, first),
    )
