"""The chart's observation settings, rendered by the Helm that hack/build builds (`helm template`;
no cluster): `observe.*` reaches `gpumix run`'s flags, and `podMonitor.enabled` renders a
PodMonitor that selects the pods gpumix renders and labels them as gpumix.observe queries them.
Last, on the control plane: `kubectl apply -f manifests/samples/` (README, hack/demo) still
applies with the Prometheus scrape config in the samples' subdirectory.

The Prometheus Operator turns a PodMonitor into a scrape job that always sets `namespace`,
`container` and `pod` from the pod's metadata, and each `podTargetLabels` entry into a label named
by replacing every character outside [a-zA-Z0-9_] with `_` (prometheus-operator
pkg/prometheus/promcfg.go, sanitizeLabelName); `sanitized` below is that rule. There is no
Prometheus Operator here, so the PodMonitor is not validated against its CRD.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpumix_testcluster as testcluster
from gpumix.api import GPUPool, LLMService
from gpumix.cli import build_parser
from gpumix.manifests import load_objects
from gpumix.observe import promql
from gpumix.problem import PoolChoice
from gpumix.render.deployment import PORT_NAME, render_deployment
from gpumix.render.names import POOL_LABEL, ROUTER_LABEL, SERVICE_LABEL, Owner
from gpumix_e2e import KubeTarget

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpumix"
SAMPLES = ROOT / "manifests" / "samples"
URL = "http://prometheus-operated.monitoring.svc:9090"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def helm() -> str:
    return str(testcluster.build_binaries().helm)


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "template", "gpumix", str(CHART), "--namespace", "gpumix-system", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def template(helm: str, *sets: str, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    out = run_helm(helm, *(a for s in sets for a in ("--set", s)), *extra)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def sanitized(label: str) -> str:
    """A pod label as the Prometheus Operator names it on a PodMonitor's targets."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def rendered_pod_template() -> dict[str, Any]:
    """The pod template of the Deployment gpumix renders for the chat sample on its l4 pool."""
    (service,) = load_objects([SAMPLES / "chat.yaml"])
    pools = [o for o in load_objects([SAMPLES / "gpupools.yaml"]) if isinstance(o, GPUPool)]
    assert isinstance(service, LLMService)
    pool = next(p for p in pools if p.name == "l4")
    owner = Owner(
        name=service.name, namespace="serving", uid="00000000-0000-0000-0000-000000000001"
    )
    choice = PoolChoice(
        pool="l4", gpu_type="l4", gpus_per_replica=1, price_per_gpu_hour=0.7, profile="l4"
    )
    template: dict[str, Any] = render_deployment(owner, service.spec, pool, choice, 1)["spec"][
        "template"
    ]
    return template


def test_no_podmonitor_and_no_observe_flags_by_default(helm: str) -> None:
    docs = template(helm)
    assert not [d for d in docs if d["kind"] == "PodMonitor"]
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if "prometheus" in a or "observe" in a]


def test_podmonitor_selects_and_labels_the_rendered_vllm_pods(helm: str) -> None:
    docs = template(helm, "podMonitor.enabled=true", "podMonitor.labels.release=kps")
    monitor = one(docs, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "gpumix-system"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"any": True}

    pod = rendered_pod_template()
    labels = pod["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    assert selector and selector.items() <= labels.items(), (selector, labels)
    # The operator's own pod (chart labels) is not a vLLM pod.
    operator_pod = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= operator_pod.items()

    (endpoint,) = spec["podMetricsEndpoints"]
    ports = [p["name"] for c in pod["spec"]["containers"] for p in c["ports"]]
    assert endpoint["port"] == PORT_NAME and ports == [PORT_NAME]
    assert endpoint["path"] == pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert endpoint["interval"] == "15s"

    assert spec["podTargetLabels"] == [SERVICE_LABEL, POOL_LABEL, ROUTER_LABEL]
    assert sanitized(SERVICE_LABEL) == promql.SERVICE_LABEL
    assert sanitized(POOL_LABEL) == "gpumix_io_pool"
    assert sanitized(ROUTER_LABEL) == promql.ROUTER_LABEL  # the routers' joint histogram
    assert all(label in labels for label in spec["podTargetLabels"][:2])  # a vLLM pod's
    # `namespace` and `pod` come from the Prometheus Operator itself; nothing may rename them.
    assert promql.POD_LABEL == "pod"
    assert "relabelings" not in endpoint


def test_observe_values_reach_gpumix_run(helm: str) -> None:
    # --set makes 2.5 a string (the schema wants a number); --set-json keeps it a number.
    docs = template(
        helm,
        f"observe.prometheusUrl={URL}",
        "observe.window=120",
        extra=("--set-json", "observe.timeout=2.5"),
    )
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(["run", *container["args"]])
    assert args.prometheus_url == URL
    assert args.observe_window == 120
    assert args.prometheus_timeout == 2.5
    # Defaults: the window and timeout of values.yaml are passed with the URL.
    (container,) = one(template(helm, f"observe.prometheusUrl={URL}"), "Deployment")["spec"][
        "template"
    ]["spec"]["containers"]
    args = build_parser().parse_args(["run", *container["args"]])
    assert (args.prometheus_url, args.observe_window, args.prometheus_timeout) == (URL, 300, 5)


@pytest.mark.parametrize(
    "bad",
    [
        "podMonitor.enabled=yes",
        "podMonitor.interval=15",
        "podMonitor.scrapeTimeout=10s",
        "observe.window=0",
        "observe.prometheusUrl=prometheus:9090",
        "observe.url=http://p:9090",
    ],
)
def test_schema_rejects_wrong_observe_values(helm: str, bad: str) -> None:
    flag = "--set-string" if bad.endswith("=yes") else "--set"
    out = run_helm(helm, flag, bad)
    assert out.returncode != 0, bad
    assert "values don't meet the specifications of the schema" in out.stderr, out.stderr


def test_samples_dir_applies_without_the_scrape_config(kube: KubeTarget) -> None:
    assert (SAMPLES / "prometheus" / "scrape-config.yaml").exists()
    out = kube.kubectl("apply", "--dry-run=server", "-f", str(SAMPLES))
    assert "llmservice.gpumix.io/chat" in out.stdout, out.stdout
    assert "scrape" not in out.stdout + out.stderr
