"""A roofline estimate of MaxTput for GPU types we cannot measure.

Decode is memory-bound: one step reads the weights and every running request's KV cache. Prefill is
compute-bound (linear layers plus quadratic attention). With vLLM-style continuous batching and no
chunked prefill, a request's latency with B requests running is L = O·d(B) + B·p(I) (its O decode
steps plus the prefills of the requests that arrive meanwhile), so TPOT = L/O and, by Little's law,
the rate is B/L. A replica of k > 1 GPUs (tensor parallelism, Megatron-LM's split) divides
both over its GPUs and adds two all-reduces of the step's activations per layer, each a ring of
2(k − 1) steps (`allreduce_s`): at decode they are latency-bound, so k = 8 decodes barely faster
than k = 4 (Splitwise's DGX measurements). MaxTput(SLO) (Mélange §5.3) is the best rate over batch
sizes whose TPOT meets the SLO and whose KV cache fits. The efficiencies are calibrated per GPU
type against measured step times (`gpumix.profiles.calibration`); types without measurements use
round defaults (their all-reduce: the L4's, PCIe). For mixture-of-experts and sliding-window
models, what a step reads and computes comes from `gpumix.profiles.shape.ModelShape` (the experts
its tokens are routed to, windowed layers).
"""

import functools
import itertools
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from gpumix import __version__
from gpumix.api import GPUProfile, GPUProfileSpec, SloTable
from gpumix.api.gpuprofile import TPDegree
from gpumix.profiles.catalog import GPUType
from gpumix.profiles.models import ModelShape
from gpumix.profiles.vllm import ASSUMED

GIB = 1024**3

Num = TypeVar("Num", float, npt.NDArray[np.float64])


class RooflineParams(BaseModel):
    model_config = ConfigDict(frozen=True)

    bandwidth_efficiency: float = Field(default=0.75, gt=0, le=1)
    compute_efficiency: float = Field(default=0.5, gt=0, le=1)
    step_overhead_ms: float = Field(default=3.0, ge=0, description="Scheduler + kernel launches.")
    gpu_memory_utilization: float = Field(
        default=ASSUMED.gpu_memory_utilization, gt=0, le=1, description="As the pods run vLLM."
    )
    activation_reserve_gib: float = Field(default=1.0, ge=0)
    max_num_seqs: int = Field(
        default=ASSUMED.max_num_seqs, ge=1, description="As the pods run vLLM (batch limit)."
    )
    allreduce_latency_us: float = Field(
        default=56.0, ge=0, description="Per ring step of a tensor-parallel all-reduce, µs."
    )
    allreduce_gbps: float = Field(
        default=4.0, gt=0, description="Bus bandwidth a tensor-parallel all-reduce reaches, GB/s."
    )


CALIBRATED: dict[str, RooflineParams] = {
    "l4": RooflineParams(
        bandwidth_efficiency=0.71,
        compute_efficiency=0.45,
        allreduce_latency_us=56.0,
        allreduce_gbps=4.0,
    ),
    "a100-40gb": RooflineParams(bandwidth_efficiency=0.68, compute_efficiency=0.91),
    "a100-80gb": RooflineParams(
        bandwidth_efficiency=0.70,
        compute_efficiency=0.64,
        allreduce_latency_us=14.0,
        allreduce_gbps=80.0,
    ),
    "a40": RooflineParams(bandwidth_efficiency=0.76, compute_efficiency=0.64),
    "h100": RooflineParams(
        bandwidth_efficiency=0.66,
        compute_efficiency=0.59,
        allreduce_latency_us=10.0,
        allreduce_gbps=100.0,
    ),
}
"""Efficiencies (and, where multi-GPU replicas were measured, the all-reduce's latency and bus
bandwidth) fitted to measurements by `gpumix.profiles.calibration.fit_all` (a unit test keeps
them in sync); other GPU types use the defaults, whose all-reduce is the L4's (PCIe)."""


def allreduce_s(gpus: Num, allreduces: Num, payload_bytes: Num, params: RooflineParams) -> Num:
    """Time of `allreduces` ring all-reduces of `payload_bytes` each over `gpus` GPUs: 2(k − 1)
    steps, each paying the link latency and sending 1/k of the payload (0 on one GPU). Works
    elementwise on arrays (the calibration's grid search)."""
    ring = 2 * (gpus - 1)
    step = params.allreduce_latency_us * 1e-6 + payload_bytes / gpus / (params.allreduce_gbps * 1e9)
    return allreduces * ring * step


