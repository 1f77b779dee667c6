"""Small pods and workloads for the simulator tests."""

from __future__ import annotations

import numpy as np

from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import Roofline, RooflineParams
from gpumix.sim.cluster import PodGroup, build_pods, run
from gpumix.sim.engine import Engine, EngineConfig
from gpumix.sim.request import Request
from gpumix.sim.routing import RoundRobin, Router
from gpumix.sim.traffic import make_requests, poisson_times

LLAMA7B = model_shape("meta-llama/Llama-2-7b-hf")


def pods(gpu: str = "a100-80gb", replicas: int = 1, **config: object) -> list[Engine]:
    return build_pods(
        [PodGroup(pool=gpu, gpu_type=gpu, replicas=replicas)],
        LLAMA7B,
        EngineConfig.model_validate(config),
    )


def tiny_pod(chunked: bool = False, memory_share: float = 0.62) -> Engine:
    """An L4 whose KV cache holds only a few thousand tokens, so preemption happens."""
    roof = Roofline(gpu_type("l4"), LLAMA7B, 1, RooflineParams(gpu_memory_utilization=memory_share))
    return Engine("tiny-0", roof, EngineConfig(chunked_prefill=chunked))


def poisson(rate: float, n: int, seed: int = 0, prompt: tuple[int, int] = (100, 1500),
            output: tuple[int, int] = (10, 400)) -> list[Request]:  # fmt: skip
    rng = np.random.default_rng(seed + 100)
    return make_requests(
        poisson_times(rate, n, seed),
        rng.integers(*prompt, n),
        rng.integers(*output, n),
    )


def simulate(engines: list[Engine], requests: list[Request], router: Router | None = None) -> float:
    return run(engines, router or RoundRobin(), requests)
