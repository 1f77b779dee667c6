"""The operator end to end on the real control plane: `gpumix run` as a subprocess, KWOK GPU nodes.

Every test creates its LLMServices in a fresh namespace and deletes them (waiting for garbage
collection) so that GPUs are free again for the next test. The helpers are in operator_harness.py;
test_install_manifests.py runs these scenarios again under the service account of manifests/.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from operator_harness import GROUP, VERSION, Env, Operator, running_operator, wait

from gpumix.operator import listing
from gpumix.operator.handlers import WATCHES
from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def operator(kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(kube, tmp_path_factory.mktemp("operator")) as op:
        yield op


def test_service_gets_planned_deployments_running_on_their_pools(env: Env) -> None:
    times = []
    for name in ("chat", "chat2", "chat3"):
        start = time.monotonic()
        env.apply(env.service(name, 5.5))
        env.wait_condition(name, "Ready", "True", "Serving", timeout=120)
        planned = env.allocation(name)
        running = wait("pods Running", lambda n=name: env.pods_running_on_right_nodes(n))
        times.append(time.monotonic() - start)
        assert running == planned
        assert env.replicas(name) == planned
        status = env.get(name)["status"]
        assert status["costPerHour"] > 0
        assert status["savingsPercent"] >= 0  # never dearer than a single type at the same capacity
        assert {b["gpuType"] for b in status["baselines"]} == {"l4", "a10g", "a100-80gb", "h100"}
        assert status["observedGeneration"] == env.get(name)["metadata"]["generation"]
        assert status["replicasSummary"] == ",".join(f"{p}={n}" for p, n in sorted(planned.items()))
        configmap = env.core.read_namespaced_config_map(f"{name}-routing", env.ns)
        assert set(json.loads(configmap.data["routing.json"])["pools"]) == set(planned)
        printed = env.kube.kubectl("get", "llmservices", "-n", env.ns).stdout
        assert printed.split()[:6] == ["NAME", "READY", "REASON", "$/H", "SAVINGS%", "REPLICAS"]
        assert status["replicasSummary"] in printed
        env.delete_and_wait(name)
    print(f"\napply → all pods Running: median {statistics.median(times):.1f} s over {times}")


def test_rate_change_replans_make_before_break(env: Env) -> None:
    # No churn penalty: the 5.5 req/s plan (a100-80gb×1 + a10g×3) moves replicas between pools
    # from the 4 req/s one (a100-80gb×1 + l4×1). A target the plans meet keeps the attainment
    # loop to the KV-cache headroom: this is about the rollout.
    no_churn = {"churn": {"penalty": 0}, "slo": {"tpotMs": 120, "attainmentTarget": 0.5}}
    env.apply(env.service("chat", 4, **no_churn))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    before = env.allocation("chat")
    env.apply(env.service("chat", 5.5, **no_churn))
    seen: list[tuple[dict[str, int], dict[str, int]]] = []

    def settled() -> bool:
        deps = env.deployments("chat")
        seen.append(({p: d.spec.replicas for p, d in deps.items()},
                     {p: d.status.available_replicas or 0 for p, d in deps.items()}))  # fmt: skip
        c = env.condition("chat", "Ready")
        return bool(c and c["status"] == "True" and env.allocation("chat") != before)

    wait("the new plan to serve", settled, timeout=120, every=0.2)
    after = env.allocation("chat")
    growing = {p: n for p, n in after.items() if n > before.get(p, 0)}
    shrinking = {p for p, n in before.items() if after.get(p, 0) < n}
    assert growing, f"expected a pool to grow: {before} → {after}"
    assert shrinking, f"expected a pool to shrink: {before} → {after}"
    for replicas, available in seen:
        if any(replicas.get(p, 0) < before[p] for p in shrinking):
            assert all(available.get(p, 0) >= n for p, n in growing.items()), (
                f"a pool shrank before the growing pools were available: {replicas} {available}"
            )
    wait("the old pool's Deployment to go", lambda: env.replicas("chat") == after)
    reasons = [(e.reason, e.message) for e in env.events("chat")]
    assert any(r == "PlanChanged" and "rate 4→5.5 req/s" in m for r, m in reasons), reasons


def test_unservable_slo_keeps_running_deployments(env: Env) -> None:
    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    versions = {p: d.metadata.resource_version for p, d in env.deployments("chat").items()}
    body = env.service("chat", 5.5)
    body["spec"]["slo"]["tpotMs"] = 41
    body["spec"]["workload"]["inputEdges"][-1] = 4000
    env.apply(body)
    cond = env.wait_condition("chat", "Ready", "False", "Unservable")
    assert "input 2048–4000" in cond["message"]
    assert "TPOT 41 ms" in cond["message"]
    degraded = env.condition("chat", "Degraded")
    assert degraded is not None
    assert degraded["status"] == "True"
    time.sleep(6)  # at least one more planner pass
    assert {p: d.metadata.resource_version for p, d in env.deployments("chat").items()} == versions


def test_services_that_do_not_fit_together_are_partially_served(env: Env) -> None:
    env.apply(env.service("first", 2, pools=["a10g"]))  # three of the four A10G GPUs
    env.wait_condition("first", "Ready", "True", "Serving", timeout=120)
    env.apply(env.service("second", 1, pools=["a10g"]))  # needs two, one is left

    # The joint plan serves as much as fits and says who is short, by how much and why.
    def short() -> dict[str, Any] | None:
        for name in ("first", "second"):
            c = env.condition(name, "Ready")
            if c and c["reason"] == "InsufficientCapacity":
                return c
        return None

    cond = wait("a service reporting InsufficientCapacity", short)
    assert "req/s unserved" in cond["message"]
    assert "pool a10g is full (4/4 GPUs planned)" in cond["message"]
    time.sleep(6)
    assert sum(env.replicas("first").values()) + sum(env.replicas("second").values()) <= 4


def test_joint_plan_serves_two_services_contending_for_a100(env: Env) -> None:
    """Coral §2.2: alone, `first` would take 5 A100s (its cheapest mix) and leave `second`, which
    may only use A100s and needs 20 of the 24, short; the joint plan moves `first` partly to
    A10G/L4 so that both are served in full."""
    env.apply(env.service("first", 20, pools=["a100-80gb", "a10g", "l4"]))
    env.apply(env.service("second", 80, pools=["a100-80gb"]))
    for name in ("first", "second"):
        env.wait_condition(name, "Ready", "True", "Serving", timeout=180)
        assert (env.get(name)["status"].get("unservedFraction") or 0) == 0
    assert env.allocation("second") == {"a100-80gb": 20}
    assert env.allocation("first").get("a100-80gb", 0) <= 4
    shares = {s["pool"]: s["gpus"] for s in env.get("second")["status"]["poolShares"]}
    assert shares == {"a100-80gb": 20}


def test_predicted_attainment_below_the_target_puts_the_slo_at_risk(env: Env) -> None:
    """On L4s alone, 1 req/s is planned as l4×3 loaded up to MaxTput: 86.5% of the requests are
    predicted to meet the SLO, below the 99% target. On A100s alone (a100-80gb×2) all do.
    Single-type plans: a mix's share of a bucket may move between equally cheap splits."""
    env.apply(env.service("on-l4", 1, pools=["l4"]))
    env.apply(env.service("on-a100", 5.5, pools=["a100-80gb"]))
    cond = env.wait_condition("on-l4", "SLOAtRisk", "True", "BelowTarget", timeout=120)
    status = env.get("on-l4")["status"]
    assert 0.5 < status["predictedAttainment"] < 0.99
    assert [a["predictedAttainment"] for a in status["allocation"]] == [
        status["predictedAttainment"]
    ]
    assert "is below the target 99%: l4: " in cond["message"]
    wait("a SLOAtRisk event", lambda: any(
        e.reason == "SLOAtRisk" and e.type == "Warning" for e in env.events("on-l4")))  # fmt: skip
    env.wait_condition("on-a100", "SLOAtRisk", "False", "OnTarget")
    assert env.get("on-a100")["status"]["predictedAttainment"] >= 0.99
    printed = env.kube.kubectl("get", "llmservices", "on-l4", "-n", env.ns).stdout.splitlines()
    assert "PREDICTED" in printed[0].split()
    assert str(status["predictedAttainment"]) in printed[1].split()


