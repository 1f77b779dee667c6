"""Where metrics come from: a small Protocol, and Prometheus behind it (prometheus-api-client).

The pure observation logic only sees `MetricsSource.query(promql) -> list[Sample]`; tests give it
a dict of canned answers, the operator a `PrometheusSource`. Failures are exceptions with a
reason the caller turns into an "unknown" observation: `MetricsUnavailableError` (cannot reach or
read Prometheus) and `QueryFailedError` (Prometheus answered with an error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from urllib3.util.retry import Retry


@dataclass(frozen=True)
class Sample:
    """One series of an instant-vector result: its labels and value (NaN kept as NaN)."""

    labels: dict[str, str] = field(default_factory=dict)
    value: float = math.nan


class MetricsUnavailableError(Exception):
    """The metrics backend cannot be reached or read (connection refused, timeout, bad JSON)."""


class QueryFailedError(Exception):
    """The backend answered the query with an error (bad PromQL, HTTP 4xx/5xx)."""


class MetricsSource(Protocol):
    def query(self, promql: str) -> list[Sample]:
        """Evaluate an instant query now; raise MetricsUnavailableError or QueryFailedError."""
        ...


class RangeSource(MetricsSource, Protocol):
    def query_range(
        self, promql: str, start: float, end: float, step_s: float
    ) -> list[tuple[float, float]]:
        """(unix time, value) of a one-series range query, oldest first; the same errors."""
        ...


class PrometheusSource:
    """`MetricsSource` over Prometheus' HTTP API. No retries: the planner loop retries on its own
    schedule, and a dead Prometheus must become "unknown" within `timeout_s`, not a minute later.
    Blocking HTTP: call it off the event loop (e.g. `asyncio.to_thread`)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self._client = PrometheusConnect(
            url=url,
            retry=Retry(total=0),
            timeout=math.ceil(timeout_s),
        )

    def query(self, promql: str) -> list[Sample]:
        try:
            raw = self._client.custom_query(promql)
        except PrometheusApiClientException as err:
            raise QueryFailedError(f"{self.url}: {err}") from err
        except (requests.RequestException, ValueError) as err:
            raise MetricsUnavailableError(f"{self.url}: {type(err).__name__}: {err}") from err
        out = []
        for item in raw:
            value = item.get("value") or [0, "NaN"]
            out.append(Sample(labels=dict(item.get("metric", {})), value=float(value[1])))
        return out

    def query_range(
        self, promql: str, start: float, end: float, step_s: float
    ) -> list[tuple[float, float]]:
        """The first series of a range query (the rate history a forecast is fitted on)."""
        try:
            raw = self._client.custom_query_range(
                promql,
                start_time=datetime.fromtimestamp(start, UTC),
                end_time=datetime.fromtimestamp(end, UTC),
                step=f"{max(1, round(step_s))}s",
            )
        except PrometheusApiClientException as err:
            raise QueryFailedError(f"{self.url}: {err}") from err
        except (requests.RequestException, ValueError) as err:
            raise MetricsUnavailableError(f"{self.url}: {type(err).__name__}: {err}") from err
        if not raw:
            return []
        return [(float(t), float(v)) for t, v in raw[0].get("values") or []]

    def close(self) -> None:
        self._client.close()
