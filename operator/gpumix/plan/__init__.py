"""Cheapest mix of GPU types that serves a request-size histogram within a latency SLO.

An implementation of Mélange's allocation algorithm (Griggs et al. 2024, §5.4) as a pure
package: pydantic instance/solution models, two equivalent ILP formulations, HiGHS/CBC via
PuLP, and a solver-independent validator. No Kubernetes here; the operator calls
:func:`plan_allocation` and writes what it returns.
"""

from gpumix.plan.errors import InvalidAllocationError, SolverError, UnservableBucketError
from gpumix.plan.instance import AllocationInstance, Formulation, GPUOption
from gpumix.plan.planner import plan_allocation, solve
from gpumix.plan.result import Allocation, Plan, SolveResult
from gpumix.plan.validate import validate_allocation

__all__ = [
    "Allocation",
    "AllocationInstance",
    "Formulation",
    "GPUOption",
    "InvalidAllocationError",
    "Plan",
    "SolveResult",
    "SolverError",
    "UnservableBucketError",
    "plan_allocation",
    "solve",
    "validate_allocation",
]
