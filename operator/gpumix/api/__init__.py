"""The gpumix.io/v1alpha1 API as pydantic models: the single source of truth for the CRDs."""

from gpumix.api.base import (
    API_VERSION,
    GROUP,
    VERSION,
    ApiModel,
    Condition,
    ConditionStatus,
    Resource,
)
from gpumix.api.buckets import BucketGrid
from gpumix.api.gpupool import GPUPool, GPUPoolSpec, GPUPoolStatus, Toleration
from gpumix.api.gpuprofile import BucketSamples, GPUProfile, GPUProfileSpec, RatePoint, SloTable
from gpumix.api.llmservice import (
    Baseline,
    Budget,
    Churn,
    KvMigration,
    KvScaleIn,
    KvSchedulerStatus,
    LLMService,
    LLMServiceSpec,
    LLMServiceStatus,
    ModelSpec,
    PoolAllocation,
    PoolShare,
    Slo,
    WorkloadUsed,
)
from gpumix.api.workload import Workload

RESOURCES: tuple[type[Resource], ...] = (LLMService, GPUPool, GPUProfile)

__all__ = [
    "API_VERSION",
    "GROUP",
    "RESOURCES",
    "VERSION",
    "ApiModel",
    "Baseline",
    "BucketGrid",
    "BucketSamples",
    "Budget",
    "Churn",
    "Condition",
    "ConditionStatus",
    "GPUPool",
    "GPUPoolSpec",
    "GPUPoolStatus",
    "GPUProfile",
    "GPUProfileSpec",
    "KvMigration",
    "KvScaleIn",
    "KvSchedulerStatus",
    "LLMService",
    "LLMServiceSpec",
    "LLMServiceStatus",
    "ModelSpec",
    "PoolAllocation",
    "PoolShare",
    "RatePoint",
    "Resource",
    "Slo",
    "SloTable",
    "Toleration",
    "Workload",
    "WorkloadUsed",
]
