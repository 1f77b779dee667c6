"""Giving the heap's free pages back to the system after a planner pass (glibc's
``malloc_trim``).

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
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    trim: Callable[[int], int] | None = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return trim


def trim() -> bool:
    """Release the heap's free pages; whether any were (``False`` also without glibc)."""
    call = _malloc_trim()
    return call is not None and bool(call(0))
