"""The operator's own metrics forget a deleted service's series."""

from prometheus_client import generate_latest

from gpumix.operator import metrics


def test_forget_drops_only_the_deleted_services_series() -> None:
    metrics.GPUS.labels(namespace="m-test", service="chat", pool="l4").set(2)
    metrics.COST.labels(namespace="m-test", service="chat").set(2)
    metrics.PLANS.labels(namespace="m-test", service="chat").inc()
    metrics.BACKLOG.labels(namespace="m-test", service="chat").set(10)
    metrics.COST.labels(namespace="m-test", service="other").set(3)
    metrics.forget("m-test", "chat")
    lines = [line for line in generate_latest().decode().splitlines() if '"m-test"' in line]
    assert lines == ['gpumix_cost_per_hour_dollars{namespace="m-test",service="other"} 3.0']
