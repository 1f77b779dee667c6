"""Fixtures of the operator scenarios (tests/e2e/operator_harness.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from operator_harness import GROUP, VERSION, Env, Operator, free_port

from gpumix_e2e import KubeTarget


@pytest.fixture
def env(kube: KubeTarget, operator: Operator) -> Iterator[Env]:
    ns = f"e2e-op-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", ns)
    e = Env(kube, ns)
    try:
        yield e
    finally:
        for item in e.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "llmservices")[
            "items"
        ]:
            e.delete_and_wait(item["metadata"]["name"])
        kube.kubectl("delete", "namespace", ns, "--wait=false")
    assert operator.alive(), "the operator exited"


@pytest.fixture(scope="module")
def prometheus_port() -> int:
    """A port for a module's Prometheus, known before the operator that reads it starts."""
    return free_port()
