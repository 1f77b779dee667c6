"""Status patches are JSON merge patches (RFC 7386): applied to what the apiserver holds, they
must give exactly the status the planner decided, nested fields it dropped included."""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpumix.operator.loop import merge_patch
from proptest import budget


def applied(target: Any, patch: Any) -> Any:
    """RFC 7386's MergePatch(Target, Patch), as the apiserver applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = applied(out.get(key), value)
    return out


keys = st.sampled_from(["derating", "keptAtRate", "rounds", "workload", "options", "a", "b"])
leaves = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.booleans())
documents = st.recursive(
    leaves | st.lists(leaves, max_size=3),
    lambda inner: st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
statuses = st.dictionaries(keys, documents, max_size=5)


@budget(100)
@given(statuses, statuses)
def test_the_patch_applied_to_the_old_status_gives_the_new_one(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    assert applied(old, merge_patch(old, new)) == new


def test_a_nested_field_dropped_is_patched_to_null() -> None:
    old = {"derating": {"rounds": 2, "keptAtRate": 3.5}, "costPerHour": 1.0, "gone": 1}
    new = {"derating": {"rounds": 2}, "costPerHour": 1.0}
    patch = merge_patch(old, new)
    dropped = {"derating": {"rounds": 2, "keptAtRate": None}, "costPerHour": 1.0, "gone": None}
    assert patch == dropped
    assert applied(old, patch) == new
