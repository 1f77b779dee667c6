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
  and DGX-H100 (Splitwise, ISCA'24) at tensor parallelism 2, 4 and 8. Predicted with the step
  overhead.

Helix's L4 pair (`l4x2`, PCIe) and Splitwise's TP 2–8 also fit the two parameters of the
tensor-parallel all-reduce (`gpumix.profiles.roofline.allreduce_s`): its per-step latency and
its bus bandwidth. Types without multi-GPU measurements keep the defaults, which are the L4's fit
(a PCIe card: what most types without NVLink in the catalog are).

The fit minimises the mean squared log error, each (source, phase) group weighted equally, over a
grid of efficiencies (and, where multi-GPU points exist, of the all-reduce's two parameters on a
coarse efficiency grid first). `CALIBRATED` in `gpumix.profiles.roofline` holds the fitted
values; a unit test re-runs the fit and checks both the values and the error bounds. GPU types
without measurements keep the default efficiencies.
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
from gpumix.profiles.roofline import GIB, RooflineParams, allreduce_s


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
    allreduces: int = 0
    """Tensor-parallel all-reduces in the measured time (two per layer); 0 on one GPU."""
    allreduce_bytes: float = 0.0
    """Activation bytes each all-reduce sums: tokens × hidden × bytes per value."""


def _layer(model: ModelShape) -> tuple[float, float]:
    """(weight bytes, parameters) of one transformer layer (embeddings excluded)."""
    params = model.params_b * 1e9 / model.layers
    return params * model.bytes_per_value, params


def _helix(base: Path) -> list[Point]:
    points: list[Point] = []
    models = {"llama1_30b": "huggyllama/llama-30b", "llama2_70b": "meta-llama/Llama-2-70b-hf"}
    gpus = {"l4": ("l4", 1), "l4x2": ("l4", 2), "a100": ("a100-40gb", 1)}
    for folder, name in models.items():
        m = model_shape(name)
        wbytes, params = _layer(m)
        for sub, (gpu, k) in gpus.items():
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
                            k,
                            False,
                            ms / 1e3,
                            2 if k > 1 else 0,
                            x * m.hidden * m.bytes_per_value,
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
    groups: dict[tuple[str, int, int, int, int], list[tuple[float, float]]] = {}
    with (base / "splitwise-sim" / "perf_model.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["model"] != "llama2-70b" or row["hardware"] not in gpus:
                continue
            key = (
                gpus[row["hardware"]],
                int(row["tensor_parallel"]),
                int(row["prompt_size"]),
                int(row["batch_size"]),
                int(row["token_size"]),
            )
            groups.setdefault(key, []).append((float(row["prompt_time"]), float(row["token_time"])))
    act = m.hidden * m.bytes_per_value
    for (gpu, k, prompt, batch, tokens), runs in sorted(groups.items()):
        prefill_ms = float(np.median([p for p, _ in runs]))
        decode_ms = float(np.median([t for _, t in runs]))
        if batch * (prompt + tokens) * m.kv_bytes_per_token > k * 80 * GIB - m.weight_bytes:
            continue  # more KV than the GPUs hold: the measurement ran some other way
        prefill_tokens = batch * prompt
        points.append(
            Point(
                gpu,
                "splitwise",
                "prefill",
                m.weight_bytes,
                2 * m.params_b * 1e9 * prefill_tokens + 4 * m.layers * batch * prompt**2 * m.hidden,
                k,
                True,
                prefill_ms / 1e3,
                2 * m.layers,
                prefill_tokens * act,
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
                k,
                True,
                decode_ms / 1e3,
                2 * m.layers,
                batch * act,
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
        comm = allreduce_s(float(p.gpus), float(p.allreduces), p.allreduce_bytes, params)
        out.append(over + max(p.read_bytes / bw, p.flops / fl) + comm)
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


LATENCY_GRID_US = np.arange(0.0, 101.0, 2.0)
BUS_GRID_GBPS = np.array(
    [1, 2, 3, 4, 5, 6, 8, 10, 12.5, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200, 300], dtype=float
)
"""The all-reduce parameters the fit tries: per-step latency (µs) and bus bandwidth (GB/s)."""


def fit_gpu(
    points: list[Point], gpu: str, step: float = 0.01, link: RooflineParams | None = None
) -> Fit:
    """Grid-search both efficiencies for one GPU type (step overhead stays at its default), and
    where it has multi-GPU measurements the all-reduce's latency and bandwidth too (on a 0.05
    efficiency grid, then the efficiencies at `step` with those fixed). `link` fixes the
    all-reduce's parameters instead (a known interconnect)."""
    pts = [p for p in points if p.gpu == gpu]
    if not pts:
        raise ValueError(f"no measurements for GPU type {gpu!r}")
    g = gpu_type(gpu)
    default = RooflineParams()
    read = np.array([p.read_bytes / (g.bandwidth_gbps * 1e9 * p.gpus) for p in pts])
    comp = np.array([p.flops / (g.fp16_tflops * 1e12 * p.gpus) for p in pts])
    over = np.array([default.step_overhead_ms / 1e3 if p.with_overhead else 0.0 for p in pts])
    meas = np.array([p.measured_s for p in pts])
    gpus = np.array([float(p.gpus) for p in pts])
    allreduces = np.array([float(p.allreduces) for p in pts])
    payload = np.array([p.allreduce_bytes for p in pts])
    groups = [f"{p.source}/{p.phase}" for p in pts]
    weight = np.array([1.0 / groups.count(k) for k in groups])

    def best(grid: np.ndarray, comm: np.ndarray) -> tuple[float, float, float]:
        bw, cp = np.meshgrid(grid, grid, indexing="ij")
        pred = over + comm + np.maximum(read / bw[..., None], comp / cp[..., None])
        loss = ((np.log(pred) - np.log(meas)) ** 2 * weight).sum(axis=-1)
        a, b = np.unravel_index(np.argmin(loss), loss.shape)
        return float(loss[a, b]), float(grid[a]), float(grid[b])

    if link is None and (gpus > 1).any():
        coarse = np.arange(0.05, 1.0 + 0.025, 0.05)
        tried = [
            (best(coarse, allreduce_s(gpus, allreduces, payload, trial))[0], trial)
            for trial in (
                RooflineParams(allreduce_latency_us=float(lat), allreduce_gbps=float(bus))
                for lat in LATENCY_GRID_US
                for bus in BUS_GRID_GBPS
            )
        ]
        link = min(tried, key=lambda t: t[0])[1]
    link = link or default
    grid = np.arange(step, 1.0 + step / 2, step)
    _, bw_eff, cp_eff = best(grid, allreduce_s(gpus, allreduces, payload, link))
    params = RooflineParams(
        bandwidth_efficiency=round(bw_eff, 3),
        compute_efficiency=round(cp_eff, 3),
        allreduce_latency_us=link.allreduce_latency_us,
        allreduce_gbps=link.allreduce_gbps,
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
