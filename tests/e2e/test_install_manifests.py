"""`kubectl apply -k manifests/default` on the real control plane, and the operator under exactly
the RBAC rules it installs.

The Deployment's pod is scheduled (onto the CPU-only node: every GPU node is tainted) and
admitted by Pod Security `restricted`; KWOK makes it Running, but no container really runs
here. So the operator also runs locally, as `gpumix run` with a token of the installed service
account, through the scenarios of test_operator.py (imported below, so they run here again
with this module's `operator` fixture), and no request of it may be refused.

The CRDs are shared with the session (and stay); everything else is deleted afterwards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_kvsched_operator as kv_scenarios
import test_operator as operator_scenarios
import yaml
from operator_harness import Env, Operator, log_text, running_operator
from test_install_argocd import health

from gpumix.install import LEASE_NAME, NAME, NAMESPACE, RULES
from gpumix_e2e import KubeTarget

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "manifests" / "default"
SA_CONTEXT = "gpumix-sa"

pytestmark = pytest.mark.e2e

# The scenarios of test_operator.py that exercise every rule of the ClusterRole (watches, status
# patches, server-side apply creating and updating, deletes, events, HPAs, nodes), collected
# again in this module, where `env` and `operator` resolve to the service-account operator.
# A scenario renamed there fails this module's collection: update the list.
SCENARIOS = (
    "test_rate_change_replans_make_before_break",
    "test_unservable_slo_keeps_running_deployments",
    "test_deleting_the_service_collects_everything",
    "test_hpa_on_a_deployment_is_left_alone",
    "test_pools_follow_nodes",
)
for _name in SCENARIOS:
    globals()[_name] = getattr(operator_scenarios, _name)
# The KV-migration loop patches pods (pod-deletion-cost) and reads their admin endpoints.
sim_pods = kv_scenarios.sim_pods
test_kv_scheduler_empties_the_newest_pod_and_removes_exactly_it = (
    kv_scenarios.test_kv_scheduler_empties_the_newest_pod_and_removes_exactly_it
)


def built_manifests(kube: KubeTarget) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(kube.kubectl("kustomize", str(DEFAULT)).stdout) if d]


@pytest.fixture(scope="module")
def installed(kube: KubeTarget) -> Iterator[float]:
    """Seconds from `kubectl apply -k` to the rolled-out Deployment."""
    start = time.monotonic()
    kube.kubectl("apply", "-k", str(DEFAULT))
    try:
        kube.kubectl("rollout", "status", f"deployment/{NAME}", "-n", NAMESPACE, "--timeout=120s")
        yield time.monotonic() - start
    finally:
        rest = [d for d in built_manifests(kube) if d["kind"] != "CustomResourceDefinition"]
        kube.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                     input=yaml.safe_dump_all(rest))  # fmt: skip


def service_account_kubeconfig(kube: KubeTarget, path: Path) -> Path:
    """A kubeconfig for the same server with a token of the installed service account."""
    token = kube.kubectl("create", "token", NAME, "-n", NAMESPACE, "--duration=1h").stdout.strip()
    view = json.loads(kube.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": view["clusters"][0]["cluster"]}],
        "users": [{"name": f"{NAMESPACE}:{NAME}", "user": {"token": token}}],
        "contexts": [
            {"name": SA_CONTEXT, "context": {"cluster": "target", "user": f"{NAMESPACE}:{NAME}"}}
        ],
        "current-context": SA_CONTEXT,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def operator(
    kube: KubeTarget, installed: float, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    log_dir = tmp_path_factory.mktemp("operator-sa")
    kubeconfig = service_account_kubeconfig(kube, log_dir / "kubeconfig")
    # The Lease where the installed Role grants it (in-cluster: $POD_NAMESPACE).
    lease = ["--leader-elect-resource-namespace", NAMESPACE]
    with running_operator(
        kube, log_dir, kubeconfig=kubeconfig, context=SA_CONTEXT, extra_args=lease
    ) as op:
        yield op


def test_apply_k_runs_the_operator_pod_on_the_cpu_node(kube: KubeTarget, installed: float) -> None:
    print(f"\nkubectl apply -k manifests/default → Deployment rolled out: {installed:.1f} s")
    pods = json.loads(
        kube.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={NAME}",
                     "-o", "json").stdout
    )["items"]  # fmt: skip
    assert len(pods) == 2  # leader-elected replicas
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"].startswith("cpu-"), pod["spec"]["nodeName"]
        assert pod["spec"]["serviceAccountName"] == NAME
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # Admitted under the namespace's Pod Security `restricted` enforcement.
    ns = json.loads(kube.kubectl("get", "namespace", NAMESPACE, "-o", "json").stdout)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_installed_role_is_the_generated_one(kube: KubeTarget, installed: float) -> None:
    role = json.loads(kube.kubectl("get", "clusterrole", NAME, "-o", "json").stdout)
    assert role["rules"] == [r.policy_rule() for r in RULES]
    sa = f"system:serviceaccount:{NAMESPACE}:{NAME}"
    can = kube.kubectl("auth", "can-i", "--list", f"--as={sa}").stdout
    assert "secrets" not in can
    for verb, resource in [("get", "secrets"), ("update", "llmservices.gpumix.io"),
                           ("delete", "nodes"), ("patch", "nodes")]:  # fmt: skip
        out = kube.kubectl("auth", "can-i", verb, resource, f"--as={sa}", check=False)
        assert out.stdout.strip() == "no", (verb, resource)
    # The Lease of leader election: its own, in its own namespace, and no other.
    for verb, resource, ns, allowed in [
        ("update", f"leases/{LEASE_NAME}", NAMESPACE, "yes"),
        ("create", "leases", NAMESPACE, "yes"),
        ("update", "leases/other", NAMESPACE, "no"),
        ("update", f"leases/{LEASE_NAME}", "kube-node-lease", "no"),
    ]:
        out = kube.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as={sa}", check=False)
        assert out.stdout.strip() == allowed, (verb, resource, ns)


def test_argocd_health_of_a_live_service_is_healthy(env: Env) -> None:
    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    assert health(env.get("chat"))["status"] == "Healthy"


def test_the_service_account_was_never_refused(operator: Operator) -> None:
    """Last in this module: after every scenario, not one request of the operator failed."""
    logs = log_text(operator)
    assert logs.strip(), "no operator log"
    refused = [line for line in logs.splitlines() if "forbidden" in line.lower()]
    assert refused == [], "\n".join(refused[:5])
    assert operator.alive()
