"""Status conditions the Kubernetes way: one per type, lastTransitionTime moves only on a flip."""

from gpumix.api import Condition, ConditionStatus


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """`conditions` with `type_` set; other types keep their place, order is stable."""
    old = next((c for c in conditions if c.type == type_), None)
    changed = old is None or old.status != status
    new = Condition.model_validate(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now if changed or old is None else old.last_transition_time,
            "observedGeneration": generation,
        }
    )
    if old is None:
        return [*conditions, new]
    return [new if c.type == type_ else c for c in conditions]


def remove_condition(conditions: list[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.type != type_]


def condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)
