"""Turning cluster objects into the allocator's instance, with reasons for every pool left out."""

from typing import Any

import pytest

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.problem import build_problem


def pool(name: str, gpu: str, **spec: Any) -> GPUPool:
    return GPUPool.model_validate({"kind": "GPUPool", "metadata": {"name": name}, "spec": {
        "gpuType": gpu, "nodeSelector": {"gpumix.io/gpu-class": name}, **spec}})  # fmt: skip


def with_spec(service: LLMService, **changes: Any) -> LLMService:
    return service.model_copy(update={"spec": service.spec.model_copy(update=changes)})


def test_every_profiled_pool_becomes_an_option(
    chat: LLMService, llama_profiles: list[GPUProfile]
) -> None:
    pools = [pool("a100", "a100-80gb", maxGPUs=5), pool("cheap-l4", "l4", pricePerGPUHour=0.5)]
    problem = build_problem(chat, pools, llama_profiles)
    assert problem.excluded == {}
    assert problem.instance is not None
    options = {g.name: g for g in problem.instance.gpus}
    assert options["a100"].cost_per_hour == 3.67
    assert options["a100"].max_count == 5
    assert options["cheap-l4"].cost_per_hour == 0.5
    assert options["cheap-l4"].max_count is None
    assert problem.instance.slo_label == "TPOT 120 ms"
    assert sum(map(sum, problem.instance.rates)) == pytest.approx(5.5 * 1.1)


def test_pools_left_out_say_why(chat: LLMService, llama_profiles: list[GPUProfile]) -> None:
    pools = [pool("a40", "a40"), pool("mystery", "b200"), pool("l4", "l4")]
    b200_spec = {**llama_profiles[0].spec.model_dump(by_alias=True), "gpuType": "b200"}
    extra = GPUProfile.model_validate(
        {"kind": "GPUProfile", "metadata": {"name": "b200"}, "spec": b200_spec}
    )
    problem = build_problem(
        with_spec(chat, pools=["a40", "mystery", "l4", "gone"]), pools, [*llama_profiles, extra]
    )
    assert (
        "no GPUProfile for model 'meta-llama/Llama-2-7b-hf' on GPU type 'a40'"
        in (problem.excluded["a40"])
    )
    assert "set spec.pricePerGPUHour" in problem.excluded["mystery"]
    assert "no GPUPool has that name" in problem.excluded["gone"]
    assert [g.name for g in problem.instance.gpus] == ["l4"] if problem.instance else False


def test_slo_tighter_than_any_profile_leaves_pools_out(
    chat: LLMService, llama_profiles: list[GPUProfile]
) -> None:
    tight = with_spec(chat, slo=chat.spec.slo.model_copy(update={"tpot_ms": 10}))
    problem = build_problem(tight, [pool("l4", "l4")], llama_profiles)
    assert problem.instance is None
    assert "tighter than the tightest measured (40 ms)" in problem.excluded["l4"]


def test_multi_gpu_replica_costs_k_gpus(chat: LLMService, llama_profiles: list[GPUProfile]) -> None:
    tp2 = llama_profiles[2].model_copy(
        update={"spec": llama_profiles[2].spec.model_copy(update={"gpus_per_replica": 2})}
    )
    problem = build_problem(chat, [pool("a100", "a100-80gb", maxGPUs=5)], [tp2])
    assert problem.instance is not None
    option = problem.instance.gpus[0]
    assert option.cost_per_hour == pytest.approx(2 * 3.67)
    assert option.max_count == 2  # 5 GPUs hold two 2-GPU replicas
    assert problem.choices["a100-tp2"].gpus_per_replica == 2  # option key: <pool>-tp<k>
