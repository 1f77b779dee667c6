"""Known answers, errors and edge cases of solve / plan_allocation."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_helpers import brute_force_cost, instance

from gpumix.plan import (
    AllocationInstance,
    Formulation,
    SolverError,
    UnservableBucketError,
    plan_allocation,
    solve,
)

# Mélange reference repo README example: gpu_info, workload_distribution, rate 16, slice factor 1.
README_GPUS = {
    "A10G": (1.01, [[5.0, 1.0], [10.0, 5.0]]),
    "A100-80GB": (3.67, [[20.0, 2.0], [50.0, 20.0]]),
}
README_DISTRIBUTION = [[0.25, 0.5], [0.25, 0.25]]


def readme_instance(rate: float = 16.0, slice_factor: int = 1) -> AllocationInstance:
    rates = [[rate * f for f in row] for row in README_DISTRIBUTION]
    return instance(rates, README_GPUS, slice_factor)


@pytest.mark.parametrize("formulation", list(Formulation))
@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_readme_example_matches_brute_force(formulation: Formulation, solver: str) -> None:
    inst = readme_instance()
    expected = brute_force_cost(inst)
    assert expected is not None
    plan = plan_allocation(inst, formulation, solver=solver)  # type: ignore[arg-type]
    assert plan.allocation is not None
    assert plan.allocation.cost_per_hour == pytest.approx(expected, abs=1e-9)
    assert plan.allocation.result.status == "optimal"
    assert plan.allocation.result.solver == solver
    # Single-type baselines by hand: A10G load 4/5+8/1+4/10+4/5 = 10 -> 10 units;
    # A100 load 4/20+8/2+4/50+4/20 = 4.48 -> 5 units.
    a10g, a100 = plan.baselines["A10G"], plan.baselines["A100-80GB"]
    assert a10g is not None
    assert a100 is not None
    assert a10g.counts == {"A10G": 10, "A100-80GB": 0}
    assert a100.counts == {"A10G": 0, "A100-80GB": 5}
    assert plan.savings["A100-80GB"] == pytest.approx(1 - expected / (5 * 3.67))


def test_finer_slices_never_cost_more() -> None:
    # Slice factor 4 can split buckets, so it can only match or beat slice factor 1.
    coarse = solve(readme_instance(rate=3.0, slice_factor=1))
    fine = solve(readme_instance(rate=3.0, slice_factor=4))
    assert coarse is not None
    assert fine is not None
    assert fine.cost_per_hour <= coarse.cost_per_hour + 1e-9
    assert fine.cost_per_hour == pytest.approx(brute_force_cost(readme_instance(3.0, 4)))


def test_mix_beats_single_types_when_each_wins_a_bucket() -> None:
    # Cheap type only good at short, big type only good at long: the mix must use both.
    inst = instance(
        [[3.0, 3.0]],
        {"small": (1.0, [[3.0, 0.5]]), "big": (3.0, [[4.0, 3.0]])},
        slice_factor=2,
    )
    plan = plan_allocation(inst)
    assert plan.allocation is not None
    assert plan.allocation.counts == {"small": 1, "big": 1}
    assert plan.allocation.share["small"] == [[1.0, 0.0]]
    assert plan.allocation.share["big"] == [[0.0, 1.0]]
    assert plan.allocation.load == pytest.approx({"small": 1.0, "big": 1.0})
    assert plan.savings["big"] == pytest.approx(1 - 4.0 / 6.0)  # big alone: 3/4 + 1 -> 2 units


def test_exact_integer_load_does_not_buy_an_extra_gpu() -> None:
    # Three slices of 1/3 load each: float sums may land one ulp above 1; still one GPU.
    inst = instance([[0.1 * 3]], {"g": (1.0, [[0.1 * 3]])}, slice_factor=3)
    allocation = solve(inst)
    assert allocation is not None
    assert allocation.counts == {"g": 1}


def test_unservable_bucket_names_range_rate_and_slo() -> None:
    inst = instance(
        [[1.0, 0.0], [0.0, 0.4]],
        {"l4": (0.7, [[5.0, 5.0], [5.0, 0.0]]), "a10g": (1.01, [[5.0, 5.0], [5.0, 0.0]])},
        input_edges=[1, 4000, 8000],
        output_edges=[1, 250, 500],
        slo_label="TPOT 40 ms",
    )
    with pytest.raises(UnservableBucketError) as excinfo:
        solve(inst)
    err = excinfo.value
    assert err.bucket == (1, 1)
    assert err.rate == 0.4
    assert str(err) == (
        "bucket input 4000–8000 / output 250–500 tokens (0.4 req/s) cannot be served "
        "by any allowed GPU type within TPOT 40 ms"
    )


def test_baseline_is_none_when_its_type_cannot_serve_a_bucket() -> None:
    inst = instance([[1.0, 1.0]], {"l4": (0.7, [[5.0, 0.0]]), "h100": (7.516, [[20.0, 10.0]])})
    plan = plan_allocation(inst)
    assert plan.baselines["l4"] is None
    assert plan.savings["l4"] is None
    assert plan.baselines["h100"] is not None
    with pytest.raises(UnservableBucketError, match=r"bucket \(0, 1\)"):
        solve(inst, only="l4")


def test_availability_cap_is_respected_or_infeasible() -> None:
    gpus = {"cheap": (1.0, [[1.0]]), "dear": (5.0, [[10.0]])}
    uncapped = solve(instance([[3.0]], gpus, slice_factor=3))
    assert uncapped is not None
    assert uncapped.counts == {"cheap": 3, "dear": 0}
    capped = AllocationInstance.model_validate(
        {
            "rates": [[3.0]],
            "slice_factor": 3,
            "gpus": [
                {"name": "cheap", "cost_per_hour": 1.0, "max_tput": [[1.0]], "max_count": 1},
                {"name": "dear", "cost_per_hour": 5.0, "max_tput": [[10.0]], "max_count": 0},
            ],
        }
    )
    assert solve(capped) is None  # 3 units of load, 1 usable unit
    plan = plan_allocation(capped)
    assert plan.allocation is None
    assert plan.savings == {"cheap": None, "dear": None}


def test_type_capped_at_zero_is_not_allowed() -> None:
    inst = AllocationInstance.model_validate(
        {
            "rates": [[1.0]],
            "gpus": [{"name": "only", "cost_per_hour": 1.0, "max_tput": [[1.0]], "max_count": 0}],
        }
    )
    with pytest.raises(UnservableBucketError):
        solve(inst)


@pytest.mark.parametrize("formulation", list(Formulation))
def test_zero_traffic_buys_nothing(formulation: Formulation) -> None:
    plan = plan_allocation(instance([[0.0, 0.0], [0.0, 0.0]], README_GPUS, 8), formulation)
    assert plan.allocation is not None
    assert plan.allocation.counts == {"A10G": 0, "A100-80GB": 0}
    assert plan.allocation.cost_per_hour == 0
    assert plan.allocation.result.status == "optimal"
    assert plan.savings == {"A10G": 0.0, "A100-80GB": 0.0}


def test_unknown_only_type() -> None:
    with pytest.raises(ValueError, match="unknown GPU type"):
        solve(readme_instance(), only="h100")


def test_only_uses_one_type() -> None:
    inst = readme_instance(rate=5.0, slice_factor=2)
    allocation = solve(inst, only="A100-80GB")
    assert allocation is not None
    assert allocation.counts["A10G"] == 0
    assert allocation.share["A10G"] == [[0.0, 0.0], [0.0, 0.0]]
    assert allocation.share["A100-80GB"] == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("formulation", list(Formulation))
def test_time_limit_without_solution_raises_solver_error(formulation: Formulation) -> None:
    # A 0 s limit stops HiGHS before it has an incumbent: no allocation, not "infeasible".
    inst = instance(
        [[7.3, 2.1, 5.5], [1.7, 3.3, 0.9]],
        {
            "a": (0.7, [[2.1, 1.3, 0.7], [1.1, 0.9, 0.5]]),
            "b": (1.01, [[3.1, 1.9, 1.1], [1.7, 1.3, 0.7]]),
            "c": (3.67, [[9.7, 6.1, 3.9], [5.3, 4.1, 2.3]]),
        },
        slice_factor=8,
    )
    with pytest.raises(SolverError, match="time_limit_no_solution") as excinfo:
        solve(inst, formulation, time_limit_s=0.0)
    assert excinfo.value.result.objective is None
    assert excinfo.value.result.solver == "highs"


def test_cbc_writes_nothing_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", "/nonexistent")  # PuLP would fall back to the CWD
    allocation = solve(readme_instance(), solver="cbc")
    assert allocation is not None
    assert allocation.result.solver == "cbc"
    assert list(tmp_path.iterdir()) == []
