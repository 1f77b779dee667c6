"""The routing ConfigMap: per-bucket traffic weights for Mélange's size-aware load balancer.

Mélange App. A.2 routes each request by its size bucket (input length, and output length
estimated as the running mean of that input bucket's past outputs), then picks a GPU at random
with weight proportional to that GPU's MaxTput for the bucket. The ILP already decided how much
of each bucket each GPU type carries (the plan's ``share``), so the router reads those fractions
here: it picks a pool with probability ``share[i][j]``, then one of the pool's identical replicas
uniformly (each replica's weight is ``share[i][j] / replicas``).
"""

import json
import math
from typing import Any

from gpumix.api import LLMServiceSpec
from gpumix.problem import PoolChoice
from gpumix.render.names import (
    Owner,
    deployment_name,
    labels_for,
    object_meta,
    routing_configmap_name,
)

ROUTING_KEY = "routing.json"
DECIMALS = 6


def _round(value: float, where: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: share must be a finite number >= 0, got {value}")
    return round(value, DECIMALS) + 0.0  # + 0.0 folds -0.0 into 0.0


def _check_shape(pool: str, matrix: list[list[float]], shape: tuple[int, int]) -> None:
    rows, cols = shape
    if len(matrix) != rows or any(len(row) != cols for row in matrix):
        raise ValueError(f"shares[{pool!r}] is not {rows}x{cols}, the workload's bucket grid")


def routing_document(
    service: str,
    spec: LLMServiceSpec,
    shares: dict[str, list[list[float]]],
    replicas: dict[str, int],
    choices: dict[str, PoolChoice],
) -> dict[str, Any]:
    """The routing weights as a JSON-ready dict; only pools with replicas > 0 appear.

    Raises ValueError when the plan is inconsistent: traffic on a pool without replicas, a pool
    with replicas but no share or choice, or a share matrix that does not fit the bucket grid.
    """
    workload = spec.workload
    pools: dict[str, Any] = {}
    for pool in sorted(set(shares) | set(replicas)):
        count = replicas.get(pool, 0)
        if count < 0:
            raise ValueError(f"replicas[{pool!r}] must be >= 0, got {count}")
        matrix = shares.get(pool)
        if count == 0:
            if matrix is not None and any(v > 0 for row in matrix for v in row):
                raise ValueError(f"shares[{pool!r}] routes traffic to a pool with no replicas")
            continue
        if matrix is None:
            raise ValueError(f"pool {pool!r} has {count} replicas but no shares")
        if pool not in choices:
            raise ValueError(f"pool {pool!r} has {count} replicas but no PoolChoice")
        _check_shape(pool, matrix, workload.shape)
        pools[pool] = {
            "deployment": deployment_name(
                service, choices[pool].pool, choices[pool].gpus_per_replica
            ),
            "gpuType": choices[pool].gpu_type,
            "replicas": count,
            "share": [
                [_round(v, f"shares[{pool!r}][{i}][{j}]") for j, v in enumerate(row)]
                for i, row in enumerate(matrix)
            ],
        }
    return {
        "histogram": [list(row) for row in workload.histogram],
        "inputEdges": list(workload.input_edges),
        "outputEdges": list(workload.output_edges),
        "pools": pools,
    }


def render_routing_configmap(
    owner: Owner,
    spec: LLMServiceSpec,
    shares: dict[str, list[list[float]]],
    replicas: dict[str, int],
    choices: dict[str, PoolChoice],
) -> dict[str, Any]:
    """The v1 ConfigMap ``<service>-routing`` whose ``routing.json`` is :func:`routing_document`
    as compact JSON with sorted keys (a 32×32 grid per pool stays small), so an unchanged plan
    renders byte for byte the same and applies as a no-op."""
    document = routing_document(owner.name, spec, shares, replicas, choices)
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return {
        "apiVersion": "v1",
        "data": {ROUTING_KEY: text},
        "kind": "ConfigMap",
        "metadata": object_meta(owner, routing_configmap_name(owner.name), labels_for(owner.name)),
    }
