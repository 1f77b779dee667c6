"""Simulations side by side: worker processes the planner hands independent runs to.

A mixed plan's prediction simulates it twice, its router guessing output lengths and knowing
them (:func:`gpumix.attainment.predict`). The two runs share nothing, so with a free core the
second costs no wall time, and a change's search is mostly such predictions. Processes, not
threads: the simulator is pure Python and holds the GIL. ``gpumix run`` starts them (spawned,
so that none of the operator's threads is forked); elsewhere (``gpumix plan``, the benches'
own process pools) nothing is started and every run stays in the caller's process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

log = logging.getLogger(__name__)

PARENT_POLL_S = 1.0
"""How often a worker checks that the process that started it still runs."""

T = TypeVar("T")
R = TypeVar("R")


class _Workers:
    """The worker processes, started again when one dies; safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self.count = 0

    def start(self, count: int) -> None:
        self.stop()
        if count < 1:
            return
        with self._lock:
            self.count = count
            self._pool = pool = self._new()
        for _ in range(count):
            pool.submit(_ready)  # not waited for: the operator starts planning meanwhile

    def stop(self) -> None:
        with self._lock:
            pool, self._pool, self.count = self._pool, None, 0
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def side_by_side(self, run: Callable[[T], R], items: Sequence[T]) -> list[R]:
        with self._lock:
            pool = self._pool
        if pool is None:
            return [run(item) for item in items]
        away: list[Future[R]] = [pool.submit(run, item) for item in items[1:]]
        results = [run(item) for item in items[:1]]
        for item, future in zip(items[1:], away, strict=True):
            try:
                results.append(future.result())
            except BrokenProcessPool:
                log.warning("a simulation worker died; running its simulation here")
                self._replace(pool)
                results.append(run(item))
        return results

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = self._new()
        broken.shutdown(wait=False, cancel_futures=True)

    def _new(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self.count,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_end_with,
            initargs=(os.getpid(),),
        )


_WORKERS = _Workers()


def start(processes: int) -> None:
    """Run up to ``processes`` simulations at once: ``processes - 1`` workers beside this
    process (none for 1). They import what a prediction runs at once, not in the first one
    (2-3 s); this returns without waiting for that."""
    _WORKERS.start(processes - 1)


def stop() -> None:
    """End the workers (at the operator's exit, and in tests)."""
    _WORKERS.stop()


def side_by_side(run: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[run(item) for item in items]``, the first here and the rest in the workers when
    started (``run`` and the items must pickle). A worker that dies (killed, out of memory)
    loses nothing: its items run here, and the pool is started again for the next call."""
    return _WORKERS.side_by_side(run, items)


def _end_with(parent: int) -> None:
    """Exit once ``parent`` is gone (in a worker): a worker of an operator killed with SIGKILL
    would otherwise wait for work forever."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _ready() -> None:
    """Import what a prediction runs (in a worker)."""
    import gpumix.attainment  # noqa: F401, PLC0415
