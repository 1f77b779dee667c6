"""`gpumix simulate` end to end on the shipped example (pure: no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumix.cli import main

ROOT = Path(__file__).resolve().parents[3]
CHAT = str(ROOT / "manifests" / "samples" / "chat.yaml")
PROFILES = str(ROOT / "manifests" / "samples" / "profiles-llama-2-7b.yaml")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["simulate", CHAT, PROFILES, "--output", "json", *args]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return out


def test_simulate_plans_and_reports_attainment(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "--rate", "4", "--requests", "500")
    for key in ("attainment_tpot", "attainment_ttft", "requests", "cost_per_hour", "violations"):
        assert key in out
    assert out["requests"] == 500
    assert 0.9 <= float(out["attainment_tpot"]) <= 1.0  # type: ignore[arg-type]
    assert float(out["cost_per_hour"]) > 0  # type: ignore[arg-type]


def test_simulate_reads_a_plan_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["plan", CHAT, PROFILES, "--output", "json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    out = _run(capsys, "--plan", str(plan), "--requests", "300", "--router", "least-loaded",
               "--arrivals", "gamma", "--chunked-prefill")  # fmt: skip
    assert out["allocation"] == json.loads(plan.read_text())["allocation"]
    assert out["requests"] == 300


def test_simulate_replays_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "--arrivals", "trace", "--sizes", "trace", "--requests", "400",
               "--trace", "azure-code")  # fmt: skip
    assert out["requests"] == 400
    assert int(out["dropped"]) > 0  # type: ignore[call-overload]  # prompts beyond 4096 tokens


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", CHAT, PROFILES, "--requests", "200"]) == 0
    text = capsys.readouterr().out
    assert "TPOT ≤ 120 ms" in text and "violations" in text
