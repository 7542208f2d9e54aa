"""A rank's ops kept in the read cache, so that a second look at one export skips the op search.

Contract: ``OpsCache.of(path, process, options)`` (None with ``--cache=false``), then
``cache.ops(inputs, compute) -> Ops``: the ops `compute()` finds, read from the cache folder when an entry holds them
for the same inputs, else computed and kept.

The op search runs over the whole profile and depends only on what the reader yielded, the iteration windows (their
key node and ends, not which of them are aggregated), the domains kept and each kernel's Tensor Core use: another
``--iter_start/--iter_stop``, another report or another format finds the same ops. So an entry is keyed by

- the read's identity of the file (reader/cache.py: name, size, modification time, hashed edges, process, the
  versions and how text is kept),
- a digest of the whole package's source (the op rules live in ops/, timeline/, classify and the model), and
- `inputs`: the caller's digest of the iterations, domains and Tensor Core use (`RankContext.ops`).

Layout: ``<folder>/<key>.ops/`` with ``manifest.json`` (the key, the warnings, each frame's columns) and one Parquet
file per frame (reader/cache.py's `write_frame`), written beside it and renamed into place. A damaged entry is a
note, removed, and the ops are found again; ops holding a value the format cannot keep exactly are not kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..limits import is_out_of_memory
from ..log import MINIMAL, shown
from ..options import Options, cache_folder
from ..reader.cache import (
    MANIFEST,
    Damaged,
    discard,
    entry_name,
    identity,
    note,
    read_frame,
    reason,
    store_entry,
    write_frame,
)
from .assign import Ops

FORMAT = 1  # of the entries: a change to the layout below bumps it
FRAMES = ("instances", "ops", "work_instance")


@cache
def package_digest() -> str:
    """A digest of every module of dlagg: an edited rule never meets ops an older one found."""
    here = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for source in sorted(here.rglob("*.py")):
        try:
            digest.update(source.relative_to(here).as_posix().encode())
            digest.update(source.read_bytes())
        except OSError:  # an installation without its sources: the version alone (in the read's identity)
            pass
    return digest.hexdigest()


def digest_of(*parts: Any) -> str:
    """A digest of text, numbers and numpy arrays (their dtype, shape and bytes)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            digest.update(f"{part.dtype.str}{part.shape}".encode())
            digest.update(np.ascontiguousarray(part).tobytes())
        else:
            digest.update(json.dumps(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class OpsCache:
    """Where one file's ops are kept: the cache folder and the read's identity of the file."""

    root: Path
    read: dict[str, Any]
    source: str  # the file's name, for the notes
    level: int = MINIMAL

    @classmethod
    def of(cls, path: Path, process: int | None, options: Options) -> OpsCache | None:
        """The cache of `path`'s ops (its `process`), or None with --cache=false or a file that cannot be read."""
        if not options.cache:
            return None
        try:
            read = identity(path, process)
        except OSError:  # the reader has said what is wrong with the file
            return None
        return cls(cache_folder(options.cache_dir), read, path.name, options.level)

    def ops(self, inputs: str, compute: Callable[[], Ops]) -> Ops:
        """`compute()`'s ops, from the entry for `inputs` when there is a sound one (module docstring)."""
        key = {"format": FORMAT, "read": self.read, "code": package_digest(), "inputs": inputs}
        entry = self.root / f"{entry_name(key)}.ops"
        if entry.is_dir():
            try:
                return read_ops(entry, key)
            except Exception as exc:  # any damage: the ops are found again
                if is_out_of_memory(exc):
                    raise
                if self.level >= MINIMAL:
                    note(f"the cached ops of {shown(self.source)} are damaged ({reason(exc)}); finding them again")
                discard(entry)
        found = compute()
        store_entry(self.root, entry, partial(write_ops, key=key, ops=found), self.level)
        return found


def write_ops(folder: Path, key: dict[str, Any], ops: Ops) -> None:
    """The entry's files in `folder`, the manifest last."""
    frames = {"instances": ops.instances, "ops": ops.ops,
              "work_instance": pd.DataFrame({"instance": np.asarray(ops.work_instance, dtype=np.int64)})}
    manifest = {"key": key, "warnings": list(ops.warnings),
                "frames": {name: write_frame(folder / f"{name}.parquet", frame) for name, frame in frames.items()}}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def read_ops(entry: Path, key: dict[str, Any]) -> Ops:
    """The ops an entry holds, each frame checked against its manifest (`Damaged` otherwise)."""
    manifest = json.loads((entry / MANIFEST).read_text())
    if manifest.get("key") != key:
        raise Damaged("the entry is another file's")
    stored = manifest["frames"]
    frames = {name: read_frame(entry / f"{name}.parquet", stored[name]) for name in FRAMES}
    work_instance = frames["work_instance"]
    if list(work_instance.columns) != ["instance"]:
        raise Damaged("the launches' instances have other columns")
    warnings = manifest["warnings"]
    if not all(isinstance(w, str) for w in warnings):
        raise Damaged("the warnings are not text")
    return Ops(frames["instances"], frames["ops"], work_instance["instance"].to_numpy(dtype=np.int64, copy=True),
               tuple(warnings))
