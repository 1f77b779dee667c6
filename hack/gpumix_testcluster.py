"""A local Kubernetes control plane with KWOK GPU nodes, for gpumix's e2e tests.

Real etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built by ``hack/build``)
run as plain processes on 127.0.0.1 with ports chosen at run time; KWOK fakes the kubelets of
the GPU nodes listed in ``hack/gpu-pools.yaml``, marks them Ready and makes scheduled pods
Running. Everything a cluster owns (PKI, etcd data, kubeconfigs, logs, pids) lives in one
directory, which ``down`` removes.

Used by ``hack/cluster`` (the CLI, see ``main``) and by the pytest session fixture in
``tests/conftest.py``. Only the standard library, PyYAML and the ``openssl`` CLI are needed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

HACK_DIR = Path(__file__).resolve().parent
DEFAULT_POOLS_FILE = HACK_DIR / "gpu-pools.yaml"
DEFAULT_NAME = "gpumix"
CONTEXT = "gpumix-hack"

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_CLASS_LABEL = "gpumix.io/gpu-class"
POOL_LABEL = "gpumix.io/hack-pool"  # on every node this module creates; value: pool name
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"

SERVICE_CIDR = "10.0.0.0/16"
NODE_LEASE_S = 40
"""KWOK's node Lease duration; it renews each every quarter of it, as a kubelet does."""
POD_CIDR = "10.1.0.0/16"

