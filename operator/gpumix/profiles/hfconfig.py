"""A model's shape from its Hugging Face ``config.json``.

:func:`shape_from_hf_config` is pure (a config dict in, a :class:`ModelShape` out);
:func:`model_shape_from_config` reads a file. What is read, and how it is modelled:

- **Sizes**: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``num_key_value_heads`` (grouped-query attention; default: one per query head), ``head_dim``
  (default: hidden / heads), ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``
  (default false). A multimodal config's ``text_config`` describes the language model; its
  vision encoder is not counted.
- **Parameters** are counted layer by layer as checkpoints store them: embedding, attention
  projections (with Qwen2's q/k/v biases, or all four when ``attention_bias``), Qwen3's q/k
  norms, gpt-oss's attention sinks and expert biases, gated MLPs, norms, the output layer
  unless tied.
- **Context**: ``max_position_embeddings``, scaled by ``rope_scaling`` the way vLLM derives its
  default ``max_model_len`` (yarn: original length × factor; linear/dynamic: × factor;
  llama3/longrope: as is).
- **Sliding windows**: ``layer_types`` when given (gpt-oss, Gemma 3); else Qwen's
  ``use_sliding_window`` (default false) with the layers from ``max_window_layers`` on
  sliding; else Gemma's ``sliding_window_pattern``; else a non-null ``sliding_window`` applies
  to every layer (Mistral). A window no shorter than the context is no window.
  :class:`ModelShape` then caches at most the window in those layers.
- **Mixture of experts**: ``num_local_experts`` / ``num_experts`` / ``n_routed_experts`` routed
  experts, ``num_experts_per_tok`` per token, each ``moe_intermediate_size`` wide (else
  ``intermediate_size``); MoE layers per ``decoder_sparse_step`` and ``mlp_only_layers``
  (Qwen) or ``first_k_dense_replace`` and ``moe_layer_freq`` (DeepSeek); always-on shared
  experts from ``n_shared_experts`` (DeepSeek) or ``shared_expert_intermediate_size`` (Qwen2-MoE).
  Total parameters set the memory; active ones the FLOPs and per-token reads.
- **Multi-head latent attention** (``kv_lora_rank``, DeepSeek-V2/V3): the cache holds one
  latent of ``kv_lora_rank`` + ``qk_rope_head_dim`` values per token and layer.
- **Bytes**: ``torch_dtype`` (or ``dtype``) sets activations and the KV cache at 2 bytes (vLLM's
  ``--dtype auto`` serves float32 checkpoints in float16); ``quantization_config`` sets the
  weights: ``mxfp4`` (routed experts at 4.25 bits: a 4-bit value plus an 8-bit scale per 32, as
  gpt-oss ships), ``fp8`` (linear layers at 1 byte), ``gptq``/``awq`` (linear layers at
  ``bits``); block and group scales are left out, and embeddings, norms and biases stay at the
  activation width.

Layers this shape cannot describe (linear attention, Mamba, chunked attention, KV shared
between layers) raise :class:`ModelConfigError` rather than give a wrong shape.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpumix.profiles.shape import ModelShape

Config = Mapping[str, Any]

MXFP4_BYTES = 4.25 / 8
"""OCP Microscaling FP4: a 4-bit E2M1 value per weight and one 8-bit E8M0 scale per 32."""

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}
"""Activation and KV-cache bytes vLLM serves a checkpoint of this ``torch_dtype`` with."""

_QKV_BIAS = {"qwen2", "qwen2_moe"}  # Qwen2 always biases q, k and v; no config key says so
_QK_NORM = {"qwen3", "qwen3_moe"}  # an RMSNorm over head_dim on q and on k
_QWEN = _QKV_BIAS | _QK_NORM  # use_sliding_window defaults to false
_UNMODELLED = {
    "full_attention_interval": "linear-attention layers (Qwen3-Next)",
    "layers_block_type": "Mamba layers",
    "attn_layer_period": "Mamba layers (Jamba)",
    "hybrid_override_pattern": "Mamba layers (Nemotron-H)",
    "attention_chunk_size": "chunked attention (Llama 4)",
    "interleave_moe_layer_step": "interleaved MoE layers (Llama 4)",
    "num_kv_shared_layers": "layers sharing another layer's KV cache",
}


class ModelConfigError(ValueError):
    """A config.json that gives no shape; the message names the key at fault."""


def _get_int(cfg: Config, key: str, where: str = "") -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelConfigError(f"{where + key!r} must be a non-negative integer, not {value!r}")
    return value


def _int(cfg: Config, key: str, default: int | None = None, where: str = "") -> int:
    value = _get_int(cfg, key, where)
    if value is not None:
        return value
    if default is None:
        raise ModelConfigError(f"config has no {where + key!r}")
    return default


def _first_int(cfg: Config, keys: Sequence[str]) -> int | None:
    for key in keys:
        value = _get_int(cfg, key)
        if value is not None:
            return value
    return None


def _text_config(config: Config) -> Config:
    """The language model's keys: a multimodal config's ``text_config`` over the top level
    (which keeps ``torch_dtype`` and ``quantization_config``)."""
    text = config.get("text_config")
    if text is None:
        return config
    if not isinstance(text, Mapping):
        raise ModelConfigError("'text_config' must be an object")
    return {**config, **text}


def _reject_unmodelled(cfg: Config) -> None:
    for key, what in _UNMODELLED.items():
        if cfg.get(key):
            raise ModelConfigError(f"{what} ({key!r}) are not modelled")


@dataclass(frozen=True)
class _Attention:
    linear: int  # q, k, v, o projections of one layer
    other: int  # biases, norms, sinks of one layer
    kv_heads: int
    kv_head_dim: int
    kv_tensors: int
    width: int  # query heads × head_dim: the attention FLOPs per (query, key) pair / 4


def _attention(cfg: Config, hidden: int, model_type: str) -> _Attention:
    heads = _int(cfg, "num_attention_heads")
    if heads == 0:
        raise ModelConfigError("'num_attention_heads' must be positive")
    if cfg.get("kv_lora_rank") is not None:
        return _latent_attention(cfg, hidden, heads)
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    head_dim = _int(cfg, "head_dim", hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    other = 0
    if cfg.get("attention_bias"):
        other += q + 2 * kv + hidden
    elif model_type in _QKV_BIAS:
        other += q + 2 * kv
    if model_type in _QK_NORM:
        other += 2 * head_dim
    if model_type == "gpt_oss":
        other += heads  # one learned attention sink per head
    return _Attention(2 * hidden * q + 2 * hidden * kv, other, kv_heads, head_dim, 2, q)


def _latent_attention(cfg: Config, hidden: int, heads: int) -> _Attention:
    """DeepSeek's MLA: queries through an optional low-rank ``q_lora_rank``, keys and values
    through one ``kv_lora_rank`` latent (cached with the rope part of the key)."""
    rank, rope = _int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim")
    nope, v = _int(cfg, "qk_nope_head_dim"), _int(cfg, "v_head_dim")
    q_rank = _get_int(cfg, "q_lora_rank")
    qk = nope + rope
    q = hidden * heads * qk if q_rank is None else hidden * q_rank + q_rank * heads * qk
    kv = hidden * (rank + rope) + rank * heads * (nope + v)
    norms = rank + (q_rank or 0)
    return _Attention(q + kv + heads * v * hidden, norms, 1, rank + rope, 1, heads * (qk + v) // 2)


def _sliding_layers(cfg: Config, layers: int, model_type: str) -> int:
    """How many layers attend to a sliding window only (see the module docstring)."""
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ModelConfigError("'layer_types' must name one type per hidden layer")
        unknown = set(types) - {"full_attention", "sliding_attention"}
        if unknown:
            raise ModelConfigError(f"layer_types {sorted(unknown)} are not modelled")
        return types.count("sliding_attention")
    if "use_sliding_window" in cfg or model_type in _QWEN:
        if not cfg.get("use_sliding_window"):
            return 0
        return max(0, layers - _int(cfg, "max_window_layers"))
    if cfg.get("sliding_window") is None:
        return 0
    pattern = _get_int(cfg, "sliding_window_pattern") or (2 if model_type == "gemma2" else None)
    if pattern:  # every pattern-th layer attends to everything
        return sum(1 for i in range(layers) if (i + 1) % pattern)
    return layers


def _max_context(cfg: Config) -> int:
    """vLLM's default ``max_model_len``: ``max_position_embeddings`` scaled by RoPE scaling."""
    positions = _int(cfg, "max_position_embeddings")
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(rope, Mapping) or str(cfg.get("model_type", "")).startswith("gemma3"):
        return positions  # Gemma 3 states the scaled length already
    kind = rope.get("rope_type", rope.get("type"))
    if kind in ("su", "longrope", "llama3"):
        return positions
    if kind == "yarn":
        positions = _int(rope, "original_max_position_embeddings", where="rope_scaling.")
    factor = rope.get("factor") or 1.0
    if not isinstance(factor, int | float) or factor <= 0:
        raise ModelConfigError(f"'rope_scaling.factor' must be a positive number, not {factor!r}")
    return int(positions * factor)


