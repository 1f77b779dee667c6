"""What the writer remembers of its applies: a digest per object, so an unchanged object is not
sent again (in any key order), a changed or deleted one is."""

import copy

from gpumix.operator.kube import Applied


def deployment(replicas: int) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": "ns", "name": "chat-a10g", "labels": {"a": "1", "b": "2"}},
        "spec": {"replicas": replicas},
    }  # fmt: skip


def test_an_object_applied_is_unchanged_until_its_content_changes() -> None:
    applied = Applied()
    assert not applied.unchanged(deployment(2))
    applied.record(deployment(2))
    same = copy.deepcopy(deployment(2))
    same["metadata"]["labels"] = {"b": "2", "a": "1"}  # type: ignore[index]
    assert applied.unchanged(same)
    assert not applied.unchanged(deployment(3))
    other = deployment(2)
    other["metadata"] = {"namespace": "ns", "name": "chat-l4", "labels": {"a": "1", "b": "2"}}
    assert not applied.unchanged(other)


def test_a_deleted_object_is_forgotten() -> None:
    applied = Applied()
    applied.record(deployment(2))
    applied.forget(("apps/v1", "Deployment", "ns", "chat-a10g"))
    assert not applied.unchanged(deployment(2))
