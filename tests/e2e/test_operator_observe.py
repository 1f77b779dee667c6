"""No data is not zero load, end to end: the operator plans an LLMService with `source:
Prometheus` from observed traffic, grows the plan when traffic doubles, and keeps it when
Prometheus goes away.

The e2e shortcut: the service's Deployments run on KWOK nodes, whose pods run nothing, so the
traffic goes to two simulated vLLM pods (`gpumix sim serve`) on 127.0.0.1 instead, and the
Prometheus started here scrapes *those* with static targets labelled as the service's pods would
be after the in-cluster relabeling (observe/README.md): `namespace=<test namespace>`,
`gpumix_io_service=chat`, `pod=<sim pod>`. The operator's selector for the service is exactly
`{namespace="<ns>", gpumix_io_service="chat"}`, so it cannot tell the difference. The operator
observes over a 10 s window (`--observe-window 10`) instead of 300 s, every 5 s pass.

Rates: prompts of 300 and outputs of 100 tokens, 3 then 6 req/s; on the chat sample's grid with
the shipped Llama-2-7B profiles that is one A10G, then two GPUs or more (README/observe tolerance:
an observed rate is within ~10% of the sent one, and both plans hold within that).

The service forecasts (15 s steps, no season, no buffer): its rate history is a real range query
against this Prometheus, so the plan is for max(forecast peak, observed) — status shows both —
and the operator's own /metrics export what it observed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from observe_harness import Traffic, running_prometheus, sim_pods
from operator_harness import Env, Operator, running_operator, wait
from prometheus_client.parser import text_string_to_metric_families

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

WINDOW_S = 10
LOW, HIGH = 3.0, 6.0
PROMPT, OUTPUT = 300, 100


@pytest.fixture(scope="module")
def operator(
    kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory, prometheus_port: int
) -> Iterator[Operator]:
    extra = ["--prometheus-url", f"http://127.0.0.1:{prometheus_port}",
             "--prometheus-timeout", "2", "--observe-window", str(WINDOW_S)]  # fmt: skip
    with running_operator(
        kube, tmp_path_factory.mktemp("operator-observe"), extra_args=extra
    ) as op:
        yield op


def _workload(env: Env) -> dict[str, Any]:
    return dict((env.get("chat").get("status") or {}).get("workload") or {})


def _gpus(env: Env) -> int:
    status = env.get("chat").get("status") or {}
    return sum(a["replicas"] * a.get("gpusPerReplica", 1) for a in status.get("allocation", []))


class Steady:
    """Ready=True Serving with the same Deployments' replicas for `hold_s` (over one pass)."""

    def __init__(self, env: Env, hold_s: float = 6.0) -> None:
        self.env, self.hold_s = env, hold_s
        self.last: tuple[dict[str, int], float] | None = None

    def __call__(self) -> bool:
        c = self.env.condition("chat", "Ready")
        replicas, now = self.env.replicas("chat"), time.monotonic()
        if not (c and c["status"] == "True" and c["reason"] == "Serving"):
            self.last = None
            return False
        if self.last is None or self.last[0] != replicas:
            self.last = (replicas, now)
        return now - self.last[1] >= self.hold_s


def _metrics(op: Operator, namespace: str) -> dict[str, float]:
    """The operator's gauges for the chat service, from its real /metrics endpoint."""
    text = urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels == {"namespace": namespace, "service": "chat"}:
                out[sample.name] = sample.value
    return out


