"""Memory limits: the address space a run may still take, what a run needs, and the out-of-memory line.

Clusters run jobs under an address-space limit (``ulimit -v``, ``prlimit --as``, batch schedulers
that enforce memory through ``RLIMIT_AS``). Under such a limit what counts is the virtual memory
*reserved*, not the memory touched: a reservation the limit refuses fails at once, even when the
pages would never have been used. dlagg's reader sizes the ADBC driver's reservations to the
result (reader/sqlite.py) and asks `fits` before a large one. What a run needs was measured by
``benchmarks/bench_memory.py`` (docs/memory.md): about `BASE_BYTES` of interpreter and libraries
plus `PER_EXPORT_BYTE` bytes per byte of export, in address space.

Contract: `room` is None when no limit is set (or on systems without ``resource``); `fits(n)` says
whether a reservation of `n` bytes leaves room for the other reader threads' own; `needed` is the
documented estimate; `out_of_memory` is the one line the CLI prints.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

# Address space of a run, measured (benchmarks/bench_memory.py, docs/memory.md): about 300 MB
# for the interpreter with pandas, pyarrow, the ADBC driver and TensorBoard's protobufs, plus
# about one byte per export byte (read frames, op discovery's per-range arrays, the reports).
# The estimate leaves a margin over both: it is what the out-of-memory line asks for.
BASE_BYTES = 320 << 20
PER_EXPORT_BYTE = 2.0
# A reservation may take this share of the room left at most: the reader threads reserve at once.
RESERVATION_SHARE = 4


def address_space_limit() -> int | None:
    """The soft ``RLIMIT_AS`` in bytes, None when unlimited or unknown."""
    if resource is None:  # not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def address_space_used() -> int:
    """The process's address space now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def room() -> int | None:
    """Bytes of address space left under the limit (None: no limit)."""
    limit = address_space_limit()
    return None if limit is None else max(0, limit - address_space_used())


def fits(nbytes: int) -> bool:
    """Whether a reservation of `nbytes` fits the limit with room to spare for concurrent ones."""
    left = room()
    return left is None or nbytes <= left // RESERVATION_SHARE


def needed(export_bytes: int) -> int:
    """The address space a run over an export of `export_bytes` needs (docs/memory.md)."""
    return int(BASE_BYTES + PER_EXPORT_BYTE * export_bytes)


def _mb(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MB"


def out_of_memory(database: Path) -> str:
    """The one line for a run that ran out of memory: the limit, what it had taken, what it needs."""
    try:
        size = database.stat().st_size
    except OSError:
        size = 0
    limit = address_space_limit()
    peak = _peak_address_space()
    had = f"it had taken {_mb(peak)} of address space" if peak else "it ran out"
    where = (f"under the address-space limit of {_mb(limit)} (ulimit -v / prlimit --as)" if limit is not None
             else "with the memory this machine has free")
    return (f"out of memory reading {database.name} ({_mb(size)}) {where}: {had}; a run on this export needs "
            f"about {_mb(needed(size))} of address space (docs/memory.md): raise the limit to that or use a bigger "
            "machine")


def _peak_address_space() -> int:
    """Peak address space of the process (VmPeak; 0 where /proc is absent)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def out_of_memory_loading() -> str:
    """The one line for a limit too small to load the libraries (before any export is read)."""
    limit = address_space_limit()
    where = f"the address-space limit of {_mb(limit)} (ulimit -v / prlimit --as)" if limit is not None else "memory"
    return (f"out of memory loading dlagg's libraries (pandas, pyarrow) under {where}: a run needs at least "
            f"{_mb(BASE_BYTES)} of address space plus about {PER_EXPORT_BYTE:g} times the export's size "
            "(docs/memory.md): raise the limit")
