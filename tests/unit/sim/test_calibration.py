"""The roofline calibrated against the shipped measurements (`gpumix/data/profiles`)."""

from __future__ import annotations

import pytest

from gpumix.profiles.calibration import Fit, fit_all, load_points, predict
from gpumix.profiles.roofline import CALIBRATED, RooflineParams, params_for

# Median / 90th-percentile relative error of the calibrated step times per GPU type.
BOUNDS = {
    "l4": (0.10, 0.20),
    "a100-40gb": (0.08, 0.18),
    "a100-80gb": (0.05, 0.17),
    "a40": (0.08, 0.20),
    "h100": (0.13, 0.22),
}


@pytest.fixture(scope="module")
def fits() -> dict[str, Fit]:
    return fit_all()


def test_the_shipped_parameters_are_the_fit(fits: dict[str, Fit]) -> None:
    assert set(fits) == set(CALIBRATED) == set(BOUNDS)
    for gpu, fit in fits.items():
        assert fit.params == CALIBRATED[gpu], f"re-run the calibration for {gpu}: {fit.params}"


def test_calibration_error_is_bounded(fits: dict[str, Fit]) -> None:
    for gpu, fit in fits.items():
        median, p90 = BOUNDS[gpu]
        assert fit.median_abs_error <= median, (gpu, fit)
        assert fit.p90_abs_error <= p90, (gpu, fit)
        assert fit.points >= 90
        assert all(err <= 0.2 for err in fit.by_source.values()), (gpu, fit.by_source)


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
