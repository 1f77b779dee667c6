"""The roofline calibrated against the shipped measurements (`gpumix/data/profiles`)."""

from __future__ import annotations

import numpy as np
import pytest

from gpumix.profiles.calibration import Fit, Point, fit_all, fit_gpu, load_points, predict
from gpumix.profiles.roofline import CALIBRATED, RooflineParams, params_for

HELD_OUT_MEDIAN = 0.15
HELD_OUT_P90 = 0.30
"""Relative step-time error the calibrated roofline must reach on measurements it was not fitted
to: one bound for every GPU type, set before looking at the errors (not each GPU's own error
rounded up)."""


@pytest.fixture(scope="module")
def fits() -> dict[str, Fit]:
    return fit_all()


def test_the_shipped_parameters_are_the_fit(fits: dict[str, Fit]) -> None:
    assert set(fits) == set(CALIBRATED)
    for gpu, fit in fits.items():
        assert fit.params == CALIBRATED[gpu], f"re-run the calibration for {gpu}: {fit.params}"


def _errors(points: list[Point], params: RooflineParams) -> np.ndarray:
    measured = np.array([p.measured_s for p in points])
    return np.abs(predict(points, params) - measured) / measured


def test_the_fit_predicts_measurements_it_did_not_see() -> None:
    """Fit on every other measurement of each (source, phase) group, judge on the rest."""
    points = load_points()
    for gpu in sorted({p.gpu for p in points}):
        groups: dict[tuple[str, str], list[Point]] = {}
        for p in points:
            if p.gpu == gpu:
                groups.setdefault((p.source, p.phase), []).append(p)
        train = [p for g in groups.values() for p in g[0::2]]
        test = [p for g in groups.values() for p in g[1::2]]
        err = _errors(test, fit_gpu(train, gpu).params)
        assert np.median(err) <= HELD_OUT_MEDIAN, (gpu, np.median(err))
        assert np.percentile(err, 90) <= HELD_OUT_P90, (gpu, np.percentile(err, 90))


def test_the_fit_carries_over_to_a_source_it_did_not_see(fits: dict[str, Fit]) -> None:
    """Where a GPU type has two sources (different models and engines), the efficiencies fitted
    on one predict the other. Only one source of each type has multi-GPU replicas, so the
    all-reduce's parameters come from the full fit."""
    points = load_points()
    for gpu in sorted({p.gpu for p in points}):
        mine = [p for p in points if p.gpu == gpu]
        sources = sorted({p.source for p in mine})
        link = fits[gpu].params
        for source in sources if len(sources) > 1 else []:
            params = fit_gpu([p for p in mine if p.source != source], gpu, link=link).params
            err = _errors([p for p in mine if p.source == source], params)
            assert np.median(err) <= HELD_OUT_MEDIAN, (gpu, source, np.median(err))


def test_calibration_is_no_worse_than_the_round_defaults(fits: dict[str, Fit]) -> None:
    points = load_points()
    for gpu in fits:
        pts = [p for p in points if p.gpu == gpu]
        measured = [p.measured_s for p in pts]

        def median_error(
            params: RooflineParams, pts: list = pts, measured: list = measured
        ) -> float:
            errors = sorted(
                abs(a - b) / b for a, b in zip(predict(pts, params), measured, strict=True)
            )
            return errors[len(errors) // 2]

        assert median_error(params_for(gpu)) <= 1.01 * median_error(RooflineParams())


def test_uncalibrated_types_keep_the_defaults() -> None:
    assert params_for("a10g") == RooflineParams()


def test_the_default_all_reduce_is_the_l4_pair(fits: dict[str, Fit]) -> None:
    """Types without multi-GPU measurements (most of them PCIe cards) take the PCIe L4 pair's."""
    default, l4 = RooflineParams(), fits["l4"].params
    assert (default.allreduce_latency_us, default.allreduce_gbps) == (
        l4.allreduce_latency_us,
        l4.allreduce_gbps,
    )


def test_tensor_parallel_all_reduces_are_fitted_where_measured(fits: dict[str, Fit]) -> None:
    """Splitwise's decode barely speeds up from TP4 to TP8: without the all-reduce term the
    roofline halves it. The fitted link must predict TP4 and TP8 decode within the held-out
    bound, where the same efficiencies with a free all-reduce miss by far more."""
    points = load_points()
    for gpu in ("a100-80gb", "h100"):
        wide = [
            p
            for p in points
            if p.gpu == gpu and p.source == "splitwise" and p.phase == "decode" and p.gpus >= 4
        ]
        assert wide
        params = fits[gpu].params
        free = params.model_copy(update={"allreduce_latency_us": 0.0, "allreduce_gbps": 1e9})
        assert np.median(_errors(wide, params)) <= HELD_OUT_MEDIAN
        assert np.median(_errors(wide, free)) > 2 * HELD_OUT_MEDIAN