JSON = dict[str, Any]
T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster could not be started, reached or changed."""


def log(message: str) -> None:
    print(f"[hack/cluster {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    if env := os.environ.get("GPUMIX_HACK_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gpumix-hack"


def default_cluster_dir(name: str = DEFAULT_NAME) -> Path:
    return cache_root() / "clusters" / name


# --------------------------------------------------------------------------- binaries


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path
    helm: Path

    @classmethod
    def parse(cls, build_output: str) -> Binaries:
        """Parse the NAME=PATH lines that ``hack/build`` prints on stdout."""
        paths = dict(line.split("=", 1) for line in build_output.splitlines() if "=" in line)
        try:
            return cls(
                **{name: Path(paths[name.replace("_", "-")]) for name in cls.__dataclass_fields__}
            )
        except KeyError as missing:
            raise ClusterError(f"hack/build printed no path for {missing}") from None


def build_binaries() -> Binaries:
    """Run ``hack/build`` (a no-op apart from version checks once cached)."""
    result = subprocess.run(
        [str(HACK_DIR / "build")], stdout=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        raise ClusterError(f"hack/build failed with exit code {result.returncode}")
    return Binaries.parse(result.stdout)


# --------------------------------------------------------------------------- GPU pools


@dataclass(frozen=True)
class GpuPool:
    """A node pool: GPU nodes (GFD labels, GPU taint and capacity), or CPU-only nodes when
    ``gpus_per_node`` is 0 (no GPU labels, no taint: where system pods such as the operator run).
    """

    name: str
    gpu_class: str | None
    product: str | None
    gpus_per_node: int
    gpu_memory_mib: int
    nodes: int
    instance_type: str
    cpu: str
    memory: str
    pods: int = 110

    @classmethod
    def from_dict(cls, raw: JSON) -> GpuPool:
        gpus = int(raw.get("gpusPerNode", 0))
        pool = cls(
            name=str(raw["name"]),
            gpu_class=str(raw["gpuClass"]) if "gpuClass" in raw else None,
            product=str(raw["product"]) if "product" in raw else None,
            gpus_per_node=gpus,
            gpu_memory_mib=int(raw.get("gpuMemoryMiB", 0)),
            nodes=int(raw["nodes"]),
            instance_type=str(raw["instanceType"]),
            cpu=str(raw["cpu"]),
            memory=str(raw["memory"]),
            pods=int(raw.get("pods", 110)),
        )
        if gpus > 0 and (pool.gpu_class is None or pool.product is None or not pool.gpu_memory_mib):
            raise ClusterError(f"GPU pool {pool.name}: needs gpuClass, product and gpuMemoryMiB")
        return pool

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0

    def labels(self) -> dict[str, str]:
        """The labels GPU Feature Discovery sets, plus the gpumix pool class (GPU pools)."""
        if not self.has_gpus:
            return {"node.kubernetes.io/instance-type": self.instance_type}
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": str(self.product),
            "nvidia.com/gpu.count": str(self.gpus_per_node),
            "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
            GPU_CLASS_LABEL: str(self.gpu_class),
            "node.kubernetes.io/instance-type": self.instance_type,
        }


def load_pools(path: Path = DEFAULT_POOLS_FILE) -> list[GpuPool]:
    raw = yaml.safe_load(path.read_text())
    pools = [GpuPool.from_dict(p) for p in raw["pools"]]
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ClusterError(f"{path}: duplicate pool names in {names}")
    return pools


def _natural(name: str) -> tuple[str, int]:
    """Sort key putting gpu-l4-2 before gpu-l4-10."""
    stem, _, index = name.rpartition("-")
    return (stem, int(index)) if index.isdigit() else (name, -1)


def node_name(pool: GpuPool, index: int) -> str:
    return f"{'gpu' if pool.has_gpus else 'cpu'}-{pool.name}-{index}"


def gpu_node_manifest(pool: GpuPool, name: str) -> JSON:
    """A Node that KWOK manages: GFD labels, GPU taint, GPU capacity in its status (GPU pools);
    CPU-only pools get neither GPU labels, taint nor capacity."""
    resources = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": str(pool.pods),
        "ephemeral-storage": "500Gi",
    }
    if pool.has_gpus:
        resources[GPU_RESOURCE] = str(pool.gpus_per_node)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "type": "kwok",
                POOL_LABEL: pool.name,
                **pool.labels(),
            },
        },
        "spec": {"taints": [dict(GPU_TAINT)] if pool.has_gpus else []},
        # The apiserver keeps status on create; later changes need the status subresource.
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


# --------------------------------------------------------------------------- API access


class KubeApi:
    """A minimal JSON client for the apiserver (stdlib only, verified TLS, client cert)."""

    def __init__(self, server: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        self.server = server.rstrip("/")
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._ssl.load_cert_chain(str(cert_file), str(key_file))

    def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        *,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> JSON:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            raise ApiError(err.code, f"{method} {path}: HTTP {err.code}: {detail}") from None
        if not text or not text.lstrip().startswith("{"):
            return {"raw": text}
        result: JSON = json.loads(text)
        return result

    def get(self, path: str) -> JSON:
        return self.request("GET", path)


class ApiError(ClusterError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    alive: Callable[[], None] = lambda: None,
) -> T:
    """Poll ``probe`` until it returns something other than None (exceptions count as None)."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        alive()
        try:
            result = probe()
        except (OSError, ClusterError, ValueError) as err:
            result, last_error = None, str(err)
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what} {last_error}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool | None:
    """True if GET url answers 200, else None (for wait_for)."""
    with urllib.request.urlopen(url, context=context, timeout=5) as resp:
        return True if resp.status == 200 else None


