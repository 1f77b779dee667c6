"""GPUPool: a class of GPU nodes the planner may buy from (cluster-scoped)."""

from typing import ClassVar, Literal

from pydantic import Field

from gpumix.api.base import ApiModel, Condition, Resource


class Toleration(ApiModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


class GPUPoolSpec(ApiModel):
    gpu_type: str = Field(
        min_length=1,
        description="GPU type, e.g. a100-80gb; names a catalog entry and the profiles to use.",
    )
    node_selector: dict[str, str] = Field(
        min_length=1,
        description="Labels of this pool's nodes, e.g. {gpumix.io/gpu-class: a100-80gb}.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=lambda: [GPU_TOLERATION],
        description="Tolerations for the pool's taints (default: nvidia.com/gpu Exists).",
    )
    price_per_gpu_hour: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        alias="pricePerGPUHour",
        description="$/h for one GPU (at most a million); defaults to the catalog's on-demand "
        "price.",
    )
    gpus_per_node: int | None = Field(
        default=None, ge=1, alias="gpusPerNode", description="Default: read from the nodes."
    )
    max_gpus: int | None = Field(
        default=None,
        ge=0,
        alias="maxGPUs",
        description="Cap on GPUs; lets an autoscaled pool with no nodes yet be planned.",
    )


class GPUPoolStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    nodes: int | None = None
    allocatable_gpus: int | None = Field(default=None, alias="allocatableGPUs")
    allocated_gpus: int | None = Field(default=None, alias="allocatedGPUs")
    price_per_gpu_hour: float | None = Field(default=None, alias="pricePerGPUHour")
    available_gpus: int | None = Field(
        default=None,
        alias="availableGPUs",
        description="GPUs gpumix may plan here: maxGPUs or allocatable, minus foreign pods'.",
    )
    planned_gpus: int | None = Field(
        default=None, alias="plannedGPUs", description="GPUs the joint plan places here."
    )


class GPUPool(Resource):
    """A class of GPU nodes (one GPU type) with its price and availability."""

    kind_name: ClassVar[str] = "GPUPool"
    plural: ClassVar[str] = "gpupools"
    scope: ClassVar[Literal["Namespaced", "Cluster"]] = "Cluster"
    short_names: ClassVar[tuple[str, ...]] = ("gpool",)
    printer_columns: ClassVar[tuple[dict[str, str | int], ...]] = (
        {"name": "GPU", "type": "string", "jsonPath": ".spec.gpuType"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes"},
        {"name": "Allocatable", "type": "integer", "jsonPath": ".status.allocatableGPUs"},
        {"name": "Allocated", "type": "integer", "jsonPath": ".status.allocatedGPUs"},
        {"name": "$/GPU-h", "type": "number", "jsonPath": ".status.pricePerGPUHour"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    max_name_length: ClassVar[int | None] = 63
    kind: Literal["GPUPool"] = "GPUPool"
    spec: GPUPoolSpec
    status: GPUPoolStatus | None = None
