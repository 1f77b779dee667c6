"""Condition ``PodsMatchPlan``: do the pods gpumix renders run the engine the plan assumed?

The plan's capacity (KV cache, token budget, longest request) holds only for pods configured as
`gpumix.profiles.vllm` says. A user's ``spec.model.args`` win over those settings, and a pool's
node selector wins over a template key that contradicts it; both are the user's call, but the
status should say so, naming the field, rather than let the prediction silently not hold.
"""

from gpumix.api import ConditionStatus, GPUPool, LLMService
from gpumix.profiles.shape import ModelShape
from gpumix.profiles.vllm import contradictions, for_workload
from gpumix.reconcile.conditions import set_condition
from gpumix.reconcile.service import ServiceDecision
from gpumix.render.podtemplate import template_conflicts

CONDITION_TYPE = "PodsMatchPlan"


def pod_mismatches(
    service: LLMService, pools: list[GPUPool], shape: ModelShape | None = None
) -> list[str]:
    """Each user setting that makes the rendered pods differ from the planned ones (``pools``:
    the pools the plan uses; ``shape``: the model's, default the built-in one of its name),
    naming the field."""
    spec = service.spec
    settings = for_workload(spec.workload, shape or spec.model.name)
    args = [f"spec.model.args: {c}" for c in contradictions(settings, spec.model.args)]
    template = [c for pool in pools for c in template_conflicts(spec.template, pool)]
    return args + template


def annotate_pods(
    sd: ServiceDecision, service: LLMService, pools: list[GPUPool], *, now: str
) -> ServiceDecision:
    """A planned service's condition ``PodsMatchPlan``: False (``SpecOverridesPlan``) with what
    overrides the plan's assumptions, else True (``AsPlanned``)."""
    used = {c.pool for option, c in sd.choices.items() if (sd.target or {}).get(option)}
    mismatches = pod_mismatches(service, [p for p in pools if p.name in used], sd.shape)
    if mismatches:
        state, reason = ConditionStatus.FALSE, "SpecOverridesPlan"
        message = "the plan's prediction may not hold: " + "; ".join(mismatches)
    else:
        state, reason, message = ConditionStatus.TRUE, "AsPlanned", ""
    status = sd.status
    conds = set_condition(
        status.conditions, CONDITION_TYPE, state, reason, message,
        generation=status.observed_generation, now=now,
    )  # fmt: skip
    return sd.model_copy(update={"status": status.model_copy(update={"conditions": conds})})
