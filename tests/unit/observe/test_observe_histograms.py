"""Re-bucketing vLLM's token histograms, combining marginals, and the error on the traces."""

import numpy as np
import pytest

from gpumix.observe.histograms import (
    ALIGNED_GRID,
    Marginals,
    combine,
    counts_on_edges,
    prometheus_cumulative,
    rake,
    total_variation,
    true_joint,
)
from gpumix.observe.tracecheck import trace_errors


def test_counts_exact_when_edges_sit_on_vllm_bounds() -> None:
    values = np.array([5, 150, 180, 700, 900, 1500, 3000])
    cum = prometheus_cumulative(values, [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000])
    counts, outside = counts_on_edges(cum, [1, 201, 1001, 2001])
    assert counts.tolist() == [3, 2, 2]  # 3000 clamps into the last bucket
    assert outside == 1


def test_counts_interpolate_linearly_inside_a_bucket() -> None:
    cum = [(100.0, 0.0), (200.0, 10.0), (float("inf"), 10.0)]
    counts, outside = counts_on_edges(cum, [101, 151, 201])  # halves of (100, 200]
    assert counts == pytest.approx([5, 5])
    assert outside == 0


def test_prior_shapes_the_split_inside_a_wide_bucket() -> None:
    cum = [(100.0, 0.0), (200.0, 10.0), (float("inf"), 10.0)]
    counts, _ = counts_on_edges(cum, [101, 151, 201], prior=[0.9, 0.1])
    assert counts == pytest.approx([9, 1])


def test_rake_matches_marginals_and_keeps_structure() -> None:
    prior = np.array([[8.0, 2.0], [2.0, 8.0]])
    out = rake(prior, np.array([0.5, 0.5]), np.array([0.3, 0.7]))
    assert out.sum(axis=1) == pytest.approx([0.5, 0.5], abs=1e-6)
    assert out.sum(axis=0) == pytest.approx([0.3, 0.7], abs=1e-6)
    assert out[0, 0] > 0.3 * 0.5  # the diagonal dependence survives
    empty = rake(np.zeros((2, 2)), np.array([1.0, 1.0]), np.array([1.0, 3.0]))
    assert empty == pytest.approx(np.outer([0.5, 0.5], [0.25, 0.75]))


def test_per_pod_mixture_recovers_size_routing() -> None:
    # Mélange routing: small requests to pod a, large to pod b → the joint is diagonal.
    groups = {
        "a": Marginals(np.array([10.0, 0.0]), np.array([10.0, 0.0])),
        "b": Marginals(np.array([0.0, 30.0]), np.array([0.0, 30.0])),
    }
    assert combine(groups) == pytest.approx(np.array([[0.25, 0.0], [0.0, 0.75]]))
    with pytest.raises(ValueError, match="unknown"):
        combine({"a": Marginals(np.zeros(2), np.zeros(2))})


def test_total_variation() -> None:
    assert total_variation(np.array([1, 0]), np.array([0, 3])) == pytest.approx(1.0)
    assert total_variation(np.array([1, 1]), np.array([2, 2])) == 0


def test_independence_is_exact_for_independent_lengths() -> None:
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(1, 5000, 20000), rng.integers(1, 2000, 20000)
    joint = true_joint(prompts, outputs, *ALIGNED_GRID)
    product = combine({"all": Marginals(joint.sum(axis=1), joint.sum(axis=0))})
    assert total_variation(joint, product) < 0.02


def test_error_on_the_traces() -> None:
    """The figures quoted in observe/README.md (rounded there)."""
    errors = {(e.trace, grid): e for grid, e in trace_errors()}
    assert len(errors) == 10
    conv = errors["azure-conv", "aligned"]
    assert conv.rebucketing == pytest.approx(0, abs=1e-9)  # aligned edges: exact re-bucketing
    assert conv.independence == pytest.approx(0.378, abs=0.005)  # chat lengths are dependent
    # A prior from earlier traffic raked onto the observed marginals beats both the product of
    # the marginals and the stale prior on every trace with aligned edges.
    for (_, grid), e in errors.items():
        if grid == "aligned":
            assert e.raked < e.raked_baseline
    for name in ("azure-conv", "mooncake-synthetic"):  # where lengths are strongly dependent
        assert errors[name, "aligned"].raked < 0.5 * errors[name, "aligned"].independence
    assert errors["azure-conv", "service"].rebucketing == pytest.approx(0.106, abs=0.005)
