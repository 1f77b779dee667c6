"""`gpumix` end to end in-process: plan the shipped example, read Mélange configs, report errors."""

import json
from pathlib import Path

import pytest
import yaml

from gpumix.api import GPUProfile
from gpumix.cli import main

from .conftest import EXAMPLES, MELANGE_CONFIG

EXAMPLE = [str(EXAMPLES / "chat.yaml"), str(EXAMPLES / "profiles-llama-2-7b.yaml")]


def test_plan_example_prints_mix_and_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "LLMService default/chat" in out
    assert "single-type baselines" in out
    assert "the mix saves" in out


def test_plan_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *EXAMPLE, "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"status", "allocation", "cost_per_hour", "baselines", "solve_seconds"} <= set(result)
    assert result["status"] == "optimal"
    feasible = [c for c in result["baselines"].values() if c is not None]
    assert feasible
    assert result["cost_per_hour"] <= min(feasible) + 1e-9
    assert set(result["allocation"]) == {"l4", "a10g", "a100-80gb", "h100"}


def test_cbc_and_paper_formulation_agree(capsys: pytest.CaptureFixture[str]) -> None:
    costs = []
    for extra in (["--solver", "cbc"], ["--formulation", "paper"], []):
        args = ["plan", *EXAMPLE, "--output", "json", "--planner", "melange", *extra]
        assert main(args) == 1  # Mélange's optimum misses the attainment target
        costs.append(json.loads(capsys.readouterr().out)["cost_per_hour"])
    assert costs[0] == pytest.approx(costs[2])
    assert costs[1] == pytest.approx(costs[2])


def test_a_plan_below_its_target_says_how_much_misses_even_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Mélange's plan of the demo misses 99%, partly with long prompts and few output tokens on
    cheap types: requests no capacity recovers, which the table counts."""
    assert main(["plan", *EXAMPLE, "--planner", "melange"]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "predicted attainment" in x)
    assert "BELOW the 99% target" in line
    alone = float(line.split("% miss even alone")[0].rsplit(" ", 1)[1])
    assert 0 < alone < 100 - float(line.split("predicted attainment ")[1].split("%")[0])


def test_a_plan_whose_misses_alone_rule_out_the_target_says_what_to_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo with a 60 ms TTFT SLO: a long prompt's prefill alone takes longer than that on
    every GPU type, for more requests than the 99% target allows. The warning says how many,
    that replicas do not recover them, and which fields to change."""
    doc = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    doc["spec"]["slo"]["ttftMs"] = 60
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path), EXAMPLE[1]]) == 1
    [warning] = capsys.readouterr().err.splitlines()
    share = float(warning.split("% of its requests miss the SLO even alone")[0].rsplit(" ", 1)[1])
    assert share > 1
    assert "more than the 1.0% the target allows, and more replicas do not recover" in warning
    assert warning.endswith("relax spec.slo.tpotMs or ttftMs, lower spec.slo.attainmentTarget "
                            "or add a pool of a faster GPU type")  # fmt: skip


def test_a_plan_past_the_kv_headroom_says_which_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """The routable ILP's plan of the demo meets 99% in its prediction, but with its pods' KV
    cache over half full on average: below the promise, and the line must say why."""
    args = ["plan", *EXAMPLE, "--planner", "melange", "--formulation", "routable"]
    assert main(args) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "predicted attainment" in x)
    met = float(line.split("predicted attainment ")[1].split("%")[0])
    assert met >= 99 and "BELOW the 99% target" in line
    full = [part for part in line.split("; ") if "KV cache" in part]
    assert full, line
    for part in full:
        share = float(part.split("KV cache ")[1].split("%")[0])
        assert share > 50 and "(at most 50%)" in part, part


def test_melange_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "melange.json"
    path.write_text(json.dumps(MELANGE_CONFIG))
    assert main(["plan", "--melange-config", str(path), "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "optimal"
    assert set(result["allocation"]) == {"A10G", "A100"}
    assert result["cost_per_hour"] <= min(result["baselines"].values())


def test_bad_manifest_names_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    doc["spec"]["workload"]["requestRate"] = -3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path), EXAMPLE[1]]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml (document 1): LLMService 'chat' is invalid" in err
    assert "spec.workload.requestRate: Input should be greater than or equal to 0" in err


def test_unservable_bucket_is_an_error_naming_bucket_and_slo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    doc["spec"]["slo"]["tpotMs"] = 40  # L4 cannot meet it at all; large buckets nobody can
    doc["spec"]["workload"]["inputEdges"][-1] = 4000
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path), EXAMPLE[1]]) == 1
    err = capsys.readouterr().err
    assert "cannot be served by any allowed GPU type within TPOT 40 ms" in err
    assert "input 2048–4000" in err