def test_deleting_the_service_collects_everything(env: Env) -> None:
    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", timeout=120)
    env.delete_and_wait("chat")
    wait("Deployments to be collected", lambda: env.deployments("chat") == {})
    services = env.core.list_namespaced_service(env.ns).items
    configmaps = env.core.list_namespaced_config_map(
        env.ns, label_selector="gpumix.io/service=chat"
    )
    assert [s.metadata.name for s in services] == []
    assert configmaps.items == []


def test_router_fronts_the_service_until_routing_mode_service(env: Env) -> None:
    """The objects only: KWOK runs no container, so no request goes through a router here."""
    router, engines = {"gpumix.io/router": "chat"}, {"gpumix.io/service": "chat"}
    policy = client.PolicyV1Api(env.kube.api_client)
    rbac = client.RbacAuthorizationV1Api(env.kube.api_client)

    def router_objects() -> dict[str, Any]:
        selector = "gpumix.io/router=chat"
        return {
            "deployments": env.apps.list_namespaced_deployment(env.ns, label_selector=selector),
            "pdbs": policy.list_namespaced_pod_disruption_budget(env.ns, label_selector=selector),
            "accounts": env.core.list_namespaced_service_account(env.ns, label_selector=selector),
            "roles": rbac.list_namespaced_role(env.ns, label_selector=selector),
            "bindings": rbac.list_namespaced_role_binding(env.ns, label_selector=selector),
        }

    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    deployment = env.apps.read_namespaced_deployment("chat--router", env.ns)
    assert deployment.spec.replicas == 2
    assert deployment.spec.selector.match_labels == router
    assert "gpumix.io/service" not in deployment.spec.template.metadata.labels
    pdb = policy.read_namespaced_pod_disruption_budget("chat--router", env.ns)
    assert pdb.spec.selector.match_labels == router
    assert env.core.read_namespaced_service("chat", env.ns).spec.selector == router
    headless = env.core.read_namespaced_service("chat--engines", env.ns)
    assert (headless.spec.cluster_ip, headless.spec.selector) == ("None", engines)
    assert all(len(found.items) == 1 for found in router_objects().values())
    assert set(env.deployments("chat")) == set(env.allocation("chat"))  # no router among them

    env.apply(env.service("chat", 5.5, routing={"mode": "Service"}))
    wait("the router to go", lambda: not any(f.items for f in router_objects().values()))
    assert env.core.read_namespaced_service("chat", env.ns).spec.selector == engines
    assert env.core.read_namespaced_service("chat--engines", env.ns).spec.selector == engines
    env.delete_and_wait("chat")


