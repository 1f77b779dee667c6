"""Output-length prediction for routing (Mélange App. A.2).

A router sees a request's prompt and its ``max_tokens`` but not how long the answer will be.
Mélange's load balancer estimates the output length as the running mean of the outputs seen so
far for the same input bucket; before a bucket has seen any, the workload histogram's mean
output for that row (the prior). ``max_tokens`` caps the estimate: an answer never exceeds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def histogram_prior(
    output_edges: Sequence[int], histogram: Sequence[Sequence[float]]
) -> list[float]:
    """Histogram-weighted mean output per input bucket (bucket midpoints); rows with no
    traffic get the mean over all rows' midpoints."""
    mids = [(a + b) / 2 for a, b in itertools.pairwise(output_edges)]
    fallback = sum(mids) / len(mids)
    prior = []
    for row in histogram:
        total = sum(row)
        prior.append(
            sum(w * m for w, m in zip(row, mids, strict=True)) / total if total else fallback
        )
    return prior


class OutputPredictor:
    """Running mean of observed output lengths per input bucket, capped by ``max_tokens``."""

    def __init__(self, prior: Sequence[float]) -> None:
        self._prior = list(prior)
        self._sum = [0.0] * len(prior)
        self._count = [0] * len(prior)

    def predict(self, input_bucket: int, max_tokens: int | None = None) -> float:
        n = self._count[input_bucket]
        estimate = self._sum[input_bucket] / n if n else self._prior[input_bucket]
        return estimate if max_tokens is None else min(estimate, float(max_tokens))

    def observe(self, input_bucket: int, output_tokens: int) -> None:
        self._sum[input_bucket] += output_tokens
        self._count[input_bucket] += 1
