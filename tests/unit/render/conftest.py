"""Fixtures of the render tests: the fixed input of render_helpers.py, fresh for every test."""

import pytest
from render_helpers import Inputs, make_inputs


@pytest.fixture
def inputs() -> Inputs:
    return make_inputs()
