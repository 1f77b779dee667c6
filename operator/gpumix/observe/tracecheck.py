"""The histogram-combination error on the shipped request traces (`histograms` module docstring).

`python -m gpumix.observe.tracecheck` prints one row per trace and grid; the unit tests call
`trace_errors` and check the figures stay where README/report quote them.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from gpumix.datafiles import data_dir
from gpumix.observe.histograms import (
    ALIGNED_GRID,
    TRACE_GRIDS,
    ReconstructionError,
    reconstruction_error,
)
from gpumix.sim.traffic import load_trace

ARXIV = "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def _lengths(name: str, base: Path | None) -> tuple[np.ndarray, np.ndarray]:
    if name == "arxiv":
        path = (base or data_dir()) / "traces" / ARXIV
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        prompts = np.array([int(float(r["num_prefill_tokens"])) for r in rows])
        return prompts, np.array([int(float(r["num_decode_tokens"])) for r in rows])
    trace = load_trace(name, base)
    return trace.prompts, trace.outputs


def trace_errors(base: Path | None = None) -> list[tuple[str, ReconstructionError]]:
    """(grid name, errors) for every trace on its service grid and on the vLLM-aligned grid."""
    out = []
    for name, (ie, oe) in TRACE_GRIDS.items():
        prompts, outputs = _lengths(name, base)
        out.append(("service", reconstruction_error(name, prompts, outputs, ie, oe)))
        out.append(("aligned", reconstruction_error(name, prompts, outputs, *ALIGNED_GRID)))
    return out


def main() -> int:
    cols = ("rebucketing", "independence", "pipeline", "raked", "raked_shaped", "raked_baseline")
    print(f"{'trace':20} {'grid':8} {'requests':>8} " + " ".join(f"{c:>14}" for c in cols))
    for grid, e in trace_errors():
        values = " ".join(f"{getattr(e, c):14.3f}" for c in cols)
        print(f"{e.trace:20} {grid:8} {e.requests:8d} {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
