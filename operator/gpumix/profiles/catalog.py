"""Built-in catalog of GPU types: memory, bandwidth, FP16 compute and on-demand price.

Sources, cited per entry:
- Mélange Table 1 (Griggs et al., "Mélange: Cost Efficient Large Language Model Serving by
  Exploiting GPU Heterogeneity", §6.1): L4, A10G, A100-80G (SXM), H100 (SXM) with the lowest
  on-demand price of AWS/Azure/GCP (H100 normalised from RunPod: 4.69/2.29 × 3.67 = 7.516 $/h).
- Jiang et al. Table 1 ("Demystifying Cost-Efficiency in LLM Serving over Heterogeneous GPUs",
  §1): A6000, A40, L40, RTX 4090 with Vast.ai-style marketplace prices (their A100/H100 prices,
  1.75 and 2.99 $/h, are marketplace prices too; we keep Mélange's cloud prices for those so that
  the four Mélange types are priced consistently).
- NVIDIA datasheets for A100-40GB (used by MELL §VIII), with no list price: a GPUPool of that type
  must set `pricePerGPUHour`.
A GPUPool's `pricePerGPUHour` always overrides the catalog price.
FP16 figures are dense tensor peaks: Mélange Table 1 lists the 2:4-sparse peaks for L4 (242) and
H100 (1979); we halve those, since LLM serving does not use structured sparsity.
"""

from pydantic import BaseModel, ConfigDict, Field


class GPUType(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    memory_gib: float = Field(gt=0, description="Device memory (GB as the vendor states it).")
    bandwidth_gbps: float = Field(gt=0, description="Memory bandwidth, GB/s.")
    fp16_tflops: float = Field(gt=0, description="Dense peak FP16 tensor TFLOPS.")
    price_per_hour: float | None = Field(default=None, gt=0, description="On-demand $/GPU-hour.")
    product_label: str = Field(description="nvidia.com/gpu.product as GPU Feature Discovery sets.")
    source: str


_MELANGE = "Mélange Table 1"
_JIANG = "Jiang et al. Table 1"

CATALOG: dict[str, GPUType] = {
    g.name: g
    for g in (
        GPUType(name="l4", memory_gib=24, bandwidth_gbps=300, fp16_tflops=121,
                price_per_hour=0.70, product_label="NVIDIA-L4", source=_MELANGE),
        GPUType(name="a10g", memory_gib=24, bandwidth_gbps=600, fp16_tflops=125,
                price_per_hour=1.01, product_label="NVIDIA-A10G", source=_MELANGE),
        GPUType(name="a100-80gb", memory_gib=80, bandwidth_gbps=1935, fp16_tflops=312,
                price_per_hour=3.67, product_label="NVIDIA-A100-SXM4-80GB", source=_MELANGE),
        GPUType(name="h100", memory_gib=80, bandwidth_gbps=3350, fp16_tflops=989.5,
                price_per_hour=7.516, product_label="NVIDIA-H100-80GB-HBM3", source=_MELANGE),
        GPUType(name="a6000", memory_gib=48, bandwidth_gbps=960, fp16_tflops=91,
                price_per_hour=0.83, product_label="NVIDIA-RTX-A6000", source=_JIANG),
        GPUType(name="a40", memory_gib=48, bandwidth_gbps=696, fp16_tflops=150,
                price_per_hour=0.55, product_label="NVIDIA-A40", source=_JIANG),
        GPUType(name="l40", memory_gib=48, bandwidth_gbps=864, fp16_tflops=181,
                price_per_hour=0.83, product_label="NVIDIA-L40", source=_JIANG),
        GPUType(name="rtx4090", memory_gib=24, bandwidth_gbps=1008, fp16_tflops=83,
                price_per_hour=0.53, product_label="NVIDIA-GeForce-RTX-4090", source=_JIANG),
        GPUType(name="a100-40gb", memory_gib=40, bandwidth_gbps=1555, fp16_tflops=312,
                product_label="NVIDIA-A100-SXM4-40GB", source="NVIDIA A100 datasheet"),
    )
}  # fmt: skip


class UnknownGPUTypeError(KeyError):
    def __str__(self) -> str:
        return f"unknown GPU type {self.args[0]!r}; known types: {', '.join(sorted(CATALOG))}"


def gpu_type(name: str) -> GPUType:
    """Look a type up by name (case-insensitive), naming the known types when it is missing."""
    try:
        return CATALOG[name.lower()]
    except KeyError:
        raise UnknownGPUTypeError(name) from None
