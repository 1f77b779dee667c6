"""Traffic for the simulator: arrival processes and request sizes.

Arrivals: Poisson, bursty (Gamma inter-arrival times with a coefficient of variation > 1),
diurnal (a sinusoidal rate, by thinning) and trace replay with rate scaling. Sizes: sampled from a
service's (input, output) histogram — uniform within a bucket — or from a trace's rows.
Traces: the Azure LLM inference trace 2023 (code / conversation CSV) and Mooncake's JSONL.
Everything takes a seed and is deterministic.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpumix.datafiles import DATA_ENV, data_dir
from gpumix.sim.request import Request

TRACE_FILES = {
    "azure-conv": "AzureLLMInferenceTrace_conv.csv",
    "azure-code": "AzureLLMInferenceTrace_code.csv",
    "mooncake-conv": "conversation_trace.jsonl",
    "mooncake-synthetic": "synthetic_trace.jsonl",
}


@dataclass(frozen=True)
class Trace:
    """Arrival offsets (s, from 0, sorted) with prompt and output token counts."""

    name: str
    times: np.ndarray
    prompts: np.ndarray
    outputs: np.ndarray

    def __len__(self) -> int:
        return len(self.times)

    @property
    def duration(self) -> float:
        return float(self.times[-1]) if len(self.times) else 0.0

    @property
    def rate(self) -> float:
        return len(self) / self.duration if self.duration > 0 else 0.0


class TraceFileError(ValueError):
    """A trace file that is empty or not in the format its suffix says."""


def _seconds(stamp: str) -> float:
    """'2023-11-16 18:17:03.9799600' → seconds since midnight (the traces span one hour)."""
    clock = stamp.split(" ")[1]
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def load_azure(path: Path) -> Trace:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise TraceFileError(f"{path}: no requests in the trace")
    t = np.array([_seconds(r["TIMESTAMP"]) for r in rows])
    return Trace(
        name=path.stem,
        times=t - t[0],
        prompts=np.array([int(r["ContextTokens"]) for r in rows]),
        outputs=np.array([int(r["GeneratedTokens"]) for r in rows]),
    )


def load_mooncake(path: Path) -> Trace:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise TraceFileError(f"{path}: no requests in the trace")
    t = np.array([r["timestamp"] / 1e3 for r in rows], dtype=float)
    order = np.argsort(t, kind="stable")
    return Trace(
        name=path.stem,
        times=t[order] - t[order][0],
        prompts=np.array([r["input_length"] for r in rows])[order],
        outputs=np.array([r["output_length"] for r in rows])[order],
    )


def load_trace(name_or_path: str, base: Path | None = None) -> Trace:
    """A trace by short name (`azure-conv`, `azure-code`, `mooncake-conv`, `mooncake-synthetic`,
    shipped with gpumix, see `datafiles`) or by path (.csv = Azure, .jsonl = Mooncake)."""
    path = Path(name_or_path)
    if name_or_path in TRACE_FILES:
        path = (base or data_dir()) / "traces" / TRACE_FILES[name_or_path]
    if not path.is_file():
        known = ", ".join(TRACE_FILES)
        raise FileNotFoundError(
            f"trace {name_or_path!r}: no file {path} (short names: {known}; set ${DATA_ENV} "
            "to the directory that holds traces/)"
        )
    mooncake = path.suffix == ".jsonl"
    kind = "a Mooncake trace (.jsonl)" if mooncake else "an Azure trace (.csv)"
    try:
        return load_mooncake(path) if mooncake else load_azure(path)
    except KeyError as err:
        raise TraceFileError(f"{path} is not {kind}: no field {err}") from None
    except IndexError as err:  # a TIMESTAMP without a time of day
        raise TraceFileError(f"{path} is not {kind}: {err}") from None
    except TraceFileError:
        raise
    except (TypeError, ValueError) as err:  # JSON or UTF-8 errors, a count not an integer, …
        raise TraceFileError(f"{path} is not {kind}: {err}") from None


# -- arrival processes ----------------------------------------------------------------------------
def poisson_times(rate: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate, n))


def gamma_times(rate: float, cv: float, n: int, seed: int) -> np.ndarray:
    """Bursty arrivals: Gamma inter-arrival times with mean 1/rate and coefficient of variation
    `cv` (1 = Poisson; larger = burstier)."""
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), n))


def diurnal_times(
    mean_rate: float,
    n: int,
    seed: int,
    *,
    period_s: float = 86_400.0,
    amplitude: float = 0.5,
    peak_at_s: float = 0.0,
) -> np.ndarray:
    """A non-homogeneous Poisson process with rate mean·(1 + a·cos(2π(t − peak)/period)), by
    thinning (Lewis & Shedler)."""
    if not 0 <= amplitude <= 1:
        raise ValueError("amplitude must be in [0, 1]")
    rng = np.random.default_rng(seed)
    peak = mean_rate * (1 + amplitude)
    out: list[float] = []
    t = 0.0
    while len(out) < n:
        gaps = rng.exponential(1.0 / peak, 4 * (n - len(out)) + 16)
        keep = rng.random(len(gaps))
        for gap, u in zip(gaps, keep, strict=True):
            t += gap
            rate = mean_rate * (1 + amplitude * np.cos(2 * np.pi * (t - peak_at_s) / period_s))
            if u * peak <= rate:
                out.append(t)
                if len(out) == n:
                    break
    return np.array(out)


def replay_times(trace: Trace, rate_scale: float = 1.0) -> np.ndarray:
    """The trace's arrival offsets, compressed by `rate_scale` (2 = twice the request rate)."""
    if rate_scale <= 0:
        raise ValueError("rate_scale must be > 0")
    return trace.times / rate_scale


# -- sizes ----------------------------------------------------------------------------------------
def histogram_sizes(
    input_edges: Sequence[int],
    output_edges: Sequence[int],
    histogram: Sequence[Sequence[float]],
    n: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Sizes drawn from a (input, output) histogram: bucket by weight, then uniform integers in
    [lo, hi) of the bucket's edges."""
    rng = np.random.default_rng(seed)
    w = np.asarray(histogram, dtype=float)
    rows, cols = w.shape
    flat = w.ravel() / w.sum()
    cells = rng.choice(rows * cols, size=n, p=flat)
    i, j = np.divmod(cells, cols)
    ie, oe = np.asarray(input_edges), np.asarray(output_edges)
    prompts = rng.integers(ie[i], ie[i + 1])
    outputs = rng.integers(oe[j], oe[j + 1])
    return np.maximum(prompts, 1), np.maximum(outputs, 1)


def trace_sizes(trace: Trace, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sizes of `n` rows of the trace drawn with replacement (zero lengths become 1)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(trace), n)
    return np.maximum(trace.prompts[rows], 1), np.maximum(trace.outputs[rows], 1)


def make_requests(times: np.ndarray, prompts: np.ndarray, outputs: np.ndarray) -> list[Request]:
    order = np.argsort(times, kind="stable")
    return [
        Request(k, float(times[o]), max(1, int(prompts[o])), max(1, int(outputs[o])))
        for k, o in enumerate(order)
    ]


def trace_requests(
    trace: Trace, rate_scale: float = 1.0, limit: int | None = None
) -> list[Request]:
    """Replay: the trace's own arrivals (rate-scaled) and sizes."""
    t = replay_times(trace, rate_scale)
    k = len(t) if limit is None else min(limit, len(t))
    return make_requests(t[:k], trace.prompts[:k], trace.outputs[:k])
