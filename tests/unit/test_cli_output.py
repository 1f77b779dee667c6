"""Machine-readable output is pure: the installed console script's whole stdout parses.

HiGHS and CBC write banners at the file-descriptor level, which in-process capture misses, so
these run `gpumix` as a subprocess, as `gpumix plan --output json | jq` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import EXAMPLES, MELANGE_CONFIG

GPUMIX = str(Path(sys.executable).parent / "gpumix")
EXAMPLE = [str(EXAMPLES / "chat.yaml"), str(EXAMPLES / "profiles-llama-2-7b.yaml")]


def _json_lines(*argv: str, codes: tuple[int, ...] = (0,)) -> list[dict[str, Any]]:
    done = subprocess.run([GPUMIX, *argv], check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode in codes, done.stderr
    lines = done.stdout.splitlines()
    assert lines, done.stderr
    return [json.loads(line) for line in lines]  # every line, not the last one only


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--solver", "cbc"],
        ["--planner", "melange"],
        ["--planner", "melange", "--formulation", "paper", "--solver", "cbc"],
    ],
    ids=["slo-highs", "slo-cbc", "melange-highs", "melange-paper-cbc"],
)
def test_plan_json_is_one_object_per_service(extra: list[str]) -> None:
    [plan] = _json_lines("plan", *EXAMPLE, "--output", "json", *extra, codes=(0, 1))
    assert plan["name"] == "default/chat"
    assert sum(plan["allocation"].values()) >= 1


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_a_plan_that_succeeds_writes_nothing_to_stderr(solver: str) -> None:
    """The table on stdout, and no solver banner beside it on stderr (HiGHS's went there, two
    lines in every run and in the operator's JSON logs)."""
    done = subprocess.run([GPUMIX, "plan", *EXAMPLE, "--solver", solver], check=False,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("LLMService default/chat:")
    assert done.stderr == ""


def test_joint_plan_json_has_every_service(tmp_path: Path) -> None:
    chat = yaml.safe_load((EXAMPLES / "chat.yaml").read_text())
    chat["metadata"]["name"] = "chat-b"
    other = tmp_path / "b.yaml"
    other.write_text(yaml.safe_dump(chat))
    plans = _json_lines("plan", *EXAMPLE, str(other), "--output", "json", codes=(0, 1))
    assert {p["name"] for p in plans} == {"default/chat", "default/chat-b"}


def test_melange_config_json(tmp_path: Path) -> None:
    path = tmp_path / "melange.json"
    path.write_text(json.dumps(MELANGE_CONFIG))
    [plan] = _json_lines("plan", "--melange-config", str(path), "--output", "json")
    assert plan["status"] == "optimal"


def test_simulate_json() -> None:
    [report] = _json_lines("simulate", *EXAMPLE, "--output", "json", "--requests", "200")
    assert report["requests"] == 200
    assert 0 <= report["attainment_tpot"] <= 1


def test_a_current_model_and_its_config_json_give_the_same_profile(tmp_path: Path) -> None:
    grid = ["--gpu", "h100", "--input-edges", "1,512,2048", "--output-edges", "1,128,512"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }))  # fmt: skip
    by_name, by_config = (
        subprocess.run(
            [GPUMIX, "profile", "estimate", "--model", "Qwen/Qwen3-8B", *grid, *extra],
            check=True, capture_output=True, text=True, timeout=300,
        ).stdout
        for extra in ([], ["--model-config", str(config)])
    )  # fmt: skip
    [doc] = yaml.safe_load_all(by_name)
    assert doc["spec"]["model"] == "Qwen/Qwen3-8B"
    assert by_config == by_name


def test_profile_estimate_is_yaml_gpumix_reads_back(tmp_path: Path) -> None:
    done = subprocess.run(
        [GPUMIX, "profile", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu",
         "a10g,l4", "--input-edges", "1,512,2048", "--output-edges", "1,128,512"],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["spec"]["gpuType"] for d in docs] == ["a10g", "l4"]
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(done.stdout)
    [plan] = _json_lines("plan", EXAMPLE[0], str(profiles), "--output", "json", codes=(0, 1))
    assert plan["name"] == "default/chat" and plan["status"]


QWEN3_8B = {  # Qwen/Qwen3-8B's config.json, the keys the shape reads
    "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip


def _as_model(path: Path, model: str, docs: list[dict[str, Any]]) -> str:
    for doc in docs:
        if doc["kind"] == "LLMService":
            doc["spec"]["model"]["name"] = model
        else:
            doc["spec"]["model"] = model
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_a_model_gpumix_does_not_know_is_planned_from_its_config_json(tmp_path: Path) -> None:
    """`plan` and `simulate` of a model with no built-in shape: exit 2 naming --model-config;
    given its config.json, the same plan and simulation as the model gpumix knows by name."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN3_8B))
    profiles = subprocess.run(
        [GPUMIX, "profile", "estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "l4,a10g,a100-80gb",
         "--input-edges", "1,256,512,1024,2048,3072", "--output-edges", "1,64,128,256,512,1001"],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    docs = [yaml.safe_load((EXAMPLES / "chat.yaml").read_text()), *yaml.safe_load_all(profiles)]
    known = _as_model(tmp_path / "known.yaml", "Qwen/Qwen3-8B", docs)
    other = _as_model(tmp_path / "other.yaml", "acme/private-8b", docs)
    for command in (["plan"], ["simulate", "--requests", "300"]):
        done = subprocess.run([GPUMIX, *command, other], check=False, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.strip().splitlines() == [
            "error: default/chat: no built-in shape for model 'acme/private-8b': give its "
            "Hugging Face config.json with --model-config acme/private-8b=FILE"
        ]
        flag = ["--model-config", f"acme/private-8b={config}"]
        [by_name] = _json_lines(*command, known, "--output", "json", codes=(0, 1))
        [by_config] = _json_lines(*command, other, *flag, "--output", "json", codes=(0, 1))
        for run in (by_name, by_config):
            run.pop("solve_seconds", None)  # a wall time
        assert by_config == by_name
        assert sum(by_config["allocation"].values()) >= 1


def test_a_reader_that_leaves_early_ends_gpumix_quietly() -> None:
    """`gpumix … | head -1`: a write to the closed pipe was a BrokenPipeError traceback."""
    argv = [GPUMIX, "profile", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "l4"]
    grid = ["--input-edges", "1,256,512,1024,2048,3072", "--output-edges", "1,64,128,256,512,1001"]
    proc = subprocess.Popen([*argv, *grid], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # before gpumix has started: its first write finds no reader
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 141, stderr
    assert stderr == b""
