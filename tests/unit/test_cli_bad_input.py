"""Every bad command-line input is exit 2 and one line on stderr naming the flag or field.

The table runs the installed console script as a user does; the property test drives every
numeric flag of every subcommand through the parser with values hypothesis picks.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import socket
import subprocess
import sys
import time
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
    (
        ["profile", "estimate", "--model", "meta-llama/Llama-2-70b-hf", "--gpu", "l4", *GRID],
        "--gpu",
    ),
    ([*EST, "--input-edges", "1,4096", "--output-edges", "1,4096"], "--input-edges/--output-edges"),
    ([*EST, *GRID, "--tpot", "20"], "--tpot 20"),
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
    (["run", "--search-time-limit", "-1"], "--search-time-limit"),
    (["run", "--search-slice", "0"], "--search-slice"),
    (["run", "--simulation-processes", "0"], "--simulation-processes"),
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


SIM = ["simulate", CHAT, PROFILES]
SERVE = ["sim", "serve", "--model", "meta-llama/Llama-2-7b-hf", "--pods"]
ENDPOINT = ["profile", "endpoint", "--model", "m", "--gpu-type", "a10g", *GRID]
ROUTE = ["route", "--engine", "a=http://x:1", "--routing-file"]

# Inputs written to a temporary directory first: {name} in an argument is that file's path.
FILE_CASES: list[tuple[dict[str, str], list[str], str]] = [
    ({"broken.yaml": "a: [\n"}, ["plan", "{broken.yaml}", PROFILES], "broken.yaml"),
    ({"nul.yaml": "\x00"}, ["plan", "{nul.yaml}", PROFILES], "nul.yaml"),
    ({}, [*SIM, "--plan", "{missing.json}"], "--plan"),
    ({"p.json": "not json\n"}, [*SIM, "--plan", "{p.json}"], "--plan"),
    ({"p.json": "[1]\n"}, [*SIM, "--plan", "{p.json}"], "--plan"),
    ({"p.json": "{}\n"}, [*SIM, "--plan", "{p.json}"], "--plan"),
    (
        {"p.json": '{"name": "default/chat", "allocation": "x"}\n'},
        [*SIM, "--plan", "{p.json}"],
        "--plan",
    ),
    (
        {"p.json": '{"name": "default/chat", "allocation": {"a10g": -2}}\n'},
        [*SIM, "--plan", "{p.json}"],
        "--plan",
    ),
    (
        {
            "p.json": '{"name": "a", "allocation": {"a10g": 2}}\n'
            '{"name": "b", "allocation": {"l4": 2}}\n'
        },
        [*SIM, "--plan", "{p.json}"],
        "--plan",
    ),
    ({}, [*SIM, "--arrivals", "trace", "--trace", "{missing.csv}"], "--trace"),
    ({"t.csv": "a,b\n1,2\n"}, [*SIM, "--arrivals", "trace", "--trace", "{t.csv}"], "--trace"),
    ({"t.jsonl": "{}\n"}, [*SIM, "--sizes", "trace", "--trace", "{t.jsonl}"], "--trace"),
    ({"t.jsonl": ""}, [*SIM, "--sizes", "trace", "--trace", "{t.jsonl}"], "--trace"),
    ({"f": ""}, ["crds", "--dir", "{f}"], "--dir"),
    ({}, ["manifests", "--root", "{missing}"], "--root"),
    ({}, ["run", "--kubeconfig", "{missing.yaml}"], "--kubeconfig"),
    (
        {"k.yaml": "a: 1\n"},
        ["route", "--service", "chat", "--kubeconfig", "{k.yaml}"],
        "--kubeconfig",
    ),
    (
        {"p.json": '{"name": "default/chat", "allocation": {"zz": 2}}\n'},
        [*SIM, "--plan", "{p.json}"],
        "--plan",
    ),
    ({"r.json": '{"pools": {}}'}, [*ROUTE, "{r.json}"], "inputEdges: Field required"),
    (
        {
            "r.json": '{"inputEdges": [1, 9], "outputEdges": [1, 9], '
            '"pools": {"a": {"replicas": "x", "share": [[1]]}}}'
        },
        [*ROUTE, "{r.json}"],
        "pools.a.replicas",
    ),
    ({"r.json": "a: [\n"}, [*ROUTE, "{r.json}"], "--routing-file"),
]

MORE_CASES: list[tuple[list[str], str]] = [
    ([*SIM, "--seed", "-1"], "--seed"),
    ([*SIM, "--service", ""], "no (matching) LLMService"),
    ([*SERVE, "a10g=0"], "--pods"),
    ([*SERVE, "a10g=-1"], "--pods"),
    ([*SERVE, "a10g=x"], "--pods"),
    ([*SERVE, "a10g,,l4"], "--pods"),
    ([*EST[:-1], "a10g,,l4", *GRID], "--gpu"),
    ([*EST[:-1], "", *GRID], "--gpu"),
    ([*EST[:-1], "z9", *GRID], "--gpu"),
    (["profile", "sim", "--model", "meta-llama/Llama-2-70b-hf", "--gpu", "l4", *GRID], "--gpu"),
    (
        [
            "profile",
            "sim",
            "--model",
            "meta-llama/Llama-2-7b-hf",
            "--gpu",
            "a10g",
            *GRID,
            "--seed",
            "-1",
        ],
        "--seed",
    ),
    ([*ENDPOINT, "--url", "notaurl"], "--url"),
    ([*ENDPOINT, "--url", "ftp://x"], "--url"),
    (["sim", "serve", "--model", "meta-llama/Llama-2-70b-hf", "--pods", "l4"], "--pods l4"),
    (
        [
            "profile",
            "sim",
            "--model",
            "meta-llama/Llama-2-7b-hf",
            "--gpu",
            "a10g",
            "--input-edges",
            "1,8192",
            "--output-edges",
            "1,4096",
        ],
        "--input-edges/--output-edges: no bucket",
    ),
]


@pytest.mark.parametrize(
    ("files", "argv", "named"), FILE_CASES, ids=[" ".join(c[1][:4]) for c in FILE_CASES]
)
def test_bad_files_are_exit_2_and_one_line_naming_them(
    tmp_path: Path, files: dict[str, str], argv: list[str], named: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = {f"{{{n}}}": str(tmp_path / n) for n in ["missing", "missing.json", "missing.csv",
                                                       "missing.yaml", *files]}  # fmt: skip
    test_bad_input_is_exit_2_and_one_line_naming_it([paths.get(a, a) for a in argv], named)


@pytest.mark.parametrize(
    ("argv", "named"), MORE_CASES, ids=[" ".join(c[0][:4]) for c in MORE_CASES]
)
def test_more_bad_values_are_exit_2_and_one_line(argv: list[str], named: str) -> None:
    test_bad_input_is_exit_2_and_one_line_naming_it(argv, named)


def test_an_unreachable_endpoint_fails_at_once_in_one_line() -> None:
    """Each request that cannot connect used to die in its thread (a traceback per request, and
    the profile then failed on NaN latencies) after waiting out every arrival of the rate."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    argv = [*ENDPOINT, "--url", f"http://127.0.0.1:{port}", "--requests", "40"]
    start = time.monotonic()
    done = subprocess.run([GPUMIX, *argv], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - start < 30
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"127.0.0.1:{port}" in lines[0] and "refused" in lines[0].lower(), lines[0]
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
