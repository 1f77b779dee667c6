"""The operator's own Prometheus metrics."""

from prometheus_client import Counter, Gauge, Histogram

PLANS = Counter(
    "gpumix_plans_computed_total", "Planner decisions per service", ["namespace", "service"]
)
PASSES = Histogram("gpumix_planner_pass_seconds", "Wall time of one planner pass")
PASS_STAGES = Histogram(
    "gpumix_planner_stage_seconds",
    "Wall time of each stage of a planner pass (observe: Prometheus; plan: the pure planner; "
    "write: statuses, objects and events sent to the apiserver)",
    ["stage"],
)
SOLVE = Histogram("gpumix_solve_seconds", "ILP solve time reported in plans")
ERRORS = Counter("gpumix_reconcile_errors_total", "Failed writes or passes", ["stage"])
VIEW_CHANGES = Counter(
    "gpumix_view_changes_total", "Watch events that changed what the planner reads", ["kind"]
)
GPUS = Gauge("gpumix_gpus", "Planned GPUs", ["namespace", "service", "pool"])
COST = Gauge("gpumix_cost_per_hour_dollars", "Planned $/h", ["namespace", "service"])
LEADER = Gauge(
    "gpumix_leader", "1 while this replica holds the operator's Lease (only it writes), else 0"
)
WRITES = Counter(
    "gpumix_cluster_writes_total",
    "Writes of the planner and the KV loop sent to the apiserver (only the leader's)",
    ["verb"],
)

_SVC = ["namespace", "service"]
OBSERVED = Gauge(
    "gpumix_workload_observed", "1 when this pass observed the workload, 0 when not", _SVC
)
OBSERVED_RATE = Gauge("gpumix_observed_request_rate", "Last observed requests per second", _SVC)
PLANNED_RATE = Gauge(
    "gpumix_planned_request_rate", "Requests per second the plan is sized for", _SVC
)
FORECAST_PEAK = Gauge("gpumix_forecast_peak_request_rate", "Forecast peak over the horizon", _SVC)
TPOT_RATIO = Gauge("gpumix_calibration_tpot_ratio", "Observed / profile-predicted TPOT", _SVC)
MAXTPUT_FACTOR = Gauge("gpumix_calibration_maxtput_factor", "Learnt MaxTput multiplier", _SVC)
BACKLOG = Gauge("gpumix_batch_backlog_requests", "Batch requests queued", _SVC)


def forget(namespace: str, service: str) -> None:
    """Drop every series of a deleted service (a gauge would otherwise report it forever)."""
    for metric in (GPUS, COST, PLANS, OBSERVED, OBSERVED_RATE, PLANNED_RATE, FORECAST_PEAK,
                   TPOT_RATIO, MAXTPUT_FACTOR, BACKLOG):  # fmt: skip
        names = metric._labelnames  # prometheus_client has no public accessor
        series = {
            tuple(sample.labels[n] for n in names)
            for family in metric.collect()
            for sample in family.samples
            if (sample.labels.get("namespace"), sample.labels.get("service"))
            == (namespace, service)
        }
        for values in series:
            metric.remove(*values)