def loopback_health_context() -> ssl.SSLContext:
    # kube-controller-manager and kube-scheduler serve /healthz with a self-signed cert they
    # generate in memory; these probes go to 127.0.0.1 only and carry no credentials.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# --------------------------------------------------------------------------- PKI


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def make_pki(pki: Path) -> None:
    """CA, apiserver serving cert, client certs per component, service-account key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=gpumix-hack-ca", cwd=pki)  # fmt: skip
    sans = "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost," + ",".join(
        f"DNS:{name}" for name in ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
    )
    leaves = {
        "apiserver": ("/CN=kube-apiserver", "serverAuth", sans),
        "admin": ("/O=system:masters/CN=gpumix-hack-admin", "clientAuth", None),
        "kube-controller-manager": ("/CN=system:kube-controller-manager", "clientAuth", None),
        "kube-scheduler": ("/CN=system:kube-scheduler", "clientAuth", None),
        "front-proxy-client": ("/CN=front-proxy-client", "clientAuth", None),
        # KWOK patches node and pod status and deletes pods: simplest is cluster-admin.
        "kwok": ("/O=system:masters/CN=kwok-controller", "clientAuth", None),
    }
    for name, (subject, usage, san) in leaves.items():
        ext = pki / f"{name}.ext"
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={usage}\n" + (f"subjectAltName={san}\n" if san else "")
        )
        _openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject, cwd=pki)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "365", "-extfile", ext.name, "-out", f"{name}.crt",
                 cwd=pki)  # fmt: skip
        (pki / f"{name}.csr").unlink()
        ext.unlink()
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", "sa.key", cwd=pki)  # fmt: skip
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def kubeconfig(server: str, pki: Path, user: str) -> JSON:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(f"{user}.crt"),
                    "client-key-data": b64(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
    }


# --------------------------------------------------------------------------- cluster


@dataclass
class ProcessRecord:
    name: str
    pid: int
    binary: str
    log: str
    args: list[str] = field(default_factory=list)
    """What it was started with, so that ``start_component`` can start it again."""


@dataclass
class Cluster:
    """A running (or stopped) local cluster, described by ``<dir>/cluster.json``."""

    dir: Path
    server: str
    ports: dict[str, int]
    processes: list[ProcessRecord] = field(default_factory=list)
    pools: list[GpuPool] = field(default_factory=list)
    detach: bool = True  # run the processes in their own session (they outlive the CLI)
    _popen: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    # ---- paths and persistence

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def save(self) -> None:
        state = {
            "server": self.server,
            "ports": self.ports,
            "processes": [asdict(p) for p in self.processes],
            "pools": [asdict(p) for p in self.pools],
        }
        tmp = self.dir / "cluster.json.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.dir / "cluster.json")

    @classmethod
    def load(cls, directory: Path) -> Cluster:
        path = directory / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster in {directory} (run hack/cluster up)")
        state = json.loads(path.read_text())
        return cls(
            dir=directory,
            server=state["server"],
            ports=state["ports"],
            processes=[ProcessRecord(**p) for p in state["processes"]],
            pools=[GpuPool(**p) for p in state["pools"]],
        )

    def api(self) -> KubeApi:
        return KubeApi(
            self.server, self.pki / "ca.crt", self.pki / "admin.crt", self.pki / "admin.key"
        )

    def pool(self, name: str) -> GpuPool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise ClusterError(f"unknown pool {name!r}; known: {[p.name for p in self.pools]}")

    # ---- processes

    def _spawn(self, name: str, binary: Path, args: Sequence[str]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / f"{name}.log"
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                # Detached, the processes outlive `hack/cluster up` and ignore the terminal's ^C;
                # attached (pytest), a ^C or a killed session takes them down too.
                start_new_session=self.detach,
            )
        self._popen[proc.pid] = proc
        record = ProcessRecord(name, proc.pid, os.path.realpath(binary), str(log_path), list(args))
        # A restarted component keeps its place (``stop`` goes newest first).
        for i, old in enumerate(self.processes):
            if old.name == name:
                self.processes[i] = record
                break
        else:
            self.processes.append(record)
        self.save()

    def _record(self, name: str) -> ProcessRecord:
        return next(p for p in self.processes if p.name == name)

    def _running(self, record: ProcessRecord) -> bool:
        if (proc := self._popen.get(record.pid)) is not None:
            return proc.poll() is None
        try:
            # Guard against pid reuse: the pid must still run the binary we started.
            exe = os.readlink(f"/proc/{record.pid}/exe").removesuffix(" (deleted)")
            return exe == record.binary
        except FileNotFoundError:
            return False
        except OSError:  # no /proc (macOS): fall back to "some process has this pid"
            try:
                os.kill(record.pid, 0)
            except ProcessLookupError:
                return False
            return True

    def _check_alive(self, *names: str) -> Callable[[], None]:
        def check() -> None:
            for name in names:
                record = self._record(name)
                if not self._running(record):
                    tail = Path(record.log).read_text(errors="replace").splitlines()[-25:]
                    raise ClusterError(
                        f"{name} exited during startup; last lines of {record.log}:\n"
                        + "\n".join(tail)
                    )

        return check

    def running(self) -> bool:
        return bool(self.processes) and all(self._running(p) for p in self.processes)

    def stop(self, *, remove_state: bool = True, timeout: float = 20.0) -> None:
        """Stop every process (newest first, each before the next) and delete the directory.

        With ``remove_state=False`` the logs and kubeconfigs stay (etcd data and PKI go).
        """
        for record in reversed(self.processes):
            self._stop_process(record, signal.SIGTERM, timeout)
        if remove_state:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            for sub in ("etcd", "pki"):
                shutil.rmtree(self.dir / sub, ignore_errors=True)
            (self.dir / "cluster.json").unlink(missing_ok=True)

    def _stop_process(self, record: ProcessRecord, sig: signal.Signals, timeout: float) -> None:
        if self._running(record):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, sig)
            deadline = time.monotonic() + timeout
            while self._running(record) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._running(record):
                log(f"{record.name} (pid {record.pid}) ignored {sig.name} for {timeout}s; killing")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGKILL)
        if (proc := self._popen.pop(record.pid, None)) is not None:
            proc.wait()

    # ---- faults: one component down and up again (tests/e2e/test_chaos.py)

    def stop_component(
        self, name: str, sig: signal.Signals = signal.SIGTERM, timeout: float = 20.0
    ) -> None:
        """Stop one process (``etcd``, ``kube-apiserver``, ``kube-controller-manager``,
        ``kube-scheduler``, ``kwok``) with ``sig`` (SIGKILL: a crash); its data stays."""
        self._stop_process(self._record(name), sig, timeout)

    def start_component(self, name: str, *, timeout: float = 120.0) -> None:
        """Start a stopped process again, with the binary, arguments, ports and data directory
        it had, and wait until it is ready (etcd /health, apiserver /readyz, /healthz)."""
        record = self._record(name)
        if self._running(record):
            raise ClusterError(f"{name} is running (pid {record.pid})")
        if not record.args:
            raise ClusterError(f"{name}: no arguments recorded (a cluster.json from before)")
        self._spawn(name, Path(record.binary), record.args)
        alive = self._check_alive(name)
        health = loopback_health_context()
        probes: dict[str, Callable[[], bool | None]] = {
            "etcd": lambda: http_ok(f"http://127.0.0.1:{self.ports['etcd-client']}/health"),
            "kube-apiserver": lambda: bool(self.api().get("/readyz")) or None,
            "kube-controller-manager": lambda: http_ok(
                f"https://127.0.0.1:{self.ports['controller-manager']}/healthz", health
            ),
            "kube-scheduler": lambda: http_ok(
                f"https://127.0.0.1:{self.ports['scheduler']}/healthz", health
            ),
        }
        probe = probes.get(name, lambda: True)  # KWOK: running is all we can tell
        wait_for(f"{name} ready", probe, timeout=timeout, alive=alive)
        log(f"{name} restarted (pid {self._record(name).pid})")
        if name in ("etcd", "kube-apiserver") and self._running(self._record("kwok")):
            self._resync_kubelets()

    def _resync_kubelets(self) -> None:
        """Restart KWOK after etcd or the apiserver came back, so that it replays every pod's
        stage. KWOK v0.8.0 drops a pod-status patch the apiserver answered with a 500 during
        the outage (``shouldRetry`` in its controllers/utils.go retries only refused
        connections, timeouts, 503 and 429) and never syncs that pod again: a new pod stayed
        Pending for good in the chaos suite's etcd scenario. A kubelet re-syncs every pod
        each sync period; the restart stands in for that."""
        self.stop_component("kwok")
        self.start_component("kwok")

    def restart_component(
        self, name: str, sig: signal.Signals = signal.SIGTERM, down_s: float = 0.0
    ) -> None:
        """``stop_component``, ``down_s`` seconds down, ``start_component``."""
        self.stop_component(name, sig)
        time.sleep(down_s)
        self.start_component(name)

    # ---- startup

    @classmethod
    def start(
        cls,
        directory: Path,
        binaries: Binaries,
        pools: Sequence[GpuPool],
        *,
        timeout: float = 120.0,
        detach: bool = True,
        node_lease_s: int = NODE_LEASE_S,
    ) -> Cluster:
        """Start a fresh cluster in ``directory`` and return once its GPU nodes are Ready.

        ``detach=False`` keeps the processes in the caller's session and process group.
        ``node_lease_s``: the node Lease duration. A quarter of it apart, each node's Lease is
        renewed: at 5,000 nodes and 40 s, 500 PUTs/s on the machine that runs everything else
        (a scale bench lengthens it; the controller-manager's grace period follows it).
        """
        if (directory / "cluster.json").exists():
            raise ClusterError(f"{directory} already holds a cluster; run hack/cluster down first")
        directory.mkdir(parents=True, exist_ok=True)
        ports = {
            name: free_port()
            for name in ("etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler")
        }
        cluster = cls(
            dir=directory.resolve(),
            server=f"https://127.0.0.1:{ports['apiserver']}",
            ports=ports,
            pools=list(pools),
            detach=detach,
        )
        try:
            cluster._start(binaries, timeout, node_lease_s)
        except BaseException:
            cluster.stop(remove_state=False)
            raise
        return cluster

    def _start(self, binaries: Binaries, timeout: float, node_lease_s: int) -> None:
        started = time.monotonic()
        self.save()
        log(f"PKI in {self.pki}")
        make_pki(self.pki)
        for user in ("admin", "kube-controller-manager", "kube-scheduler", "kwok"):
            name = "kubeconfig" if user == "admin" else f"{user}.kubeconfig"
            (self.dir / name).write_text(yaml.safe_dump(kubeconfig(self.server, self.pki, user)))
            (self.dir / name).chmod(0o600)

        etcd_url = f"http://127.0.0.1:{self.ports['etcd-client']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn("etcd", binaries.etcd, [
            "--name=default", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}", "--unsafe-no-fsync=true",
            "--log-level=warn",
        ])  # fmt: skip
        wait_for("etcd /health", lambda: http_ok(f"{etcd_url}/health"),
                 timeout=timeout, alive=self._check_alive("etcd"))  # fmt: skip
        log(f"etcd ready at {etcd_url}")

        pki = self.pki
        self._spawn("kube-apiserver", binaries.kube_apiserver, [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC", "--allow-privileged=true", "--profiling=false",
            # The apiserver would publish 127.0.0.1 as the endpoint of Service "kubernetes",
            # which Endpoints validation rejects (and nothing routes ClusterIPs here anyway).
            "--endpoint-reconciler-type=none",
            # Front-proxy (aggregation) trust, so components find a complete auth config.
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        ])  # fmt: skip
        api = self.api()
        wait_for("kube-apiserver /readyz", lambda: api.get("/readyz") and True,
                 timeout=timeout, alive=self._check_alive("etcd", "kube-apiserver"))  # fmt: skip
        log(f"kube-apiserver ready at {self.server}")

        common = ["--leader-elect=false", "--bind-address=127.0.0.1"]
        kcm_kubeconfig = self.dir / "kube-controller-manager.kubeconfig"
        self._spawn("kube-controller-manager", binaries.kube_controller_manager, [
            *common, f"--secure-port={self.ports['controller-manager']}",
            f"--kubeconfig={kcm_kubeconfig}",
            f"--authentication-kubeconfig={kcm_kubeconfig}",
            f"--authorization-kubeconfig={kcm_kubeconfig}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Nodes go NotReady when their Lease is this stale (its default fits 40 s Leases).
            *([f"--node-monitor-grace-period={node_lease_s}s"]
              if node_lease_s != NODE_LEASE_S else []),
        ])  # fmt: skip
        sched_kubeconfig = self.dir / "kube-scheduler.kubeconfig"
        self._spawn("kube-scheduler", binaries.kube_scheduler, [
            *common, f"--secure-port={self.ports['scheduler']}",
            f"--kubeconfig={sched_kubeconfig}",
            f"--authentication-kubeconfig={sched_kubeconfig}",
            f"--authorization-kubeconfig={sched_kubeconfig}",
        ])  # fmt: skip
        stages = sorted(binaries.kwok_stages.glob("*.yaml"))
        self._spawn("kwok", binaries.kwok, [
            f"--kubeconfig={self.dir / 'kwok.kubeconfig'}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
            f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1",
            # Node Leases in kube-node-lease, renewed like a kubelet's: the heartbeat-with-lease
            # stage rewrites node status only every ~10 min and leaves liveness to the Leases.
            # Without this flag KWOK creates none and the node lifecycle controller has only
            # those rare status updates to go by.
            f"--node-lease-duration-seconds={node_lease_s}",
            *(f"--config={stage}" for stage in stages),
        ])  # fmt: skip
        everything = self._check_alive(*(p.name for p in self.processes))
        health = loopback_health_context()
        for name in ("controller-manager", "scheduler"):
            probe = functools.partial(
                http_ok, f"https://127.0.0.1:{self.ports[name]}/healthz", health
            )
            wait_for(f"kube-{name} /healthz", probe, timeout=timeout, alive=everything)
        log("kube-controller-manager and kube-scheduler healthy")

        # Pods in "default" need its ServiceAccount, which the controller-manager creates.
        wait_for("ServiceAccount default/default",
                 lambda: api.get("/api/v1/namespaces/default/serviceaccounts/default"),
                 timeout=timeout, alive=everything)  # fmt: skip
        names = [
            self.create_node(pool, node_name(pool, i))
            for pool in self.pools
            for i in range(pool.nodes)
        ]
        self.wait_nodes_ready(names, timeout=timeout, alive=everything)
        log(f"{len(names)} nodes Ready; cluster up in {time.monotonic() - started:.1f}s")

    # ---- GPU nodes

    def create_node(self, pool: GpuPool, name: str) -> str:
        self.api().request("POST", "/api/v1/nodes", gpu_node_manifest(pool, name))
        return name

    def node_names(self, pool: str | None = None) -> list[str]:
        selector = f"{POOL_LABEL}={pool}" if pool else POOL_LABEL
        query = urllib.parse.urlencode({"labelSelector": selector})
        items = self.api().get(f"/api/v1/nodes?{query}")["items"]
        return sorted((item["metadata"]["name"] for item in items), key=_natural)

    def add_gpu_nodes(self, pool: str | GpuPool, count: int = 1, *, wait: bool = True) -> list[str]:
        """Create ``count`` more nodes of a pool (next free indices); wait until Ready."""
        spec = pool if isinstance(pool, GpuPool) else self.pool(pool)
        existing = set(self.node_names(spec.name))
        names: list[str] = []
        index = 0
        while len(names) < count:
            if node_name(spec, index) not in existing:
                names.append(self.create_node(spec, node_name(spec, index)))
            index += 1
        if wait:
            self.wait_nodes_ready(names)
        return names

    def delete_gpu_nodes(self, names: Iterable[str], *, wait: bool = True) -> None:
        """Delete GPU nodes (the controller-manager's pod GC later deletes pods bound to them)."""
        names = list(names)
        api = self.api()
        for name in names:
            api.request("DELETE", f"/api/v1/nodes/{name}")
        if wait:
            wait_for(f"nodes {names} to disappear",
                     lambda: True if not set(names) & set(self.node_names()) else None,
                     timeout=60)  # fmt: skip

    def wait_nodes_ready(
        self,
        names: Sequence[str],
        *,
        timeout: float = 60.0,
        alive: Callable[[], None] = lambda: None,
    ) -> None:
        api = self.api()

        def all_ready() -> bool | None:
            items = api.get(
                f"/api/v1/nodes?{urllib.parse.urlencode({'labelSelector': POOL_LABEL})}"
            )
            ready = {
                item["metadata"]["name"]
                for item in items["items"]
                for cond in item.get("status", {}).get("conditions", [])
                if cond["type"] == "Ready" and cond["status"] == "True"
            }
            return True if set(names) <= ready else None

        wait_for(f"{len(names)} nodes Ready", all_ready, timeout=timeout, alive=alive)


# --------------------------------------------------------------------------- CLI


def _cluster_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else default_cluster_dir(args.name)


def cmd_up(args: argparse.Namespace) -> None:
    directory = _cluster_dir(args)
    if (directory / "cluster.json").exists():
        existing = Cluster.load(directory)
        if existing.running():
            log(f"already running ({existing.server})")
            print(existing.kubeconfig)
            return
        log("found a stopped cluster; cleaning it up")
        existing.stop()
    binaries = build_binaries()
    cluster = Cluster.start(directory, binaries, load_pools(Path(args.pools)), timeout=args.timeout)
    print(cluster.kubeconfig)


def cmd_down(args: argparse.Namespace) -> None:
    directory = _cluster_dir(args)
    if not (directory / "cluster.json").exists():
        log(f"no cluster in {directory}")
        shutil.rmtree(directory, ignore_errors=True)
        return
    Cluster.load(directory).stop()
    log(f"stopped; removed {directory}")


def cmd_status(args: argparse.Namespace) -> None:
    cluster = Cluster.load(_cluster_dir(args))
    for record in cluster.processes:
        state = "running" if cluster._running(record) else "STOPPED"
        print(f"{record.name:<24} pid {record.pid:<8} {state:<8} {record.log}")
    print(f"server     {cluster.server}\nkubeconfig {cluster.kubeconfig}")
    if not cluster.running():
        sys.exit(1)


def cmd_nodes(args: argparse.Namespace) -> None:
    cluster = Cluster.load(_cluster_dir(args))
    if args.action == "list":
        for name in cluster.node_names():
            print(name)
    elif args.action == "add":
        for name in cluster.add_gpu_nodes(args.pool, args.count):
            print(name)
    else:
        names = list(args.names)
        if args.pool:
            names += (
                cluster.node_names(args.pool)[-args.count :]
                if args.count
                else cluster.node_names(args.pool)
            )
        if not names:
            raise ClusterError("nothing to delete: give node names or --pool")
        cluster.delete_gpu_nodes(names)
        for name in names:
            print(name)


def cmd_restart(args: argparse.Namespace) -> None:
    cluster = Cluster.load(_cluster_dir(args))
    sig = signal.SIGKILL if args.kill else signal.SIGTERM
    cluster.restart_component(args.component, sig, args.down)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="hack/cluster", description=__doc__.split("\n\n")[0])
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--name", default=DEFAULT_NAME, help="cluster name (default: %(default)s)")
    where.add_argument("--dir", help="cluster directory (default: <cache>/clusters/<name>)")
    sub = top.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", parents=[where], help="start; print the kubeconfig path last")
    up.add_argument("--pools", default=str(DEFAULT_POOLS_FILE), help="GPU pools YAML file")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds per startup step")
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", parents=[where], help="stop and remove state").set_defaults(
        func=cmd_down
    )
    sub.add_parser("status", parents=[where], help="show processes").set_defaults(func=cmd_status)
    restart = sub.add_parser(
        "restart", parents=[where], help="stop one component and start it again (same data)"
    )
    restart.add_argument(
        "component",
        choices=["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"],
    )
    restart.add_argument("--kill", action="store_true", help="SIGKILL (a crash), not SIGTERM")
    restart.add_argument("--down", type=float, default=0.0, help="seconds to stay down")
    restart.set_defaults(func=cmd_restart)

    nodes = sub.add_parser("nodes", help="list, add or delete KWOK GPU nodes")
    actions = nodes.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[where], help="list GPU nodes").set_defaults(func=cmd_nodes)
    add = actions.add_parser("add", parents=[where], help="add nodes to a pool (by pool name)")
    add.add_argument("pool")
    add.add_argument("--count", type=int, default=1)
    add.set_defaults(func=cmd_nodes)
    delete = actions.add_parser("delete", parents=[where], help="delete nodes by name or pool")
    delete.add_argument("names", nargs="*")
    delete.add_argument("--pool", help="delete this pool's nodes (all, or the last --count)")
    delete.add_argument("--count", type=int, default=0)
    delete.set_defaults(func=cmd_nodes)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except ClusterError as err:
        log(f"error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