def test_prometheus_source_without_prometheus_plans_the_spec(env: Env) -> None:
    """This operator runs without --prometheus-url: the spec's numbers, and the status says why
    (test_operator_observe.py has the operator with Prometheus)."""
    body = env.service("chat", 5.5)
    body["spec"]["workload"]["source"] = "Prometheus"
    env.apply(body)
    cond = env.wait_condition("chat", "WorkloadObserved", "False", "PrometheusNotConfigured")
    assert "gpumix run --prometheus-url URL" in cond["message"]
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    assert sum(env.allocation("chat").values()) >= 1
    workload = env.get("chat")["status"]["workload"]
    assert (workload["source"], workload["origin"], workload["requestRate"]) == (
        "Prometheus", "spec", 5.5,
    )  # fmt: skip


def test_operator_restart_changes_nothing(env: Env, operator: Operator) -> None:
    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    time.sleep(6)

    def versions() -> dict[str, str]:
        out = {
            f"deploy/{p}": d.metadata.resource_version for p, d in env.deployments("chat").items()
        }
        out["llmservice"] = env.get("chat")["metadata"]["resourceVersion"]
        out["configmap"] = env.core.read_namespaced_config_map(
            "chat-routing", env.ns
        ).metadata.resource_version
        return out  # fmt: skip

    before = versions()
    operator.stop()
    operator.start()
    time.sleep(15)  # startup, the initial listing and at least two passes
    assert operator.alive()
    assert versions() == before


