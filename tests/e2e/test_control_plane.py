"""The control plane itself: stamped versions and gpumix's CRDs."""

from __future__ import annotations

import re

import pytest
import yaml
from kubernetes import client

from gpumix_e2e import CRDS_DIR, KubeTarget, crd_files
from gpumix_testcluster import HACK_DIR

pytestmark = pytest.mark.e2e


def pinned_versions() -> dict[str, str]:
    lines = (HACK_DIR / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_apiserver_reports_stamped_version(kube: KubeTarget) -> None:
    info = client.VersionApi(kube.api_client).get_code()
    if kube.cluster is not None:
        want = pinned_versions()["KUBE_VERSION"]
        assert info.git_version == want
        major, minor, _ = want.removeprefix("v").split(".")
        assert (info.major, info.minor) == (major, minor)
    else:  # someone else's cluster: at least a real release, not an unstamped build
        assert re.fullmatch(r"v1\.\d+\.\d+.*", info.git_version), info.git_version
    assert info.git_version != "v0.0.0-master"


def test_crds_apply_cleanly_and_are_established(kube: KubeTarget) -> None:
    names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in crd_files()]
    assert sorted(names) == sorted(kube.crd_names)
    assert {"llmservices.gpumix.io", "gpupools.gpumix.io", "gpuprofiles.gpumix.io"} <= set(names)
    # crds/ holds a kustomization.yaml, so the directory is applied with -k (plain `apply -f
    # crds/` would try to create a Kustomization object and fail). Re-applying what the fixture
    # applied must succeed for every CRD.
    applied = kube.kubectl(
        "apply", "--server-side", "--field-manager=gpumix-e2e", "-k", str(CRDS_DIR)
    ).stdout
    for name in names:
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in applied

    ext = client.ApiextensionsV1Api(kube.api_client)
    for name in names:
        conditions = {
            c.type: c.status for c in ext.read_custom_resource_definition(name).status.conditions
        }
        assert conditions.get("Established") == "True", (name, conditions)
        assert conditions.get("NamesAccepted") == "True", (name, conditions)

    served = kube.kubectl("api-resources", "--api-group=gpumix.io", "-o", "name").stdout.split()
    assert set(names) <= set(served)


def test_kustomization_lists_every_crd(kube: KubeTarget) -> None:
    rendered = kube.kubectl("kustomize", str(CRDS_DIR)).stdout
    kinds = [d["metadata"]["name"] for d in yaml.safe_load_all(rendered) if d]
    assert sorted(kinds) == sorted(kube.crd_names)
