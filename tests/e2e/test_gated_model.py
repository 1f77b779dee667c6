"""README "Serving a gated model" on the local cluster: the sample applies, the operator creates
the model cache before the pods that read it, and the pods carry the token, cache and engine
arguments. KWOK runs no container: the download Job's pod is marked Succeeded and the vLLM pods'
init containers done, so what is measured is objects, their order and their readiness."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from operator_harness import SAMPLES, Env, Operator, log_text, running_operator, wait

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e

RECIPE = SAMPLES / "gated-model"


@pytest.fixture(scope="module")
def operator(kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(kube, tmp_path_factory.mktemp("operator")) as op:
        yield op


def _volume_for(env: Env, claim: str, path: Path) -> None:
    """A PersistentVolume for the claim: the local cluster has no storage provisioner."""
    env.kube.apply({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{env.ns}-model-cache"},
        "spec": {
            "capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteMany"],
            "hostPath": {"path": str(path)},
            "claimRef": {"namespace": env.ns, "name": claim},
        },
    })  # fmt: skip


def test_the_gated_model_recipe(env: Env, tmp_path: Path) -> None:
    _volume_for(env, "llama--model-cache", tmp_path)
    env.kube.kubectl("apply", "-n", env.ns, "-f", str(RECIPE))
    batch = client.BatchV1Api(env.kube.api_client)

    def cache_done() -> str | None:
        jobs = batch.list_namespaced_job(env.ns).items
        done = [j for j in jobs if any(c.type == "Complete" and c.status == "True"
                                       for c in j.status.conditions or [])]  # fmt: skip
        return done[0].metadata.name if done else None

    job_name = wait("the model-cache Job to complete", cache_done, timeout=120)
    claim = env.core.read_namespaced_persistent_volume_claim("llama--model-cache", env.ns)
    assert claim.status.phase == "Bound"
    running = wait("the vLLM pods Running", lambda: env.pods_running_on_right_nodes("llama"), 120)
    assert sum(running.values()) >= 1
    job = batch.read_namespaced_job(job_name, env.ns)
    deployments = env.deployments("llama")
    # The operator applies the claim and the Job before the Deployments (one pass, in order).
    first = min(d.metadata.creation_timestamp for d in deployments.values())
    assert claim.metadata.creation_timestamp <= job.metadata.creation_timestamp <= first
    download = job.spec.template.spec.containers[0]
    assert any(e.name == "HF_TOKEN" and e.value_from.secret_key_ref.name == "hf-token"
               for e in download.env)  # fmt: skip

    pod = env.core.list_namespaced_pod(env.ns, label_selector="gpumix.io/service=llama").items[0]
    (vllm,) = pod.spec.containers
    env_vars = {e.name: e for e in vllm.env}
    assert env_vars["HF_TOKEN"].value_from.secret_key_ref.key == "HF_TOKEN"
    assert env_vars["HF_HOME"].value == "/model-cache"
    assert env_vars["HF_HUB_OFFLINE"].value == "1"
    assert vllm.resources.requests["cpu"] == "4" and vllm.resources.requests["memory"] == "24Gi"
    assert vllm.resources.limits["nvidia.com/gpu"] == "1"
    assert pod.metadata.labels["team"] == "research"
    args = vllm.args
    assert args[args.index("--max-model-len") + 1] == "4073"  # 3072 + 1001 < Llama 2's 4096
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.9"
    (wait_init,) = pod.spec.init_containers
    assert wait_init.name == "wait-for-model-cache"
    assert pod.status.init_container_statuses[0].state.terminated.exit_code == 0
    mount = next(m for m in vllm.volume_mounts if m.name == "model-cache")
    assert mount.read_only and mount.mount_path == "/model-cache"

    planned = env.wait_condition("llama", "PodsMatchPlan", "True", "AsPlanned")
    assert planned["message"] == ""


def test_the_token_stays_in_its_secret(env: Env, operator: Operator, tmp_path: Path) -> None:
    """The token reaches the pods only by reference: not in any object the operator writes,
    its status or events, nor its logs (it holds no RBAC on Secrets to read it with)."""
    token = "hf_e2e_" + env.ns.replace("-", "_") + "_do_not_log"
    docs = [d for d in yaml.safe_load_all((RECIPE / "llama.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "Secret":
            d["stringData"] = {"HF_TOKEN": token}
    _volume_for(env, "llama--model-cache", tmp_path)
    env.kube.kubectl("apply", "-n", env.ns, "-f", "-", input=yaml.safe_dump_all(docs))
    env.wait_condition("llama", "Planned", "True")
    wait("the vLLM Deployments", lambda: env.deployments("llama") or None)
    jobs = client.BatchV1Api(env.kube.api_client).list_namespaced_job(env.ns).items
    objects = [*env.deployments("llama").values(), *env.events("llama"), *jobs]
    written = [env.get("llama"), *map(env.kube.api_client.sanitize_for_serialization, objects)]
    assert len(jobs) == 1 and "HF_TOKEN" in json.dumps(written)  # referenced by name only
    assert token not in json.dumps(written)
    assert token not in log_text(operator)
