"""The offline parts of gpumix.operator.election: the follower's /healthz, the write gate and
the settings it reads from the pod. The campaign against a real apiserver is
tests/e2e/test_leader_election.py."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NoReturn

import pytest
from kubernetes import client

from gpumix.operator import election
from gpumix.operator.election import FollowerHealth, LeaseElector, default_identity
from gpumix.reconcile.leadership import Timing


class LostError(Exception):
    pass


def lose(why: str) -> NoReturn:
    raise LostError(why)


def elector(timing: Timing | None = None) -> LeaseElector:
    return LeaseElector(
        client.ApiClient(),
        name="gpumix-operator",
        namespace="gpumix-system",
        identity="pod-a",
        timing=timing or Timing(),
        on_lost=lose,
    )


def get(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_follower_is_healthy_while_its_campaign_attempts() -> None:
    e = elector()
    health = FollowerHealth("127.0.0.1", 0, e)
    try:
        url = f"http://127.0.0.1:{health.port}/healthz"
        status, body = get(url)
        assert status == 200
        assert body == {"role": "follower", "identity": "pod-a", "lease": "gpumix-system/"
                        "gpumix-operator", "holder": "", "campaign": "running"}  # fmt: skip
        e.last_attempt = time.monotonic() - 60  # a campaign thread that hangs
        status, body = get(url)
        assert status == 503
        assert body["campaign"].startswith("stalled")
    finally:
        health.close()


def test_no_write_passes_the_gate_without_the_lease() -> None:
    e = elector()
    with pytest.raises(LostError, match="apply attempted without a valid Lease"):
        e.check("apply")
    assert not e.may_act()


def test_timings_that_cannot_exclude_are_refused() -> None:
    with pytest.raises(ValueError, match="must exceed the renew deadline"):
        elector(Timing(lease_duration_s=5, renew_deadline_s=5, retry_period_s=1))


def test_identity_and_namespace_come_from_the_downward_api(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POD_NAME", "gpumix-7c9-x2")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert default_identity() == "gpumix-7c9-x2"
    assert election.default_namespace("gpumix-system") == "ops"
    monkeypatch.delenv("POD_NAME")
    monkeypatch.delenv("POD_NAMESPACE")
    assert default_identity().endswith(f"_{os.getpid()}")
    monkeypatch.setattr(election, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    assert election.default_namespace("gpumix-system") == "gpumix-system"
