"""The Helm chart (charts/gpumix) with the Helm that hack/build builds, on the real control plane.

lint and template; the rendered chart passes the apiserver's validation (server-side dry run);
it says the same as the kustomize manifests (RBAC, CRDs, the operator's container); and the CRD
lifecycle: `helm install` (taking over the CRDs the session installed), `helm upgrade` with a
changed CRD updates it, `helm uninstall` keeps the CRDs and LLMServices with `crds.keep=true`
and deletes them with `crds.keep=false`. The session's CRDs are restored afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import SAMPLES, wait

import gpumix_testcluster as testcluster
from gpumix_e2e import KubeTarget, crd_files, install_crds

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpumix"
RELEASE = "gpumix-e2e"
LLMSERVICES = "llmservices.gpumix.io"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def helm_binary() -> str:
    return str(testcluster.build_binaries().helm)


class Helm:
    def __init__(self, binary: str, kube: KubeTarget) -> None:
        self.binary, self.kube = binary, kube

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, *args, f"--kube-context={self.kube.context}"]
        if self.kube.kubeconfig is not None:
            cmd.append(f"--kubeconfig={self.kube.kubeconfig}")
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {out.returncode}:\n{out.stderr}")
        return out


@pytest.fixture
def helm(helm_binary: str, kube: KubeTarget) -> Helm:
    return Helm(helm_binary, kube)


def template(helm: Helm, *args: str, release: str = "gpumix", namespace: str = "gpumix-system"):
    out = helm("template", release, str(CHART), "--namespace", namespace, *args)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_helm_lint_passes(helm: Helm) -> None:
    out = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def test_schema_rejects_no_replicas_and_unknown_values(helm: Helm) -> None:
    for bad in ("replicas=0", "image.tags=latest", "crds.keep=maybe"):
        out = helm("template", "x", str(CHART), "--set", bad, check=False)
        assert out.returncode != 0, bad
        assert "values don't meet the specifications of the schema" in out.stderr, out.stderr


def test_template_renders_the_operator(helm: Helm) -> None:
    objects = by_kind(template(helm))
    assert set(objects) == {
        ("ServiceAccount", "gpumix"),
        ("ClusterRole", "gpumix"),
        ("ClusterRoleBinding", "gpumix"),
        ("Role", "gpumix-leader-election"),
        ("RoleBinding", "gpumix-leader-election"),
        ("Service", "gpumix-metrics"),
        ("Deployment", "gpumix"),
        ("PodDisruptionBudget", "gpumix"),
        ("NetworkPolicy", "gpumix"),
        *(("CustomResourceDefinition", p.name.removesuffix(".yaml")) for p in crd_files()),
    }
    policy = objects[("NetworkPolicy", "gpumix")]["spec"]
    pod = objects[("Deployment", "gpumix")]["spec"]["template"]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (operator,) = pod["spec"]["containers"]
    declared = {p["name"] for p in operator["ports"]}
    assert [{p["port"] for p in rule["ports"]} for rule in policy["ingress"]] == [declared]
    assert ("NetworkPolicy", "gpumix") not in by_kind(
        template(helm, "--set", "networkPolicy.enabled=false")
    )
    assert objects[("Deployment", "gpumix")]["spec"]["replicas"] == 2
    assert objects[("PodDisruptionBudget", "gpumix")]["spec"]["minAvailable"] == 1
    # One replica: no budget (minAvailable 1 of 1 would block every node drain).
    single = by_kind(template(helm, "--set", "replicas=1"))
    assert ("PodDisruptionBudget", "gpumix") not in single
    for name in (p.name.removesuffix(".yaml") for p in crd_files()):
        crd = objects[("CustomResourceDefinition", name)]
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    no_crds = by_kind(template(helm, "--set", "crds.enabled=false"))
    assert not [k for k in no_crds if k[0] == "CustomResourceDefinition"]
    not_kept = by_kind(template(helm, "--set", "crds.keep=false"))
    assert "annotations" not in not_kept[("CustomResourceDefinition", LLMSERVICES)]["metadata"]
    tagged = by_kind(template(helm, "--set", "image.tag=dev", "--set", "image.repository=r/g"))
    (container,) = tagged[("Deployment", "gpumix")]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "r/g:dev"
    monitored = by_kind(template(helm, "--set", "metrics.serviceMonitor.enabled=true"))
    monitor = monitored[("ServiceMonitor", "gpumix")]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    placement = [
        "nodeSelector.pool=system",
        "tolerations[0].key=k",
        "tolerations[0].operator=Exists",
    ]
    scheduled = by_kind(template(helm, *(a for s in placement for a in ("--set", s))))
    pod = scheduled[("Deployment", "gpumix")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]


def test_chart_and_kustomize_manifests_agree(helm: Helm, kube: KubeTarget) -> None:
    """The same RBAC rules, CRDs and operator container (image tag = appVersion included)."""
    chart = by_kind(template(helm))
    built = kube.kubectl("kustomize", str(ROOT / "manifests" / "default")).stdout
    manifests = by_kind([d for d in yaml.safe_load_all(built) if d])
    assert {k for k in manifests if k[0] != "Namespace"} == set(chart)
    for key in (("ClusterRole", "gpumix"), ("Role", "gpumix-leader-election")):
        assert chart[key]["rules"] == manifests[key]["rules"], key
    key = ("PodDisruptionBudget", "gpumix")
    assert chart[key]["spec"]["minAvailable"] == manifests[key]["spec"]["minAvailable"]
    key = ("NetworkPolicy", "gpumix")
    assert chart[key]["spec"]["ingress"] == manifests[key]["spec"]["ingress"]
    for kind, name in chart:
        if kind == "CustomResourceDefinition":
            assert chart[kind, name]["spec"] == manifests[kind, name]["spec"], name
    ours, theirs = (
        objs[("Deployment", "gpumix")]["spec"] for objs in (chart, manifests)
    )  # fmt: skip
    for spec in (ours, theirs):
        spec["template"]["metadata"] = {}
        spec["selector"] = {}
    assert ours == theirs
    assert (
        chart[("Service", "gpumix-metrics")]["spec"]["ports"]
        == (manifests[("Service", "gpumix-metrics")]["spec"]["ports"])
    )


def test_rendered_chart_passes_server_side_dry_run(
    helm: Helm, kube: KubeTarget, namespace: str
) -> None:
    docs = template(helm, release=RELEASE, namespace=namespace)
    out = kube.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs)
    )
    assert "deployment.apps/gpumix-e2e created (server dry run)" in out.stdout, out.stdout
    assert f"customresourcedefinition.apiextensions.k8s.io/{LLMSERVICES}" in out.stdout


def changed_chart(dest: Path) -> Path:
    """The chart with one more printer column on the LLMService CRD."""
    shutil.copytree(CHART, dest)
    path = dest / "templates" / "crds" / f"{LLMSERVICES}.yaml"
    text = path.read_text()
    anchor = "    additionalPrinterColumns:\n"
    assert anchor in text
    column = "    - name: E2EUpgrade\n      type: string\n      jsonPath: .metadata.name\n"
    path.write_text(text.replace(anchor, anchor + column, 1))
    return dest


def printer_columns(kube: KubeTarget) -> list[str]:
    crd = json.loads(kube.kubectl("get", "crd", LLMSERVICES, "-o", "json").stdout)
    return [c["name"] for c in crd["spec"]["versions"][0].get("additionalPrinterColumns", [])]


def crd_exists(kube: KubeTarget) -> bool:
    return kube.kubectl("get", "crd", LLMSERVICES, check=False).returncode == 0


def restore_crds(kube: KubeTarget) -> None:
    """Put back the CRDs of crds/ exactly (replace drops fields another manager added)."""
    for path in crd_files():
        verb = "replace" if crd_exists(kube) else "create"
        kube.kubectl(verb, "-f", str(path))
    install_crds(kube)


@pytest.fixture
def release(helm: Helm, kube: KubeTarget, namespace: str) -> Iterator[str]:
    yield namespace
    helm("uninstall", RELEASE, "--namespace", namespace, "--wait", check=False)
    restore_crds(kube)


def llmservice(namespace: str) -> str:
    body = yaml.safe_load((SAMPLES / "chat.yaml").read_text())
    body["metadata"] = {"name": "kept", "namespace": namespace}
    return yaml.safe_dump(body)


def test_install_upgrade_uninstall_crd_lifecycle(
    helm: Helm, kube: KubeTarget, release: str, tmp_path: Path
) -> None:
    ns = release
    timings: dict[str, float] = {}

    def timed(what: str, *args: str) -> None:
        start = time.monotonic()
        helm(*args)
        timings[what] = time.monotonic() - start

    # The session installed the CRDs with kubectl; the release takes them over.
    timed("install", "install", RELEASE, str(CHART), "--namespace", ns, "--take-ownership",
          "--wait", "--timeout=2m")  # fmt: skip
    crd = json.loads(kube.kubectl("get", "crd", LLMSERVICES, "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    pods = json.loads(kube.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]  # leader-elected
    assert pods[0]["spec"]["nodeName"].startswith("cpu-"), pods[0]["spec"]["nodeName"]

    assert "E2EUpgrade" not in printer_columns(kube)
    timed("upgrade", "upgrade", RELEASE, str(changed_chart(tmp_path / "chart")),
          "--namespace", ns, "--wait", "--timeout=2m")  # fmt: skip
    assert "E2EUpgrade" in printer_columns(kube)

    kube.kubectl("apply", "-f", "-", input=llmservice(ns))
    timed("uninstall (keep)", "uninstall", RELEASE, "--namespace", ns, "--wait")
    assert crd_exists(kube)
    kube.kubectl("get", "llmservice", "kept", "-n", ns)  # still there
    assert kube.kubectl("get", "deploy", "-n", ns, "-o", "name").stdout.strip() == ""

    if kube.cluster is None:
        print(f"\nhelm timings: {timings}")
        pytest.skip("crds.keep=false deletes every LLMService of the cluster: local cluster only")
    # Same release name and namespace: Helm adopts the kept CRDs without --take-ownership.
    # An install does not remove annotations it did not write, so stop keeping with an upgrade.
    timed("reinstall", "install", RELEASE, str(CHART), "--namespace", ns, "--wait",
          "--timeout=2m")  # fmt: skip
    timed("upgrade (keep=false)", "upgrade", RELEASE, str(CHART), "--namespace", ns,
          "--set", "crds.keep=false", "--wait", "--timeout=2m")  # fmt: skip
    crd = json.loads(kube.kubectl("get", "crd", LLMSERVICES, "-o", "json").stdout)
    assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})
    assert "E2EUpgrade" not in printer_columns(kube)  # the chart's CRD again
    timed("uninstall (no keep)", "uninstall", RELEASE, "--namespace", ns, "--wait")
    wait("the LLMService CRD to be deleted", lambda: not crd_exists(kube), timeout=60)
    assert kube.kubectl("get", "ns", ns).returncode == 0  # the LLMService went with its CRD
    print(f"\nhelm timings (s): { {k: round(v, 1) for k, v in timings.items()} }")
