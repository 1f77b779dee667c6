"""GPU pools as the cluster shows them: nodes matching a pool, GPUs allocatable and allocated."""

from pydantic import BaseModel, ConfigDict

from gpumix.api import Condition, ConditionStatus, GPUPool, GPUPoolStatus
from gpumix.problem import pool_price
from gpumix.reconcile.conditions import set_condition

GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = "app.kubernetes.io/managed-by"


class NodeInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str]
    allocatable_gpus: int


class PodInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    node: str | None
    gpus: int
    phase: str
    managed_by_gpumix: bool


def pool_nodes(pool: GPUPool, nodes: list[NodeInfo]) -> list[NodeInfo]:
    """Nodes whose labels include every label of the pool's selector."""
    sel = pool.spec.node_selector.items()
    return [n for n in nodes if all(n.labels.get(k) == v for k, v in sel)]


def holds_gpus(pod: PodInfo) -> bool:
    """A pod holds its GPUs from scheduling until it finishes."""
    return pod.node is not None and pod.phase not in ("Succeeded", "Failed") and pod.gpus > 0


def pool_status(
    pool: GPUPool,
    *,
    mine: list[NodeInfo],
    pods: list[PodInfo],
    previous: list[Condition],
    generation: int | None,
    now: str,
) -> GPUPoolStatus:
    """The pool's status from its nodes (``mine``: :func:`pool_nodes`) and the pods on them."""
    names = {n.name for n in mine}
    allocated = sum(p.gpus for p in pods if holds_gpus(p) and p.node in names)
    allocatable = sum(n.allocatable_gpus for n in mine)
    if mine:
        cond = (ConditionStatus.TRUE, "NodesFound", f"{len(mine)} nodes, {allocatable} GPUs")
    elif pool.spec.max_gpus:
        cond = (
            ConditionStatus.TRUE,
            "Autoscaled",
            f"no nodes yet; plannable up to maxGPUs={pool.spec.max_gpus}",
        )
    else:
        selector = ",".join(f"{k}={v}" for k, v in sorted(pool.spec.node_selector.items()))
        cond = (
            ConditionStatus.FALSE,
            "NoNodes",
            f"no node matches nodeSelector {selector}; label GPU nodes or set maxGPUs",
        )
    conditions = set_condition(previous, "Ready", *cond, generation=generation, now=now)
    return GPUPoolStatus(
        observed_generation=generation,
        conditions=conditions,
        nodes=len(mine),
        allocatable_gpus=allocatable,
        allocated_gpus=allocated,
        price_per_gpu_hour=pool_price(pool),
    )


def plannable_gpus(pool: GPUPool, status: GPUPoolStatus) -> int:
    """GPUs the planner may place in this pool: its declared maximum (an autoscaled pool can
    grow to it), else what its nodes offer."""
    if pool.spec.max_gpus is not None:
        return pool.spec.max_gpus
    return status.allocatable_gpus or 0


def foreign_gpus(mine: list[NodeInfo], pods: list[PodInfo]) -> int:
    """GPUs of a pool's nodes (``mine``: :func:`pool_nodes`) held by pods gpumix does not
    manage (other workloads)."""
    names = {n.name for n in mine}
    return sum(
        p.gpus for p in pods if holds_gpus(p) and p.node in names and not p.managed_by_gpumix
    )