def params_for(gpu: str) -> RooflineParams:
    """The performance-model parameters for a GPU type: calibrated where measured."""
    return CALIBRATED.get(gpu, RooflineParams())


class Roofline:
    """Step-time model of one replica: `gpus` GPUs of one type running one model (TP)."""

    def __init__(
        self, gpu: GPUType, model: ModelShape, gpus: int = 1, params: RooflineParams | None = None
    ) -> None:
        self.gpu, self.model, self.gpus = gpu, model, gpus
        self.p = params or params_for(gpu.name)
        self._bw = gpu.bandwidth_gbps * 1e9 * gpus * self.p.bandwidth_efficiency  # bytes/s
        self._flops = gpu.fp16_tflops * 1e12 * gpus * self.p.compute_efficiency
        # The model's constants, read once: the simulator asks for millions of step times, and
        # each property of the shape recomputes (same operations, so the same floats).
        self._overhead_s = self.p.step_overhead_ms / 1e3
        self._weights = None if model.experts else model.weight_read_bytes(0)
        """Weight bytes a step reads; ``None``: a mixture of experts, where it depends on the
        step's tokens."""
        self._kv_token = model.kv_bytes_per_token
        self._kv_window = model.kv_window_bytes
        self._flop_token = 2 * model.flop_params_b * 1e9
        self._allreduces = 2 * model.layers
        self._activation_bytes = model.hidden * model.bytes_per_value

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV cache that fit beside the weights (≤ 0: the model does not fit at all)."""
        usable = self.gpu.memory_gib * GIB * self.gpus * self.p.gpu_memory_utilization
        free = usable - self.model.weight_bytes - self.p.activation_reserve_gib * GIB * self.gpus
        free -= self.p.max_num_seqs * self.model.kv_window_bytes  # sliding layers' windows
        return int(free // self.model.kv_bytes_per_token)

    @functools.cached_property
    def context_limit(self) -> int:
        """Longest request (prompt + output tokens) a replica holds: the model's context or its
        KV cache, whichever is shorter. Read once: the latency checks ask for it per request."""
        return min(self.model.max_context, self.kv_capacity_tokens)

    def decode_step_s(self, batch: int, mean_context: float) -> float:
        read = self._weight_read(batch) + batch * mean_context * self._kv_token
        read += batch * self._kv_window
        compute = self._flop_token * batch
        return self._overhead_s + max(read / self._bw, compute / self._flops) + self._comm_s(batch)

    def _weight_read(self, tokens: float) -> float:
        return self.model.weight_read_bytes(tokens) if self._weights is None else self._weights

    def prefill_s(self, tokens: float) -> float:
        compute = self._flop_token * tokens + self.model.attention_flops(tokens**2, tokens)
        read = self._weight_read(tokens)
        return self._overhead_s + max(compute / self._flops, read / self._bw) + self._comm_s(tokens)

    def _comm_s(self, tokens: float) -> float:
        """A step's tensor-parallel all-reduces: two per layer, of `tokens` activations each."""
        if self.gpus == 1:
            return 0.0
        payload = tokens * self._activation_bytes
        return allreduce_s(float(self.gpus), float(self._allreduces), payload, self.p)

    def step_s(
        self,
        decode_batch: int,
        decode_context: float,
        prefill_tokens: float = 0.0,
        prefill_attention: float = 0.0,
    ) -> float:
        """One engine iteration mixing decodes and prefill (chunks), as the simulator runs them.

        `decode_context` is the summed context of the decoding requests (KV tokens read);
        `prefill_attention` is Σ chunk × (tokens the chunk attends to) over the prefill chunks
        (a whole prompt of n tokens contributes n²). With only decodes this is `decode_step_s`,
        with one whole prompt it is `prefill_s`.
        """
        tokens = decode_batch + prefill_tokens
        read = self._weight_read(tokens) + decode_context * self._kv_token
        read += decode_batch * self._kv_window
        compute = self._flop_token * tokens
        if prefill_tokens:
            compute += self.model.attention_flops(prefill_attention, prefill_tokens)
        return self._overhead_s + max(read / self._bw, compute / self._flops) + self._comm_s(tokens)

    def alone_s(self, input_tokens: int, output_tokens: int) -> tuple[float, float]:
        """(TTFT, TPOT) of one request on an idle replica: its prefill gives the first token,
        then one batch-1 decode step per further token (the step is linear in the context, so
        the mean context is exact). No load, plan or replica count gets a request below this."""
        ttft = self.prefill_s(input_tokens)
        decodes = (output_tokens - 1) * self.decode_step_s(1, input_tokens + output_tokens / 2)
        return ttft, (ttft + decodes) / output_tokens

    def meets_alone(
        self, input_tokens: int, output_tokens: int, tpot_ms: float, ttft_ms: float | None = None
    ) -> bool:
        """Whether one request meets the SLO alone on an idle replica and fits in its KV cache:
        if not, no load, plan or replica count of this replica gets it there."""
        ttft, tpot = self.alone_s(input_tokens, output_tokens)
        late = ttft_ms is not None and ttft * 1e3 > ttft_ms
        fits = input_tokens + output_tokens <= self.context_limit
        return fits and tpot * 1e3 <= tpot_ms and not late

    def alone_met_share(
        self,
        inputs: tuple[int, int],
        outputs: tuple[int, int],
        tpot_ms: float,
        ttft_ms: float | None = None,
        samples: int = 32,
    ) -> float:
        """Share of a bucket's requests (integer sizes uniform in ``[lo, hi)`` of each range,
        at least 1, as the simulator draws them) that meet the SLO alone and fit in the KV
        cache. A bucket's MaxTput comes from its midpoint (§5.3), but with few output tokens a
        long prompt's prefill alone can exceed the TPOT SLO, at any load. Exact along the input
        (latency grows with it: binary search), ``samples`` equal-probability output lengths."""

        def meets(i: int, o: int) -> bool:
            return self.meets_alone(max(i, 1), max(o, 1), tpot_ms, ttft_ms)  # sizes are ≥ 1

        in_lo, in_hi = inputs
        out_lo, out_hi = outputs
        width = out_hi - out_lo
        n = min(samples, width)
        met = 0
        for k in range(n):
            o = out_lo + (2 * k + 1) * width // (2 * n)
            lo, hi = in_lo, in_hi  # the first input that misses lies in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (mid + 1, hi) if meets(mid, o) else (lo, mid)
            met += lo - in_lo
        return met / (n * (in_hi - in_lo))

    def max_tput(self, input_tokens: float, output_tokens: float, tpot_ms: float) -> float:
        """Highest req/s for requests of this size with mean TPOT ≤ tpot_ms; 0 if none."""
        if input_tokens + output_tokens > self.context_limit:
            return 0.0
        prefill = self.prefill_s(input_tokens)
        mean_context = input_tokens + output_tokens / 2
        batch_limit = min(self.p.max_num_seqs, int(self.kv_capacity_tokens // mean_context))
        best = 0.0
        for batch in range(1, batch_limit + 1):
            latency = output_tokens * self.decode_step_s(batch, mean_context) + batch * prefill
            if latency / output_tokens * 1e3 > tpot_ms:
                break
            best = max(best, batch / latency)
        return best


def estimate_profile(
    gpu: GPUType,
    model: ModelShape,
    *,
    input_edges: list[int],
    output_edges: list[int],
    tpots_ms: list[float],
    gpus: TPDegree = 1,
    params: RooflineParams | None = None,
) -> GPUProfile:
    """A GPUProfile in table form, each bucket represented by its midpoint request size."""
    roof = Roofline(gpu, model, gpus, params)
    mids_in = [(a + b) / 2 for a, b in itertools.pairwise(input_edges)]
    mids_out = [(a + b) / 2 for a, b in itertools.pairwise(output_edges)]
    tables = [
        SloTable(
            tpot_ms=slo,
            max_tput=[[round(roof.max_tput(i, o, slo), 4) for o in mids_out] for i in mids_in],
        )
        for slo in sorted(tpots_ms)
    ]
    short = model.name.rsplit("/", 1)[-1].lower()
    return GPUProfile(
        metadata={"name": f"{short}-{gpu.name}-tp{gpus}"},
        spec=GPUProfileSpec(
            model=model.name,
            gpu_type=gpu.name,
            gpus_per_replica=gpus,
            input_edges=input_edges,
            output_edges=output_edges,
            tables=tables,
            source=f"roofline estimate (gpumix {__version__}; {gpu.source} specs); not measured",
        ),
    )
