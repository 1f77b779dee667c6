"""MELL's online KV-cache scheduler (§V–VII) and its baselines (§VIII-B): Liu et al., "MELL:
Memory-Efficient Large Language Model Serving via Multi-GPU KV Cache Management".

Pure and I/O-free: `Mell` (Fig. 10 operations, Algorithm 1 epochs, §VI-C batching),
`FitScheduler` (BF/WF), `LoadBalancer` (LB, Llumnix-style), `plan_migrations` (§V adaptive
migration), `recompute_only` (the router's re-prefill migration on stock vLLM),
`theorem.violations` (Theorem 1's properties).
"""

from gpumix.kvsched.baselines import FitScheduler, LoadBalancer, make_baseline
from gpumix.kvsched.mell import Mell, PriorityWeights
from gpumix.kvsched.migration import (
    Choice,
    LinkProfile,
    MigrationPlan,
    MigrationProfile,
    kv_only,
    plan_migrations,
    recompute_only,
)
from gpumix.kvsched.state import Cluster, EpochResult, Move, RequestClass, classify

__all__ = [
    "Choice",
    "Cluster",
    "EpochResult",
    "FitScheduler",
    "LinkProfile",
    "LoadBalancer",
    "Mell",
    "MigrationPlan",
    "MigrationProfile",
    "Move",
    "PriorityWeights",
    "RequestClass",
    "classify",
    "kv_only",
    "make_baseline",
    "plan_migrations",
    "recompute_only",
]
