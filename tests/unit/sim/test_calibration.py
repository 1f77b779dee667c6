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


def test_the_fit_carries_over_to_a_source_it_did_not_see() -> None:
    """Where a GPU type has two sources (different models and engines), fitting on one predicts
    the other."""
    points = load_points()
    for gpu in sorted({p.gpu for p in points}):
        mine = [p for p in points if p.gpu == gpu]
        sources = sorted({p.source for p in mine})
        for source in sources if len(sources) > 1 else []:
            params = fit_gpu([p for p in mine if p.source != source], gpu).params
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
