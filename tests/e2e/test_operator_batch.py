"""A batch LLMService on the real control plane (SageServe §3.3, §6.2–6.3): served from an
interactive service's spare capacity, own replicas only for what that cannot finish in time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import Env, Operator, running_operator, wait

from gpumix_e2e import KubeTarget

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def operator(kube: KubeTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(kube, tmp_path_factory.mktemp("operator")) as op:
        yield op


def batch_status(env: Env, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (env.get(name).get("status") or {}).get("batch") or {}
    return status


def test_batch_service_uses_spare_capacity_then_its_own(env: Env) -> None:
    # Two A100 replicas carry 4.2 req/s at 52% planned utilisation: ≈ 0.7 req/s below 60%.
    env.apply(env.service("chat", 4.2, pools=["a100-80gb"]))
    env.wait_condition("chat", "Ready", "True", "Serving", timeout=120)
    nightly = env.service(
        "nightly", 0.2, priority="Batch", batch={"servedBy": "chat", "backlogRequests": 30000}
    )
    env.apply(nightly)
    env.wait_condition("nightly", "DeadlineOnTrack", "True", "WithinDeadline")
    env.wait_condition("nightly", "Ready", "True", "Serving")
    batch = batch_status(env, "nightly")
    assert batch["spareRate"] > 0.6 and batch["reservedRate"] == 0
    assert (batch["backlogRequests"], batch["servedBy"]) == (30000, "chat")
    assert env.allocation("nightly") == {}
    printed = env.kube.kubectl("get", "llms", "-n", env.ns, "-o", "wide").stdout.splitlines()
    assert "BACKLOG" in printed[0].split()
    assert "30000" in next(line for line in printed if line.startswith("nightly")).split()

    nightly["spec"]["batch"]["backlogRequests"] = 200000  # more than the spare drains in 24 h
    env.apply(nightly)
    wait("nightly's own replicas", lambda: env.allocation("nightly"))
    assert batch_status(env, "nightly")["reservedRate"] > 1.5
    env.wait_condition("nightly", "DeadlineOnTrack", "True", "WithinDeadline")

    nightly["spec"]["batch"]["servedBy"] = "chatt"
    env.apply(nightly)
    cond = env.wait_condition("nightly", "DeadlineOnTrack", "False", "ServedByNotFound")
    assert "spec.batch.servedBy names 'chatt'" in cond["message"]
    wait("a ServedByNotFound event", lambda: [
        e for e in env.events("nightly") if e.reason == "ServedByNotFound" and e.type == "Warning"
    ])  # fmt: skip
    assert batch_status(env, "nightly")["spareRate"] == 0
