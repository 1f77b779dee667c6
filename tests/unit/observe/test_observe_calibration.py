"""Observed vs predicted latency and the bounded MaxTput correction."""

import pytest

from gpumix.api import GPUProfile, LLMService
from gpumix.observe.calibration import (
    latency_ratio,
    maxtput_correction,
    predicted_tpot_ms,
    profile_slo_range,
    replica_load,
)


def test_predicted_tpot_inverts_the_load() -> None:
    # MaxTput(s) = s / 10 req/s: a replica carrying 6 req/s meets TPOT 60 ms exactly.
    p = predicted_tpot_ms(lambda s: 6.0 / (s / 10.0), 40.0, 120.0)
    assert p.bound == "exact"
    assert p.tpot_ms == pytest.approx(60.0, abs=0.1)
    assert predicted_tpot_ms(lambda s: 0.1, 40, 120).bound == "at-most"
    assert predicted_tpot_ms(lambda s: 9.0, 40, 120).bound == "at-least"


def test_predicted_tpot_from_a_shipped_profile(
    chat: LLMService, llama_profiles: list[GPUProfile]
) -> None:
    profile = next(p for p in llama_profiles if p.spec.gpu_type == "a10g").spec
    grid = chat.spec.workload
    lo, hi = profile_slo_range(profile)
    full = replica_load(profile, grid, [[0.0] * 5 for _ in range(5)])
    assert full(120.0) == 0
    rates = [[0.0] * 5 for _ in range(5)]
    rates[1][1] = 1.0
    load = replica_load(profile, grid, rates)
    # Scale the rate so that the replica is exactly full at 80 ms: the prediction is 80 ms.
    rates[1][1] = 1.0 / load(80.0)
    p = predicted_tpot_ms(replica_load(profile, grid, rates), lo, hi)
    assert p.bound == "exact"
    assert p.tpot_ms == pytest.approx(80.0, abs=0.2)


def test_latency_ratio() -> None:
    assert latency_ratio(0.1, 80.0) == pytest.approx(1.25)
    assert latency_ratio(None, 80.0) is None
    assert latency_ratio(0.1, 0.0) is None


def test_correction_moves_towards_inverse_ratio_and_is_bounded() -> None:
    c = maxtput_correction(1.0, 1.25, requests=1000)
    assert c.updated
    assert 0.8 < c.factor < 1.0  # GPUs slower than profiled: less MaxTput, smoothed
    factor = 1.0
    for _ in range(50):
        factor = maxtput_correction(factor, 4.0, requests=1000).factor
    assert factor == pytest.approx(0.5)  # bounded below
    for _ in range(50):
        factor = maxtput_correction(factor, 0.1, requests=1000).factor
    assert factor == pytest.approx(1.25)  # bounded above


@pytest.mark.parametrize(
    ("ratio", "requests", "bound"),
    [(None, 1000, "exact"), (1.5, 10, "exact"), (1.5, 1000, "at-most"), (1.03, 1000, "exact")],
)
def test_correction_freezes_on_weak_evidence(
    ratio: float | None, requests: float, bound: str
) -> None:
    c = maxtput_correction(0.9, ratio, requests=requests, bound=bound)  # type: ignore[arg-type]
    assert not c.updated
    assert c.factor == 0.9
