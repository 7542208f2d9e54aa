"""What the local pool's fork server imports before it forks workers (``pool.PRELOAD``); nothing else imports it.

The workers run ``pipeline`` (ranks reduced, reports written), so the server imports it once and every worker
starts with it. And when dlagg's process ends, the server ends at once: its normal exit tears down pandas,
pyarrow and numpy object by object (about 0.3 s of one core), all the while holding dlagg's stderr open, so a
pipe from dlagg (``dlagg ... | tee log``, a CI job) would wait for it. Its workers have ended by then, and it
has nothing to flush or remove (the parent removes its socket).
"""

from __future__ import annotations

import atexit
import os

from . import pipeline  # noqa: F401 - imported for the workers

atexit.register(os._exit, 0)  # registered last, so run first: before the teardown
