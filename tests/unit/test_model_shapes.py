"""Model shapes from Hugging Face config.json: parameters, KV cache, windows, experts, errors."""

import json
from pathlib import Path
from typing import Any

import pytest

from gpumix.profiles import gpu_type
from gpumix.profiles.hfconfig import (
    MXFP4_BYTES,
    ModelConfigError,
    model_shape_from_config,
    shape_from_hf_config,
)
from gpumix.profiles.models import MODELS, SHIPPED_CONFIGS, UnknownModelError, model_shape
from gpumix.profiles.roofline import GIB, Roofline, estimate_profile
from gpumix.profiles.shape import ModelShape

SHIPPED: list[dict[str, Any]] = json.loads(SHIPPED_CONFIGS.read_text())["models"]
LEGACY = ["meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-70b-hf",
          "huggyllama/llama-30b"]  # fmt: skip


def shipped_config(name: str) -> dict[str, Any]:
    (entry,) = [e for e in SHIPPED if name in e["names"]]
    return dict(entry["config"])


# Parameters in billions as the model cards (or, for gpt-oss, OpenAI's model card table) state
# them: total; and active where the card gives it.
PUBLISHED = [
    ("meta-llama/Llama-3.1-8B-Instruct", 8.03),
    ("meta-llama/Llama-3.1-70B-Instruct", 70.6),
    ("meta-llama/Llama-3.2-1B-Instruct", 1.24),
    ("meta-llama/Llama-3.2-3B-Instruct", 3.21),
    ("meta-llama/Llama-3.3-70B-Instruct", 70.6),
    ("Qwen/Qwen3-0.6B", 0.6),
    ("Qwen/Qwen3-8B", 8.2),
    ("Qwen/Qwen3-14B", 14.8),
    ("Qwen/Qwen3-32B", 32.8),
    ("Qwen/Qwen3-30B-A3B", 30.5),
    ("mistralai/Mistral-7B-Instruct-v0.3", 7.25),
    ("mistralai/Mistral-Small-24B-Instruct-2501", 24.0),
    ("openai/gpt-oss-20b", 20.91),
    ("openai/gpt-oss-120b", 116.83),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 7.62),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", 14.8),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 32.8),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", 8.03),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", 70.6),
]

