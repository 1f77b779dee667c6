"""Shared pytest setup: the ``--kube-context`` option and the Kubernetes session fixture.

By default the ``kube`` fixture builds (or reuses) the binaries with ``hack/build``, starts the
local control plane with KWOK GPU nodes from ``hack/gpu-pools.yaml`` (see ``hack/README.md``),
installs ``crds/`` and stops the cluster at the end of the session.

With ``--kube-context NAME`` it uses that context of the existing kubeconfig (``$KUBECONFIG`` or
``~/.kube/config``) instead, e.g. a kind cluster from ``hack/kind-up``. Only the named context is
ever used; the kubeconfig's current-context is ignored.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config

REPO_ROOT = Path(__file__).resolve().parents[1]
CRDS_DIR = REPO_ROOT / "crds"
sys.path.insert(0, str(REPO_ROOT / "hack"))

# hack/ holds the cluster code (and is on sys.path only through this line).
import gpumix_testcluster as testcluster  # noqa: E402
import proptest  # noqa: E402, F401 - registers and loads the Hypothesis profiles
from gpumix_e2e import KubeTarget, install_crds  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("gpumix e2e").addoption(
        "--kube-context",
        default=None,
        metavar="NAME",
        help="run e2e tests against this context of $KUBECONFIG (or ~/.kube/config) instead of "
        "starting the local hack/ cluster; no other context is ever used",
    )


def _existing_target(context: str) -> KubeTarget:
    contexts, _ = config.list_kube_config_contexts()
    known = [c["name"] for c in contexts]
    if context not in known:
        raise pytest.UsageError(f"--kube-context {context!r} is not in the kubeconfig: {known}")
    return KubeTarget(
        context=context, kubeconfig=None, api_client=config.new_client_from_config(context=context)
    )


@pytest.fixture(scope="session")
def kube(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeTarget]:
    """A cluster with gpumix's CRDs installed: the local hack/ cluster, or --kube-context."""
    context: str | None = request.config.getoption("--kube-context")
    if context:
        target = _existing_target(context)
        try:
            target.crd_names = install_crds(target)
            yield target
        finally:
            target.api_client.close()
        return

    binaries = testcluster.build_binaries()
    directory = tmp_path_factory.mktemp("hack-cluster")
    cluster = testcluster.Cluster.start(directory, binaries, testcluster.load_pools(), detach=False)
    try:
        target = KubeTarget(
            context=testcluster.CONTEXT,
            kubeconfig=cluster.kubeconfig,
            api_client=config.new_client_from_config(
                config_file=str(cluster.kubeconfig), context=testcluster.CONTEXT
            ),
            cluster=cluster,
        )
        try:
            target.crd_names = install_crds(target)
            yield target
        finally:
            target.api_client.close()
    finally:
        # Stop everything; keep the logs in pytest's temporary directory for post-mortems.
        cluster.stop(remove_state=False)


@pytest.fixture
def namespace(kube: KubeTarget) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    yield name
    if os.environ.get("GPUMIX_E2E_KEEP_NAMESPACES") != "1":
        kube.kubectl("delete", "namespace", name, "--wait=false")
