"""manifests/samples/prometheus/scrape-config.yaml labels the pods gpumix renders as
gpumix.observe queries them, and the chart's `observe` defaults are `gpumix run`'s.

Debian's Prometheus is built without Kubernetes service discovery (`promtool check config`
rejects `kubernetes_sd_configs`), so no Prometheus here can discover a pod. Instead the sample's
`relabel_configs` are applied, with Prometheus's target-relabelling rules, to the meta labels its
`role: pod` discovery gives each container port of a pod rendered by gpumix.render.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpumix.api import GPUPool, LLMService
from gpumix.cli import build_parser
from gpumix.manifests import load_objects
from gpumix.observe import promql
from gpumix.problem import PoolChoice
from gpumix.render.deployment import PORT, PORT_NAME, render_deployment
from gpumix.render.names import POOL_LABEL, SERVICE_LABEL, Owner

from .conftest import EXAMPLES, ROOT

SAMPLE = EXAMPLES / "prometheus" / "scrape-config.yaml"
OBSERVE_README = ROOT / "operator" / "gpumix" / "observe" / "README.md"
CHART_VALUES = ROOT / "charts" / "gpumix" / "values.yaml"

Labels = dict[str, str]


# --------------------------------------------------------------------------- Prometheus's rules


def sanitize(name: str) -> str:
    """Kubernetes label name -> Prometheus meta label suffix (strutil.SanitizeLabelName)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _expand(match: re.Match[str], template: str) -> str:
    """Go's Regexp.Expand for `$1`, `${1}`, `$name`, `${name}` (a missing group expands to "")."""

    def group(m: re.Match[str]) -> str:
        ref = m.group(1) or m.group(2)
        try:
            value = match.group(int(ref) if ref.isdigit() else ref)
        except IndexError:  # no such group
            return ""
        return value or ""

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", group, template)


def relabel(labels: Labels, rules: list[dict[str, Any]]) -> Labels | None:
    """Prometheus's relabel_config semantics for the actions the sample uses: the source labels'
    values joined by `separator`, matched against the fully anchored `regex`; None = dropped."""
    out = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace").lower()
        regex = re.compile(f"(?s:{rule.get('regex', '(.*)')})")
        value = rule.get("separator", ";").join(
            out.get(n, "") for n in rule.get("source_labels", [])
        )
        replacement = str(rule.get("replacement", "$1"))
        if action == "keep":
            if not regex.fullmatch(value):
                return None
        elif action == "drop":
            if regex.fullmatch(value):
                return None
        elif action == "labelmap":
            for name, v in list(out.items()):
                if m := regex.fullmatch(name):
                    out[_expand(m, replacement)] = v
        elif action == "replace":
            if m := regex.fullmatch(value):
                target, result = _expand(m, rule["target_label"]), _expand(m, replacement)
                if result:
                    out[target] = result
                else:
                    out.pop(target, None)
        else:
            raise AssertionError(f"relabel action {action!r} is not modelled by this test")
    return out


def target_labels(job: dict[str, Any], discovered: Labels) -> Labels | None:
    """The labels of a scraped series' target: job and instance defaults, relabelling, then every
    `__`-prefixed label removed."""
    labels = relabel({"job": job["job_name"], **discovered}, job.get("relabel_configs", []))
    if labels is None:
        return None
    labels.setdefault("instance", labels["__address__"])
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def discovered(
    pod: dict[str, Any], *, ip: str = "10.1.0.7", phase: str = "Running"
) -> list[Labels]:
    """What kubernetes_sd `role: pod` discovers: one target per declared container port."""
    meta = pod["metadata"]
    common: Labels = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_ready": "true",
    }
    for kind, items in (
        ("label", meta.get("labels", {})),
        ("annotation", meta.get("annotations", {})),
    ):
        for key, value in items.items():
            common[f"__meta_kubernetes_pod_{kind}_{sanitize(key)}"] = value
            common[f"__meta_kubernetes_pod_{kind}present_{sanitize(key)}"] = "true"
    return [
        {
            **common,
            "__address__": f"{ip}:{port['containerPort']}",
            "__meta_kubernetes_pod_container_name": container["name"],
            "__meta_kubernetes_pod_container_init": "false",
            "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
            "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
            "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
        }
        for container in pod["spec"]["containers"]
        for port in container.get("ports", [])
    ]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def job() -> dict[str, Any]:
    (scrape,) = yaml.safe_load(SAMPLE.read_text())["scrape_configs"]
    assert isinstance(scrape, dict)
    return scrape


