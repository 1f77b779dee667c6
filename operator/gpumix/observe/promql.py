"""Every PromQL query gpumix sends, in one place, with fallbacks for renamed vLLM metrics.

Expected scrape configuration (documented in observe/README.md): every vLLM pod is scraped with
the labels `namespace`, `pod` and the pod's labels mapped by `labelmap` — the pod label
`gpumix.io/service` becomes `gpumix_io_service`, `gpumix.io/pool` becomes `gpumix_io_pool`. A
service's series are therefore selected by `{namespace="…", gpumix_io_service="…"}`.

Fallbacks: renamed series are combined per pod with `or` *inside* the aggregation (e.g.
`sum(sum by (pod) (rate(new[w])) or sum by (pod) (rate(old[w]))))`): after the per-pod sums the
label sets match, so a pod exporting both names counts once (the new name wins) and a pod
exporting only the old name still counts. An empty
result is never read as zero: the caller turns it into "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass, field

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
TTFT = ("vllm:time_to_first_token_seconds",)
FINISHED = ("vllm:request_success_total", "vllm:e2e_request_latency_seconds_count")
PROMPT_TOKENS = "vllm:request_prompt_tokens"
OUTPUT_TOKENS = "vllm:request_generation_tokens"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
ROUTER_COMPLETED = "gpumix_router_completed_requests_total"
"""The router's joint histogram (gpumix.route.proxy.RouterMetrics): requests answered in full per
routing-grid bucket, labelled by the bucket's lower edges `input_from` and `output_from`."""

SERVICE_LABEL = "gpumix_io_service"
ROUTER_LABEL = "gpumix_io_router"
POD_LABEL = "pod"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _matchers(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={_quote(v)}" for k, v in sorted(labels.items()))


@dataclass(frozen=True)
class ServiceSelector:
    """The pods of one LLMService as Prometheus labels them (see the module docstring)."""

    namespace: str
    service: str
    extra: dict[str, str] = field(default_factory=dict)
    group_by: str = POD_LABEL
    """Label that tells pods apart (histograms are combined per value of it)."""

    def matchers(self) -> str:
        return _matchers({"namespace": self.namespace, SERVICE_LABEL: self.service, **self.extra})

    def router_matchers(self) -> str:
        """The service's router pods. `extra` narrows the engine pods only: a router serves them
        all and carries none of their other labels."""
        return _matchers({"namespace": self.namespace, ROUTER_LABEL: self.service})

    def of(self, metric: str) -> str:
        return f"{metric}{{{self.matchers()}}}"


def _window(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def _rate_any(names: tuple[str, ...], sel: ServiceSelector, w: str, le: bool = False) -> str:
    """Σ over pods of the first of `names` each pod exports: per-pod sums joined by `or` (the
    names' other labels differ, e.g. `finished_reason`, so they must go before `or` matches)."""
    keep = f"{sel.group_by}, le" if le else sel.group_by
    inner = " or ".join(f"sum by ({keep}) (rate({sel.of(n)}[{w}]))" for n in names)
    return f"sum by (le) ({inner})" if le else f"sum({inner})"


def request_rate(sel: ServiceSelector, window_s: float) -> str:
    """Finished requests per second over the window, all pods."""
    return _rate_any(FINISHED, sel, _window(window_s))


def rate_history(sel: ServiceSelector, step_s: float) -> str:
    """The request rate as a range query samples it for forecasting: each point averages the
    step before it (at least a minute, so that a 15 s scrape interval gives ≥ 4 samples)."""
    return request_rate(sel, max(60.0, step_s))


def backlog_growth(sel: ServiceSelector, window_s: float) -> str:
    """Requests per second by which the pods' queues grew (arrivals not yet finished)."""
    w = _window(window_s)
    return f"sum(deriv({sel.of(WAITING)}[{w}])) + sum(deriv({sel.of(RUNNING)}[{w}]))"


def token_buckets(metric: str, sel: ServiceSelector, window_s: float) -> str:
    """Per-group cumulative bucket increases of a token-length histogram over the window."""
    return (
        f"sum by ({sel.group_by}, le) (increase({sel.of(metric + '_bucket')}[{_window(window_s)}]))"
    )


def router_buckets(sel: ServiceSelector, window_s: float) -> str:
    """Requests the service's routers answered in full over the window, per (input_from,
    output_from) bucket, summed over router replicas: the workload's joint histogram."""
    where = f"{ROUTER_COMPLETED}{{{sel.router_matchers()}}}"
    return f"sum by (input_from, output_from) (increase({where}[{_window(window_s)}]))"


def token_mean(metric: str, sel: ServiceSelector, window_s: float) -> str:
    w = _window(window_s)
    total, count = sel.of(metric + "_sum"), sel.of(metric + "_count")
    return f"sum(increase({total}[{w}])) / sum(increase({count}[{w}]))"


def latency_mean(names: tuple[str, ...], sel: ServiceSelector, window_s: float) -> str:
    """Mean of a latency histogram over the window (seconds), renamed series combined."""
    w = _window(window_s)
    num = _rate_any(tuple(n + "_sum" for n in names), sel, w)
    den = _rate_any(tuple(n + "_count" for n in names), sel, w)
    return f"{num} / {den}"


def latency_quantile(names: tuple[str, ...], q: float, sel: ServiceSelector, w_s: float) -> str:
    w = _window(w_s)
    buckets = _rate_any(tuple(n + "_bucket" for n in names), sel, w, le=True)
    return f"histogram_quantile({q}, {buckets})"


def per_pod_gauge(names: tuple[str, ...], sel: ServiceSelector) -> str:
    """A gauge per pod (max over its series), renamed series combined per pod."""
    return " or ".join(f"max by ({sel.group_by}) ({sel.of(n)})" for n in names)


def targets(sel: ServiceSelector) -> str:
    """Scrape targets of the service: 1 up, 0 down (Prometheus' own `up` series)."""
    return f"max by ({sel.group_by}) (up{{{sel.matchers()}}})"
