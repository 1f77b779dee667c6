"""One source of engine settings: the pods gpumix deploys run the engine it simulated, planned."""

from typing import Any

import pytest

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.problem import PoolChoice, build_problem
from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import estimate_profile
from gpumix.profiles.vllm import contradictions, engine_args, for_workload
from gpumix.render import Owner, render_deployment
from gpumix.sim.scenario import PlanChoice, TrafficSpec, simulate_service

OWNER = Owner(name="chat", namespace="default", uid="u")
LLAMA31 = "meta-llama/Llama-3.1-8B-Instruct"


def _pool(gpu: str) -> GPUPool:
    return GPUPool.model_validate(
        {"kind": "GPUPool", "metadata": {"name": gpu},
         "spec": {"gpuType": gpu, "nodeSelector": {"gpumix.io/gpu-class": gpu}}}
    )  # fmt: skip


def _flags(args: list[str]) -> dict[str, str]:
    """The container's args as vLLM's parser reads them: the last value of each flag."""
    out: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else "--"
            out[arg] = "" if nxt.startswith("--") else nxt
    return out


def _with(service: LLMService, **model: Any) -> LLMService:
    spec = service.spec.model_copy(update={"model": service.spec.model.model_copy(update=model)})
    return service.model_copy(update={"spec": spec})


@pytest.mark.parametrize("gpu", ["l4", "a10g", "a100-80gb", "h100"])
def test_the_deployment_runs_the_engine_the_simulator_predicts(
    chat: LLMService, llama_profiles: list[GPUProfile], gpu: str
) -> None:
    """Changing a setting on one side only (the roofline's memory share, the simulator's block
    size, the renderer's flags) fails here."""
    pool = _pool(gpu)
    run = simulate_service(
        chat, [pool], llama_profiles, TrafficSpec(requests=5), plan=PlanChoice(counts={gpu: 1})
    )
    pod = run.pods[0]  # built as attainment.predict builds the plan's pods
    choice = PoolChoice(pool=gpu, gpu_type=gpu, gpus_per_replica=1, price_per_gpu_hour=1,
                        profile="p")  # fmt: skip
    deployment = render_deployment(OWNER, chat.spec, pool, choice, 1)
    flags = _flags(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert int(flags["--block-size"]) == pod.bs
    assert float(flags["--gpu-memory-utilization"]) == pod.roof.p.gpu_memory_utilization
    assert int(flags["--max-num-seqs"]) == pod.cfg.max_num_seqs == pod.roof.p.max_num_seqs
    assert int(flags["--max-num-batched-tokens"]) == pod.max_batched
    assert min(int(flags["--max-model-len"]), pod.kv_blocks * pod.bs) == pod.max_tokens
    assert ("--enable-chunked-prefill" in flags) == pod.cfg.chunked_prefill
    assert ("--no-enable-chunked-prefill" in flags) != pod.cfg.chunked_prefill


def test_max_model_len_is_the_workloads_longest_request_within_the_models_limit(
    chat: LLMService,
) -> None:
    wl = chat.spec.workload  # edges up to 3072 and 1001
    assert for_workload(wl, LLAMA31).max_model_len == 3072 + 1001  # not Llama 3.1's 131,072
    assert for_workload(wl, "huggyllama/llama-30b").max_model_len == 2048  # its context
    assert for_workload(wl, "example/unknown-model").max_model_len == 4073


def test_user_args_win_and_are_reported() -> None:
    settings = for_workload(
        LLMService.model_validate(
            {"kind": "LLMService", "metadata": {"name": "s"}, "spec": {
                "model": {"name": LLAMA31}, "slo": {"tpotMs": 100},
                "workload": {"requestRate": 1, "inputEdges": [1, 1024], "outputEdges": [1, 512],
                             "histogram": [[1]]}}}
        ).spec.workload,
        LLAMA31,
    )  # fmt: skip
    user = ["--gpu-memory-utilization=0.95", "--max_model_len", "8192", "--enforce-eager"]
    args = engine_args(settings, user)
    assert "--gpu-memory-utilization" not in args and "--max-model-len" not in args
    flags = _flags(args)
    # Without chunked prefill vLLM refuses a budget below the longest request: ours follows theirs.
    assert flags["--max-num-batched-tokens"] == "8192"
    assert flags["--block-size"] == "16"
    assert contradictions(settings, user) == [
        "--max-model-len 8192 (the plan assumes 1536)",
        "--gpu-memory-utilization 0.95 (the plan assumes 0.9)",
    ]
    assert contradictions(settings, ["--gpu-memory-utilization", "0.90", "--enforce-eager"]) == []
    assert contradictions(settings, ["--enable-chunked-prefill"]) == [
        "--enable-chunked-prefill (the plan assumes chunked prefill off)"
    ]
    assert "--no-enable-chunked-prefill" not in engine_args(settings, ["--enable-chunked-prefill"])


def test_a_replica_must_hold_the_workloads_longest_request_not_the_models_context(
    chat: LLMService,
) -> None:
    """Llama 3.1 8B's 131k-token context needs 16 GiB of KV; an L4 (24 GiB) holds the weights
    plus a few tens of thousands of tokens: the chat workload fits, a 64k-token one does not."""
    shape = model_shape(LLAMA31)
    wl = chat.spec.workload
    profile = estimate_profile(gpu_type("l4"), shape, input_edges=wl.input_edges,
                               output_edges=wl.output_edges, tpots_ms=[120])  # fmt: skip
    service = _with(chat, name=LLAMA31)
    assert build_problem(service, [_pool("l4")], [profile]).excluded == {}
    long_wl = wl.model_copy(update={"input_edges": [*wl.input_edges[:-1], 65536]})
    long = service.model_copy(
        update={"spec": service.spec.model_copy(update={"workload": long_wl})}
    )
    long_profile = estimate_profile(gpu_type("l4"), shape, input_edges=long_wl.input_edges,
                                    output_edges=wl.output_edges, tpots_ms=[120])  # fmt: skip
    excluded = build_problem(long, [_pool("l4")], [long_profile]).excluded
    assert "66537-token request" in excluded["l4"]
    assert "--max-model-len" in excluded["l4"]
