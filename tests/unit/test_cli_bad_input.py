"""Every bad command-line input is exit 2 and one line on stderr naming the flag or field.

The table runs the installed console script as a user does; the property test drives every
numeric flag of every subcommand through the parser with values hypothesis picks.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumix.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
GPUMIX = str(Path(sys.executable).parent / "gpumix")
SAMPLES = REPO / "manifests" / "samples"
CHAT = str(SAMPLES / "chat.yaml")
PROFILES = str(SAMPLES / "profiles-llama-2-7b.yaml")
EST = ["profile", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a10g"]
GRID = ["--input-edges", "1,512,2048", "--output-edges", "1,128,512"]

CASES: list[tuple[list[str], str]] = [
    (["plan", CHAT, PROFILES, "--budget", "-5"], "--budget"),
    (["plan", CHAT, PROFILES, "--budget", "abc"], "--budget"),
    (["plan", CHAT, PROFILES, "--time-limit", "0"], "--time-limit"),
    (["plan", CHAT, PROFILES, "--time-limit", "-1"], "--time-limit"),
    (["plan", CHAT, PROFILES, "--attainment-target", "1.5"], "--attainment-target"),
    (["plan", CHAT, PROFILES, "--attainment-target", "nan"], "--attainment-target"),
    (["plan", CHAT, PROFILES, "--solver", "gurobi"], "--solver"),
    (["plan", CHAT, PROFILES, CHAT], "LLMService default/chat is already given"),
    (["plan", CHAT], "no GPUPool and no GPUProfile for model"),
    (["plan", "--melange-config", PROFILES, CHAT], "--melange-config is the whole input"),
    (["plan", "--melange-config", CHAT], "--melange-config"),
    (["plan", str(REPO / "missing.yaml")], "missing.yaml"),
    (["plan", CHAT, PROFILES, "--model-config", str(REPO / "config.json")], "--model-config"),
    (["plan", CHAT, PROFILES, "--model-config", f"m={REPO / 'no.json'}"], "no.json"),
    (["plan", CHAT, PROFILES, "--model-config", f"m={CHAT}"], "--model-config"),
    (["simulate", CHAT, PROFILES, "--model-config", "m="], "--model-config"),
    (["plan"], "give LLMService/GPUProfile/GPUPool YAML files"),
    ([*EST, "--input-edges", "1,a", "--output-edges", "1,64"], "--input-edges"),
    ([*EST, "--input-edges", "100,1", "--output-edges", "1,64"], "--input-edges"),
    ([*EST, "--input-edges", "0,10", "--output-edges", "1,64"], "--input-edges"),
    ([*EST, "--input-edges", "5", "--output-edges", "1,64"], "--input-edges"),
    ([*EST, *GRID[:2], "--output-edges", "64,64"], "--output-edges"),
    ([*EST, *GRID, "--tpot", "-5"], "--tpot"),
    ([*EST, *GRID, "--tpot", ""], "--tpot"),
    ([*EST, *GRID, "--gpus-per-replica", "3"], "--gpus-per-replica"),
    (["profile", "estimate", "--model", "nope/nope", "--gpu", "a10g", *GRID], "nope/nope"),
    (["profile", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "z9", *GRID], "z9"),
    ([*EST, *GRID, "--model-config", str(REPO / "no-config.json")], "no-config.json"),
    ([*EST, *GRID, "--model-config", CHAT], "chat.yaml"),
    (["simulate", CHAT, PROFILES, "--rate", "-5"], "--rate"),
    (["simulate", CHAT, PROFILES, "--requests", "0"], "--requests"),
    (["simulate", CHAT, PROFILES, "--cv", "0"], "--cv"),
    (["simulate", CHAT, PROFILES, "--tpot-ms", "0"], "--tpot-ms"),
    (["simulate", CHAT, PROFILES, "--ttft-ms", "-1"], "--ttft-ms"),
    (["simulate", CHAT, PROFILES, "--amplitude", "2"], "--amplitude"),
    (["simulate", CHAT, PROFILES, "--period", "0"], "--period"),
    (["simulate", CHAT, PROFILES, "--rate-scale", "inf"], "--rate-scale"),
    (["simulate", CHAT], "no GPUPool and no GPUProfile for model"),
    (["simulate", CHAT, PROFILES, "--service", "other"], "no (matching) LLMService"),
    (
        ["sim", "serve", "--model", "meta-llama/Llama-2-7b-hf", "--pods", "a10g", "--speed", "0"],
        "--speed",
    ),
    (
        [
            "sim",
            "serve",
            "--model",
            "meta-llama/Llama-2-7b-hf",
            "--pods",
            "a10g",
            "--base-port",
            "70000",
        ],
        "--base-port",
    ),
    (["sim", "serve", "--model", "meta-llama/Llama-2-7b-hf", "--pods", "z9=1"], "z9"),
    (
        [
            "profile",
            "sim",
            "--model",
            "meta-llama/Llama-2-7b-hf",
            "--gpu",
            "a10g",
            *GRID,
            "--requests",
            "0",
        ],
        "--requests",
    ),
    (
        [
            "profile",
            "endpoint",
            "--model",
            "m",
            "--url",
            "http://x",
            "--gpu-type",
            "a10g",
            *GRID,
            "--timeout",
            "0",
        ],
        "--timeout",
    ),
    (["run", "--interval", "0"], "--interval"),
    (["run", "--metrics-port", "-1"], "--metrics-port"),
    (["run", "--prometheus-timeout", "0"], "--prometheus-timeout"),
    (["route", "--max-inflight-per-pod", "0"], "--max-inflight-per-pod"),
    (["route", "--port", "99999"], "--port"),
    (["route", "--engine", "small=http://x:1"], "either --service or --routing-file"),
]


@pytest.mark.parametrize(("argv", "named"), CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_bad_input_is_exit_2_and_one_line_naming_it(argv: list[str], named: str) -> None:
    done = subprocess.run([GPUMIX, *argv], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert named in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def _numeric_flags() -> list[tuple[list[str], str, argparse.Action]]:
    """(subcommand path, flag, action) of every flag parsed by a checking type."""
    found: list[tuple[list[str], str, argparse.Action]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif action.option_strings and getattr(action.type, "__module__", "") == (
                "gpumix.cliargs"
            ):
                found.append((path, action.option_strings[0], action))

    walk(build_parser(), [])
    return found


FLAGS = _numeric_flags()


def test_the_checked_flags_cover_every_subcommand_with_numbers() -> None:
    commands = {" ".join(path) for path, _, _ in FLAGS}
    assert {"plan", "simulate", "run", "route", "sim serve", "profile estimate"} <= commands
    assert len(FLAGS) >= 25


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(FLAGS),
    st.one_of(
        st.floats(max_value=0, allow_nan=False).map(repr),
        st.integers(max_value=0).map(str),
        st.sampled_from(["nan", "inf", "-inf", "x", "", "1e999"]),
        st.integers(min_value=70_000).map(str),
    ),
)
def test_values_every_checking_type_refuses_are_reported_on_the_flag(
    flag: tuple[list[str], str, argparse.Action], value: str
) -> None:
    path, option, action = flag
    assert action.type is not None
    try:
        action.type(value)  # type: ignore[operator]
    except argparse.ArgumentTypeError:
        pass
    else:
        return  # a value this flag accepts (0 for a port or a duration, say)
    err = _parse_error([*path, *_required(path), f"{option}={value}"])
    assert err.splitlines() == [err.strip()]
    assert f"argument {option}" in err


def _required(path: list[str]) -> list[str]:
    """The other arguments a subcommand needs to reach its flags."""
    if path == ["profile", "endpoint"]:
        return ["--model", "m", "--gpu-type", "a10g", "--url", "http://x", *GRID]
    if path[:1] == ["profile"]:
        return ["--model", "m", "--gpu", "a10g", *GRID]
    if path == ["sim", "serve"]:
        return ["--model", "m", "--pods", "a10g"]
    return []


def _parse_error(argv: list[str]) -> str:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    return stderr.getvalue()
