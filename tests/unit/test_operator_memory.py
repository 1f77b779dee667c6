"""`gpumix.operator.memory.trim` gives the heap's free pages back (glibc's malloc_trim)."""

import ctypes
import platform

import pytest

from gpumix.operator import memory

GLIBC = platform.libc_ver()[0] == "glibc"


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        line = next(row for row in status if row.startswith("VmRSS:"))
    return int(line.split()[1])


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere trim() does nothing")
def test_trim_releases_free_pages_in_the_middle_of_the_heap() -> None:
    # 64 KiB blocks come from malloc's heap (below its mmap threshold). Freeing all but the
    # last leaves the free pages under a block in use, where the heap cannot shrink from its top.
    blocks = [ctypes.create_string_buffer(64 * 1024) for _ in range(3000)]  # ~190 MiB
    for block in blocks:
        ctypes.memset(block, 1, len(block))  # touched: resident
    last = blocks[-1]
    before = rss_kib()
    del blocks
    freed = rss_kib()
    assert memory.trim()
    after = rss_kib()
    assert before - freed < 50 * 1024, "the heap kept the pages until trimmed"
    assert freed - after > 150 * 1024, (before, freed, after)
    assert last.raw[:1] == b"\x01"  # the block past them is untouched
