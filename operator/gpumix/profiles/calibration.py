"""Calibrating the roofline against measured step times (the shipped public profile data).

Per GPU type we fit the roofline's two efficiencies — the share of peak memory bandwidth and of
peak FP16 compute that a real engine reaches — to every measurement we have of that GPU:

- `helix`: vLLM per-layer prefill (tokens → ms) and decode (batch → ms) times of LLaMA-30B and
  Llama-2-70B on L4 and A100-40GB (Helix, ASPLOS'25). Predicted as one layer's share of the
  roofline step without the per-step overhead. Decode context is not recorded, so only batches
  ≤ 32 (weight-read bound) are used; prefill times under 5 ms (recorded in whole ms) are skipped.
- `vidur`: per-layer times of Llama-2-7B's linear operators vs tokens on A100, A40, H100 (Vidur),
  TP1, sum of the op medians without the embedding. Predicted as the linear layers' share
  (weights and FLOPs of the projections and MLP), no attention, no overhead.
- `splitwise`: whole-model prefill and per-iteration decode times of Llama-2-70B on DGX-A100
  and DGX-H100 (Splitwise, ISCA'24), TP2 only: the roofline does not model tensor-parallel
  communication, which dominates at TP4/8. Predicted with the step overhead.

The fit minimises the mean squared log error, each (source, phase) group weighted equally, over a
grid of efficiencies. `CALIBRATED` in `gpumix.profiles.roofline` holds the fitted values; a unit
test re-runs the fit and checks both the values and the error bounds. GPU types without
measurements keep the default efficiencies.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpumix.datafiles import data_dir
from gpumix.profiles.catalog import gpu_type
from gpumix.profiles.models import ModelShape, model_shape
from gpumix.profiles.roofline import GIB, RooflineParams


@dataclass(frozen=True)
class Point:
    """One measurement, reduced to what the roofline needs: bytes read, FLOPs, overhead."""

    gpu: str
    source: str
    phase: str  # "prefill" | "decode"
    read_bytes: float
    flops: float
    gpus: int
    with_overhead: bool
    measured_s: float


def _layer(model: ModelShape) -> tuple[float, float]:
    """(weight bytes, parameters) of one transformer layer (embeddings excluded)."""
    params = model.params_b * 1e9 / model.layers
    return params * model.bytes_per_value, params


def _helix(base: Path) -> list[Point]:
    points: list[Point] = []
    models = {"llama1_30b": "huggyllama/llama-30b", "llama2_70b": "meta-llama/Llama-2-70b-hf"}
    gpus = {"l4": "l4", "a100": "a100-40gb"}
    for folder, name in models.items():
        m = model_shape(name)
        wbytes, params = _layer(m)
        for sub, gpu in gpus.items():
            for phase in ("prompt", "decode"):
                path = base / "helix" / folder / sub / f"{phase}_bs2time.csv"
                for line in path.read_text().split():
                    x, ms = (float(v) for v in line.split(","))
                    if x <= 0 or ms < 1:
                        continue
                    if phase == "prompt" and ms < 5:
                        continue  # whole milliseconds: too coarse below 5 ms
                    if phase == "decode" and x > 32:
                        continue  # grows with the (unrecorded) context's attention
                    if phase == "prompt":
                        flops = 2 * params * x + 4 * x * x * m.hidden
                    else:
                        flops = 2 * params * x
                    points.append(
                        Point(
                            gpu,
                            "helix",
                            "prefill" if phase == "prompt" else "decode",
                            wbytes,
                            flops,
                            1,
                            False,
                            ms / 1e3,
                        )
                    )
    return points


VIDUR_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)


def _vidur(base: Path) -> list[Point]:
    points: list[Point] = []
    m = model_shape("meta-llama/Llama-2-7b-hf")
    inter = 11008
    params = 4 * m.hidden * m.hidden + 3 * m.hidden * inter  # q,k,v,o + gate,up,down
    for sub, gpu in (("a100", "a100-80gb"), ("a40", "a40"), ("h100", "h100")):
        path = base / "vidur" / "compute" / sub / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row["num_tensor_parallel_workers"] != "1":
                    continue
                n = float(row["num_tokens"])
                ms = sum(float(row[f"time_stats.{op}.median"]) for op in VIDUR_OPS)
                points.append(
                    Point(
                        gpu,
                        "vidur",
                        "prefill" if n > 1 else "decode",
                        params * m.bytes_per_value,
                        2 * params * n,
                        1,
                        False,
                        ms / 1e3,
                    )
                )
    return points


def _splitwise(base: Path) -> list[Point]:
    points: list[Point] = []
    m = model_shape("meta-llama/Llama-2-70b-hf")
    gpus = {"a100-80gb": "a100-80gb", "h100-80gb": "h100"}
    groups: dict[tuple[str, int, int, int], list[tuple[float, float]]] = {}
    with (base / "splitwise-sim" / "perf_model.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["model"] != "llama2-70b" or row["hardware"] not in gpus:
                continue
            if row["tensor_parallel"] != "2":
                continue
            key = (
                gpus[row["hardware"]],
                int(row["prompt_size"]),
                int(row["batch_size"]),
                int(row["token_size"]),
            )
            groups.setdefault(key, []).append((float(row["prompt_time"]), float(row["token_time"])))
    for (gpu, prompt, batch, tokens), runs in sorted(groups.items()):
        prefill_ms = float(np.median([p for p, _ in runs]))
        decode_ms = float(np.median([t for _, t in runs]))
        if batch * (prompt + tokens) * m.kv_bytes_per_token > 2 * 80 * GIB - m.weight_bytes:
            continue  # more KV than the two GPUs hold: the measurement ran some other way
        prefill_tokens = batch * prompt
        points.append(
            Point(
                gpu,
                "splitwise",
                "prefill",
                m.weight_bytes,
                2 * m.params_b * 1e9 * prefill_tokens + 4 * m.layers * batch * prompt**2 * m.hidden,
                2,
                True,
                prefill_ms / 1e3,
            )
        )
        context = batch * (prompt + tokens / 2)
        points.append(
            Point(
                gpu,
                "splitwise",
                "decode",
                m.weight_bytes + context * m.kv_bytes_per_token,
                2 * m.params_b * 1e9 * batch,
                2,
                True,
                decode_ms / 1e3,
            )
        )
    return points


def load_points(base: Path | None = None) -> list[Point]:
    """Every measurement in the shipped profile data the roofline can be compared with."""
    root = (base or data_dir()) / "profiles"
    return [*_helix(root), *_vidur(root), *_splitwise(root)]


def predict(points: Iterable[Point], params: RooflineParams) -> np.ndarray:
    out = []
    for p in points:
        g = gpu_type(p.gpu)
        bw = g.bandwidth_gbps * 1e9 * p.gpus * params.bandwidth_efficiency
        fl = g.fp16_tflops * 1e12 * p.gpus * params.compute_efficiency
        over = params.step_overhead_ms / 1e3 if p.with_overhead else 0.0
        out.append(over + max(p.read_bytes / bw, p.flops / fl))
    return np.array(out)


@dataclass(frozen=True)
class Fit:
    gpu: str
    params: RooflineParams
    points: int
    median_abs_error: float
    """Median |predicted − measured| / measured over the GPU's points."""
    p90_abs_error: float
    by_source: dict[str, float]
    """Median relative error per `source/phase`."""