def test_the_first_pass_counts_what_the_apiserver_holds(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpumix.operator.listing`, which the first pass waits for, against the real apiserver:
    each watched kind as many as kubectl lists; the label-selected Deployments page by page."""
    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    monkeypatch.setattr(listing, "PAGE", 1)

    def kubectl_count(group: str, plural: str, labels: dict[str, str] | None) -> int:
        selector = ["-l", ",".join(f"{k}={v}" for k, v in labels.items())] if labels else []
        resource = f"{plural}.{group}" if group else plural
        return len(env.kube.kubectl("get", resource, "-A", "-o", "name", *selector).stdout.split())

    for _ in range(5):  # other tests' namespaces may still be going away: a quiet moment
        before = {k: kubectl_count(g, p, sel) for k, (g, _, p, sel) in WATCHES.items()}
        counts = listing.listed_counts(env.kube.api_client)
        after = {k: kubectl_count(g, p, sel) for k, (g, _, p, sel) in WATCHES.items()}
        if before == after:
            break
    assert before == after == counts
    assert counts["deployments"] > listing.PAGE  # more than one page
    assert counts["nodes"] >= 10 and counts["pools"] >= 3


def test_hpa_on_a_deployment_is_left_alone(env: Env) -> None:
    env.apply(env.service("chat", 5.5))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    pool = sorted(env.allocation("chat"))[0]
    name = f"chat-{pool}"
    env.kube.kubectl("autoscale", "deployment", name, "-n", env.ns, "--min=1", "--max=4")
    cond = env.wait_condition("chat", "ConflictingAutoscaler", "True")
    assert f"HorizontalPodAutoscaler {name}" in cond["message"]
    env.kube.kubectl("scale", "deployment", name, "-n", env.ns, "--replicas=3")
    env.apply(env.service("chat", 6))  # a replan must not reset the autoscaler's replicas
    time.sleep(8)
    assert env.replicas("chat")[pool] == 3


def test_pools_follow_nodes(kube: KubeTarget, operator: Operator) -> None:
    if kube.cluster is None:
        pytest.skip("adding KWOK nodes needs the local hack/ cluster")  # --kube-context run
    custom = client.CustomObjectsApi(kube.api_client)

    def nodes() -> int:
        pool = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", "h100")
        return int((pool.get("status") or {}).get("nodes", -1))

    start = wait("h100 pool status", lambda: nodes() if nodes() > 0 else None)
    added = kube.cluster.add_gpu_nodes("h100", 1)
    wait("a third h100 node in the pool status", lambda: nodes() == start + 1)
    pool = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", "h100")
    assert pool["status"]["allocatableGPUs"] == 8 * (start + 1)
    kube.cluster.delete_gpu_nodes(added)
    wait("the node gone from the pool status", lambda: nodes() == start)


def test_plans_follow_nodes(kube: KubeTarget, env: Env) -> None:
    if kube.cluster is None:
        pytest.skip("adding KWOK nodes needs the local hack/ cluster")  # --kube-context run
    env.apply(env.service("chat", 2, pools=["l4"]))  # six L4 replicas; the pool has four GPUs
    cond = env.wait_condition("chat", "Ready", "False", "InsufficientCapacity")
    assert "pool l4 is full (4/4 GPUs planned)" in cond["message"]
    assert 0 < env.get("chat")["status"]["unservedFraction"] < 1
    added = kube.cluster.add_gpu_nodes("l4", 2)
    try:
        env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
        assert env.allocation("chat") == {"l4": 6}
        running = wait(
            "six pods Running on L4 nodes", lambda: env.pods_running_on_right_nodes("chat")
        )
        assert running == {"l4": 6}
    finally:
        env.delete_and_wait("chat")
        kube.cluster.delete_gpu_nodes(added)


def test_gpu_drop_replans_onto_remaining_pools(kube: KubeTarget, env: Env) -> None:
    """Jiang App. M's "GPU drop": the A100 nodes go away and the plan moves to the H100 pool."""
    if kube.cluster is None:
        pytest.skip("deleting KWOK nodes needs the local hack/ cluster")
    env.apply(env.service("chat", 5.5, pools=["a100-80gb", "h100"]))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    assert env.allocation("chat") == {"a100-80gb": 2}  # 7.34 $/h beats h100×1 at 7.52 $/h
    dropped = kube.cluster.node_names("a100-80gb")
    kube.cluster.delete_gpu_nodes(dropped)
    try:
        wait("a plan on h100", lambda: env.allocation("chat") == {"h100": 1}, timeout=120)
        env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
        running = wait("the pod on an H100 node", lambda: env.pods_running_on_right_nodes("chat"))
        assert running == {"h100": 1}
    finally:
        env.delete_and_wait("chat")
        kube.cluster.add_gpu_nodes("a100-80gb", len(dropped))
