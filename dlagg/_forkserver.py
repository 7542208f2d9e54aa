"""What the local pool's fork server imports before it forks workers (``ranks.pool.PRELOAD``); nothing else imports it.

The workers run ``pipeline`` (ranks reduced, reports written), so the server imports it once and every worker
starts with it. And when dlagg's process ends, the server ends at once: its normal exit tears down pandas,
pyarrow and numpy object by object (a good part of a second), all the while holding dlagg's stderr open, so a
pipe from dlagg (``dlagg ... | tee log``, a CI job) would wait for it. Its workers have ended by then, and it
has nothing to flush or remove (the parent removes its socket). Started from dlagg's main thread, the server is
also killed by the kernel when dlagg's process ends however it ends (SIGKILL included), before any import here.
"""

from __future__ import annotations

import atexit
import os
import sys

from .limits import is_out_of_memory, small_thread_stacks
from .ranks.pool import SERVER_PARENT, die_with_parent

SERVER_PID = os.getpid()  # what a worker forked from here checks its parent against (pool._start_worker)
_parent = os.environ.pop(SERVER_PARENT, "")  # set by pool.start_early in dlagg's main thread; not for the workers
if _parent.isdigit() and not die_with_parent(int(_parent)):  # first: before the imports, the slow part
    os._exit(0)  # dlagg's process ended while this one started

small_thread_stacks()  # the workers' threads, under an address-space limit (dlagg/__main__.py sets the parent's)

try:
    from . import pipeline  # noqa: E402, F401 - imported for the workers
except BaseException as _exc:
    if not is_out_of_memory(_exc):
        raise
    # No room for the libraries: dlagg's process says so when its pool cannot start (pool._worker_lane), in one
    # line; multiprocessing would print this process's traceback to the same terminal.
    os._exit(1)


def _quiet_when_orphaned(kind: type[BaseException], value: BaseException, tb: object) -> None:
    """A worker forked here as dlagg's process was killed finds its pipe from it closed (EOFError reading what to run,
    before any dlagg code), or, as dlagg's process ended (out of memory, say), the pool's semaphores gone
    (FileNotFoundError unpickling them): it ends without a traceback on the gone run's terminal. Anything else is
    said as usual."""
    if os.getpid() != SERVER_PID and isinstance(value, (EOFError, ConnectionError, FileNotFoundError)):
        return
    sys.__excepthook__(kind, value, tb)  # type: ignore[arg-type]


sys.excepthook = _quiet_when_orphaned  # multiprocessing's forkserver reports a forked child's failure with it
atexit.register(os._exit, 0)  # registered last, so run first: before the teardown
