"""Progress and warnings on stderr, honouring --verbosity (quiet < minimal < normal < detailed)."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

MINIMAL, NORMAL, DETAILED, DIAGNOSTIC = range(1, 5)


def shown(path: object) -> str:
    """A file name as error and warning lines print it: as it is, unless it holds control characters (a newline, an
    ESC that would drive the terminal) or undecodable bytes, which are escaped as Python does (``\\n``, ``\\x1b``),
    so that one message stays one line and the terminal shows it as written."""
    text = str(path)
    if text.isprintable() and not any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
        return text
    return "".join(c if c.isprintable() or c == " " else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    if 0xDC80 <= ord(char) <= 0xDCFF:  # an undecodable byte (surrogateescape)
        return f"\\x{ord(char) - 0xDC00:02x}"
    return repr(char)[1:-1]


class Log:
    """`strict` (the CLI's --strict=true): every warning is written as an error line, whatever the
    verbosity; `warnings` keeps every warning given, for the caller's exit code."""

    def __init__(self, level: int = NORMAL, stream: TextIO | None = None, *, strict: bool = False) -> None:
        self.level = level
        self.stream = stream if stream is not None else sys.stderr
        self.strict = strict
        self.warnings: list[str] = []

    def _emit(self, text: str) -> None:
        print(f"dlagg: {text}", file=self.stream, flush=True)

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        if self.strict:
            self._emit(f"error: {text}")
        elif self.level >= MINIMAL:
            self._emit(f"warning: {text}")

    def result(self, text: str) -> None:
        if self.level >= MINIMAL:
            self._emit(text)

    def info(self, text: str) -> None:
        if self.level >= NORMAL:
            self._emit(text)

    def detail(self, text: str) -> None:
        if self.level >= DETAILED:
            self._emit(text)

    @contextmanager
    def stage(self, what: str) -> Iterator[None]:
        """Log `what` with its wall time once it is done (normal verbosity); memory too at diagnostic.

        A stage's temporaries are freed when it ends; the memory they held goes back to the system
        then, so that what one stage leaves fragmented does not add to the next stage's peak.
        """
        began = time.perf_counter()
        yield
        release_free_memory()
        memory = f", {_rss_mb():,.0f} MB resident, peak {peak_mb():,.0f} MB" if self.level >= DIAGNOSTIC else ""
        self.info(f"{what} ({time.perf_counter() - began:.2f} s{memory})")


TRIM_FREE_BYTES = 32 << 20  # a stage leaving less free in the C heap keeps it (release_free_memory)


class _MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (malloc.h, glibc 2.33 and later)
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def release_free_memory(least: int = TRIM_FREE_BYTES) -> None:
    """Give the C heap's free pages back to the system when it holds at least `least` bytes free (glibc's
    malloc_trim; a no-op elsewhere).

    glibc serves arrays below its (adaptive, up to 32 MB) mmap threshold from the heap and keeps
    what they leave when freed: measured, 100-170 MB of a 460 MB peak on transformer_amp_large, where
    every stage leaves 50-120 MB free. A small rank's stages leave 7-13 MB, and handing those back only for
    the next stage to fault them in again (pages the kernel zeroes) cost 2.4 times the page faults of a 16-rank
    run; with two workers at once, both processes' faults slowed every rank (docs/benchmarks.md). Below `least`
    the heap keeps them: that much more peak at most.
    """
    trim = glibc("malloc_trim")
    if trim is None:
        return
    if least > 0 and (free := heap_free_bytes()) is not None and free < least:
        return
    trim(0)


def heap_free_bytes() -> int | None:
    """Bytes the C heap holds free (glibc's mallinfo2; None elsewhere and before glibc 2.33)."""
    info = glibc("mallinfo2")
    if info is None:
        return None
    info.restype = _MallInfo2  # (the one function object, cached by `glibc`)
    return int(info().fordblks)


M_ARENA_MAX = -8  # glibc's mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest adaptive mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); the trim threshold follows, twice it.
ADAPTED_MMAP_THRESHOLD = 32 << 20


def one_malloc_arena() -> None:
    """One glibc malloc arena for every thread (a no-op elsewhere): what one thread frees the others
    can reuse, and no thread reserves an arena of its own (64 MB of address space each)."""
    mallopt = glibc("mallopt")
    if mallopt is not None:
        mallopt(M_ARENA_MAX, 1)


def heap_as_adapted() -> bool:
    """glibc's heap thresholds set where its adaptive ones end up in a process that frees large arrays: arrays under
    32 MB served from the heap, up to 64 MB of free memory kept at its top (`release_free_memory` gives back more
    between stages). For a process whose environment fixed a threshold, which turns glibc's adaptation off: Dask's
    nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536, and every array over 128 KB was then mapped and
    unmapped on its own, its pages zeroed by the kernel each time: a rank of the many-ranks benchmark faulted 7.5
    times the pages and took 1.15-1.3x as long (tuning.tune_dask_worker). False where this is not glibc."""
    mallopt = glibc("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, ADAPTED_MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, 2 * ADAPTED_MMAP_THRESHOLD))


@functools.cache
def glibc(name: str):  # -> the C function, or None
    """A function of the process's C library that only glibc has, or None elsewhere."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return None


def _rss_mb() -> float:
    """Resident memory now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def peak_mb() -> float:
    """Peak resident memory so far (ru_maxrss is in KiB on Linux)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
