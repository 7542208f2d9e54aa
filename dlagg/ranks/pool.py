"""The local process pool's start method, and starting it before the parent's own imports.

Ranks are reduced, and then the run's outputs written, by this process and a pool whose workers
fork from a *fork server* that has imported dlagg once (``multiprocessing``'s forkserver with ``dlagg._forkserver``
preloaded): each worker then starts in milliseconds, without the parent's threads and memory.
Importing dlagg takes most of a second of one core; started from ``python -m dlagg`` before the parent's
imports (``start_early``), the fork server does it on the other core while the parent does its own,
so a run over several files does not wait for it.

``shared_map`` shares a list of work (files to probe, ranks to reduce) between this process and the
pool's workers: this process is one of the ``--workers`` (the pool has one process fewer).

Standard library only: ``__main__`` imports this before numpy, pandas and pyarrow. ``multiprocessing`` and the
process pool (tens of milliseconds of imports) are loaded when a pool is made: a run in one process never needs them.
"""

from __future__ import annotations

import glob
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Executor, Future
from functools import partial
from typing import Any, Generic, TypeVar

from ..errors import WorkerLost
from ..limits import address_space_limit, usable_cores

T = TypeVar("T")
R = TypeVar("R")

PRELOAD = ["dlagg._forkserver"]  # dlagg.pipeline, and a quick exit
_SHUTTING_DOWN = threading.Lock()  # worker_lost's shutdown of a broken pool, one lane at a time


def pool_context() -> Any:
    """A fork server that has imported dlagg, else spawn (platforms without fork)."""
    import multiprocessing  # here, not at the top: a run in one process never pays for loading it

    context: Any = multiprocessing.get_context("forkserver" if "forkserver" in
                                               multiprocessing.get_all_start_methods() else "spawn")
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload(PRELOAD)
    return context


def start_early() -> None:
    """Start the fork server now (it imports dlagg in the background); a later pool uses it.

    Started from the main thread, the server ends with this process however it ends (`die_with_parent`, set by
    dlagg._forkserver as it starts: ``SERVER_PARENT`` tells it this process's id). From another thread it is not tied
    so (a parent-death signal comes when the *thread* that started it ends: a pool's thread, long before this
    process); its workers still end with this process (`worker_initializer`), and it with them (multiprocessing's
    own rule: the server ends once no process holding its "alive" pipe, this one and its workers, is left)."""
    if pool_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        main = threading.current_thread() is threading.main_thread()
        given = os.environ.get(SERVER_PARENT)
        if main:
            os.environ[SERVER_PARENT] = str(os.getpid())
        try:
            _start_resource_tracker()
            forkserver.ensure_running()
        finally:
            if main:
                if given is None:
                    os.environ.pop(SERVER_PARENT, None)
                else:
                    os.environ[SERVER_PARENT] = given


def _start_resource_tracker() -> None:
    """multiprocessing's resource tracker (the fork server starts it else), told not to warn of the pool's semaphores
    it removes when this process was killed: ended with this one (`worker_initializer`), the pool leaves them to it,
    and the warning would come on the user's terminal after the run is gone."""
    from multiprocessing import resource_tracker

    given = os.environ.get("PYTHONWARNINGS")
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    os.environ["PYTHONWARNINGS"] = f"{given},{quiet}" if given else quiet
    try:
        resource_tracker.ensure_running()
    finally:
        if given is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = given


SERVER_PARENT = "DLAGG_FORKSERVER_PARENT"  # the fork server's environment: the process it ends with
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(expected: int) -> bool:
    """Have the kernel kill this process (SIGKILL) when its parent ends (Linux: prctl(PR_SET_PDEATHSIG); elsewhere
    nothing), and whether its parent is still `expected` (False: the parent ended before, and this process was
    handed to another: it must end now). The signal comes when the parent *thread* ends: call it only in a process
    started by a thread that lasts as long as its process (a main thread, or a single-threaded fork server)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # here: pool.py is imported before anything else (__main__), and ctypes is not free

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the watch (`watch_parent`) is left
            pass
    return os.getppid() == expected


def process_identity(pid: int) -> str | None:
    """What tells process `pid` from a later one given its id: its start time, in clock ticks since boot (Linux
    /proc); None where that is unknown, or when the process has ended (a zombie included)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold anything
    except (OSError, IndexError):
        return None
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()  # field 22 of proc(5): starttime


def _alive(pid: int, identity: str | None) -> bool:
    if identity is not None:
        return process_identity(pid) == identity
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        pass
    return True


def watch_parent(pid: int, identity: str | None) -> bool:
    """End this process (at once: no flushing, no further write) when process `pid` (`identity`: its
    `process_identity`) ends, watched by a daemon thread: a pidfd (Linux 5.3) is readable from the moment it ends;
    without one, the thread looks every 0.2 s. False when it has ended already (or its id is another process's now)."""
    try:
        handle: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfd here: poll
        handle = None
    if not _alive(pid, identity):  # after opening it: the pidfd is the process checked, not a later one
        if handle is not None:
            os.close(handle)
        return False
    threading.Thread(target=_end_with, args=(pid, identity, handle), name="dlagg-parent-watch", daemon=True).start()
    return True


