"""The machine a run gets: the address space it may still take, what a run needs, the out-of-memory line;
the memory and the cores it may use.

Clusters run jobs under an address-space limit (``ulimit -v``, ``prlimit --as``, batch schedulers
that enforce memory through ``RLIMIT_AS``). Under such a limit what counts is the virtual memory
*reserved*, not the memory touched: a reservation the limit refuses fails at once, even when the
pages would never have been used. dlagg's reader sizes the ADBC driver's reservations to the
result (reader/database.py) and asks `fits` before a large one. What a run needs was measured by
``benchmarks/bench_memory.py`` (docs/memory.md): about `BASE_BYTES` of interpreter and libraries
plus `PER_EXPORT_BYTE` bytes per byte of export, in address space.

Contract: `room` is None when no limit is set (or on systems without ``resource``); `fits(n)` says
whether a reservation of `n` bytes leaves room for the other reader threads' own; `needed` is the
documented estimate; `out_of_memory` is the one line the CLI prints; `js_engine_refused` says
when vl-convert's JavaScript engine cannot start under the limit (it would abort the process).

Memory, not address space, bounds how many ranks the processes of a local pool reduce at once:
`available_memory()` is what this process and its children may still take (the system's available
memory, less where a cgroup limits the job: Slurm, Kubernetes, Docker); `rank_memory(export_bytes)` is
what one process reducing a rank of `export_bytes` bytes of export peaks at;
`processes_that_fit(export_bytes, available)`
how many processes can reduce the largest of the ranks at once within that.

`usable_cores()` is the cores this process may run on: its CPU affinity (Slurm, taskset and numactl
pin a job to some of a node's cores) and no more than a cgroup CPU quota gives (Docker's --cpus,
Kubernetes' CPU limits). ``os.cpu_count()`` counts the node's cores whatever the job was given.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

# Address space of a run, measured (benchmarks/bench_memory.py, docs/memory.md): about 340 MB
# for the interpreter with pandas, pyarrow, the ADBC driver and TensorBoard's protobufs, plus
# about one byte per export byte (read frames, op discovery's per-range arrays, the reports).
# The estimate leaves a margin over both: it is what the out-of-memory line asks for.
BASE_BYTES = 380 << 20
PER_EXPORT_BYTE = 2.0
# A reservation may take this share of the room left at most: the reader threads reserve at once.
RESERVATION_SHARE = 4
# Room a query needs besides its batches: the SQLite driver allocates while it runs one (its page cache, the
# statement, Arrow's builders, other reader threads' the same) and crashes on a refused allocation (SIGSEGV).
# With less left, the read is out of memory before the driver starts: the scan of limits (tests/test_memory_limit.py)
# crashed with half this and never with this.
DRIVER_HEADROOM = 48 << 20
# Resident memory of a process that reduces one rank, measured (benchmarks/bench_memory.py, bench_ranks.py;
# docs/memory.md): 130-140 MB of interpreter and libraries, plus about one byte per byte of the rank's export
# (1.0-1.05 on 155 MB and 622 MB exports), plus the figures the job's parent keeps per rank until the merge
# (0.7 MB at 1,024 ranks). Each estimate leaves a margin of a third or more over the measurement.
RANK_BASE_BYTES = 180 << 20
RANK_PER_EXPORT_BYTE = 1.5
PARENT_PER_RANK = 2 << 20
# cgroup limits at or above this are "no limit" (cgroup v1 writes 2^63 rounded down to a page)
NO_CGROUP_LIMIT = 1 << 60


# Stack a thread reserves under an address-space limit (`small_thread_stacks`): room for the recursion limit's
# depth of Python calls and the libraries' C code, a quarter of glibc's default.
THREAD_STACK_BYTES = 2 << 20


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


def small_thread_stacks() -> None:
    """Under an address-space limit, threads started from now on reserve `THREAD_STACK_BYTES` of stack instead of
    glibc's default (the stack limit, 8 MiB): a reservation counts whole against the limit, and a process pool's
    manager and feeder threads, the reader's and the writers' start while the SQLite driver reserves its batches,
    whose refusal ends in a SIGSEGV in the driver's error path."""
    if address_space_limit() is not None:
        threading.stack_size(THREAD_STACK_BYTES)


def room() -> int | None:
    """Bytes of address space left under the limit (None: no limit)."""
    limit = address_space_limit()
    return None if limit is None else max(0, limit - address_space_used())


# V8, the JavaScript engine inside vl-convert (the HTML page's Vega libraries, the roofline PNG), reserves 64 GiB of
# address space when it starts and aborts the whole process, with no error to catch, when a limit refuses it.
JS_ENGINE_RESERVATION = 65 << 30


def js_engine_fits() -> bool:
    """Whether the JavaScript engine can start under this process's address-space limit (or no limit)."""
    left = room()
    return left is None or left >= JS_ENGINE_RESERVATION


