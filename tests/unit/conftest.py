"""Shared fixtures for the pure unit tests: the shipped example, loaded once."""

from pathlib import Path

import pytest

from gpumix.api import GPUProfile, LLMService
from gpumix.manifests import load_objects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "samples"


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