def fit_gpu(points: list[Point], gpu: str, step: float = 0.01) -> Fit:
    """Grid-search both efficiencies for one GPU type (step overhead stays at its default)."""
    pts = [p for p in points if p.gpu == gpu]
    if not pts:
        raise ValueError(f"no measurements for GPU type {gpu!r}")
    g = gpu_type(gpu)
    default = RooflineParams()
    read = np.array([p.read_bytes / (g.bandwidth_gbps * 1e9 * p.gpus) for p in pts])
    comp = np.array([p.flops / (g.fp16_tflops * 1e12 * p.gpus) for p in pts])
    over = np.array([default.step_overhead_ms / 1e3 if p.with_overhead else 0.0 for p in pts])
    meas = np.array([p.measured_s for p in pts])
    groups = [f"{p.source}/{p.phase}" for p in pts]
    weight = np.array([1.0 / groups.count(k) for k in groups])
    grid = np.arange(step, 1.0 + step / 2, step)
    bw, cp = np.meshgrid(grid, grid, indexing="ij")
    pred = over + np.maximum(read / bw[..., None], comp / cp[..., None])
    loss = ((np.log(pred) - np.log(meas)) ** 2 * weight).sum(axis=-1)
    a, b = np.unravel_index(np.argmin(loss), loss.shape)
    params = RooflineParams(
        bandwidth_efficiency=round(float(grid[a]), 3), compute_efficiency=round(float(grid[b]), 3)
    )
    err = np.abs(predict(pts, params) - meas) / meas
    by_source = {
        k: round(float(np.median(err[[i for i, x in enumerate(groups) if x == k]])), 4)
        for k in sorted(set(groups))
    }
    return Fit(
        gpu=gpu,
        params=params,
        points=len(pts),
        median_abs_error=round(float(np.median(err)), 4),
        p90_abs_error=round(float(np.percentile(err, 90)), 4),
        by_source=by_source,
    )


def fit_all(base: Path | None = None) -> dict[str, Fit]:
    points = load_points(base)
    return {gpu: fit_gpu(points, gpu) for gpu in sorted({p.gpu for p in points})}
