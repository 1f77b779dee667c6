"""What the Prometheus e2e tests share: simulated vLLM pods, a router in front of them, a real
Prometheus scraping them, and evenly spaced traffic.

Used by test_observe.py (observe_service against Prometheus, no cluster) and by
test_operator_observe.py (the operator planning from what that Prometheus saw). The sim pods
run on 127.0.0.1 (`gpumix sim serve`), the router too (`gpumix route --routing-file`);
Prometheus scrapes them with static targets that carry the labels the in-cluster relabeling
would give the service's pods (namespace, gpumix_io_service, pod — observe/README.md) and its
router pods (namespace, gpumix_io_router, pod), so they are selected exactly as real pods would be.
Prometheus comes from `hack/prometheus install` (the Makefile's `test` runs it).
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
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gpumix_command() -> str:
    """The console script a user runs, from the venv running the tests."""
    return str(Path(sys.executable).with_name("gpumix"))


def prometheus_binary() -> str:
    path = os.environ.get("GPUMIX_PROMETHEUS") or shutil.which("prometheus")
    if not path:
        pytest.fail("no prometheus binary: run hack/prometheus install (make test does)")
    return path


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def sim_pods(pods: str = "a10g=2", duration_s: float = 120) -> Iterator[list[dict[str, str]]]:
    """Simulated vLLM pods at 20× speed (requests finish in a fraction of a second); yields one
    {"pod", "url", …} per pod."""
    count = sum(int(p.split("=")[1]) for p in pods.split(","))
    proc = subprocess.Popen(
        [gpumix_command(), "sim", "serve", "--model", "meta-llama/Llama-2-7b-hf",
         "--pods", pods, "--speed", "20", "--duration", str(duration_s)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        yield [json.loads(proc.stdout.readline()) for _ in range(count)]
    finally:
        stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def router(
    directory: Path, routing: dict[str, Any], engines: Sequence[tuple[str, str]]
) -> Iterator[dict[str, str]]:
    """`gpumix route` with `routing` as its routing file, in front of `engines` ((pool, url) of
    pools the routing names); yields {"pod", "url"} like sim_pods once it is ready."""
    (directory / "routing.json").write_text(json.dumps(routing))
    port, admin = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    flags = [f for pool, engine in engines for f in ("--engine", f"{pool}={engine}")]
    log = (directory / "router.log").open("wb")
    proc = subprocess.Popen(
        [gpumix_command(), "route", "--routing-file", str(directory / "routing.json"), *flags,
         "--bind", "127.0.0.1", "--port", str(port), "--admin-port", str(admin),
         "--log-format", "plain"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "the router exited; see router.log"
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/ready", timeout=1):
                break
            assert time.monotonic() < deadline, "the router never became ready; see router.log"
            time.sleep(0.1)
        yield {"pod": "router-0", "url": url}
    finally:
        stop(proc)
        log.close()


def complete(url: str, prompt: int, output: int) -> None:
    """One completion of `prompt` token IDs that generates exactly `output` tokens (the sim's toy
    model would stop at an EOS otherwise); raises OSError on failure."""
    body = {"prompt": [7] * prompt, "max_tokens": output, "ignore_eos": True}
    req = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


class PrometheusProcess:
    """Prometheus scraping `targets` every second as pods of service `service` in `namespace`,
    and `routers` as its router pods."""

    def __init__(
        self,
        directory: Path,
        targets: list[dict[str, str]],
        *,
        namespace: str,
        service: str,
        routers: Sequence[dict[str, str]] = (),
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        static = [
            {
                "targets": [t["url"].removeprefix("http://")],
                "labels": {"namespace": namespace, label: service, "pod": t["pod"]},
            }
            for label, pods in (("gpumix_io_service", targets), ("gpumix_io_router", routers))
            for t in pods
        ]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "vllm", "static_configs": static}],
        }
        (directory / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = (directory / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={directory / 'prometheus.yml'}",
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
        stop(self.proc)
        self.log.close()


@contextlib.contextmanager
def running_prometheus(
    directory: Path,
    targets: list[dict[str, str]],
    *,
    namespace: str,
    service: str,
    routers: Sequence[dict[str, str]] = (),
    port: int | None = None,
) -> Iterator[PrometheusProcess]:
    """A Prometheus that has scraped every target twice; stopped on exit (if still running)."""
    prom = PrometheusProcess(
        directory, targets, namespace=namespace, service=service, routers=routers, port=port
    )
    try:
        prom.wait_ready()
        prom.wait_scraping(len(targets) + len(routers))
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
        try:
            complete(url, prompt, output)
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