def test_profile_estimate_emits_valid_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["profile", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a10g,h100",
            "--input-edges", "1,100,1000", "--output-edges", "1,100"]  # fmt: skip
    assert main(args) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    profiles = [GPUProfile.model_validate(d) for d in docs]
    assert [p.spec.gpu_type for p in profiles] == ["a10g", "h100"]
    assert all(t.max_tput[0][0] > 0 for p in profiles for t in p.spec.tables or [])


def test_profile_estimate_unknown_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["profile", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "tpu",
            "--input-edges", "1,100", "--output-edges", "1,100"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert "argument --gpu: unknown GPU type 'tpu'" in capsys.readouterr().err


def _two_services(tmp_path: Path) -> list[str]:
    chat = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    batch = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    batch["metadata"]["name"] = "chat-batch"
    batch["spec"]["priority"] = "Batch"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([chat, batch]))
    return [str(path), EXAMPLE[1]]


def test_several_services_are_planned_jointly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *_two_services(tmp_path), "--output", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in lines] == ["default/chat", "default/chat-batch"]
    for r in lines:
        assert {"status", "allocation", "cost_per_hour", "baselines", "solve_seconds"} <= set(r)
        assert r["status"] == "optimal" and r["unserved_fraction"] == 0
        assert r["cost_per_hour"] <= min(c for c in r["baselines"].values() if c) + 1e-9
        assert r["joint"]["objective"] == "min-cost"
    assert lines[0]["joint"]["cost_per_hour"] == pytest.approx(
        sum(r["cost_per_hour"] for r in lines)
    )
    assert main(["plan", *_two_services(tmp_path)]) == 0
    assert "joint plan (min-cost)" in capsys.readouterr().out


def test_max_throughput_under_a_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", *_two_services(tmp_path), "--output", "json"]
    assert main([*args, "--objective", "throughput", "--budget", "10"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    joint = lines[0]["joint"]
    assert joint["objective"] == "max-throughput"
    assert 0 < joint["throughput_scale"] < 1  # 10 $/h cannot serve both demands in full
    assert joint["cost_per_hour"] <= 10 + 1e-6
    # A single service with a budget goes through the joint planner too; keys unchanged.
    assert main(["plan", *EXAMPLE, "--output", "json", "--budget", "100"]) == 0
    (single,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"status", "allocation", "cost_per_hour", "baselines", "solve_seconds"} <= set(single)
    assert single["status"] == "optimal"


def test_min_replicas_in_a_joint_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _two_services(tmp_path)
    chat, batch = yaml.safe_load_all(Path(paths[0]).read_text())
    batch["spec"]["minReplicas"] = 4
    Path(paths[0]).write_text(yaml.safe_dump_all([chat, batch]))
    assert main(["plan", *paths, "--output", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sum(lines[0]["allocation"].values()) < 4 <= sum(lines[1]["allocation"].values())


@pytest.mark.parametrize(("field", "value"), [("maxReplicas", 2), ("minReplicas", 5)])
def test_one_service_keeps_its_replica_bounds(
    field: str, value: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unbounded, the example plans 3 replicas; a single service's maxReplicas / minReplicas
    hold in both outputs (it goes through the joint planner, as several services do)."""
    doc = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    doc["spec"][field] = value
    path = tmp_path / "bounded.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = ["plan", str(path), EXAMPLE[1]]
    assert main([*args, "--output", "json"]) == 0
    (result,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    replicas = sum(result["allocation"].values())
    assert replicas <= value if field == "maxReplicas" else replicas >= value
    assert result["status"] == "optimal" and result["unserved_fraction"] == 0
    assert result["reasons"] == []
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    for option, count in result["allocation"].items():
        if count:
            assert any(line.startswith(f"  {option:<16}{count:>9}") for line in table)


def test_an_unreachable_min_replicas_floor_is_noted_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    doc["spec"]["minReplicas"] = 50
    path = tmp_path / "floor.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path), EXAMPLE[1], "--budget", "10"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  note:")]
    assert len(notes) == 1 and "minReplicas 50 not reachable" in notes[0], notes


def test_max_throughput_without_pool_limits_or_budget_says_what_to_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without GPUPools every profiled GPU type is an uncapped pool: with no budget either,
    the throughput has no maximum (it used to print ×1e6 with a million replicas)."""
    args = ["plan", *EXAMPLE, "--objective", "throughput"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "error: max-throughput is unbounded: with no budget, no maxReplicas and no GPU limit on "
        "pools a100-80gb, a10g, "
    )
    assert "(GPUPool spec.maxGPUs, --budget, LLMService spec.budget or spec.maxReplicas)" in (
        captured.err
    )
    assert main([*args, "--output", "json"]) == 2
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "unbounded" and "set a pool's GPU limit" in result["error"]
    assert main([*args, "--budget", "20"]) == 0