def test_planned_from_observed_traffic_and_kept_when_prometheus_stops(
    env: Env, operator: Operator, prometheus_port: int, tmp_path: Path
) -> None:
    started = time.monotonic()
    with (
        sim_pods("a10g=2", duration_s=180) as pods,
        running_prometheus(
            tmp_path, pods, namespace=env.ns, service="chat", port=prometheus_port
        ) as prometheus,
        Traffic([p["url"] for p in pods]) as traffic,
    ):
        traffic.set(LOW, PROMPT, OUTPUT)
        time.sleep(WINDOW_S)  # a full window of traffic before the service exists
        body = env.service("chat", 0.5)  # the spec's 0.5 req/s is only the fallback
        body["spec"]["workload"]["source"] = "Prometheus"
        body["spec"]["scaling"] = {"forecast": {
            "enabled": True, "stepSeconds": 15, "seasonSeconds": 0, "horizonSeconds": 60,
            "buffer": 0}}  # fmt: skip
        env.apply(body)

        # 1. Planned from what Prometheus saw, not from the spec.
        cond = env.wait_condition("chat", "WorkloadObserved", "True", "Observed", timeout=30)
        assert "2 pods" in cond["message"]
        wait("the observed rate in status",
             lambda: _workload(env).get("origin") == "observed"
             and abs(_workload(env)["observedRate"] - LOW) < 0.25 * LOW, timeout=20)  # fmt: skip
        wait("a steady plan for the low rate", Steady(env), timeout=40)
        low_rate, low_gpus = _workload(env)["observedRate"], _gpus(env)
        forecast = env.get("chat")["status"]["forecast"]
        assert forecast["method"] == "naive" and forecast["historyPoints"] >= 1, forecast
        assert forecast["plannedRate"] >= forecast["observedRate"] > 0
        assert _workload(env)["requestRate"] >= forecast["observedRate"]
        exported = _metrics(operator, env.ns)
        assert exported["gpumix_workload_observed"] == 1.0
        assert abs(exported["gpumix_observed_request_rate"] - low_rate) < 0.3 * low_rate
        assert exported["gpumix_forecast_peak_request_rate"] >= 0
        low_cost, low_plan = env.get("chat")["status"]["costPerHour"], env.replicas("chat")
        wl = _workload(env)
        assert wl["source"] == "Prometheus"
        assert wl.get("observedAt") and wl.get("tpotSeconds", 0) > 0

        # 2. Traffic doubles: the plan grows.
        traffic.set(HIGH, PROMPT, OUTPUT)
        wait("the doubled rate in status (a full window of it)",
             lambda: _workload(env)["observedRate"] > 0.85 * HIGH, timeout=30)  # fmt: skip
        wait("a steady plan for the high rate", Steady(env), timeout=40)
        assert 1.6 <= _workload(env)["observedRate"] / low_rate <= 2.4
        assert _gpus(env) > low_gpus
        assert env.get("chat")["status"]["costPerHour"] > low_cost
        before = env.replicas("chat")
        high_rate = _workload(env)["observedRate"]

        # 3. Prometheus stops: unknown is not zero, the plan stays.
        prometheus.stop()
        cond = env.wait_condition(
            "chat", "WorkloadObserved", "False", "PrometheusUnavailable", timeout=20
        )
        assert "not zero" in cond["message"]
        assert _workload(env)["origin"] == "last-observed"
        assert _workload(env)["observedRate"] > 1.6 * low_rate  # the last good rate, not zero
        assert _workload(env)["requestRate"] >= _workload(env)["observedRate"]
        wait(
            "the metric saying nothing is observed",
            lambda: _metrics(operator, env.ns)["gpumix_workload_observed"] == 0.0,
            timeout=15,
        )
        time.sleep(11)  # two more passes without Prometheus
        assert env.replicas("chat") == before
        ready = env.condition("chat", "Ready")
        assert ready is not None and ready["status"] == "True"
        still = env.condition("chat", "WorkloadObserved")
        assert still is not None and still["reason"] == "PrometheusUnavailable"
    assert not traffic.errors, traffic.errors[:3]
    took = time.monotonic() - started
    print(f"\nobserved {low_rate} req/s → {low_plan}; {high_rate} req/s → {before}; "
          f"kept without Prometheus; {took:.0f} s")  # fmt: skip
    assert took < 120
