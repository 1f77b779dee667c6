"""The shape of a service's model: its config.json from a ConfigMap (``spec.model.config``), else
the shape gpumix has built in for ``spec.model.name``.

The shape decides whether a replica holds the model (:mod:`gpumix.problem`), vLLM's
``--max-model-len`` (:mod:`gpumix.profiles.vllm`), the engines the plan is simulated with
(:mod:`gpumix.attainment`) and the KV bytes a migration moves (:mod:`gpumix.operator.kvtask`).
Pure: the operator watches the ConfigMaps like every other object and hands their bodies in
(:mod:`gpumix.operator.view`); the config.json is parsed by :mod:`gpumix.profiles.hfconfig`.
A ConfigMap that is missing, lacks the key or holds no usable config.json is an error naming the
field; the planner then keeps the last plan (:func:`gpumix.reconcile.service._keep`).
"""

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from gpumix.api import ConfigMapKeySelector, LLMService
from gpumix.profiles.hfconfig import ModelConfigError, config_from_json, shape_from_hf_config
from gpumix.profiles.models import UnknownModelError, model_shape
from gpumix.profiles.shape import ModelShape

FIELD = "spec.model.config.configMapKeyRef"
REASON = "InvalidModelConfig"
"""Ready's (and Planned's) reason while the ConfigMap gives no shape."""

ConfigMaps = Mapping[tuple[str, str], Mapping[str, Any]]
"""(namespace, name) → a ConfigMap's body (``data``, ``binaryData``)."""


def config_map_ref(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the ConfigMap a raw LLMService body names in ``spec.model.config``;
    read leniently (an invalid spec names none), so the view can tell which ConfigMaps matter."""
    try:
        name = body["spec"]["model"]["config"]["configMapKeyRef"]["name"]
    except (KeyError, TypeError):
        return None
    if not isinstance(name, str):
        return None
    return str((body.get("metadata") or {}).get("namespace", "")), name


def _value(body: Mapping[str, Any], key: str) -> str | None:
    """The key's value as text, from ``data`` or (base64) ``binaryData``; None when absent."""
    data = body.get("data") or {}
    if key in data:
        return str(data[key])
    binary = (body.get("binaryData") or {}).get(key)
    if binary is None:
        return None
    try:
        return base64.b64decode(binary, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as err:
        raise ModelConfigError(f"{FIELD}.key: binaryData {key!r} is not UTF-8 text: {err}") from err


def shape_from_config_map(
    body: Mapping[str, Any] | None, ref: ConfigMapKeySelector, namespace: str, model: str
) -> ModelShape:
    """The shape of ``model`` from the config.json under ``ref.key`` of ConfigMap ``body``
    (``None``: not found). Raises :class:`ModelConfigError` naming the field at fault."""
    where = f"ConfigMap {ref.name!r}"
    if body is None:
        raise ModelConfigError(
            f"{FIELD}.name: {where} not found in namespace {namespace!r} (create it, e.g. "
            f"`kubectl create configmap {ref.name} --from-file={ref.key}=config.json`)"
        )
    text = _value(body, ref.key)
    if text is None:
        keys = sorted({*(body.get("data") or {}), *(body.get("binaryData") or {})})
        has = f"its keys: {', '.join(keys)}" if keys else "it has no data"
        raise ModelConfigError(f"{FIELD}.key: {where} has no key {ref.key!r} ({has})")
    try:
        return shape_from_hf_config(config_from_json(text), model)
    except ModelConfigError as err:
        raise ModelConfigError(f"{FIELD}: {ref.key!r} of {where}: {err}") from err


def service_shape(service: LLMService, config_maps: ConfigMaps) -> ModelShape | None:
    """The shape to plan ``service`` with: from the ConfigMap ``spec.model.config`` names (it
    wins over a built-in shape), else the built-in shape of ``spec.model.name``, else ``None``
    (a model gpumix does not know: planned from its GPUProfiles alone, see
    :func:`unknown_model_message`). Raises :class:`ModelConfigError` naming the field when the
    ConfigMap gives no shape."""
    model = service.spec.model
    if model.config is not None:
        ref = model.config.config_map_key_ref
        namespace = str(service.metadata.get("namespace", ""))
        body = config_maps.get((namespace, ref.name))
        return shape_from_config_map(body, ref, namespace, model.name)
    try:
        return model_shape(model.name)
    except UnknownModelError:
        return None


def unknown_model_message(model: str) -> str:
    """What a service of a model with no built-in shape and no ``spec.model.config`` is told."""
    return (
        f"no built-in shape for model {model!r}: put its Hugging Face config.json in a ConfigMap "
        f"and name it in {FIELD} (until then the plan comes from the GPUProfiles alone, is not "
        "simulated, and vLLM's --max-model-len is not capped by the model's context)"
    )
