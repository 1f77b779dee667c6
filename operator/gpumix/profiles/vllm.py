"""The vLLM engine settings a plan assumes, in one place.

The roofline's KV capacity (memory utilisation, batch limit), the simulator's engines (block size,
scheduling, the token budget of a step, the longest request) and the arguments of the vLLM pods
gpumix deploys all read :class:`VllmSettings`, so the pods that run are the pods that were planned
and simulated. Left to its defaults, vLLM would size the longest request by the model's full
context (131k tokens for Llama 3.1) and pick a token budget per GPU type; both change what a pod
holds and how fast it prefills, so gpumix passes every setting explicitly.

A user's own ``spec.model.args`` still win (vLLM takes the last value of a flag, and the
renderer leaves its own out); :func:`contradictions` says which of them the plan did not assume.
Prefix caching (vLLM's default) is not simulated: it only makes real pods faster than predicted.
"""

from pydantic import BaseModel, ConfigDict, Field

from gpumix.api import Workload
from gpumix.profiles.models import UnknownModelError, model_shape
from gpumix.profiles.shape import ModelShape

MIN_TOKEN_BUDGET = 2048
"""vLLM's smallest default token budget per step (and its chunk size with chunked prefill)."""


class VllmSettings(BaseModel):
    """What the profiles and the simulator assume of every vLLM pod (vLLM's names, snake_case)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of GPU memory for weights, activations, KV."
    )
    block_size: int = Field(default=16, ge=1, description="Tokens per paged KV-cache block.")
    max_num_seqs: int = Field(default=256, ge=1, description="Most requests in a running batch.")
    enable_chunked_prefill: bool = Field(
        default=False,
        description="Off: a step prefills whole prompts or decodes (what the profiles model).",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="Longest prompt + output; None: the model's own limit."
    )
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per step; None: :func:`token_budget`."
    )


ASSUMED = VllmSettings()
"""The settings every profile and simulation starts from (the workload adds the lengths)."""

_FLAGS: tuple[tuple[str, str], ...] = (
    ("max_model_len", "--max-model-len"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("block_size", "--block-size"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
)
_CHUNKED = "--enable-chunked-prefill"
_NO_CHUNKED = "--no-enable-chunked-prefill"


def token_budget(chunked_prefill: bool, max_model_len: int) -> int:
    """Tokens one step may schedule: a chunk size with chunked prefill; without it, at least the
    longest prompt (vLLM refuses a smaller budget, as a prompt could never be scheduled)."""
    return MIN_TOKEN_BUDGET if chunked_prefill else max(MIN_TOKEN_BUDGET, max_model_len)


def max_model_len(workload: Workload, model: str | ModelShape) -> int:
    """The workload's longest request (last input edge + last output edge), capped by the
    model's context when gpumix knows its shape (``model``: the shape, e.g. from the service's
    config.json, or a name to look up among the built-in ones): what a pod must hold, not the
    model's 131k."""
    longest = workload.input_edges[-1] + workload.output_edges[-1]
    try:
        shape = model if isinstance(model, ModelShape) else model_shape(model)
    except UnknownModelError:
        return longest
    return min(longest, shape.max_context)


def for_workload(
    workload: Workload, model: str | ModelShape, base: VllmSettings = ASSUMED
) -> VllmSettings:
    """``base`` with every setting resolved for this workload and model (no ``None`` left)."""
    length = base.max_model_len or max_model_len(workload, model)
    budget = base.max_num_batched_tokens or token_budget(base.enable_chunked_prefill, length)
    return base.model_copy(update={"max_model_len": length, "max_num_batched_tokens": budget})


def _flag_values(args: list[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` pairs of a vLLM command line (``_`` read as ``-``,
    as vLLM does); a boolean flag maps to ``""``. The last occurrence wins, as in argparse."""
    values: dict[str, str] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        name = "--" + name[2:].replace("_", "-")
        if not eq:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = "" if nxt.startswith("--") else nxt
        values[name] = value
    return values


def _user_chunked(given: dict[str, str]) -> bool | None:
    """The user's chunked-prefill choice, None when they made none."""
    if _CHUNKED in given:
        return given[_CHUNKED].lower() not in ("false", "0")
    return False if _NO_CHUNKED in given else None


def _with_user_lengths(settings: VllmSettings, given: dict[str, str]) -> VllmSettings:
    """``settings`` with the token budget following a user's own ``--max-model-len`` or
    chunking (unless they set the budget too): without chunked prefill vLLM refuses a budget
    below the longest request, so ours must grow with theirs."""
    if "--max-num-batched-tokens" in given:
        return settings
    chunked = _user_chunked(given)
    chunked = settings.enable_chunked_prefill if chunked is None else chunked
    try:
        length = int(given.get("--max-model-len", settings.max_model_len or 0))
    except ValueError:
        return settings
    if not length:
        return settings
    return settings.model_copy(update={"max_num_batched_tokens": token_budget(chunked, length)})


def engine_args(settings: VllmSettings, user_args: list[str]) -> list[str]:
    """The flags for ``settings``, except those the user's own args set (theirs win)."""
    given = _flag_values(user_args)
    settings = _with_user_lengths(settings, given)
    out: list[str] = []
    for field, flag in _FLAGS:
        value = getattr(settings, field)
        if value is not None and flag not in given:
            out += [flag, str(value)]
    if not {_CHUNKED, _NO_CHUNKED} & given.keys():
        out.append(_CHUNKED if settings.enable_chunked_prefill else _NO_CHUNKED)
    return out


def contradictions(settings: VllmSettings, user_args: list[str]) -> list[str]:
    """Each user arg that sets an engine setting to something the plan did not assume."""
    given = _flag_values(user_args)
    out = []
    for field, flag in _FLAGS:
        assumed = getattr(settings, field)
        if flag not in given or assumed is None:
            continue
        try:
            same = float(given[flag]) == float(assumed)
        except ValueError:
            same = False
        if not same:
            out.append(f"{flag} {given[flag]} (the plan assumes {assumed})")
    chunked = _user_chunked(given)
    if chunked is not None and chunked != settings.enable_chunked_prefill:
        assumed = "on" if settings.enable_chunked_prefill else "off"
        flag = _CHUNKED if chunked else _NO_CHUNKED
        out.append(f"{flag} (the plan assumes chunked prefill {assumed})")
    return out