@dataclass(frozen=True)
class _Mlp:
    linear: int  # dense MLPs and shared experts, every layer
    experts: int  # routed experts with their biases, every layer
    other: int  # biases, routers, shared-expert gates
    experts_per_layer: int
    experts_per_token: int


def _moe_layers(cfg: Config, layers: int) -> int:
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:  # DeepSeek
        first, every = _int(cfg, "first_k_dense_replace", 0), _int(cfg, "moe_layer_freq", 1)
        return sum(1 for i in range(layers) if i >= first and i % max(every, 1) == 0)
    step = max(_int(cfg, "decoder_sparse_step", 1), 1)  # Qwen-MoE
    dense = set(cfg.get("mlp_only_layers") or ())
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _mlp(cfg: Config, hidden: int, layers: int, model_type: str) -> _Mlp:
    experts = _first_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts")) or 0
    moe = _moe_layers(cfg, layers) if experts else 0
    linear = other = 0
    if layers > moe:
        width = _int(cfg, "intermediate_size")
        linear += (layers - moe) * 3 * hidden * width  # gate, up, down
        if cfg.get("mlp_bias"):
            other += (layers - moe) * (2 * width + hidden)
    if not moe:
        return _Mlp(linear, 0, other, 0, 0)
    per_token = _first_int(cfg, ("num_experts_per_tok", "experts_per_token"))
    if not per_token:
        raise ModelConfigError("config has no 'num_experts_per_tok'")
    width = _get_int(cfg, "moe_intermediate_size") or _int(cfg, "intermediate_size")
    expert = 3 * hidden * width
    routed = moe * experts * expert
    other += moe * hidden * experts  # router
    if model_type == "gpt_oss":
        routed += moe * experts * (2 * width + hidden)
        other += moe * experts  # router bias
    if cfg.get("topk_method") == "noaux_tc":
        other += moe * experts  # DeepSeek-V3's routing score correction
    linear += moe * (_get_int(cfg, "n_shared_experts") or 0) * expert
    shared = _get_int(cfg, "shared_expert_intermediate_size") or 0
    if shared:
        linear += moe * 3 * hidden * shared
        other += moe * hidden  # the shared expert's gate
    return _Mlp(linear, routed, other, experts, per_token)


