"""From cluster objects to an allocation problem and back: the pure core the planner loop calls.

A service may use a pool when the pool has a price and there is a GPUProfile for the service's
model on the pool's GPU type; every other pool is left out with a reason the user can act on.
When several profiles (tensor-parallel degrees) exist for one pool, the one with the fewest GPUs
per replica is used; choosing among replica configurations is the joint planner's job.
"""

from pydantic import BaseModel, ConfigDict

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.plan import AllocationInstance, GPUOption
from gpumix.profiles import CATALOG, ProfileRangeError, max_tput_for_grid
from gpumix.profiles.catalog import GPUType
from gpumix.profiles.models import ModelShape
from gpumix.profiles.roofline import Roofline


class PoolChoice(BaseModel):
    """A pool as one allocator option: its replica size, price and profile."""

    model_config = ConfigDict(frozen=True)

    pool: str
    gpu_type: str
    gpus_per_replica: int
    price_per_gpu_hour: float
    profile: str


class ServiceProblem(BaseModel):
    model_config = ConfigDict(frozen=True)

    instance: AllocationInstance | None
    """None when no pool is usable."""
    choices: dict[str, PoolChoice]
    excluded: dict[str, str]
    """Pool name → why this service cannot use it."""


def replica_fits(
    gpu: GPUType, model: ModelShape, gpus: int, min_kv_tokens: int | None = None
) -> bool:
    """Jiang App. D's memory check: ``gpus`` GPUs of one type hold the weights plus the KV cache
    of at least one full-context request (``min_kv_tokens``, default the model's context)."""
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
) -> ServiceProblem:
    """The service's allocation problem. `available_gpus` (pool → GPUs this service may take)
    caps each option; without it only the pools' own `maxGPUs` do."""
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
        profile = matching[0]
        k = profile.spec.gpus_per_replica
        try:
            table = max_tput_for_grid(
                profile.spec, spec.workload, spec.slo.tpot_ms, spec.slo.ttft_ms
            )
        except ProfileRangeError as err:
            excluded[pool.name] = str(err)
            continue
        cap = pool.spec.max_gpus
        if available_gpus is not None and pool.name in available_gpus:
            cap = available_gpus[pool.name]
        options.append(
            GPUOption(
                name=pool.name,
                cost_per_hour=price * k,
                max_tput=table,
                max_count=None if cap is None else cap // k,
            )
        )
        choices[pool.name] = PoolChoice(
            pool=pool.name,
            gpu_type=pool.spec.gpu_type,
            gpus_per_replica=k,
            price_per_gpu_hour=price,
            profile=profile.name,
        )
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
