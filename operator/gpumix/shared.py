"""Where the project's shared data (measured profiles, public traces) lives."""

import os
from pathlib import Path

SHARED_ENV = "GPUMIX_SHARED_DIR"


def shared_dir() -> Path:
    """The shared data directory: $GPUMIX_SHARED_DIR, else `<repo>/../shared`."""
    env = os.environ.get(SHARED_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared"