def _value_bytes(cfg: Config) -> int:
    dtype = cfg.get("torch_dtype", cfg.get("dtype"))
    if dtype is None:
        return 2
    if dtype not in DTYPE_BYTES:
        raise ModelConfigError(f"torch_dtype {dtype!r} is not modelled")
    return DTYPE_BYTES[dtype]


def _weight_bytes(
    cfg: Config, value_bytes: int, linear: int, dense: int
) -> tuple[float | None, float | None]:
    """(mean bytes of the weights other than routed experts, bytes of routed experts), or None
    for the activation width. ``linear`` of the ``dense`` non-expert weights are projections."""
    quant = cfg.get("quantization_config")
    if quant is None:
        return None, None
    if not isinstance(quant, Mapping):
        raise ModelConfigError("'quantization_config' must be an object")
    method = quant.get("quant_method")
    if method == "mxfp4":
        return None, MXFP4_BYTES
    if method == "fp8":
        width = 1.0
    elif method in ("gptq", "awq"):
        width = _int(quant, "bits", where="quantization_config.") / 8
    else:
        raise ModelConfigError(f"quantization_config.quant_method {method!r} is not modelled")
    return (linear * width + (dense - linear) * value_bytes) / dense, width


def shape_from_hf_config(config: Config, name: str) -> ModelShape:
    """The shape of the model a Hugging Face ``config.json`` (parsed) describes, named ``name``.

    ``params_b`` counts every weight (memory); :attr:`ModelShape.active_params_b` and
    :attr:`ModelShape.flop_params_b` the ones a token uses, which set FLOPs and, with the
    experts a step's tokens are routed to, the bytes a step reads. Raises
    :class:`ModelConfigError` naming the missing or unsupported key.
    """
    cfg = _text_config(config)
    _reject_unmodelled(cfg)
    model_type = str(cfg.get("model_type", ""))
    hidden, layers = _int(cfg, "hidden_size"), _int(cfg, "num_hidden_layers")
    if not hidden or not layers:
        raise ModelConfigError("'hidden_size' and 'num_hidden_layers' must be positive")
    vocab = _int(cfg, "vocab_size")
    attn = _attention(cfg, hidden, model_type)
    mlp = _mlp(cfg, hidden, layers, model_type)
    tied = bool(cfg.get("tie_word_embeddings", False))
    embedding = vocab * hidden
    linear = layers * attn.linear + mlp.linear
    other = layers * (attn.other + 2 * hidden) + hidden + mlp.other  # + two norms a layer, final
    dense = embedding * (1 if tied else 2) + linear + other
    value_bytes = _value_bytes(cfg)
    weight_bytes, expert_bytes = _weight_bytes(cfg, value_bytes, linear, dense)
    max_context = _max_context(cfg)
    sliding = _sliding_layers(cfg, layers, model_type)
    window = _get_int(cfg, "sliding_window")
    if sliding and window is None:
        raise ModelConfigError("sliding-window layers, but config has no 'sliding_window'")
    if window is None or window >= max_context:
        sliding, window = 0, None
    try:
        return ModelShape(
            name=name,
            params_b=(dense + mlp.experts) / 1e9,
            layers=layers,
            hidden=hidden,
            kv_heads=attn.kv_heads,
            head_dim=attn.kv_head_dim,
            max_context=max_context,
            bytes_per_value=value_bytes,
            attention_dim=attn.width,
            kv_tensors=attn.kv_tensors,
            sliding_layers=sliding,
            sliding_window=window if sliding else None,
            embedding_params_b=0.0 if tied else embedding / 1e9,
            expert_params_b=mlp.experts / 1e9,
            experts=mlp.experts_per_layer,
            experts_per_token=mlp.experts_per_token,
            weight_bytes_per_value=weight_bytes,
            expert_bytes_per_value=expert_bytes,
        )
    except ValidationError as err:
        raise ModelConfigError(f"config gives an impossible shape: {err}") from err


def config_from_json(text: str) -> dict[str, Any]:
    """A ``config.json``'s text as the dict :func:`shape_from_hf_config` reads; a
    :class:`ModelConfigError` when it is not one JSON object."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"not JSON: {err}") from err
    if not isinstance(config, dict):
        raise ModelConfigError("a config.json holds one JSON object")
    return config


def model_shape_from_config(path: Path | str, name: str | None = None) -> ModelShape:
    """The shape of the model whose ``config.json`` is at ``path`` (``--model-config FILE``),
    named ``name``, else the config's ``_name_or_path``, else its directory's name. Errors are
    :class:`ModelConfigError`, prefixed with the path."""
    path = Path(path)
    try:
        config = config_from_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ModelConfigError) as err:
        raise ModelConfigError(f"{path}: {err}") from err
    label = name or config.get("_name_or_path") or path.resolve().parent.name
    try:
        return shape_from_hf_config(config, str(label))
    except ModelConfigError as err:
        raise ModelConfigError(f"{path}: {err}") from err
