"""Giving the heap's free pages back to the system after a planner pass (glibc's
``malloc_trim``), and collecting cyclic garbage less often.

A pass at fleet size builds and drops hundreds of MB of objects (a fleet's instance JSON alone
is 3 MB at 500 services). CPython returns its own small-object arenas when they empty, but
what it takes from ``malloc`` (lists, dicts, strings over 512 bytes) goes back to glibc's heap,
which keeps the free pages in the process: the RSS the kubelet counts against the operator's
memory limit stays at the pass's high-water mark. ``malloc_trim(0)`` releases every free page
of the heap, not only its top; it takes milliseconds. Elsewhere than glibc there is no such
call and nothing is done.
"""

import ctypes
import functools
import gc
from collections.abc import Callable

GC_THRESHOLDS = (50_000, 20, 20)
"""The cyclic garbage collector's thresholds (Python's default: 700, 10, 10). A planner pass
allocates millions of short-lived objects (pydantic models, plan grids); at the default, the
collector ran some 900 times a pass, 3-6 of them over every object the caches hold, and took
0.8-1.8 s of a 2.6-4 s pass at 500 services (offline, ``bench/scale.py``'s fleet). These take
0.1-0.5 s for the same peak RSS (309 MB): what a pass drops, reference counting frees."""


def collect_less() -> None:
    """Set :data:`GC_THRESHOLDS` for this process (`gpumix run`, and `gpumix plan` of a fleet)."""
    gc.set_threshold(*GC_THRESHOLDS)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    trim: Callable[[int], int] | None = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return trim


def trim() -> bool:
    """Release the heap's free pages; whether any were (``False`` also without glibc)."""
    call = _malloc_trim()
    return call is not None and bool(call(0))
