"""What the operator e2e tests share: `gpumix run` as a subprocess, and one test's namespace.

Used by test_operator.py (the operator with the cluster's admin credentials) and by
test_install_manifests.py (the same scenarios with the service account of manifests/base).
The `env` fixture lives in conftest.py and asks for the module's own `operator` fixture.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml
from kubernetes import client

from gpumix_e2e import KubeTarget

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "manifests" / "samples"
GROUP, VERSION = "gpumix.io", "v1alpha1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(
    what: str,
    probe: Callable[[], Any],
    timeout: float = 90,
    every: float = 0.5,
    about: Callable[[], Any] | None = None,
) -> Any:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout`, with
    what `about` then says (e.g. the status message that explains the wait)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    context = "" if about is None else f"; {about()!r}"
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}{context}"
    )


class Operator:
    """`gpumix run` against the test cluster, restartable, logs in a file.

    Runs with `kubeconfig`/`context` when given (e.g. a service account's token), else with
    the credentials of `kube`; `extra_args` go after the harness's own (e.g.
    `--prometheus-url`)."""

    def __init__(
        self,
        kube: KubeTarget,
        log_dir: Path,
        *,
        kubeconfig: Path | None = None,
        context: str | None = None,
        extra_args: Sequence[str] = (),
        identity: str | None = None,
    ) -> None:
        self.kube, self.log_dir = kube, log_dir
        self.extra_args = list(extra_args)
        self.identity = identity
        """The Lease holderIdentity (`--leader-elect-identity`); None: hostname_pid."""
        self.kubeconfig = kubeconfig if context else kube.kubeconfig
        self.context = context or kube.context
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[str] | None = None
        self.runs = 0
        self.metrics_port = 0
        """The operator's Prometheus metrics port (set by `start`)."""

    def start(self) -> None:
        self.runs += 1
        self.metrics_port = free_port()
        args = [sys.executable, "-m", "gpumix.cli", "run", "--context", self.context,
                "--interval", "5", "--bind", "127.0.0.1", "--metrics-port", str(self.metrics_port),
                "--health-port", str(free_port()), "--log-format", "plain"]  # fmt: skip
        if self.kubeconfig is not None:
            args += ["--kubeconfig", str(self.kubeconfig)]
        # Leader election: the Lease in a namespace every cluster has (outside a pod the
        # default is gpumix-system); the operators of one session run one after another.
        args += ["--leader-elect-resource-namespace", "default"]
        if self.identity is not None:
            args += ["--leader-elect-identity", self.identity]
        args += self.extra_args
        self.log = (self.log_dir / f"operator-{self.runs}.log").open("w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Env:
    """One test's namespace and typed access to what the operator wrote there."""

    def __init__(self, kube: KubeTarget, namespace: str) -> None:
        self.kube, self.ns = kube, namespace
        self.custom = client.CustomObjectsApi(kube.api_client)
        self.apps = client.AppsV1Api(kube.api_client)
        self.core = client.CoreV1Api(kube.api_client)

    def service(self, name: str, rate: float, **spec: Any) -> dict[str, Any]:
        body: dict[str, Any] = yaml.safe_load((SAMPLES / "chat.yaml").read_text())
        body["metadata"] = {"name": name, "namespace": self.ns}
        body["spec"]["workload"]["requestRate"] = rate
        body["spec"].update(spec)
        return body

    def apply(self, body: dict[str, Any]) -> None:
        self.kube.apply(body)

    def get(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, "llmservices", name
        )
        return obj

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        status = self.get(name).get("status") or {}
        return next((c for c in status.get("conditions", []) if c["type"] == type_), None)

    def wait_condition(
        self, name: str, type_: str, status: str, reason: str | None = None, timeout: float = 90
    ) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            c = self.condition(name, type_)
            ok = c and c["status"] == status and (reason is None or c["reason"] == reason)
            return c if ok else None

        result: dict[str, Any] = wait(f"{name} {type_}={status} {reason or ''}", probe, timeout)
        return result

    def deployments(self, service: str) -> dict[str, Any]:
        items = self.apps.list_namespaced_deployment(
            self.ns, label_selector=f"gpumix.io/service={service}"
        ).items
        return {d.metadata.labels["gpumix.io/pool"]: d for d in items}

    def replicas(self, service: str) -> dict[str, int]:
        return {p: d.spec.replicas for p, d in self.deployments(service).items()}

    def allocation(self, service: str) -> dict[str, int]:
        status = self.get(service).get("status") or {}
        return {a["pool"]: a["replicas"] for a in status.get("allocation", [])}

    def pods_running_on_right_nodes(self, service: str) -> dict[str, int] | None:
        """Running pods per pool, or None while any pod is not Running or is misplaced."""
        counts: dict[str, int] = {}
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"gpumix.io/service={service}")
        for pod in pods.items:
            if pod.metadata.deletion_timestamp:
                return None
            pool = pod.metadata.labels["gpumix.io/pool"]
            if pod.status.phase != "Running" or not pod.spec.node_name:
                return None
            node = self.core.read_node(pod.spec.node_name)
            assert node.metadata.labels.get("gpumix.io/gpu-class") == pool, (
                f"pod {pod.metadata.name} of pool {pool} landed on {pod.spec.node_name}"
            )
            counts[pool] = counts.get(pool, 0) + 1
        return counts

    def events(self, service: str) -> list[Any]:
        return [
            e
            for e in self.core.list_namespaced_event(self.ns).items
            if e.involved_object.name == service and e.involved_object.kind == "LLMService"
        ]

    def delete_and_wait(self, service: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "llmservices", service)
        wait(f"{service}'s pods to be garbage-collected", lambda: not self.core.list_namespaced_pod(
            self.ns, label_selector=f"gpumix.io/service={service}").items, timeout=120)  # fmt: skip


def log_text(op: Operator) -> str:
    return "\n".join(log.read_text() for log in sorted(op.log_dir.glob("*.log")))


@contextmanager
def running_operator(kube: KubeTarget, log_dir: Path, **options: Any) -> Iterator[Operator]:
    """The sample GPUPools and profiles applied and `gpumix run` running for the block
    (`options` go to `Operator`); its logs are printed when GPUMIX_E2E_SHOW_LOGS=1."""
    kube.kubectl("apply", "-f", str(SAMPLES / "gpupools.yaml"),
                 "-f", str(SAMPLES / "profiles-llama-2-7b.yaml"))  # fmt: skip
    op = Operator(kube, log_dir, **options)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        if os.environ.get("GPUMIX_E2E_SHOW_LOGS") == "1":
            print(log_text(op), file=sys.stderr)
