"""Simulations side by side in worker processes (gpumix.sim.workers), and predictions made so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.attainment import predict
from gpumix.manifests import load_objects
from gpumix.plan import solve
from gpumix.problem import build_problem
from gpumix.sim import workers

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "samples"


def pid_of(tag: str) -> tuple[str, int]:
    """Which process ran ``tag`` (module-level: a worker must unpickle it)."""
    return tag, os.getpid()


@pytest.fixture
def started() -> Iterator[None]:
    workers.start(2)
    yield
    workers.stop()


def test_without_workers_every_run_stays_here() -> None:
    assert workers.side_by_side(pid_of, ["a", "b", "c"]) == [
        ("a", os.getpid()),
        ("b", os.getpid()),
        ("c", os.getpid()),
    ]


@pytest.mark.usefixtures("started")
def test_the_first_run_stays_here_and_the_rest_go_to_a_worker_in_order() -> None:
    ran = workers.side_by_side(pid_of, ["a", "b", "c"])
    assert [tag for tag, _ in ran] == ["a", "b", "c"]
    assert ran[0][1] == os.getpid()
    assert ran[1][1] != os.getpid() and ran[2][1] == ran[1][1]  # one worker, both in turn


@pytest.mark.usefixtures("started")
def test_a_killed_worker_loses_no_run_and_is_replaced() -> None:
    (_, worker), *_ = workers.side_by_side(pid_of, ["x", "y"])[1:]
    os.kill(worker, signal.SIGKILL)
    ran = workers.side_by_side(pid_of, ["a", "b"])
    assert [tag for tag, _ in ran] == ["a", "b"]
    assert ran[1][1] == os.getpid()  # the dead worker's run ran here
    after = workers.side_by_side(pid_of, ["c", "d"])
    assert after[1][1] not in (os.getpid(), worker)  # and a new worker takes the next


def test_a_mixed_plans_prediction_is_the_same_side_by_side(
    chat: LLMService, llama_profiles: list[GPUProfile]
) -> None:
    pools = [o for o in load_objects([EXAMPLES / "gpupools.yaml"]) if isinstance(o, GPUPool)]
    instance = build_problem(chat, pools, llama_profiles).instance
    assert instance is not None
    mixed = solve(instance)
    assert mixed is not None and sum(n > 0 for n in mixed.counts.values()) >= 2
    here = predict(chat, pools, llama_profiles, mixed, requests=500)
    workers.start(2)
    try:
        side = predict(chat, pools, llama_profiles, mixed, requests=500)
    finally:
        workers.stop()
    assert side == here


def test_the_workers_of_a_sigkilled_process_exit(tmp_path: Path) -> None:
    script = tmp_path / "starts_workers.py"  # a file: the workers import its `pid`
    script.write_text(
        "import os, time\n"
        "from gpumix.sim import workers\n"
        "def pid(_: None) -> int:\n"
        "    return os.getpid()\n"
        "if __name__ == '__main__':\n"
        "    workers.start(2)\n"
        "    print(workers.side_by_side(pid, [None, None])[1], flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env=env,
    ) as parent:  # fmt: skip
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert worker != parent.pid
        os.kill(worker, 0)  # it runs
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30 * workers.PARENT_POLL_S
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
