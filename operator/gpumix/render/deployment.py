"""The Deployment of one service on one GPU pool: vLLM's OpenAI-compatible server.

One Deployment per (service, pool) lets each GPU class scale on its own to the replica count of
the Mélange plan (§5.4.3's ``B``), with the pool's node selector, tolerations and GPU requests.
"""

from typing import Any

from gpumix.api import GPUPool, LLMServiceSpec, Toleration
from gpumix.api.podtemplate import CONTAINER, GPU_RESOURCE
from gpumix.problem import PoolChoice
from gpumix.profiles.shape import ModelShape
from gpumix.profiles.vllm import engine_args, for_workload
from gpumix.render.cache import with_cache
from gpumix.render.names import (
    ENGINE_LABELS,
    TP_LABEL,
    Owner,
    deployment_name,
    labels_for,
    object_meta,
    selector_for,
)
from gpumix.render.podtemplate import apply_template

PORT = 8000
PORT_NAME = "http"
ADMIN_PORT = 8001
"""The admin contract's port on a pod (gpumix/sim/SERVER.md), served by a vLLM sidecar; and the
router's admin API's port (``gpumix route --admin-port``), which the KV loop reads and moves
streams through."""

TERMINATION_GRACE_SECONDS = 60
"""Time for vLLM to finish in-flight requests after SIGTERM; long generations are cut off."""

SCRAPE_ANNOTATIONS = {
    "prometheus.io/path": "/metrics",
    "prometheus.io/port": str(PORT),
    "prometheus.io/scrape": "true",
}
"""For Prometheus' annotation-based pod discovery: vLLM (and the router) serve /metrics on PORT."""

PROGRESS_DEADLINE_SECONDS = 1800
"""Image pull (tens of GiB) plus model load (the startup probe's 10 min) exceed the default 600 s
after which the Deployment reports ``Progressing=False``."""


PACKING_WEIGHT = 100
"""The largest weight a preferred scheduling term takes: enough to outweigh the scheduler's default
scoring, which spreads pods (system-default topology spread, least-allocated nodes)."""


def packing_affinity(gpus_per_replica: int) -> dict[str, Any]:
    """A preferred pod affinity toward nodes that already run gpumix's vLLM pods of the same size
    (any service, any namespace).

    The plan counts a pool's free GPUs as one sum, and a k-GPU replica needs k of them on one
    node. Left to its default scoring, the scheduler spreads pods, so scattered 1-GPU pods leave
    no node with k free while the pool's sum says there is room. Pods of one size packed together
    fill nodes whole; when every size divides the node's GPU count (1, 2, 4 on 4- or 8-GPU
    nodes), the partly filled nodes are about one per size and a full plan still places."""
    size = (
        {"key": TP_LABEL, "operator": "In", "values": [str(gpus_per_replica)]}
        if gpus_per_replica != 1
        else {"key": TP_LABEL, "operator": "DoesNotExist"}  # see TP_LABEL: unset on 1-GPU pods
    )
    same_size = {
        "labelSelector": {"matchExpressions": [size], "matchLabels": dict(ENGINE_LABELS)},
        "namespaceSelector": {},
        "topologyKey": "kubernetes.io/hostname",
    }
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"podAffinityTerm": same_size, "weight": PACKING_WEIGHT}
            ]
        }
    }


def toleration_dict(toleration: Toleration) -> dict[str, str]:
    """A pod toleration in the core/v1 shape, with unset fields left out."""
    return toleration.model_dump(by_alias=True, exclude_none=True, mode="json")


def vllm_args(
    spec: LLMServiceSpec, gpus_per_replica: int, shape: ModelShape | None = None
) -> list[str]:
    """Arguments of the ``vllm/vllm-openai`` image, whose entrypoint is the OpenAI API server;
    tensor parallelism spans the replica's GPUs, the engine settings are those the plan assumed
    (`gpumix.profiles.vllm`, for the model's ``shape``, by default the built-in one of its
    name), and the user's extra args come last (and replace ours they set)."""
    model = spec.model
    settings = for_workload(spec.workload, shape or model.name)
    return [
        "--model",
        model.name,
        "--served-model-name",
        model.served_name or model.name,
        "--tensor-parallel-size",
        str(gpus_per_replica),
        "--port",
        str(PORT),
        *engine_args(settings, model.args),
        *model.args,
    ]


def _probe(period: int, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {
        "failureThreshold": failures,
        "httpGet": {"path": "/health", "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
    }


def _container(spec: LLMServiceSpec, gpus: int, shape: ModelShape | None) -> dict[str, Any]:
    return {
        "args": vllm_args(spec, gpus, shape),
        "image": spec.model.image,
        "livenessProbe": _probe(period=10, failures=3),
        "name": CONTAINER,
        "ports": [{"containerPort": PORT, "name": PORT_NAME, "protocol": "TCP"}],
        "readinessProbe": _probe(period=5, failures=3),
        # Extended resources cannot be overcommitted: request and limit must be equal. Quantities
        # are strings, as the apiserver returns them and the kubernetes client types them.
        "resources": {
            "limits": {GPU_RESOURCE: str(gpus)},
            "requests": {GPU_RESOURCE: str(gpus)},
        },
        # Loading weights takes minutes; the startup probe (10 s × 60 = 10 min) holds off the
        # liveness probe until /health first answers, so a slow load is not killed midway.
        "startupProbe": _probe(period=10, failures=60),
        # NCCL's tensor-parallel workers exchange data through shared memory; the runtime's
        # default 64 MiB /dev/shm is too small.
        "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm"}],
    }


def render_deployment(
    owner: Owner,
    spec: LLMServiceSpec,
    pool: GPUPool,
    choice: PoolChoice,
    replicas: int,
    *,
    shape: ModelShape | None = None,
) -> dict[str, Any]:
    """The apps/v1 Deployment :func:`deployment_name` running ``replicas`` vLLM servers of
    ``choice.gpus_per_replica`` GPUs each on ``pool``'s nodes; ``shape`` is the model's the
    plan was made with (from its config.json; default: the built-in one of its name)."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    if choice.pool != pool.name:
        raise ValueError(f"choice is for pool {choice.pool!r}, not {pool.name!r}")
    gpus = choice.gpus_per_replica
    labels = labels_for(owner.name, pool.name, gpus)
    pod = {
        "metadata": {
            "annotations": dict(SCRAPE_ANNOTATIONS),
            "labels": dict(labels),  # a copy: no aliasing between the two label maps
        },
        "spec": {
            "affinity": packing_affinity(gpus),
            "containers": [_container(spec, gpus, shape)],
            # Service links would inject VLLM_PORT=tcp://… into the pod for a Service named
            # "vllm", which vLLM reads as its own port setting and fails on.
            "enableServiceLinks": False,
            "nodeSelector": dict(sorted(pool.spec.node_selector.items())),
            "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
            "tolerations": [toleration_dict(t) for t in pool.spec.tolerations],
            "volumes": [{"emptyDir": {"medium": "Memory"}, "name": "dshm"}],
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(owner, deployment_name(owner.name, pool.name, gpus), labels),
        "spec": {
            "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
            "replicas": replicas,
            "selector": {"matchLabels": selector_for(owner.name, pool.name, gpus)},
            # Never below the current ready count: a new pod must be Ready before an old one
            # goes, so serving capacity holds during a rollout. The price is one spare replica's
            # GPUs during the rollout; when the pool has none free, the surge pod stays Pending
            # and the rollout waits for capacity rather than dropping traffic.
            "strategy": {
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                "type": "RollingUpdate",
            },
            "template": apply_template(with_cache(pod, owner, spec), spec.template),
        },
    }
