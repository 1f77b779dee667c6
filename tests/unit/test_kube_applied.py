"""What the writer remembers of its applies: a digest per object, so an unchanged object is not
sent again (in any key order), a changed or deleted one is."""

import copy

import pytest

from gpumix.operator import kube
from gpumix.operator.kube import Applied, digest


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


def test_a_known_digest_is_taken_as_the_objects_and_spares_serialising_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    applied = Applied()
    known = digest(deployment(2))
    applied.record(deployment(2), known)
    serialised: list[object] = []
    monkeypatch.setattr(kube, "digest", lambda obj: serialised.append(obj) or digest(obj))
    assert applied.unchanged(deployment(2), known)
    assert not applied.unchanged(deployment(3), digest(deployment(3)))
    assert serialised == []
    assert applied.unchanged(deployment(2))  # without it, the writer digests the object
    assert len(serialised) == 1
