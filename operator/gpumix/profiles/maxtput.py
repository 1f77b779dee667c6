"""MaxTput(G, bucket, SLO): the highest request rate a GPU type sustains within an SLO (§5.3).

A profile is measured on its own bucket grid; a service may use another. `max_tput_for_grid` maps
one onto the other conservatively: a service bucket gets the *lowest* MaxTput of the profile buckets
it overlaps, and zero ("cannot serve") where it reaches outside the measured range — we never
extrapolate beyond what was measured.
"""

import bisect

from gpumix.api import BucketGrid, BucketSamples, GPUProfileSpec, RatePoint

Matrix = list[list[float]]


class ProfileRangeError(ValueError):
    """The SLO asked for lies outside what the profile measured."""


def _interpolate_tables(spec: GPUProfileSpec, tpot_ms: float) -> Matrix:
    """Linear in the SLO between measured tables. Above the loosest measured SLO we keep the loosest
    table (MaxTput only grows as the SLO loosens, so this under-promises); below the tightest one we
    refuse, since the throughput there is unknown."""
    tables = sorted(spec.tables or [], key=lambda t: t.tpot_ms)
    slos = [t.tpot_ms for t in tables]
    if tpot_ms < slos[0]:
        raise ProfileRangeError(
            f"TPOT SLO {tpot_ms:g} ms is tighter than the tightest measured ({slos[0]:g} ms) in "
            f"the profile of {spec.model} on {spec.gpu_type}; profile it at this SLO"
        )
    k = bisect.bisect_left(slos, tpot_ms)
    if k == len(slos):
        return [list(row) for row in tables[-1].max_tput]
    hi = tables[k]
    if slos[k] == tpot_ms or k == 0:
        return [list(row) for row in hi.max_tput]
    lo = tables[k - 1]
    w = (tpot_ms - lo.tpot_ms) / (hi.tpot_ms - lo.tpot_ms)
    return [
        [a + w * (b - a) for a, b in zip(ra, rb, strict=True)]
        for ra, rb in zip(lo.max_tput, hi.max_tput, strict=True)
    ]


def _crossing(p: RatePoint, q: RatePoint, value_p: float, value_q: float, limit: float) -> float:
    """Rate between p and q where a latency rising from value_p to value_q reaches limit."""
    if value_q == value_p:
        return p.rate
    return p.rate + (limit - value_p) / (value_q - value_p) * (q.rate - p.rate)


def max_rate_within(points: list[RatePoint], tpot_ms: float, ttft_ms: float | None) -> float:
    """§5.3: the highest rate whose mean TPOT (and mean TTFT, when asked and measured) meets the
    SLO, interpolating between the last sample that meets it and the first that does not; never
    beyond the highest rate sampled."""
    pts = sorted(points, key=lambda p: p.rate)

    def latencies(p: RatePoint) -> list[tuple[float, float]]:
        out = [(p.tpot_ms, tpot_ms)]
        if ttft_ms is not None and p.ttft_ms is not None:
            out.append((p.ttft_ms, ttft_ms))
        return out

    best = 0.0
    for prev, cur in zip([None, *pts], pts, strict=False):
        if all(v <= lim for v, lim in latencies(cur)):
            best = cur.rate
            continue
        if prev is not None:
            limits = [
                _crossing(prev, cur, vp, vc, lim)
                for (vp, lim), (vc, _) in zip(latencies(prev), latencies(cur), strict=True)
                if vc > lim
            ]
            best = max(best, min(limits))
        break
    return best


def _from_samples(spec: GPUProfileSpec, tpot_ms: float, ttft_ms: float | None) -> Matrix:
    rows, cols = spec.shape
    out: Matrix = [[0.0] * cols for _ in range(rows)]
    sample: BucketSamples
    for sample in spec.samples or []:
        out[sample.input_bucket][sample.output_bucket] = max_rate_within(
            sample.points, tpot_ms, ttft_ms
        )
    return out


def max_tput(spec: GPUProfileSpec, tpot_ms: float, ttft_ms: float | None = None) -> Matrix:
    """MaxTput per bucket of the profile's own grid at the given SLO. Buckets with no samples get 0.
    The table form carries no TTFT, so `ttft_ms` only applies to the samples form."""
    if spec.tables is not None:
        return _interpolate_tables(spec, tpot_ms)
    return _from_samples(spec, tpot_ms, ttft_ms)


def _overlapping(edges: list[int], lo: int, hi: int) -> list[int] | None:
    """Indices of the buckets of `edges` overlapping [lo, hi); None if [lo, hi) is not covered."""
    if lo < edges[0] or hi > edges[-1]:
        return None
    return [k for k in range(len(edges) - 1) if edges[k] < hi and lo < edges[k + 1]]


def max_tput_for_grid(
    spec: GPUProfileSpec, grid: BucketGrid, tpot_ms: float, ttft_ms: float | None = None
) -> Matrix:
    """MaxTput on the service's grid: the minimum over overlapped profile buckets, 0 outside."""
    table = max_tput(spec, tpot_ms, ttft_ms)
    if (spec.input_edges, spec.output_edges) == (grid.input_edges, grid.output_edges):
        return table
    rows, cols = grid.shape
    out: Matrix = [[0.0] * cols for _ in range(rows)]
    for i in range(rows):
        ins = _overlapping(spec.input_edges, grid.input_edges[i], grid.input_edges[i + 1])
        for j in range(cols):
            outs = _overlapping(spec.output_edges, grid.output_edges[j], grid.output_edges[j + 1])
            if ins and outs:
                out[i][j] = min(table[a][b] for a in ins for b in outs)
    return out
