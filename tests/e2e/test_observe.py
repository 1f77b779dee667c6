"""The real Prometheus path: simulated vLLM pods → Prometheus (Debian's binary) → observe_service.

No Kubernetes cluster: `gpumix sim serve` runs two simulated vLLM pods on 127.0.0.1, a
Prometheus started here scrapes their /metrics every second with the labels the in-cluster
relabeling produces (namespace, gpumix_io_service, pod), and the test drives traffic into the
pods' /v1/completions. It checks that the observed rate and histogram follow a change in traffic,
and that a stopped Prometheus makes the observation "unknown" while the decision keeps the last
good workload. Prometheus comes from `hack/prometheus install` (the Makefile's `test` runs it).

Tolerance: arrivals are evenly spaced (no Poisson noise), so a 10 s window holds the sent
requests ± 1; `rate()` over 1 s scrapes extrapolates to the window edges, which can add or
drop up to about one scrape interval's worth (10%). Each observed rate must be within 25% of the
sent rate and their ratio within 1.6–2.4 for a doubling.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gpumix.api.workload import Workload
from gpumix.observe import (
    ObservationUnknown,
    ObservedWorkload,
    PrometheusSource,
    ServiceSelector,
    UnknownReason,
    decide_workload,
    observe_service,
)

pytestmark = pytest.mark.e2e

NAMESPACE, SERVICE = "e2e", "chat"
IN_EDGES = [1, 201, 501, 1001, 2001]
OUT_EDGES = [1, 51, 101, 201, 501]
WINDOW_S = 10.0
PHASE_S = 12.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prometheus_binary() -> str:
    path = os.environ.get("GPUMIX_PROMETHEUS") or shutil.which("prometheus")
    if not path:
        pytest.fail("no prometheus binary: run hack/prometheus install (make test does)")
    return path


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def pods() -> Iterator[list[dict[str, str]]]:
    """Two simulated a10g vLLM pods at 20× speed (requests finish in a fraction of a second)."""
    gpumix = Path(sys.executable).with_name("gpumix")
    proc = subprocess.Popen(
        [str(gpumix), "sim", "serve", "--model", "meta-llama/Llama-2-7b-hf",
         "--pods", "a10g=2", "--speed", "20", "--duration", "120"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        found = [json.loads(proc.stdout.readline()) for _ in range(2)]
        yield found
    finally:
        _stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


class PrometheusProcess:
    def __init__(self, directory: Path, targets: list[dict[str, str]]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        static = [
            {
                "targets": [t["url"].removeprefix("http://")],
                "labels": {"namespace": NAMESPACE, "gpumix_io_service": SERVICE, "pod": t["pod"]},
            }
            for t in targets
        ]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "vllm", "static_configs": static}],
        }
        (directory / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = (directory / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [_prometheus_binary(), f"--config.file={directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait_ready(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "prometheus exited; see prometheus.log"
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {timeout_s} s")

    def wait_scraping(self, targets: int, timeout_s: float = 20.0) -> None:
        """Until every target has been scraped twice (Prometheus hands discovered targets to the
        scrapers in 5 s batches, so the first scrape comes a few seconds after readiness)."""
        query = urllib.parse.quote("count_over_time(up[1m]) >= 2")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?query={query}", timeout=2) as r:
                if len(json.load(r)["data"]["result"]) == targets:
                    return
            time.sleep(0.2)
        raise AssertionError(f"prometheus did not scrape {targets} targets within {timeout_s} s")

    def stop(self) -> None:
        _stop(self.proc)
        self.log.close()


@pytest.fixture
def prometheus(tmp_path: Path, pods: list[dict[str, str]]) -> Iterator[PrometheusProcess]:
    prom = PrometheusProcess(tmp_path, pods)
    try:
        prom.wait_ready()
        prom.wait_scraping(len(pods))
        yield prom
    finally:
        prom.stop()


class Traffic:
    """Evenly spaced completions, round-robin over the pods, until stopped or changed."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.rate, self.prompt, self.output = 0.0, 1, 1
        self.sent = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=64)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def set(self, rate: float, prompt: int, output: int) -> None:
        self.rate, self.prompt, self.output = rate, prompt, output

    def _send(self, url: str, prompt: int, output: int) -> None:
        body = json.dumps({"prompt": [7] * prompt, "max_tokens": output}).encode()
        req = urllib.request.Request(
            f"{url}/v1/completions", body, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
        except OSError as err:
            self.errors.append(str(err))

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            if self.rate <= 0:
                time.sleep(0.05)
                next_at = time.monotonic()
                continue
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            url = self.urls[self.sent % len(self.urls)]
            self._pool.submit(self._send, url, self.prompt, self.output)
            self.sent += 1
            next_at += 1.0 / self.rate

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)


def _observe(source: PrometheusSource) -> ObservedWorkload | ObservationUnknown:
    sel = ServiceSelector(namespace=NAMESPACE, service=SERVICE)
    return observe_service(source, sel, IN_EDGES, OUT_EDGES, now=time.time(), window_s=WINDOW_S)


def test_observed_workload_follows_traffic_and_unknown_keeps_last_good(
    pods: list[dict[str, str]], prometheus: PrometheusProcess, request: pytest.FixtureRequest
) -> None:
    started = time.monotonic()
    source = PrometheusSource(prometheus.url, timeout_s=2)
    request.addfinalizer(source.close)
    with Traffic([p["url"] for p in pods]) as traffic:
        traffic.set(rate=4.0, prompt=100, output=40)  # bucket (0, 0)
        time.sleep(PHASE_S)
        low = _observe(source)
        traffic.set(rate=8.0, prompt=700, output=150)  # bucket (2, 2)
        time.sleep(PHASE_S)
        high = _observe(source)
    assert not traffic.errors, traffic.errors[:3]
    assert isinstance(low, ObservedWorkload), low
    assert isinstance(high, ObservedWorkload), high
    assert low.request_rate == pytest.approx(4.0, rel=0.25)
    assert high.request_rate == pytest.approx(8.0, rel=0.25)
    assert 1.6 <= high.request_rate / low.request_rate <= 2.4
    assert low.histogram is not None and high.histogram is not None
    assert np.asarray(low.histogram)[0, 0] > 0.9
    assert np.asarray(high.histogram)[2, 2] > 0.9
    assert high.mean_input_tokens == pytest.approx(700, rel=0.05)
    assert high.ttft_seconds is not None and high.tpot_seconds is not None
    assert [p.pod for p in high.pods] == sorted(p["pod"] for p in pods)
    assert all(p.kv_usage is not None for p in high.pods)

    prometheus.stop()
    gone = _observe(source)
    assert isinstance(gone, ObservationUnknown)
    assert gone.reason == UnknownReason.PROMETHEUS_UNAVAILABLE
    edges = {"inputEdges": IN_EDGES, "outputEdges": OUT_EDGES}
    spec = Workload.model_validate(
        {"source": "Prometheus", "requestRate": 1.0, "histogram": [[1] * 4] * 4, **edges}
    )
    decision = decide_workload(spec, high, gone, now=time.time())
    assert decision.workload.request_rate == high.request_rate  # the last good, not zero
    assert decision.workload.histogram == high.histogram
    assert decision.condition is not None
    assert decision.condition.reason == "PrometheusUnavailable"
    assert time.monotonic() - started < 60
