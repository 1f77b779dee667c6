"""The discrete-event loop: requests arrive, a router picks a pod, pods step until idle."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.models import ModelShape
from gpumix.profiles.roofline import Roofline, RooflineParams
from gpumix.sim.engine import Engine, EngineConfig
from gpumix.sim.request import Request
from gpumix.sim.routing import Router


class PodGroup(BaseModel):
    """`replicas` pods of one pool: `gpus` GPUs of `gpu_type` each."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pool: str
    gpu_type: str
    replicas: int
    gpus: int = 1
    price_per_gpu_hour: float = 0.0


def build_pods(
    groups: Sequence[PodGroup],
    model: ModelShape,
    config: EngineConfig | None = None,
    params: Mapping[str, RooflineParams] | None = None,
) -> list[Engine]:
    """One engine per replica, named `<pool>-<k>`, in the order of `groups`. `params` overrides
    the performance model per GPU type (default: the calibrated parameters)."""
    pods: list[Engine] = []
    for g in groups:
        roof = Roofline(gpu_type(g.gpu_type), model, g.gpus, (params or {}).get(g.gpu_type))
        for k in range(g.replicas):
            pods.append(
                Engine(
                    f"{g.pool}-{k}",
                    roof,
                    config,
                    price_per_hour=g.price_per_gpu_hour * g.gpus,
                    index=len(pods),
                )
            )
    return pods


def run(pods: Sequence[Engine], router: Router, requests: Sequence[Request]) -> float:
    """Simulate `requests` (sorted by arrival) to completion; returns the end time. Each request
    ends finished (`finish` set) or dropped (`drop_reason` set), exactly once."""
    if not pods:
        raise ValueError("no pods to simulate")
    heap: list[tuple[float, int, int]] = []  # (step end, version, pod)
    push, pop = heapq.heappush, heapq.heappop
    now = 0.0
    inf = float("inf")
    n = len(requests)
    i = 0
    while i < n or heap:
        next_arrival = requests[i].arrival if i < n else inf
        if heap and heap[0][0] <= next_arrival:
            now, version, k = pop(heap)
            pod = pods[k]
            if version != pod.version:
                continue
            for r in pod.finish(now):
                router.observe(r)
            pod.version += 1
            end = pod.start(now)
            if end is not None:
                push(heap, (end, pod.version, k))
            continue
        r = requests[i]
        i += 1
        now = next_arrival
        k = router.route(r, pods, now)
        pod = pods[k]
        if not pod.enqueue(r, now):
            router.dropped(r)
            continue
        if pod.busy:
            if pod.cut(now):
                push(heap, (pod.step_end, pod.version, k))
        else:
            pod.version += 1
            end = pod.start(now)
            if end is not None:
                push(heap, (end, pod.version, k))
    return now
