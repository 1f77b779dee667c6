"""Shared fixtures for the pure unit tests: the shipped example, loaded once."""

from pathlib import Path

import pytest

from gpumix.api import GPUProfile, LLMService
from gpumix.manifests import load_objects
from gpumix.reconcile import cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "samples"


@pytest.fixture(autouse=True)
def _planner_starts_fresh() -> None:
    """Each test's first pass prepares every service, as a new operator's does: a test that
    patches what preparing calls sees its patch (`cluster._PreparedLastPass`)."""
    cluster._PREPARED.clear()


@pytest.fixture(scope="session")
def chat() -> LLMService:
    (service,) = load_objects([EXAMPLES / "chat.yaml"])
    assert isinstance(service, LLMService)
    return service


@pytest.fixture(scope="session")
def llama_profiles() -> list[GPUProfile]:
    objs = load_objects([EXAMPLES / "profiles-llama-2-7b.yaml"])
    assert all(isinstance(o, GPUProfile) for o in objs)
    return [o for o in objs if isinstance(o, GPUProfile)]


MELANGE_CONFIG = {
    "gpu_info": {"A10G": {"cost": 1.01, "tputs": [[5, 1], [10, 5]]},
                 "A100": {"cost": 3.67, "tputs": [[20, 2], [50, 20]]}},
    "workload_distribution": [[0.25, 0.5], [0.25, 0.25]],
    "total_request_rate": 16,
    "slice_factor": 1,
}  # fmt: skip
"""A small Mélange reference-solver input (`gpumix plan --melange-config`)."""