def rendered_pod(service: LLMService, pool: str, namespace: str = "serving") -> dict[str, Any]:
    """A pod of the Deployment gpumix renders for `service` on the sample GPUPool `pool`."""
    (gpu_pool,) = [
        p
        for p in load_objects([EXAMPLES / "gpupools.yaml"])
        if isinstance(p, GPUPool) and p.name == pool
    ]
    owner = Owner(
        name=service.name, namespace=namespace, uid="00000000-0000-4000-8000-000000000001"
    )
    choice = PoolChoice(pool=pool, gpu_type=gpu_pool.spec.gpu_type, gpus_per_replica=1,
                        price_per_gpu_hour=1.0, profile=pool)  # fmt: skip
    deployment = render_deployment(owner, service.spec, gpu_pool, choice, 1)
    template = deployment["spec"]["template"]
    name = f"{deployment['metadata']['name']}-5d8f9c7b6-x2k4q"
    return {
        "metadata": {**template["metadata"], "name": name, "namespace": namespace},
        "spec": template["spec"],
    }


# --------------------------------------------------------------------------- tests


def test_sample_is_one_pod_discovery_job(job: dict[str, Any]) -> None:
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    assert job["metrics_path"] == "/metrics"


def test_rendered_pod_gets_the_labels_the_operator_queries_by(
    job: dict[str, Any], chat: LLMService
) -> None:
    pod = rendered_pod(chat, "a10g")
    targets = [t for t in (target_labels(job, d) for d in discovered(pod)) if t is not None]
    (labels,) = targets
    assert labels[promql.SERVICE_LABEL] == pod["metadata"]["labels"][SERVICE_LABEL] == "chat"
    assert labels[sanitize(POOL_LABEL)] == "a10g"
    assert labels["namespace"] == "serving"
    assert labels[promql.POD_LABEL] == pod["metadata"]["name"]
    assert labels["instance"] == f"10.1.0.7:{PORT}"
    # Every matcher of the operator's queries for this service holds on the target's labels.
    selector = promql.ServiceSelector(namespace="serving", service="chat")
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', selector.matchers()))
    assert wanted == {"namespace": "serving", promql.SERVICE_LABEL: "chat"}
    assert wanted.items() <= labels.items()


def test_only_gpumix_vllm_ports_of_live_pods_are_scraped(
    job: dict[str, Any], chat: LLMService
) -> None:
    pod = rendered_pod(chat, "l4")
    (port,) = pod["spec"]["containers"][0]["ports"]
    assert port["name"] == PORT_NAME
    # A second port on the same pod (e.g. a sidecar's) is not vLLM's.
    sidecar = {"name": "proxy", "ports": [{"containerPort": 9901, "name": "admin"}]}
    two_ports = {
        **pod,
        "spec": {**pod["spec"], "containers": [*pod["spec"]["containers"], sidecar]},
    }
    kept = [t for t in (target_labels(job, d) for d in discovered(two_ports)) if t]
    assert [t["instance"] for t in kept] == [f"10.1.0.7:{PORT}"]
    # Not gpumix's pod: same labels but managed by someone else.
    other_labels = {**pod["metadata"]["labels"], "app.kubernetes.io/managed-by": "Helm"}
    other = {**pod, "metadata": {**pod["metadata"], "labels": other_labels}}
    assert [target_labels(job, d) for d in discovered(other)] == [None]
    # A finished pod has no server.
    assert [target_labels(job, d) for d in discovered(pod, phase="Succeeded")] == [None]


def test_observe_readme_points_at_the_sample() -> None:
    text = OBSERVE_README.read_text()
    section = text.split("## Scrape configuration we expect", 1)[1].split("\n## ", 1)[0]
    assert "manifests/samples/prometheus/scrape-config.yaml" in section
    assert "kubernetes_sd_configs" not in section, "one copy: the sample file"


def test_chart_observe_defaults_are_gpumix_runs() -> None:
    observe = yaml.safe_load(CHART_VALUES.read_text())["observe"]
    defaults = build_parser().parse_args(["run"])
    assert observe["prometheusUrl"] == "" and defaults.prometheus_url is None
    assert observe["window"] == defaults.observe_window
    assert observe["timeout"] == defaults.prometheus_timeout


def test_sample_dir_has_only_kubernetes_objects_at_top_level() -> None:
    """`kubectl apply -f manifests/samples/` (README, hack/demo) reads every top-level YAML file
    (not subdirectories): each document there must be a Kubernetes object."""
    for path in sorted(Path(EXAMPLES).glob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                assert {"apiVersion", "kind"} <= doc.keys(), path