def _end_with(pid: int, identity: str | None, handle: int | None) -> None:
    import select
    import time

    if handle is not None:
        select.select([handle], [], [])
    else:
        while _alive(pid, identity):
            time.sleep(0.2)
    os._exit(1)


def worker_initializer(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A pool's initializer that ends each worker process with this one, however this one ends (SIGKILL included),
    then runs `then`. A worker's parent is the fork server: with the server tied to this process (`start_early`),
    the kernel kills the server, and the server's death the worker (`die_with_parent`: the server has one thread);
    and the worker watches this process itself (`watch_parent`), whatever started the server. Without it a worker
    waits for its next task forever once this process is gone, keeping the fork server and the resource tracker
    alive with it, and one busy with a rank goes on writing into a staging folder nobody will commit or remove."""
    return partial(_start_worker, os.getpid(), process_identity(os.getpid()), then)


def _start_worker(parent: int, identity: str | None, then: Callable[[], None] | None) -> None:
    server = getattr(sys.modules.get("dlagg._forkserver"), "SERVER_PID", None)  # forked from dlagg's fork server
    if (server is not None and not die_with_parent(server)) or not watch_parent(parent, identity):
        os._exit(1)  # dlagg's process has ended already: nothing to do for it
    if then is not None:
        then()


def pool_size(pool: Executor) -> int:
    """The number of workers of `pool` (its constructor's max_workers, which it keeps unexposed)."""
    return int(pool._max_workers)  # type: ignore[attr-defined]


def shared_map(items: Sequence[T], task: Callable[[T], R], pool: Executor,
               done: Callable[[R, str], None] | None = None,
               describe: Callable[[T], str] = str) -> list[R]:
    """`task` of every item, run by this process and the pool's workers together; the results in the items'
    order, and each given to `done` as it ends, with where it ran ("this process" or "a worker process").

    One queue: this process takes the next item when it has ended its last (at once; it ships no results); a
    thread per worker keeps it one item ahead until the queue is short, from when it is up (no item waits while
    the fork server imports dlagg). A failure stops the queue, and the first is raised once the others end. A
    worker process that ends abruptly (killed: most often by the system, for memory) is a `WorkerLost` naming
    the item it was working on (`describe`; with several pool workers, the items they were on)."""
    queue = _Queue(items, 1 + pool_size(pool), done or _ignore)
    processes = getattr(pool, "_processes", None)  # the pool's own dict of its processes, filled as they start
    feeders = [threading.Thread(target=_worker_lane, args=(queue, task, pool, describe, processes), daemon=True)
               for _ in range(pool_size(pool))]
    for feeder in feeders:
        feeder.start()
    try:
        while (taken := queue.take(ahead=False)) is not None:
            queue.end(taken[0], task(taken[1]), "this process")
    except BaseException as exc:
        queue.fail(exc)
    for feeder in feeders:
        feeder.join()
    if queue.failures:
        raise queue.failures[0]
    return queue.results


class _Queue(Generic[T, R]):
    """`shared_map`'s items not yet taken, the results so far and the failures, shared by its lanes (one lock)."""

    def __init__(self, items: Sequence[T], lanes: int, done: Callable[[R, str], None]) -> None:
        self.items = items
        self.waiting = deque(enumerate(items))
        self.lanes = lanes
        self.done = done
        self.results: list[Any] = [None] * len(items)
        self.failures: list[BaseException] = []
        self.sent: dict[int, None] = {}  # items given to the pool and not ended, in the order they were given
        self.lock = threading.Lock()

    def take(self, ahead: bool) -> tuple[int, T] | None:
        """The next item and its index; None when none is left, after a failure, or (`ahead`: a worker's next
        item, taken while it still runs one) when fewer items are left than lanes."""
        with self.lock:
            if self.failures or not self.waiting or (ahead and len(self.waiting) < self.lanes):
                return None
            return self.waiting.popleft()

    def send(self, index: int) -> None:
        with self.lock:
            self.sent[index] = None

    def end(self, index: int, result: R, where: str) -> None:
        with self.lock:
            self.results[index] = result
            self.sent.pop(index, None)
            self.done(result, where)

    def on_workers(self, workers: int) -> list[T]:
        """The items the pool's `workers` processes were on: the oldest given to it and not ended (its processes
        take them in the order given, one each)."""
        with self.lock:
            return [self.items[index] for index in list(self.sent)[:workers]]

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.failures.append(exc)
            self.waiting.clear()


def _worker_lane(queue: _Queue[T, R], task: Callable[[T], R], pool: Executor, describe: Callable[[T], str],
                 processes: dict[int, Any] | None) -> None:
    """A pool worker's lane of `shared_map`: the worker kept one item ahead, from when it is up."""
    running: deque[tuple[int, Future[R]]] = deque()
    try:
        _started(pool)  # until the worker is up, this process takes every item
        while True:
            taken = queue.take(ahead=bool(running))
            if taken is not None:
                running.append((taken[0], pool.submit(task, taken[1])))
                queue.send(taken[0])
                if len(running) < 2:
                    continue
            if not running:
                return
            index, job = running[0]
            queue.end(index, job.result(), "a worker process")
            running.popleft()
    except BrokenExecutor as broken:
        try:
            doing = " or ".join(describe(item) for item in queue.on_workers(pool_size(pool)))
            queue.fail(worker_lost(pool, doing or "starting", processes))
        except BaseException:  # the map never goes on without its failure
            queue.fail(broken)
    except BaseException as exc:
        queue.fail(exc)


def _ignore(*_: object) -> None:
    pass


def _started(pool: Executor) -> None:
    """Once `pool` has a worker up. A fork server that ended as it started (it had no room to import dlagg under an
    address-space limit: dlagg/_forkserver.py) shows as its pipe closed: the out-of-memory error there."""
    try:
        pool.submit(_ignore).result()
    except (EOFError, ConnectionError) as exc:
        if address_space_limit() is None:
            raise
        raise MemoryError(f"the worker pool's fork server ended as it started ({exc!r}), under an address-space "
                          "limit") from exc


def worker_lost(pool: Executor, doing: str, processes: dict[int, Any] | None = None) -> WorkerLost | MemoryError:
    """The error for `pool` broken by a worker process that ended abruptly while `doing`: how it ended, and what
    to do. The pool is shut down first, so that every worker's end is known (the pool ends the others itself).
    `processes`: the pool's dict of its processes, taken before (a pool shut down drops it, and another lane may
    have shut it down first); by default the pool's own, now. Under an address-space limit it is a MemoryError
    (the CLI's out-of-memory line): there a worker ends abruptly when a library's reservation is refused (SIGSEGV
    in a driver's error path, SIGABRT from C++'s bad_alloc, a thread it could not start), whatever the signal."""
    known = processes if processes is not None else getattr(pool, "_processes", None)  # (kept unexposed)
    workers = list((known or {}).values())
    with _SHUTTING_DOWN:  # lanes of one pool find it broken at once, and its shutdown is not safe twice at once
        try:
            pool.shutdown(wait=True)
        except OSError:  # its queues closed by the other shutdown already
            pass
    codes = [p.exitcode for p in workers]
    code = next((c for c in codes if c not in (None, 0, -signal.SIGTERM)), None)
    if code is None and -signal.SIGTERM in codes:
        code = -signal.SIGTERM
    if address_space_limit() is not None and code != -signal.SIGTERM:
        return MemoryError(f"a worker process ended abruptly ({code}) while {doing}, under an address-space limit")
    if code is None:
        how = "ended abruptly"
    elif code < 0:
        how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
    else:
        how = f"exited with status {code}"
    why = (": most likely by the system's out-of-memory killer, dlagg's processes together needing more memory than "
           "the machine had" if code == -signal.SIGKILL else "")
    if code == 1 and doing == "starting" and _unguarded_script():
        return WorkerLost(f"a worker process {how} while {doing}: each worker process imports the script that "
                          "called dlagg, which then calls it again; call dlagg under `if __name__ == \"__main__\":` "
                          "in that script, or pass workers=1 (docs/api.md)")
    fewer = max(1, (pool_size(pool) + 1) // 2)
    return WorkerLost(f"a worker process {how} while {doing}{why}; rerun with fewer processes at once "
                      f"(--workers={fewer}) or on a machine with more memory (docs/memory.md)")


def _unguarded_script() -> bool:
    """Whether the program is a script of the user's (not the dlagg command): a worker process started from it
    runs the script's top level again (multiprocessing's rule), which fails at once when that level calls dlagg."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return bool(getattr(main, "__file__", None)) and (spec is None or not spec.name.startswith("dlagg"))


def _value(argv: Sequence[str], option: str) -> str | None:
    """The last value of `--option=value` or `--option value` in `argv` (None when absent)."""
    found = None
    for i, arg in enumerate(argv):  # command-line words, not events
        if arg.startswith(option + "="):
            found = arg[len(option) + 1:]
        elif arg == option and i + 1 < len(argv):
            found = argv[i + 1]
    return found


def several_files(argv: Sequence[str]) -> bool:
    """Whether the command line names several input files for a local pool (a cheap guess made before
    the options are parsed: a comma list, a glob or a folder; not with --workers=1 or --scheduler).
    A wrong guess costs a fork server that is never used, or one started later."""
    spec = _value(argv, "--nsys_database") or _value(argv, "--nvprof_database")
    if not spec or _value(argv, "--workers") == "1" or _value(argv, "--scheduler"):
        return False
    if usable_cores() < 2 and _value(argv, "--workers") is None:
        return False
    return "," in spec or glob.has_magic(spec) or os.path.isdir(spec)
