"""Joint planning of every service over every pool (Coral §2.2, §4.3; Jiang et al. §4.3, App. E).

One ILP instead of one per service: services compete for the same pools' GPUs and budgets, a
replica may span ``k`` GPUs of one node (tensor parallel), newly added replicas carry Coral's
initialisation penalty, and when not everything fits the plan serves as much as it can in
priority order and says what is left and why. The single-service Mélange planner in
:mod:`gpumix.plan` stays the reference each service's slice of the joint plan is checked against.
"""

from gpumix.plan.joint.instance import (
    JointInstance,
    Objective,
    PoolLimit,
    Priority,
    ReplicaOption,
    ServiceDemand,
)
from gpumix.plan.joint.makespan import makespan, proportional_share
from gpumix.plan.joint.result import JointAllocation, ServiceAllocation
from gpumix.plan.joint.sequential import SequentialPlan, solve_sequential
from gpumix.plan.joint.solve import JointUnservableError, UnboundedThroughputError, solve_joint
from gpumix.plan.joint.validate import validate_joint

__all__ = [
    "JointAllocation",
    "JointInstance",
    "JointUnservableError",
    "Objective",
    "PoolLimit",
    "Priority",
    "ReplicaOption",
    "SequentialPlan",
    "ServiceAllocation",
    "ServiceDemand",
    "UnboundedThroughputError",
    "makespan",
    "proportional_share",
    "solve_joint",
    "solve_sequential",
    "validate_joint",
]
