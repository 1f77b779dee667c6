"""Plans that hold their SLO: predicted attainment, and the plan → simulate → derate loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.attainment import derated, plan_to_target, predict
from gpumix.manifests import load_objects
from gpumix.plan import AllocationInstance, solve
from gpumix.problem import build_problem
from proptest import budget

from .conftest import EXAMPLES

FILES = [EXAMPLES / "chat.yaml", EXAMPLES / "profiles-llama-2-7b.yaml", EXAMPLES / "gpupools.yaml"]


@pytest.fixture(scope="module")
def pools() -> list[GPUPool]:
    return [o for o in load_objects([EXAMPLES / "gpupools.yaml"]) if isinstance(o, GPUPool)]


@pytest.fixture(scope="module")
def demo(
    chat: LLMService, llama_profiles: list[GPUProfile], pools: list[GPUPool]
) -> AllocationInstance:
    instance = build_problem(chat, pools, llama_profiles).instance
    assert instance is not None
    return instance


def test_the_melange_plan_of_the_demo_misses_and_the_slo_plan_meets_the_target(
    chat: LLMService, llama_profiles: list[GPUProfile], pools: list[GPUPool],
    demo: AllocationInstance,
) -> None:  # fmt: skip
    melange = solve(demo)
    assert melange is not None
    before = predict(chat, pools, llama_profiles, melange)
    assert before.met < 0.9  # MaxTput-loaded pools: the promise does not hold
    targeted = plan_to_target(chat, pools, llama_profiles, demo, target=0.99)
    assert targeted is not None and targeted.reached
    assert targeted.predicted.met >= 0.99
    assert targeted.allocation.cost_per_hour >= melange.cost_per_hour
    assert all(0 < f <= 1 for f in targeted.derating.values())
    assert sum(a.requests for a in targeted.predicted.pools.values()) == targeted.predicted.requests


def test_each_round_costs_at_least_the_one_before(
    chat: LLMService, llama_profiles: list[GPUProfile], pools: list[GPUPool],
    demo: AllocationInstance,
) -> None:  # fmt: skip
    costs = []
    for rounds in range(1, 5):
        plan = plan_to_target(chat, pools, llama_profiles, demo, target=0.9999, max_rounds=rounds)
        assert plan is not None and plan.rounds <= rounds
        costs.append(plan.allocation.cost_per_hour)
    assert costs == sorted(costs)
    assert costs[-1] > costs[0]


@budget(15)
@given(st.lists(st.floats(0.2, 1.0), min_size=4, max_size=4))
def test_derating_never_makes_the_optimum_cheaper(
    demo: AllocationInstance, factors: list[float]
) -> None:
    base = solve(demo)
    names = [g.name for g in demo.gpus]
    cheaper = solve(derated(demo, dict(zip(names, factors, strict=True))))
    assert base is not None and cheaper is not None
    assert cheaper.cost_per_hour >= base.cost_per_hour - 1e-9
    assert derated(demo, {}) == demo


def _gpumix(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "gpumix"
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, check=False, timeout=300
    )


def test_plan_json_is_all_of_stdout_and_carries_the_predicted_attainment() -> None:
    out = _gpumix("plan", *map(str, FILES), "--output", "json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # the whole stdout: no solver banner before it
    assert result["planner"] == "slo" and result["attainment_target"] == 0.99
    predicted = result["predicted_attainment"]
    assert predicted["met"] >= 0.99 and predicted["requests"] == 3000
    assert set(predicted["pools"]) == {p for p, n in result["allocation"].items() if n}
    fair = {n: s for n, s in result["savings"].items() if s is not None}
    assert all(result["baseline_attainment"][n] >= 0.99 for n in fair)


def test_the_melange_planner_reports_its_shortfall() -> None:
    out = _gpumix("plan", *map(str, FILES), "--planner", "melange", "--output", "json")
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert result["status"] == "below_target"
    assert result["predicted_attainment"]["met"] < 0.99
    assert "below the target 99%" in out.stderr
    table = _gpumix("plan", *map(str, FILES))
    assert "predicted attainment" in table.stdout and "meets the 99% target" in table.stdout


def test_a_plan_of_multi_gpu_replicas_is_simulated_on_its_pool(
    chat: LLMService, pools: list[GPUPool]
) -> None:
    """Options of k-GPU replicas are keyed `<pool>-tp<k>`; the simulator finds their pool."""
    from gpumix.profiles import gpu_type  # noqa: PLC0415
    from gpumix.profiles.models import model_shape  # noqa: PLC0415
    from gpumix.profiles.roofline import estimate_profile  # noqa: PLC0415

    wl = chat.spec.workload
    model = chat.spec.model.model_copy(update={"name": "meta-llama/Llama-2-70b-hf"})
    service = chat.model_copy(update={"spec": chat.spec.model_copy(update={"model": model})})
    profile = estimate_profile(
        gpu_type("a100-80gb"), model_shape(model.name), input_edges=wl.input_edges,
        output_edges=wl.output_edges, tpots_ms=[120.0], gpus=2,
    )  # fmt: skip
    a100 = [p for p in pools if p.spec.gpu_type == "a100-80gb"]
    instance = build_problem(service, a100, [profile]).instance
    assert instance is not None and [g.name for g in instance.gpus] == ["a100-80gb-tp2"]
    plan = solve(instance)
    assert plan is not None
    predicted = predict(service, a100, [profile], plan, requests=300)
    assert set(predicted.pools) == {"a100-80gb-tp2"}
    assert predicted.pools["a100-80gb-tp2"].requests == 300
