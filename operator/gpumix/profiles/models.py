"""The models gpumix knows by name, and their shapes (what the roofline estimator needs).

Two kinds of entries:

- the four 2023 models the shipped profile data measures (`gpumix.profiles.calibration` fits
  the roofline to them), entered by hand from their published configs: fp16, full attention,
  dense; their numbers must not move, or the calibration does;
- current open models, computed by `gpumix.profiles.hfconfig` from excerpts of their Hugging
  Face config.json shipped in ``model_configs.json``, each with its source.

A model not listed here takes its shape from its own config.json
(`gpumix.profiles.hfconfig.model_shape_from_config`).
"""

import json
from pathlib import Path

from gpumix.profiles.hfconfig import shape_from_hf_config
from gpumix.profiles.shape import ModelShape

__all__ = ["MODELS", "SHIPPED_CONFIGS", "ModelShape", "UnknownModelError", "model_shape"]

SHIPPED_CONFIGS = Path(__file__).with_name("model_configs.json")

_MEASURED = (
    ModelShape(name="meta-llama/Llama-2-7b-hf", params_b=6.74, layers=32, hidden=4096,
               kv_heads=32, head_dim=128, max_context=4096),
    ModelShape(name="meta-llama/Llama-2-13b-hf", params_b=13.0, layers=40, hidden=5120,
               kv_heads=40, head_dim=128, max_context=4096),
    ModelShape(name="meta-llama/Llama-2-70b-hf", params_b=69.0, layers=80, hidden=8192,
               kv_heads=8, head_dim=128, max_context=4096),
    ModelShape(name="huggyllama/llama-30b", params_b=32.5, layers=60, hidden=6656,
               kv_heads=52, head_dim=128, max_context=2048),
)  # fmt: skip


def _shipped(path: Path) -> list[ModelShape]:
    """One shape per name of every model in ``path`` (see its ``about``)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [
        shape_from_hf_config(entry["config"], name)
        for entry in doc["models"]
        for name in entry["names"]
    ]


MODELS: dict[str, ModelShape] = {m.name: m for m in (*_MEASURED, *_shipped(SHIPPED_CONFIGS))}


class UnknownModelError(KeyError):
    def __str__(self) -> str:
        return (
            f"no built-in shape for model {self.args[0]!r}; known: {', '.join(sorted(MODELS))}. "
            "For another model, give its Hugging Face config.json (--model-config FILE)"
        )


def model_shape(name: str) -> ModelShape:
    """The shape of a known model, by Hugging Face id (case-insensitive, as the Hub's ids are;
    the shape carries ``name`` as given)."""
    shape = MODELS.get(name)
    if shape is not None:
        return shape
    folded = {known.casefold(): m for known, m in MODELS.items()}.get(name.casefold())
    if folded is None:
        raise UnknownModelError(name)
    return folded.model_copy(update={"name": name})
