"""What the roofline estimator needs to know about a model: memory, FLOPs and bytes per step.

A dense model with full attention in every layer and 16-bit weights needs only the first fields;
the optional ones default to exactly that, so such a shape's numbers are the plain formulas
(weights = parameters × 2 bytes, FLOPs = 2 × parameters per token, KV = 2 × layers × KV heads ×
head_dim × 2 bytes per token). The optional fields describe what current models add:

- **Mixture of experts.** ``params_b`` counts every parameter, so ``weight_bytes`` is what the
  replica must hold. A token runs only ``experts_per_token`` of each MoE layer's ``experts``:
  FLOPs follow the parameters it multiplies (:attr:`ModelShape.flop_params_b`), and one step
  reads the experts that at least one of its tokens was routed to
  (:meth:`ModelShape.weight_read_bytes`): a batch-1 decode reads about the active weights, a
  large batch or a prefill reads nearly all of them.
- **Sliding-window attention.** ``sliding_layers`` of the layers attend only to the last
  ``sliding_window`` tokens, so they cache at most that many tokens per request
  (:attr:`ModelShape.kv_window_bytes`) and their attention grows linearly, not quadratically.
- **Quantized weights** (e.g. gpt-oss's MXFP4 experts): bytes per weight differ from the 16-bit
  activations and KV cache.
- **Multi-head latent attention** (DeepSeek-V2/V3): one compressed latent per token and layer
  is cached instead of separate K and V (``kv_tensors`` = 1).

:func:`gpumix.profiles.hfconfig.shape_from_hf_config` fills all of this in from a config.json.
"""

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelShape(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Hugging Face id, as in LLMService model.name.")
    params_b: float = Field(gt=0, description="All parameters, billions (what memory holds).")
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0, description="Width of one cached K (or V) head.")
    max_context: int = Field(gt=0, description="Longest input + output the model accepts.")
    bytes_per_value: int = Field(
        default=2, gt=0, description="Activations and KV cache; weights too unless set below."
    )
    attention_dim: int | None = Field(
        default=None, gt=0, description="Query heads × their head_dim (default: hidden)."
    )
    kv_tensors: int = Field(
        default=2, ge=1, le=2, description="Cached per KV head and layer: K and V, or MLA's latent."
    )
    sliding_layers: int = Field(
        default=0, ge=0, description="Layers that attend only to the last sliding_window tokens."
    )
    sliding_window: int | None = Field(default=None, gt=0)
    embedding_params_b: float = Field(
        default=0.0,
        ge=0,
        description="Input embedding table when not tied to the output layer (part of params_b): "
        "a step looks rows up, it neither multiplies nor reads the whole table.",
    )
    expert_params_b: float = Field(
        default=0.0, ge=0, description="Routed experts of every MoE layer (part of params_b)."
    )
    experts: int = Field(default=0, ge=0, description="Routed experts per MoE layer.")
    experts_per_token: int = Field(default=0, ge=0)
    weight_bytes_per_value: float | None = Field(
        default=None, gt=0, description="Mean over the weights other than routed experts."
    )
    expert_bytes_per_value: float | None = Field(
        default=None, gt=0, description="Routed experts' weights (MXFP4: 4.25 bits)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.sliding_layers > self.layers:
            raise ValueError("sliding_layers exceeds layers")
        if self.sliding_layers and self.sliding_window is None:
            raise ValueError("sliding_layers needs sliding_window")
        if self.expert_params_b and not 0 < self.experts_per_token <= self.experts:
            raise ValueError("expert_params_b needs 0 < experts_per_token <= experts")
        if self.embedding_params_b + self.expert_params_b >= self.params_b:
            raise ValueError("embedding and expert parameters exceed params_b")
        return self

    @property
    def full_attention_layers(self) -> int:
        return self.layers - self.sliding_layers

    @property
    def _dense_bytes(self) -> float:
        return self.weight_bytes_per_value or self.bytes_per_value

    @property
    def _expert_bytes(self) -> float:
        return self.expert_bytes_per_value or self._dense_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights: what a replica holds besides the KV cache."""
        dense = (self.params_b - self.expert_params_b) * 1e9 * self._dense_bytes
        return dense + self.expert_params_b * 1e9 * self._expert_bytes

    @property
    def active_params_b(self) -> float:
        """Parameters one token uses: all but the routed experts it skips (the "active" count
        of Qwen, Mixtral and DeepSeek model cards)."""
        if not self.experts:
            return self.params_b
        skipped = self.expert_params_b * (1 - self.experts_per_token / self.experts)
        return self.params_b - skipped

    @property
    def flop_params_b(self) -> float:
        """Parameters one token multiplies (2 FLOPs each): the active ones less an untied input
        embedding, which is only looked up (gpt-oss's model card counts "active" this way)."""
        return self.active_params_b - self.embedding_params_b

    def expert_share_read(self, tokens: float) -> float:
        """Expected share of routed experts that ``tokens`` tokens in one step are routed to,
        each token picking ``experts_per_token`` of ``experts`` uniformly. Real routers are
        skewed toward popular experts, which touches fewer: an upper bound."""
        if not self.experts:
            return 0.0
        untouched: float = (1 - self.experts_per_token / self.experts) ** tokens
        return 1 - untouched

    def weight_read_bytes(self, tokens: float) -> float:
        """Weight bytes one step over ``tokens`` tokens reads from memory: every dense weight
        but the input embedding table, and the routed experts some token is sent to. For a
        dense model without an untied embedding this is ``weight_bytes``."""
        dense = (self.params_b - self.expert_params_b - self.embedding_params_b) * 1e9
        read = dense * self._dense_bytes
        if not self.experts:
            return read
        experts = self.expert_params_b * 1e9 * self._expert_bytes
        return read + experts * self.expert_share_read(tokens)

    def attention_flops(self, pairs: float, tokens: float) -> float:
        """FLOPs of attention scores and their weighted sum: 4 × width per (query, key) pair and
        layer. ``pairs`` is Σ queries × keys attended (n² for a whole prompt of n tokens);
        sliding-window layers attend to at most ``sliding_window`` keys per query, so
        ``tokens`` × window bounds their pairs."""
        width = self.attention_dim or self.hidden
        flops = 4 * self.full_attention_layers * pairs * width
        if self.sliding_layers and self.sliding_window:
            flops += 4 * self.sliding_layers * min(pairs, tokens * self.sliding_window) * width
        return flops

    @property
    def _kv_bytes_per_layer_token(self) -> int:
        return self.kv_tensors * self.kv_heads * self.head_dim * self.bytes_per_value

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token of context, kept while the request runs: K and V (or MLA's latent)
        in every layer that attends to the whole context. Sliding-window layers keep only the
        last window (``kv_window_bytes``), except in a model where every layer slides: there
        they count per token, as if no context outgrew the window (exact up to the window,
        an upper bound beyond it)."""
        layers = self.full_attention_layers or self.layers
        return layers * self._kv_bytes_per_layer_token

    @property
    def kv_window_bytes(self) -> int:
        """KV bytes one request's sliding-window layers hold at most (once its context reaches
        the window), on top of ``kv_bytes_per_token`` × context."""
        if not self.full_attention_layers or not self.sliding_window:
            return 0
        return self.sliding_layers * self.sliding_window * self._kv_bytes_per_layer_token
