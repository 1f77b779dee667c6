"""MaxTput from profiles (Mélange §5.3), the catalog, and the roofline estimator."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumix.api import BucketGrid, GPUProfile, GPUProfileSpec, RatePoint
from gpumix.profiles import (
    CATALOG,
    ProfileRangeError,
    UnknownGPUTypeError,
    gpu_type,
    max_rate_within,
    max_tput,
    max_tput_for_grid,
)
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import Roofline, estimate_profile
from proptest import budget

LLAMA7B = model_shape("meta-llama/Llama-2-7b-hf")


def spec(**kw: Any) -> GPUProfileSpec:
    base: dict[str, Any] = {"model": "m", "gpuType": "l4", "inputEdges": [1, 100, 1000],
                            "outputEdges": [1, 100, 500]}  # fmt: skip
    return GPUProfileSpec.model_validate({**base, **kw})


TABLES = [
    {"tpotMs": 40, "maxTput": [[4, 2], [2, 1]]},
    {"tpotMs": 120, "maxTput": [[8, 6], [4, 3]]},
]


def test_tables_interpolate_linearly_between_slos() -> None:
    assert max_tput(spec(tables=TABLES), 80) == [[6, 4], [3, 2]]
    assert max_tput(spec(tables=TABLES), 40) == [[4, 2], [2, 1]]


def test_tables_keep_loosest_above_and_refuse_below() -> None:
    assert max_tput(spec(tables=TABLES), 500) == [[8, 6], [4, 3]]
    with pytest.raises(ProfileRangeError, match=r"TPOT SLO 20 ms is tighter than .*40 ms"):
        max_tput(spec(tables=TABLES), 20)


def pts(*triples: tuple[float, float, float | None]) -> list[RatePoint]:
    return [RatePoint(rate=r, tpot_ms=t, ttft_ms=f) for r, t, f in triples]


def test_samples_interpolate_to_the_slo_crossing() -> None:
    points = pts((1, 20, None), (2, 30, None), (4, 50, None))
    assert max_rate_within(points, 40, None) == pytest.approx(3.0)
    assert max_rate_within(points, 30, None) == 2
    assert max_rate_within(points, 10, None) == 0  # even the lightest load misses the SLO
    assert max_rate_within(points, 100, None) == 4  # never beyond the highest rate measured


def test_samples_respect_ttft_when_measured() -> None:
    points = pts((1, 20, 100), (2, 25, 300))
    assert max_rate_within(points, 40, None) == 2
    assert max_rate_within(points, 40, 200) == pytest.approx(1.5)


def test_samples_form_fills_unsampled_buckets_with_zero() -> None:
    s = spec(samples=[{"inputBucket": 1, "outputBucket": 0, "points": [
        {"rate": 1, "tpotMs": 10}, {"rate": 3, "tpotMs": 30}]}])  # fmt: skip
    assert max_tput(s, 20) == [[0, 0], [2, 0]]


@given(
    rates=st.lists(st.floats(0.1, 100), min_size=1, max_size=8, unique=True),
    slo_a=st.floats(1, 200),
    slo_b=st.floats(1, 200),
)
def test_max_rate_never_shrinks_when_the_slo_loosens(
    rates: list[float], slo_a: float, slo_b: float
) -> None:
    points = [RatePoint(rate=r, tpot_ms=10 + r) for r in sorted(rates)]  # TPOT rises with load
    lo, hi = sorted((slo_a, slo_b))
    assert max_rate_within(points, lo, None) <= max_rate_within(points, hi, None) + 1e-9
    assert max_rate_within(points, hi, None) <= max(rates)


def test_regrid_takes_the_minimum_and_never_extrapolates() -> None:
    s = spec(tables=[{"tpotMs": 40, "maxTput": [[4, 2], [3, 1]]}])
    same = BucketGrid(input_edges=[1, 100, 1000], output_edges=[1, 100, 500])
    assert max_tput_for_grid(s, same, 40) == [[4, 2], [3, 1]]
    coarse = BucketGrid(input_edges=[1, 1000, 2000], output_edges=[1, 50, 500])
    # [1,1000) overlaps both input rows; [1,50) only the first output column; [50,500) both.
    # [1000,2000) lies beyond the measured inputs: cannot serve.
    assert max_tput_for_grid(s, coarse, 40) == [[3, 1], [0, 0]]


def test_catalog_has_melange_prices_and_names_unknown_types() -> None:
    prices = {n: CATALOG[n].price_per_hour for n in ("l4", "a10g", "a100-80gb", "h100")}
    assert prices == {"l4": 0.70, "a10g": 1.01, "a100-80gb": 3.67, "h100": 7.516}
    assert gpu_type("A100-80GB").name == "a100-80gb"
    with pytest.raises(UnknownGPUTypeError, match="unknown GPU type 'b200'; known types: a10"):
        gpu_type("b200")


def test_roofline_behaves_like_hardware() -> None:
    a10g, a100 = Roofline(gpu_type("a10g"), LLAMA7B), Roofline(gpu_type("a100-80gb"), LLAMA7B)
    # Bigger requests, lower rate; looser SLO, higher rate; faster GPU, higher rate.
    assert a100.max_tput(100, 100, 120) > a100.max_tput(1000, 100, 120) > 0
    assert a100.max_tput(1000, 500, 120) >= a100.max_tput(1000, 500, 40) > 0
    assert a100.max_tput(500, 200, 40) > a10g.max_tput(500, 200, 40)
    # KV capacity: the 80 GB card holds far more than the 24 GB one.
    assert a100.kv_capacity_tokens > 5 * a10g.kv_capacity_tokens
    # Llama-2's 4096-token context bounds what any GPU can serve.
    assert a100.max_tput(4000, 200, 1000) == 0


def test_roofline_reproduces_melanges_size_crossover() -> None:
    """§4.2: the cheap GPU wins tokens per dollar on small requests, the big one on large ones."""
    a10g, a100 = Roofline(gpu_type("a10g"), LLAMA7B), Roofline(gpu_type("a100-80gb"), LLAMA7B)

    def per_dollar(r: Roofline, i: int, o: int) -> float:
        price = r.gpu.price_per_hour
        assert price is not None
        return r.max_tput(i, o, 120) / price

    assert per_dollar(a10g, 25, 25) > per_dollar(a100, 25, 25)
    assert per_dollar(a100, 2000, 500) > per_dollar(a10g, 2000, 500)


def test_shipped_example_profiles_are_what_the_estimator_gives(
    llama_profiles: list[GPUProfile],
) -> None:
    for shipped in llama_profiles:
        fresh = estimate_profile(
            gpu_type(shipped.spec.gpu_type),
            LLAMA7B,
            input_edges=shipped.spec.input_edges,
            output_edges=shipped.spec.output_edges,
            tpots_ms=[t.tpot_ms for t in shipped.spec.tables or []],
        )
        assert fresh == shipped, f"manifests/samples/ profile {shipped.name} is stale"


@pytest.mark.parametrize(
    ("gpu", "model", "gpus", "prompt", "output"),
    [
        ("a100-80gb", "meta-llama/Llama-2-7b-hf", 1, 3000, 1),
        ("l4", "meta-llama/Llama-2-7b-hf", 1, 700, 300),
        ("h100", "meta-llama/Llama-2-70b-hf", 2, 1500, 40),
    ],
)
def test_alone_latency_is_what_the_simulated_engine_takes_on_an_idle_pod(
    gpu: str, model: str, gpus: int, prompt: int, output: int
) -> None:
    from gpumix.sim.cluster import PodGroup, build_pods, run  # noqa: PLC0415
    from gpumix.sim.request import Request  # noqa: PLC0415
    from gpumix.sim.routing import RoundRobin  # noqa: PLC0415

    shape = model_shape(model)
    pods = build_pods([PodGroup(pool="p", gpu_type=gpu, replicas=1, gpus=gpus)], shape)
    request = Request(0, 0.0, prompt, output)
    run(pods, RoundRobin(), [request])
    ttft, tpot = Roofline(gpu_type(gpu), shape, gpus).alone_s(prompt, output)
    assert ttft == pytest.approx(request.ttft, rel=1e-9)
    assert tpot == pytest.approx(request.tpot, rel=1e-9)


@budget(30)
@given(
    gpu=st.sampled_from(["l4", "a10g", "a100-80gb", "h100"]),
    inputs=st.tuples(st.integers(0, 3800), st.integers(1, 200)),
    outputs=st.tuples(st.integers(0, 80), st.integers(1, 32)),
    pivot=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    ttft_slack=st.one_of(st.none(), st.floats(0.5, 2)),
)
def test_alone_met_share_counts_every_request_size_of_the_bucket(
    gpu: str,
    inputs: tuple[int, int],
    outputs: tuple[int, int],
    pivot: tuple[float, float],
    ttft_slack: float | None,
) -> None:
    """Against enumeration of every (input, output) the simulator can draw in the bucket (each
    at least 1 token), checked with `alone_s` and the KV limit. The SLO is the alone latency of
    a request in the bucket (``pivot``), so the boundary runs through it."""
    roof = Roofline(gpu_type(gpu), LLAMA7B)
    (in_lo, in_w), (out_lo, out_w) = inputs, outputs
    sizes = [
        (max(i, 1), max(o, 1))
        for i in range(in_lo, in_lo + in_w)
        for o in range(out_lo, out_lo + out_w)
    ]
    ttft_s, tpot_s = roof.alone_s(*sizes[int(pivot[0] * (len(sizes) - 1))])
    tpot_ms = tpot_s * 1e3 * (0.5 + pivot[1])
    ttft_ms = None if ttft_slack is None else ttft_s * 1e3 * ttft_slack
    limit = min(LLAMA7B.max_context, roof.kv_capacity_tokens)
    met = 0
    for i, o in sizes:
        ttft, tpot = roof.alone_s(i, o)
        late = ttft_ms is not None and ttft * 1e3 > ttft_ms
        met += i + o <= limit and tpot * 1e3 <= tpot_ms and not late
    share = roof.alone_met_share((in_lo, in_lo + in_w), (out_lo, out_lo + out_w), tpot_ms, ttft_ms)
    assert share == pytest.approx(met / len(sizes), abs=1e-12)


def test_few_output_tokens_after_a_long_prompt_miss_alone_where_the_bucket_midpoint_meets() -> None:
    """The case MaxTput (from the midpoint, §5.3) misses: a 60 ms TPOT on an A100 holds for a
    1,024–2,048-token prompt with 8 output tokens, not with 1; an H100 serves more of them."""
    a100, h100 = Roofline(gpu_type("a100-80gb"), LLAMA7B), Roofline(gpu_type("h100"), LLAMA7B)
    assert a100.max_tput(1536, 8.5, 60) > 0
    bucket = ((1024, 2048), (1, 16))
    assert 0.5 < a100.alone_met_share(*bucket, 60) < 1
    assert a100.alone_met_share(*bucket, 60) < h100.alone_met_share(*bucket, 60)
    assert a100.alone_met_share(*bucket, 60) < a100.alone_met_share(*bucket, 120)
    assert a100.alone_met_share(*bucket, 60, ttft_ms=10) == 0
    assert a100.alone_met_share((1, 64), (64, 128), 60) == 1


def test_a_request_meets_alone_up_to_its_own_idle_latency_and_only_when_it_fits() -> None:
    """`meets_alone`, what the attainment bench's reach check asks of every option: the SLO at
    the request's own idle latency holds, a hair under it does not (TPOT, then TTFT), and a
    request longer than the replica holds never meets."""
    roof = Roofline(gpu_type("a10g"), LLAMA7B)
    ttft, tpot = roof.alone_s(1500, 20)
    assert roof.meets_alone(1500, 20, tpot * 1e3, ttft * 1e3)
    assert not roof.meets_alone(1500, 20, tpot * 1e3 * 0.999)
    assert not roof.meets_alone(1500, 20, tpot * 1e3, ttft * 1e3 * 0.999)
    assert roof.context_limit == min(LLAMA7B.max_context, roof.kv_capacity_tokens)
    assert not roof.meets_alone(roof.context_limit, 1, 1e9)
    assert roof.meets_alone(roof.context_limit - 1, 1, 1e9)
