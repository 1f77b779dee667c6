"""From cluster objects to an allocation problem and back: the pure core the planner loop calls.

A service may use a pool when the pool has a price and there is a GPUProfile for the service's
model on the pool's GPU type; every other pool is left out with a reason the user can act on.
Every profiled replica size ``k`` (GPUProfile ``gpusPerReplica``) becomes one option — Jiang et
al. §4.3's deployment configurations, Coral §4.2's templates restricted to one node — unless
``k`` exceeds the GPUs of one node (tensor parallelism stays within a node, Jiang App. D) or
``k`` GPUs cannot hold the weights plus the KV cache of the workload's longest request (App. D's
memory check, from the roofline model; the pods run with that ``--max-model-len``, so the model's
full context need not fit). Options are named by :func:`option_key`.
"""

import functools

from pydantic import BaseModel, ConfigDict

from gpumix.api import GPUPool, GPUProfile, LLMService, Workload
from gpumix.plan import AllocationInstance, GPUOption
from gpumix.profiles import CATALOG, ProfileRangeError, max_tput_for_grid
from gpumix.profiles.catalog import GPUType
from gpumix.profiles.models import ModelShape, UnknownModelError, model_shape
from gpumix.profiles.roofline import Roofline
from gpumix.profiles.vllm import max_model_len


def option_key(pool: str, gpus_per_replica: int) -> str:
    """``<pool>`` for one-GPU replicas, ``<pool>-tp<k>`` otherwise (as the Deployment name)."""
    return pool if gpus_per_replica == 1 else f"{pool}-tp{gpus_per_replica}"


def _fits(service: LLMService, gpu_type: str, k: int, shape: ModelShape | None) -> str | None:
    """Why ``k`` GPUs of ``gpu_type`` cannot hold the model (of ``shape``, else the built-in
    shape of its name), or ``None`` when they can or the model's shape is unknown."""
    gpu = CATALOG.get(gpu_type.lower())
    if gpu is None:
        return None
    if shape is None:
        try:
            shape = model_shape(service.spec.model.name)
        except UnknownModelError:
            shape = None
    if shape is not None:
        longest = max_model_len(service.spec.workload, shape)
        if replica_fits(gpu, shape, k, longest):
            return None
        return (
            f"{k}×{gpu.name} cannot hold the weights plus the KV cache of one {longest}-token "
            "request (the workload's longest, vLLM's --max-model-len)"
        )
    weights = service.spec.model.weights_gib
    if weights is not None and weights > gpu.memory_gib * k * 0.9:
        return f"{k}×{gpu.name} ({gpu.memory_gib * k:g} GiB) cannot hold {weights:g} GiB of weights"
    return None


class PoolChoice(BaseModel):
    """A pool as one allocator option: its replica size, price and profile."""

    model_config = ConfigDict(frozen=True)

    pool: str
    gpu_type: str
    gpus_per_replica: int
    price_per_gpu_hour: float
    profile: str


class NoUsablePoolError(ValueError):
    """No pool can serve the service: missing profiles or pools, or an SLO no profile meets."""


class ServiceProblem(BaseModel):
    model_config = ConfigDict(frozen=True)

    instance: AllocationInstance | None
    """None when no pool is usable."""
    choices: dict[str, PoolChoice]
    excluded: dict[str, str]
    """Pool name → why this service cannot use it."""

    def unusable(self, service: LLMService) -> str:
        """One line saying why no pool is usable and what to give (when `instance` is None)."""
        if not self.excluded:
            model = service.spec.model.name
            return (
                f"{service.name}: no GPUPool and no GPUProfile for model {model!r} in the input; "
                f"give GPUProfiles (e.g. `gpumix profile estimate --model {model} --gpu a10g "
                "--input-edges ... --output-edges ...`)"
            )
        reasons = "; ".join(f"pool {pool}: {why}" for pool, why in self.excluded.items())
        return f"{service.name}: no usable GPU pool ({reasons})"


@functools.lru_cache(maxsize=4096)
def replica_fits(
    gpu: GPUType, model: ModelShape, gpus: int, min_kv_tokens: int | None = None
) -> bool:
    """Jiang App. D's memory check: ``gpus`` GPUs of one type hold the weights plus the KV cache
    of at least one full-context request (``min_kv_tokens``, default the model's context).
    Cached: every pass asks it of each service's options (500 services: 8,000 times, 0.4 s)."""
    need = model.max_context if min_kv_tokens is None else min_kv_tokens
    return Roofline(gpu, model, gpus).kv_capacity_tokens >= need


