"""Where the public traces and measured profiles gpumix reads live: shipped in the package.

`data/README.md` gives each file's source, licence and how it was cut down (`hack/cut_data.py`).
"""

import os
from pathlib import Path

DATA_ENV = "GPUMIX_DATA_DIR"


def data_dir() -> Path:
    """$GPUMIX_DATA_DIR (a directory with `traces/` and `profiles/`), else the shipped copy."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path(__file__).resolve().parent / "data"