def js_engine_refused(what: str) -> str | None:
    """None when the JavaScript engine can start (`js_engine_fits`); else the warning saying that `what` (the thing
    it would have made) is left out, and how to get it."""
    if js_engine_fits():
        return None
    return (f"{what}: the JavaScript engine that draws them (V8, in vl-convert) reserves 64 GiB of address space "
            f"when it starts, more than the address-space limit of {_mb(address_space_limit() or 0)} leaves "
            "(ulimit -v / prlimit --as); run without the limit, or with one above 66 GB, to get them")


# Below this address-space limit the libraries a run imports cannot load (pandas, pyarrow and numpy together need
# about 200 MiB), and numpy's OpenBLAS ends the process at import with a line of its own, which no exception reaches.
LIBRARIES_FLOOR = 128 << 20


def libraries_fit() -> bool:
    """Whether the address-space limit (if any) is above `LIBRARIES_FLOOR`: the heavy imports are worth trying."""
    limit = address_space_limit()
    return limit is None or limit >= LIBRARIES_FLOOR


def fits_driver() -> bool:
    """Whether the SQLite driver may run a query: at least `DRIVER_HEADROOM` of room left (or no limit)."""
    left = room()
    return left is None or left >= DRIVER_HEADROOM


def fits(nbytes: int) -> bool:
    """Whether a reservation of `nbytes` fits the limit with room to spare for concurrent ones."""
    left = room()
    return left is None or nbytes <= left // RESERVATION_SHARE


def needed(export_bytes: int) -> int:
    """The address space a run over an export of `export_bytes` needs (docs/memory.md)."""
    return int(BASE_BYTES + PER_EXPORT_BYTE * export_bytes)


def rank_memory(export_bytes: int) -> int:
    """Peak resident memory of a process reducing a rank of `export_bytes` bytes of export (docs/memory.md)."""
    return int(RANK_BASE_BYTES + RANK_PER_EXPORT_BYTE * export_bytes)


def processes_that_fit(export_bytes: Sequence[int], available: int) -> int:
    """How many processes can reduce ranks at once within `available` bytes (at least 1): each takes one of the
    largest ranks (they are reduced first), and the job's parent keeps every rank's figures besides."""
    room = available - PARENT_PER_RANK * len(export_bytes)
    needs = [rank_memory(s) for s in sorted(export_bytes, reverse=True)]
    taken = 0
    for count, need in enumerate(needs):  # ranks, not events
        taken += need
        if taken > room:
            return max(1, count)
    return max(1, len(needs))


def available_memory(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes of memory this process and its children may still take: the system's available memory (Linux'
    MemAvailable: free memory and the page cache it can drop), less where a cgroup v1 or v2 memory limit of this
    process or of a cgroup above it leaves less room (its limit less its usage, the file cache it can drop not
    counted, as `docker stats` counts). None where neither is known (not Linux)."""
    known = [v for v in (_mem_available(proc / "meminfo"), *_cgroup_rooms(proc / "self" / "cgroup", cgroups))
             if v is not None]
    return max(0, min(known)) if known else None


def _mem_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_rooms(membership: Path, cgroups: Path) -> list[int | None]:
    """Room left under each memory limit of the cgroups this process is in and above (v2 and v1 hierarchies)."""
    return [_cgroup_room(folder, "memory.max", "memory.current", "inactive_file") if v2 else
            _cgroup_room(folder, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            for v2, folder in _cgroup_folders(membership, cgroups, "memory", ("memory",))]


def _cgroup_folders(membership: Path, cgroups: Path, controller: str,
                    v1_mounts: tuple[str, ...]) -> list[tuple[bool, Path]]:
    """The folders of the cgroups this process is in and above (`_folders`), each with whether it is cgroup v2's:
    the unified hierarchy's, and the v1 hierarchy's of `controller`, mounted under `cgroups` as one of `v1_mounts`.
    Read from `membership` (/proc/self/cgroup: one line per hierarchy); none where it cannot be read."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[bool, Path]] = []
    for line in lines:  # one line per hierarchy
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and not controllers:  # the v2 (unified) hierarchy
            base = cgroups if (cgroups / "cgroup.controllers").exists() else cgroups / "unified"
            found += [(True, folder) for folder in _folders(base, path)]
        elif controller in controllers.split(","):
            found += [(False, folder) for mount in v1_mounts for folder in _folders(cgroups / mount, path)]
    return found


def _folders(base: Path, path: str) -> list[Path]:
    """`base`/`path` and every folder above it up to `base`: a limit set on a parent cgroup holds for its
    children. A cgroup namespace (a container) shows its own cgroup as ``/``, mounted at `base`."""
    folder = base / path.strip("/")
    return [folder, *[p for p in folder.parents if p.is_relative_to(base)]]