# Exact totals the Hugging Face Hub reports from the safetensors headers (for gpt-oss: the
# BF16 tensors plus one value per MXFP4 element).
SAFETENSORS = [
    ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
    ("meta-llama/Llama-3.2-1B-Instruct", 1_235_814_400),
    ("meta-llama/Llama-3.2-3B-Instruct", 3_212_749_824),
    ("Qwen/Qwen3-32B", 32_762_123_264),
    ("Qwen/Qwen3-30B-A3B", 30_532_122_624),
    ("openai/gpt-oss-20b", 1_804_459_584 + 24 * 32 * 2880 * 5760 * 3 // 2),
    ("openai/gpt-oss-120b", 2_167_371_072 + 36 * 128 * 2880 * 5760 * 3 // 2),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 32_763_876_352),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", 8_030_261_248),
]


@pytest.mark.parametrize(("name", "published_b"), PUBLISHED)
def test_parameters_counted_from_the_config_match_the_published_count(
    name: str, published_b: float
) -> None:
    assert model_shape(name).params_b == pytest.approx(published_b, rel=0.02)


@pytest.mark.parametrize(("name", "total"), SAFETENSORS)
def test_parameters_counted_from_the_config_match_the_checkpoint_exactly(
    name: str, total: int
) -> None:
    assert round(model_shape(name).params_b * 1e9) == total


def test_active_parameters_of_mixtures_of_experts() -> None:
    qwen = model_shape("Qwen/Qwen3-30B-A3B")
    assert qwen.active_params_b == pytest.approx(3.3, rel=0.03)  # "3.3B activated"
    # OpenAI counts the output layer but not the input embedding as active (a lookup):
    # 3.61 B and 5.13 B; that is what a token multiplies.
    assert model_shape("openai/gpt-oss-20b").flop_params_b == pytest.approx(3.61, rel=0.01)
    assert model_shape("openai/gpt-oss-120b").flop_params_b == pytest.approx(5.13, rel=0.01)
    # A dense model's active parameters are all of them.
    llama = model_shape("meta-llama/Llama-3.1-8B-Instruct")
    assert llama.active_params_b == llama.params_b
    assert llama.flop_params_b == pytest.approx(llama.params_b - 128256 * 4096 / 1e9)


def test_a_step_reads_the_experts_its_tokens_are_routed_to() -> None:
    m = model_shape("Qwen/Qwen3-30B-A3B")
    assert m.expert_share_read(1) == pytest.approx(8 / 128)
    assert m.expert_share_read(2048) == pytest.approx(1.0)
    embedding = 151936 * 2048 * 2
    assert m.weight_read_bytes(2048) == pytest.approx(m.weight_bytes - embedding)
    one = m.weight_read_bytes(1)
    assert one == pytest.approx((m.active_params_b - m.embedding_params_b) * 2e9)
    assert m.weight_read_bytes(1) < m.weight_read_bytes(8) < m.weight_read_bytes(64)


def test_memory_holds_all_experts_but_a_batch_one_decode_reads_few() -> None:
    moe = Roofline(gpu_type("h100"), model_shape("Qwen/Qwen3-30B-A3B"))
    dense = Roofline(gpu_type("h100"), model_shape("Qwen/Qwen3-32B"))
    assert moe.model.weight_bytes == pytest.approx(dense.model.weight_bytes, rel=0.1)
    assert moe.decode_step_s(1, 2000) < dense.decode_step_s(1, 2000) / 2
    assert moe.prefill_s(4096) < dense.prefill_s(4096) / 2  # FLOPs of 3 B, not 30 B


def test_gpt_oss_ships_mxfp4_experts() -> None:
    m = model_shape("openai/gpt-oss-20b")
    assert m.expert_bytes_per_value == MXFP4_BYTES == 0.53125
    experts = 24 * 32 * (3 * 2880 * 2880 + 2 * 2880 + 2880)
    dense = round(m.params_b * 1e9) - experts
    assert m.weight_bytes == pytest.approx(dense * 2 + experts * MXFP4_BYTES)
    assert m.weight_bytes / 1e9 == pytest.approx(13.8, rel=0.01)  # the checkpoint's size
    assert model_shape("openai/gpt-oss-120b").weight_bytes / 1e9 == pytest.approx(65.2, rel=0.01)
    assert m.bytes_per_value == 2  # activations and KV cache stay 16-bit


@pytest.mark.parametrize(
    ("name", "per_token"),
    [
        # layers × KV heads × head_dim × (K, V) × 2 bytes
        ("meta-llama/Llama-3.1-8B-Instruct", 32 * 8 * 128 * 2 * 2),  # 131072
        ("meta-llama/Llama-3.1-70B-Instruct", 80 * 8 * 128 * 2 * 2),
        ("meta-llama/Llama-3.2-1B-Instruct", 16 * 8 * 64 * 2 * 2),
        ("Qwen/Qwen3-8B", 36 * 8 * 128 * 2 * 2),
        ("Qwen/Qwen3-30B-A3B", 48 * 4 * 128 * 2 * 2),
        ("mistralai/Mistral-Small-24B-Instruct-2501", 40 * 8 * 128 * 2 * 2),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 28 * 4 * 128 * 2 * 2),
        # gpt-oss: only the 12 full-attention layers grow with the context
        ("openai/gpt-oss-20b", 12 * 8 * 64 * 2 * 2),
        ("meta-llama/Llama-2-7b-hf", 32 * 32 * 128 * 2 * 2),  # no GQA
    ],
)
def test_kv_bytes_per_token_with_grouped_query_attention(name: str, per_token: int) -> None:
    assert model_shape(name).kv_bytes_per_token == per_token


def test_llama_3_1_8b_caches_128_kib_per_token() -> None:
    assert model_shape("meta-llama/Llama-3.1-8B-Instruct").kv_bytes_per_token == 131072


def test_gpt_oss_sliding_layers_hold_one_window_per_request() -> None:
    m = model_shape("openai/gpt-oss-20b")
    assert (m.sliding_layers, m.sliding_window, m.full_attention_layers) == (12, 128, 12)
    assert m.kv_window_bytes == 12 * 128 * (8 * 64 * 2 * 2)
    roof = Roofline(gpu_type("h100"), m)
    usable = 80 * GIB * 0.9 - m.weight_bytes - 1 * GIB
    reserved = roof.p.max_num_seqs * m.kv_window_bytes
    assert roof.kv_capacity_tokens == int((usable - reserved) // m.kv_bytes_per_token)
    # Without windows the same model would cache twice the bytes per token; its decode steps
    # read more as the context grows.
    full = m.model_copy(update={"sliding_layers": 0, "sliding_window": None})
    assert full.kv_bytes_per_token == 2 * m.kv_bytes_per_token
    slow = Roofline(gpu_type("h100"), full)
    assert roof.decode_step_s(64, 8000) < slow.decode_step_s(64, 8000)
    assert roof.kv_capacity_tokens > 1.9 * slow.kv_capacity_tokens


def test_sliding_layers_attend_to_at_most_the_window() -> None:
    m = model_shape("openai/gpt-oss-20b")
    n = 4096
    width = 64 * 64
    assert m.attention_flops(n * n, n) == 4 * width * (12 * n * n + 12 * n * 128)
    assert m.attention_flops(64 * 64, 64) == 4 * width * 24 * 64 * 64  # shorter than a window


MISTRAL_V01 = {  # every layer slides over 4096 tokens (mistralai/Mistral-7B-v0.1)
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_a_model_whose_every_layer_slides_caches_every_layer_per_token() -> None:
    m = shape_from_hf_config(MISTRAL_V01, "mistralai/Mistral-7B-v0.1")
    assert (m.sliding_layers, m.sliding_window) == (32, 4096)
    assert m.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2  # exact up to the window
    assert m.kv_window_bytes == 0
    assert Roofline(gpu_type("a100-80gb"), m).kv_capacity_tokens > 0


def test_qwen_slides_only_when_use_sliding_window_is_set() -> None:
    cfg = shipped_config("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") | {"sliding_window": 4096}
    assert shape_from_hf_config(cfg, "off").sliding_layers == 0  # use_sliding_window: false
    del cfg["use_sliding_window"]
    assert shape_from_hf_config(cfg, "default").sliding_layers == 0  # Qwen's default: off
    on = shape_from_hf_config(cfg | {"use_sliding_window": True, "max_window_layers": 21}, "on")
    assert (on.sliding_layers, on.sliding_window) == (28 - 21, 4096)
    with pytest.raises(ModelConfigError, match="'max_window_layers'"):
        shape_from_hf_config(cfg | {"use_sliding_window": True}, "on")


def test_a_window_as_long_as_the_context_is_no_window() -> None:
    cfg = MISTRAL_V01 | {"sliding_window": 32768}
    assert shape_from_hf_config(cfg, "m").sliding_layers == 0


def test_gemma_style_sliding_window_pattern() -> None:
    cfg = MISTRAL_V01 | {"sliding_window_pattern": 4}  # every 4th layer attends to everything
    assert shape_from_hf_config(cfg, "m").sliding_layers == 24


def test_unmodelled_layer_kinds_are_refused() -> None:
    cfg = shipped_config("openai/gpt-oss-20b")
    cfg["layer_types"] = ["linear_attention", "full_attention"] * 12
    with pytest.raises(ModelConfigError, match="linear_attention"):
        shape_from_hf_config(cfg, "m")
    with pytest.raises(ModelConfigError, match="chunked attention"):
        shape_from_hf_config(MISTRAL_V01 | {"attention_chunk_size": 8192}, "m")


DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json: MLA, 256 routed + 1 shared expert, FP8
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "topk_method": "noaux_tc", "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}  # fmt: skip


def test_deepseek_v3_latent_attention_and_shared_experts() -> None:
    m = shape_from_hf_config(DEEPSEEK_V3, "deepseek-ai/DeepSeek-V3")
    assert m.params_b == pytest.approx(671, rel=0.01)  # 671 B without the MTP module
    assert m.active_params_b == pytest.approx(37, rel=0.03)  # "37B activated"
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2  # one latent per token and layer
    assert m.max_context == 4096 * 40  # yarn
    assert m.expert_bytes_per_value == 1.0  # fp8 linear layers; embeddings stay 16-bit
    assert m.weight_bytes_per_value is not None
    assert 1 < m.weight_bytes_per_value < 1.2


QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B: 60 routed experts, one wide shared expert
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "vocab_size": 151936, "max_position_embeddings": 8192, "tie_word_embeddings": False,
}  # fmt: skip


def test_qwen_moe_shared_expert_is_always_active() -> None:
    m = shape_from_hf_config(QWEN15_MOE, "Qwen/Qwen1.5-MoE-A2.7B")
    assert m.params_b == pytest.approx(14.3, rel=0.02)
    assert m.active_params_b == pytest.approx(2.7, rel=0.03)
    half = shape_from_hf_config(QWEN15_MOE | {"mlp_only_layers": list(range(12))}, "half")
    assert half.expert_params_b == pytest.approx(m.expert_params_b / 2)


def test_quantized_linear_layers() -> None:
    cfg = shipped_config("Qwen/Qwen3-8B")
    plain = shape_from_hf_config(cfg, "bf16")
    gptq = shape_from_hf_config(cfg | {"quantization_config": {"quant_method": "gptq",
                                                                "bits": 4}}, "int4")  # fmt: skip
    embeddings = 2 * 151936 * 4096 * 2
    linear = plain.weight_bytes - embeddings  # norms are a rounding error here
    assert gptq.weight_bytes == pytest.approx(embeddings + linear / 4, rel=1e-4)
    assert gptq.kv_bytes_per_token == plain.kv_bytes_per_token
    with pytest.raises(ModelConfigError, match="'bitsandbytes' is not modelled"):
        shape_from_hf_config(cfg | {"quantization_config": {"quant_method": "bitsandbytes"}}, "x")
    with pytest.raises(ModelConfigError, match=r"'quantization_config\.bits'"):
        shape_from_hf_config(cfg | {"quantization_config": {"quant_method": "awq"}}, "x")


def test_a_multimodal_configs_text_config_describes_the_model() -> None:
    text = shipped_config("mistralai/Mistral-Small-24B-Instruct-2501")
    dtype = text.pop("torch_dtype")
    nested = {"model_type": "mistral3", "torch_dtype": dtype, "text_config": text,
              "vision_config": {"hidden_size": 1024}}  # fmt: skip
    shape = shape_from_hf_config(nested, "mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    assert shape.params_b == model_shape("mistralai/Mistral-Small-24B-Instruct-2501").params_b


def test_context_follows_vllm_rope_scaling() -> None:
    assert model_shape("openai/gpt-oss-20b").max_context == 4096 * 32  # yarn
    assert model_shape("meta-llama/Llama-3.1-8B-Instruct").max_context == 131072  # llama3
    assert model_shape("Qwen/Qwen3-8B").max_context == 40960
    linear = MISTRAL_V01 | {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert shape_from_hf_config(linear, "m").max_context == 65536


@pytest.mark.parametrize(
    "key",
    ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
     "intermediate_size", "max_position_embeddings"],
)  # fmt: skip
def test_a_config_missing_a_key_names_it(key: str) -> None:
    cfg = shipped_config("meta-llama/Llama-3.1-8B-Instruct")
    del cfg[key]
    with pytest.raises(ModelConfigError, match=f"config has no '{key}'"):
        shape_from_hf_config(cfg, "m")


def test_a_mixture_of_experts_without_experts_per_token_names_the_key() -> None:
    cfg = shipped_config("Qwen/Qwen3-30B-A3B")
    del cfg["num_experts_per_tok"]
    with pytest.raises(ModelConfigError, match="'num_experts_per_tok'"):
        shape_from_hf_config(cfg, "m")


def test_a_wrongly_typed_value_is_named() -> None:
    cfg = shipped_config("Qwen/Qwen3-8B") | {"num_key_value_heads": "8"}
    with pytest.raises(ModelConfigError, match="'num_key_value_heads' must be"):
        shape_from_hf_config(cfg, "m")


def test_reading_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "Qwen3-8B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(shipped_config("Qwen/Qwen3-8B")))
    by_dir = model_shape_from_config(path)
    assert by_dir.name == "Qwen3-8B"
    assert by_dir.params_b == model_shape("Qwen/Qwen3-8B").params_b
    assert model_shape_from_config(str(path), "Qwen/Qwen3-8B") == model_shape("Qwen/Qwen3-8B")
    path.write_text(json.dumps({**shipped_config("Qwen/Qwen3-8B"), "_name_or_path": "q/x"}))
    assert model_shape_from_config(path).name == "q/x"


def test_errors_reading_a_config_file_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    cfg = shipped_config("Qwen/Qwen3-8B")
    del cfg["vocab_size"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError, match=r"config\.json: config has no 'vocab_size'"):
        model_shape_from_config(path)
    path.write_text("{not json")
    with pytest.raises(ModelConfigError, match=r"config\.json: "):
        model_shape_from_config(path)
    with pytest.raises(ModelConfigError, match=r"missing\.json"):
        model_shape_from_config(tmp_path / "missing.json")


EXPECTED_SHIPPED = {
    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mistral-Small-24B-Instruct-2501", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
}  # fmt: skip


def test_every_shipped_shape_names_its_source() -> None:
    assert {e["names"][0] for e in SHIPPED} == EXPECTED_SHIPPED
    for entry in SHIPPED:
        repo = entry["names"][0]
        assert entry["source"] == f"https://huggingface.co/{repo}/blob/main/config.json"
        for name in entry["names"]:
            assert MODELS[name].name == name
            assert MODELS[name].model_copy(update={"name": repo}) == MODELS[repo]


def test_lookup_is_case_insensitive_and_keeps_the_name_given() -> None:
    shape = model_shape("qwen/qwen3-8b")
    assert shape.name == "qwen/qwen3-8b"
    assert shape.params_b == model_shape("Qwen/Qwen3-8B").params_b
    assert model_shape("Qwen/Qwen3-8B").name == "Qwen/Qwen3-8B"


def test_an_unknown_model_lists_the_known_ones_and_suggests_its_config() -> None:
    with pytest.raises(UnknownModelError) as raised:
        model_shape("example/unshaped-7b")
    message = str(raised.value)
    assert message.startswith("no built-in shape for model 'example/unshaped-7b'; known: ")
    assert "openai/gpt-oss-20b" in message
    assert "meta-llama/Llama-2-7b-hf" in message
    assert "--model-config" in message
    assert isinstance(raised.value, KeyError)  # callers catch KeyError


@pytest.mark.parametrize("name", LEGACY)
def test_the_measured_models_numbers_are_unchanged(name: str) -> None:
    """The calibration is fitted to these four: every formula must reduce to the old one."""
    m = model_shape(name)
    assert (m.sliding_layers, m.experts, m.embedding_params_b, m.kv_tensors) == (0, 0, 0.0, 2)
    assert m.weight_bytes == m.params_b * 1e9 * 2
    assert m.kv_bytes_per_token == 2 * m.layers * m.kv_heads * m.head_dim * 2
    assert m.kv_window_bytes == 0
    assert m.active_params_b == m.flop_params_b == m.params_b
    assert m.weight_read_bytes(1) == m.weight_read_bytes(512) == m.weight_bytes
    assert m.attention_flops(1000.0**2, 1000) == 4 * m.layers * 1000.0**2 * m.hidden
    roof = Roofline(gpu_type("a100-80gb"), m, 2)
    bw = roof._bw
    flops = roof._flops
    over = roof.p.step_overhead_ms / 1e3
    read = m.weight_bytes + 8 * 1500 * m.kv_bytes_per_token

    def comm(tokens: int) -> float:  # two all-reduces a layer, each a 2-step ring on 2 GPUs
        step = roof.p.allreduce_latency_us * 1e-6 + tokens * m.hidden * 2 / 2 / (
            roof.p.allreduce_gbps * 1e9
        )
        return 2 * m.layers * 2 * step

    decode = over + max(read / bw, 2 * m.params_b * 1e9 * 8 / flops) + comm(8)
    assert roof.decode_step_s(8, 1500) == pytest.approx(decode, rel=1e-12)
    compute = 2 * m.params_b * 1e9 * 700 + 4 * m.layers * 700**2 * m.hidden
    prefill = over + max(compute / flops, m.weight_bytes / bw) + comm(700)
    assert roof.prefill_s(700) == pytest.approx(prefill, rel=1e-12)


def test_legacy_shapes_are_the_hand_entered_ones() -> None:
    assert model_shape("meta-llama/Llama-2-7b-hf") == ModelShape(
        name="meta-llama/Llama-2-7b-hf", params_b=6.74, layers=32, hidden=4096, kv_heads=32,
        head_dim=128, max_context=4096,
    )  # fmt: skip


def test_a_profile_estimate_for_a_current_model() -> None:
    profile = estimate_profile(
        gpu_type("h100"), model_shape("openai/gpt-oss-20b"),
        input_edges=[1, 1000, 4000], output_edges=[1, 500], tpots_ms=[50.0],
    )  # fmt: skip
    assert profile.spec.model == "openai/gpt-oss-20b"
    assert all(r > 0 for row in profile.spec.tables[0].max_tput for r in row)