def pool_price(pool: GPUPool) -> float | None:
    """The pool's own price, else the catalog's on-demand price for its GPU type."""
    if pool.spec.price_per_gpu_hour is not None:
        return pool.spec.price_per_gpu_hour
    entry = CATALOG.get(pool.spec.gpu_type.lower())
    return entry.price_per_hour if entry else None


def build_problem(
    service: LLMService,
    pools: list[GPUPool],
    profiles: list[GPUProfile],
    available_gpus: dict[str, int] | None = None,
    gpus_per_node: dict[str, int] | None = None,
    *,
    shape: ModelShape | None = None,
) -> ServiceProblem:
    """The service's allocation problem, one option per (pool, replica size). `available_gpus`
    (pool → GPUs this service may take) caps each option; without it only `maxGPUs` do.
    `gpus_per_node` (pool → GPUs of its largest node; `spec.gpusPerNode` wins) bounds ``k``.
    `shape` is the model's (from its config.json); without it, the built-in one of its name."""
    spec = service.spec
    wanted = set(spec.pools) if spec.pools else {p.name for p in pools}
    excluded = {
        name: f"spec.pools names {name!r} but no GPUPool has that name"
        for name in sorted(wanted - {p.name for p in pools})
    }
    options: list[GPUOption] = []
    choices: dict[str, PoolChoice] = {}
    for pool in sorted(pools, key=lambda p: p.name):
        if pool.name not in wanted:
            continue
        matching = sorted(
            (
                p
                for p in profiles
                if p.spec.model == spec.model.name and p.spec.gpu_type == pool.spec.gpu_type
            ),
            key=lambda p: (p.spec.gpus_per_replica, p.name),
        )
        price = pool_price(pool)
        if not matching:
            excluded[pool.name] = (
                f"no GPUProfile for model {spec.model.name!r} on GPU type "
                f"{pool.spec.gpu_type!r}; create one (e.g. `gpumix profile estimate`)"
            )
            continue
        if price is None:
            excluded[pool.name] = (
                f"GPU type {pool.spec.gpu_type!r} has no catalog price; set spec.pricePerGPUHour"
            )
            continue
        node_gpus = pool.spec.gpus_per_node or (gpus_per_node or {}).get(pool.name)
        cap = pool.spec.max_gpus
        if available_gpus is not None and pool.name in available_gpus:
            cap = available_gpus[pool.name]
        why: list[str] = []
        seen: set[int] = set()
        for profile in matching:
            k = profile.spec.gpus_per_replica
            if k in seen:
                continue  # the first profile (by name) of each size is used
            seen.add(k)
            if node_gpus and k > node_gpus:
                why.append(f"{k} GPUs per replica exceed the {node_gpus} of one node")
                continue
            no_fit = _fits(service, pool.spec.gpu_type, k, shape)
            if no_fit is not None:
                why.append(no_fit)
                continue
            try:
                table = max_tput_for_grid(
                    profile.spec, spec.workload, spec.slo.tpot_ms, spec.slo.ttft_ms
                )
            except ProfileRangeError as err:
                why.append(str(err))
                continue
            key = option_key(pool.name, k)
            options.append(
                GPUOption(
                    name=key,
                    cost_per_hour=price * k,
                    max_tput=table,
                    max_count=None if cap is None else cap // k,
                )
            )
            choices[key] = PoolChoice(
                pool=pool.name,
                gpu_type=pool.spec.gpu_type,
                gpus_per_replica=k,
                price_per_gpu_hour=price,
                profile=profile.name,
            )
        if why and not any(c.pool == pool.name for c in choices.values()):
            excluded[pool.name] = "; ".join(why)
    instance = None
    if options:
        slo = f"TPOT {spec.slo.tpot_ms:g} ms"
        instance = AllocationInstance(
            rates=spec.workload.bucket_rates(),
            gpus=options,
            slice_factor=spec.workload.slice_factor,
            input_edges=spec.workload.input_edges,
            output_edges=spec.workload.output_edges,
            slo_label=slo if spec.slo.ttft_ms is None else f"{slo}, TTFT {spec.slo.ttft_ms:g} ms",
        )
    return ServiceProblem(instance=instance, choices=choices, excluded=excluded)


def with_rates(problem: ServiceProblem, workload: Workload) -> ServiceProblem:
    """`problem` for another rate of the same workload: options and MaxTput do not depend on
    the rate, so only the bucket rates change (no second `build_problem`)."""
    if problem.instance is None:
        return problem
    instance = problem.instance.model_copy(update={"rates": workload.bucket_rates()})
    return problem.model_copy(update={"instance": instance})