def _cgroup_room(folder: Path, limit_file: str, usage_file: str, inactive_key: str) -> int | None:
    """A cgroup's limit less what it uses (its droppable file cache not counted); None without a limit."""
    try:
        limit_text = (folder / limit_file).read_text().strip()
        if limit_text == "max" or int(limit_text) >= NO_CGROUP_LIMIT:
            return None
        usage = int((folder / usage_file).read_text())
        stat = dict(line.partition(" ")[::2] for line in (folder / "memory.stat").read_text().splitlines())
        return int(limit_text) - max(0, usage - int(stat.get(inactive_key) or 0))
    except (OSError, ValueError):
        return None


def usable_cores(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on (at least 1): the CPUs of its affinity mask (else the machine's), no more
    than the smallest CPU quota of its cgroups and those above them, rounded up (cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    quotas = [q for q in _cpu_quotas(proc / "self" / "cgroup", cgroups) if q is not None]
    return max(1, min([cores, *quotas]))


def _cpu_quotas(membership: Path, cgroups: Path) -> list[int | None]:
    """The CPU quota (cores, rounded up) of each cgroup this process is in and above (v2 and v1 hierarchies; v1's
    mounted as cpu, cpu,cpuacct or cpuacct,cpu)."""
    return [_cpu_max(folder / "cpu.max") if v2 else _cfs_quota(folder)
            for v2, folder in _cgroup_folders(membership, cgroups, "cpu", ("cpu", "cpu,cpuacct", "cpuacct,cpu"))]


def _cpu_max(path: Path) -> int | None:
    """Cores of a cgroup v2 ``cpu.max`` ("quota period", or "max period": none), rounded up."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else -(-int(quota) // int(period))
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _cfs_quota(folder: Path) -> int | None:
    """Cores of a cgroup v1 CPU quota (``cpu.cfs_quota_us`` -1: none), rounded up."""
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else -(-quota // period)
    except (OSError, ValueError):
        return None


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
    need = needed(size)
    if limit is None or need > limit:
        return (f"out of memory reading {database.name} ({_mb(size)}) {where}: {had}; a run on this export needs "
                f"about {_mb(need)} of address space (docs/memory.md): raise the limit to that or use a bigger "
                "machine")
    # the estimate is an average: this run needed more than the limit it failed under, whatever the estimate says
    return (f"out of memory reading {database.name} ({_mb(size)}) {where}: {had}; this run needs more than the "
            f"{_mb(limit)} it was allowed (docs/memory.md): raise the limit, to {_mb(2 * limit)} for instance, or "
            "use a bigger machine")


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
    least = (f"more than the {_mb(limit)} it was allowed" if limit is not None and limit >= BASE_BYTES
             else f"at least {_mb(BASE_BYTES)} of address space")
    return (f"out of memory loading dlagg's libraries (pandas, pyarrow) under {where}: a run needs {least} plus "
            f"about {PER_EXPORT_BYTE:g} times the export's size (docs/memory.md): raise the limit")


# What the system refusing memory says where it is no MemoryError: a thread without room for its stack
# (Python's RuntimeError, Arrow's thread pool), an extension module that cannot be mapped (ImportError), a mapping
# refused (OSError).
OUT_OF_MEMORY_TEXTS = ("can't start new thread", "failed to launch worker thread", "failed to map segment",
                       "cannot allocate memory")
_THREAD_RAN_OUT = threading.Event()
_FIRST = threading.Lock()


def is_out_of_memory(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, is the system refusing memory."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # an exception's chain, not events
        seen.add(id(exc))
        if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
            return True
        if any(text in str(exc).lower() for text in OUT_OF_MEMORY_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def end_run_when_a_thread_runs_out() -> None:
    """From now on a thread that ends on the system refusing memory interrupts the main thread (SIGINT, which the
    command's handler turns into an exception that unwinds the run, its staging folder removed), and
    `thread_ran_out` tells the CLI to say the out-of-memory line instead of "interrupted". Without it the thread
    dies with a traceback, and whoever waits for its work waits forever: a process pool's manager thread that
    cannot start its queue's feeder thread leaves every task of the pool pending."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if not is_out_of_memory(args.exc_value):
            previous(args)
            return
        with _FIRST:  # one interruption: a second would break into the first one's unwinding
            if _THREAD_RAN_OUT.is_set():
                return
            _THREAD_RAN_OUT.set()
        main = threading.main_thread().ident
        if args.thread is not threading.main_thread() and main is not None and hasattr(signal, "pthread_kill"):
            signal.pthread_kill(main, signal.SIGINT)

    threading.excepthook = hook


def thread_ran_out() -> bool:
    """Whether a thread ended on the system refusing memory (`end_run_when_a_thread_runs_out`)."""
    return _THREAD_RAN_OUT.is_set()
