"""Free heap pages go back to the system after a stage only when the heap holds enough of them (dlagg/log.py).

The heap is prepared by hand with the C library's own malloc and free: blocks of 64 KiB (below glibc's mmap
threshold, so on the heap), every other one freed, which leaves holes glibc keeps (they are not at the top of
the heap, so free() cannot trim them). Resident memory is read from /proc: malloc_trim hands the holes' pages
back, and the process's resident memory drops by about their size.
"""

from __future__ import annotations

import ctypes
import sys

import pytest

from dlagg.log import _rss_mb, glibc, heap_free_bytes, release_free_memory

BLOCK = 64 << 10
BLOCKS = 1024  # 64 MiB in all, 32 MiB of it freed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or glibc("mallinfo2") is None,
                                reason="glibc 2.33 or later (malloc_trim, mallinfo2) on Linux")


def heap_free() -> int:
    free = heap_free_bytes()
    assert free is not None  # (the module's skip condition)
    return free


@pytest.fixture
def holes():
    """32 MiB of free 64 KiB holes between live blocks, each hole's pages touched (resident) before it was freed."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    release_free_memory(0)  # start from a trimmed heap
    blocks = [libc.malloc(BLOCK) for _ in range(BLOCKS)]
    assert all(blocks)
    for block in blocks:
        ctypes.memset(block, 1, BLOCK)  # resident
    for block in blocks[::2]:
        libc.free(block)
    yield
    for block in blocks[1::2]:
        libc.free(block)
    release_free_memory(0)


def test_holes_are_free_heap(holes):
    assert heap_free() >= BLOCKS // 2 * BLOCK * 0.95


def test_a_heap_with_less_free_than_asked_keeps_its_pages(holes):
    before = _rss_mb()
    release_free_memory(least=heap_free() + (1 << 30))
    assert _rss_mb() > before - 4  # nothing handed back (4 MB of slack for the interpreter's own churn)


def test_a_heap_with_enough_free_hands_its_pages_back(holes):
    before = _rss_mb()
    release_free_memory(least=BLOCKS // 4 * BLOCK)
    assert _rss_mb() < before - 0.8 * BLOCKS // 2 * BLOCK / 2**20  # at least 80 % of the 32 MiB of holes

