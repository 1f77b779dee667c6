"""Shapes of well-known models: what the roofline estimator needs to know about a model.

Numbers are from the models' published configs (parameters, layers, hidden size, KV heads,
context length); fp16 weights and KV cache.
"""

from pydantic import BaseModel, ConfigDict, Field


class ModelShape(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Hugging Face id, as in LLMService model.name.")
    params_b: float = Field(gt=0, description="Parameters, billions.")
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    max_context: int = Field(gt=0, description="Longest input + output the model accepts.")
    bytes_per_value: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * self.bytes_per_value

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: 2 × layers × kv_heads × head_dim × bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(name="meta-llama/Llama-2-7b-hf", params_b=6.74, layers=32, hidden=4096,
                   kv_heads=32, head_dim=128, max_context=4096),
        ModelShape(name="meta-llama/Llama-2-13b-hf", params_b=13.0, layers=40, hidden=5120,
                   kv_heads=40, head_dim=128, max_context=4096),
        ModelShape(name="meta-llama/Llama-2-70b-hf", params_b=69.0, layers=80, hidden=8192,
                   kv_heads=8, head_dim=128, max_context=4096),
        ModelShape(name="huggyllama/llama-30b", params_b=32.5, layers=60, hidden=6656,
                   kv_heads=52, head_dim=128, max_context=2048),
    )
}  # fmt: skip


def model_shape(name: str) -> ModelShape:
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise KeyError(f"no built-in shape for model {name!r}; known: {known}") from None
