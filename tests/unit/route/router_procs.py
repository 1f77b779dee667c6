"""`gpumix route` and `gpumix sim serve` as subprocesses on 127.0.0.1, as a user runs them: the
processes the router's tests talk to."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
from prometheus_client.parser import text_string_to_metric_families

MODEL = "llama"
GPUMIX = [str(Path(sys.executable).parent / "gpumix")]  # the console script a user runs
ROUTING = {
    "inputEdges": [1, 64, 4096],
    "outputEdges": [1, 64, 4096],
    "pools": {
        "small": {"replicas": 1, "share": [[1.0, 1.0], [0.0, 0.0]]},
        "large": {"replicas": 1, "share": [[0.0, 0.0], [1.0, 1.0]]},
    },
}


def words(n: int) -> str:
    return " ".join(f"w{k}" for k in range(n))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Engines:
    """`gpumix sim serve` with one pod per GPU type given, as a subprocess."""

    def __init__(self, pods: str, speed: float) -> None:
        self.proc = subprocess.Popen(
            [*GPUMIX, "sim", "serve", "--model", "meta-llama/Llama-2-7b-hf", "--served-name",
             MODEL, "--pods", pods, "--speed", str(speed)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        count = sum(int(p.partition("=")[2] or 1) for p in pods.split(","))
        self.urls = [json.loads(self.proc.stdout.readline())["url"] for _ in range(count)]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGCONT)  # a frozen engine must be able to die
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=10)

    def freeze(self) -> None:
        """A hung engine: the kernel still accepts its connections, nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)


class Router:
    def __init__(
        self,
        tmp: Path,
        engines: list[tuple[str, str]],
        *extra: str,
        table: dict[str, Any] | None = None,
    ) -> None:
        routing = tmp / "routing.json"
        routing.write_text(json.dumps(table or ROUTING))
        self.port, admin = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin = f"http://127.0.0.1:{admin}"
        flags = [f for pool, url in engines for f in ("--engine", f"{pool}={url}")]
        self.proc = subprocess.Popen(
            [*GPUMIX, "route", "--routing-file", str(routing), *flags, "--bind", "127.0.0.1",
             "--port", str(self.port), "--admin-port", str(admin), "--log-format", "plain",
             *extra],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=2) as resp:
                    assert resp.status == 200
                    return
            except (OSError, urllib.error.URLError):
                assert self.proc.poll() is None, self.proc.communicate()[1]
                assert time.monotonic() < deadline, "the router never became ready"
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=20)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def open_stream(self, prompt: int, max_tokens: int) -> tuple[http.client.HTTPConnection, Any]:
        """A streamed completion left open after its first event (the caller closes it)."""
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = {"model": MODEL, "prompt": words(prompt), "max_tokens": max_tokens, "stream": True}
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.readline().startswith(b"data: {")
        return conn, resp

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="x", max_retries=0, timeout=30)
