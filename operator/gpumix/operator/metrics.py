"""The operator's own Prometheus metrics."""

from prometheus_client import Counter, Gauge, Histogram

PLANS = Counter(
    "gpumix_plans_computed_total", "Planner decisions per service", ["namespace", "service"]
)
PASSES = Histogram("gpumix_planner_pass_seconds", "Wall time of one planner pass")
SOLVE = Histogram("gpumix_solve_seconds", "ILP solve time reported in plans")
ERRORS = Counter("gpumix_reconcile_errors_total", "Failed writes or passes", ["stage"])
GPUS = Gauge("gpumix_gpus", "Planned GPUs", ["namespace", "service", "pool"])
COST = Gauge("gpumix_cost_per_hour_dollars", "Planned $/h", ["namespace", "service"])
