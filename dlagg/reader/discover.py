"""Which files, processes, GPUs and ranks a job's exports hold, read before any event table.

Contract: ``input_paths(spec) -> list[Path]`` expands ``--nsys_database`` (one file, a comma list,
a glob, a folder); ``discover(paths) -> Job`` lists one `RankSource` per rank. A rank is a process
that ran GPU work (kernels, copies or memsets); a file without any such process is one rank of its
own (its CPU-side data: a run without CUDA). A file with one such process is read whole, as it
always was; a file with several is read once per process, each read keeping that process's rows.

Rank numbers: NVIDIA's exports keep the environment of the profiled processes (``RANK=...``) as
strings, but not which process each one belongs to. So a rank number is taken from the environment
only when every file holds one GPU process and names exactly one rank (``RANK``, else
``OMPI_COMM_WORLD_RANK``, ``SLURM_PROCID``, ``PMI_RANK``), all different; otherwise ranks are numbered
by order of (file, lowest device id). Files are ordered by name with numbers compared as numbers
(``rank2`` before ``rank10``).
"""

from __future__ import annotations

import errno
import filecmp
import glob
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from ..log import shown
from ..model import Profile
from . import schema
from .cache import cached_answer
from .database import Database
from .formats import SQLITE, TRACE, format_of, sniffed
from .kineto import probe_kineto
from .nsys import file_late_events, session_start, stated_session, trusted_session

# probe_all(probe, paths): probe(path) of every path, in their order (see `discover`)
ProbeAll = Callable[[Callable[[Path], Any], list[Path]], list[Any]]
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK")
GPU_TABLES = (schema.KERNELS, schema.MEMCPY, schema.MEMSET)
# The OS process id inside a globalPid (reference §2.3).
PID_SHIFT, PID_BITS = 24, 0xFFFFFF
# The names a folder's PyTorch profiler traces may have (tensorboard_trace_handler: <worker>.<ts>.pt.trace.json.gz).
TRACE_SUFFIXES = (".json", ".gz")
# Traces one of which begins this long after another has ended are of different runs (docs/kineto.md).
RUN_GAP_NS = 10 * 10**9
# Bytes of each file hashed to tell a copy of one file given twice (its size must match too).
DIGEST_BYTES = 1 << 20


@dataclass(frozen=True)
class RankSource:
    """Where one rank's events are: a file, and the process to keep (None: the whole file)."""

    path: Path
    process: int | None  # globalPid; None when the file is read whole
    pid: int  # OS process id (0 when the file has no GPU process)
    devices: tuple[int, ...]  # CUDA device ids the process ran GPU work on
    host: str  # the recording machine's host name ('' when not recorded)
    rank: int
    # bytes of its file over the file's ranks: about what the rank costs to read and reduce (the largest are
    # reduced first: ranks.reduce.largest_first)
    export_bytes: int


@dataclass(frozen=True)
class Job:
    sources: tuple[RankSource, ...]  # ordered by rank
    files: int
    processes: int  # processes that called CUDA or ran GPU work
    numbering: str  # how ranks were numbered, for the log
    notes: tuple[str, ...] = ()  # what the user should know of the files (a rank missing), for the log

    @property
    def gpus(self) -> int:
        """Distinct GPUs the ranks ran on (a device id per host)."""
        return len({(s.host, d) for s in self.sources for d in s.devices})

    def describe(self) -> str:
        ranks = len(self.sources)
        gpus = f" on {self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else ""  # (a trace's: read later)
        return (f"{self.files} file{'s' if self.files != 1 else ''}, {self.processes} process"
                f"{'es' if self.processes != 1 else ''} with CUDA activity, {ranks} rank{'s' if ranks != 1 else ''}"
                f"{gpus}; {self.numbering}")


def with_profile_facts(source: RankSource, profile: Profile) -> RankSource:
    """`source` with the process and devices its profile shows, where the probe could not tell them (a trace's
    probe reads only its head): the devices that ran its GPU work, the process that made most CUDA calls."""
    if source.devices or source.pid:
        return source
    devices = np.unique(np.concatenate([getattr(profile, t.name)["device_id"].to_numpy() for t in GPU_TABLES]))
    calls = profile.runtime["global_tid"].to_numpy()
    pid = int(pd.Series(calls >> PID_SHIFT).value_counts().index[0]) & PID_BITS if len(calls) else 0
    return replace(source, devices=tuple(int(d) for d in devices), pid=pid)


def _natural(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _folder(path: Path, skipped: list[str] | None) -> list[Path]:
    """The profiles in a folder: its ``*.sqlite`` files, else its PyTorch profiler traces (files of another format,
    such as other JSON, are named in `skipped` and left out)."""
    found = sorted(path.glob("*.sqlite"), key=_natural)
    if found:
        return found
    candidates = sorted((p for p in path.iterdir() if p.suffix in TRACE_SUFFIXES and p.is_file()), key=_natural)
    traces: list[Path] = []
    others: list[Path] = []
    for candidate in candidates:
        try:
            known = sniffed(candidate)[0]
        except InputError:
            known = None
        (traces if known is not None and known.name == TRACE else others).append(candidate)
    if not traces:
        raise InputError(f"{shown(path)}: the folder holds no *.sqlite file nor PyTorch profiler trace; pass "
                         "nsys SQLite exports or the *.pt.trace.json(.gz) files torch.profiler wrote")
    if others and skipped is not None:
        names = ", ".join(p.name for p in others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        skipped.append(f"{shown(path)}: left out {len(others)} file{'s' if len(others) > 1 else ''} that "
                       f"{'are' if len(others) > 1 else 'is'} not a profiler trace ({names})")
    return traces


def input_paths(spec: str | Path | Sequence[str | Path], skipped: list[str] | None = None) -> list[Path]:
    """The files `spec` names: a file, a folder (its ``*.sqlite``, else its PyTorch profiler traces), a glob, or
    a comma list of those (a name that exists as given is one name, even with a comma in it). Files of a folder
    that are no profile are left out, each folder's said in `skipped`."""
    items = [spec] if isinstance(spec, (str, Path)) else list(spec)
    # a name that exists as given is taken whole, commas and all (run,1.sqlite); else the commas separate names
    names = [str(item) for item in items]
    parts = [p.strip() for name in names
             for p in ([name] if "," in name and os.path.lexists(name) else name.split(",")) if p.strip()]
    if not parts:
        raise InputError("--nsys_database: no file given; pass an nsys SQLite export or a PyTorch profiler trace, "
                         "a folder or a glob")
    paths: list[Path] = []
    for part in parts:
        path = Path(part)
        _check_name(path)
        if path.is_dir():
            paths.extend(_folder(path, skipped))
        elif any(ch in part for ch in "*?[") and not path.exists():
            found = sorted((Path(p) for p in glob.glob(part)), key=_natural)
            if not found:
                raise InputError(f"{shown(part)}: no file matches; check the pattern (quote it so the shell leaves it)")
            paths.extend(found)
        else:
            paths.append(path)
    resolved = [_resolved(p) for p in paths]
    first = {r: p for r, p in zip(reversed(resolved), reversed(paths), strict=True)}  # a file named twice: read once
    return [p for r, p in zip(resolved, paths, strict=True) if first[r] is p]


# Longest file name (bytes of one path component) and path the filesystem accepts (Linux NAME_MAX, PATH_MAX).
NAME_MAX, PATH_MAX = 255, 4096


def _check_name(path: Path) -> None:
    """A name the filesystem cannot hold is one clear line, not the OSError a lookup of it raises."""
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX or len(os.fsencode(str(path))) >= PATH_MAX:
        what = (f"a part of it is {longest} bytes long, over the {NAME_MAX} a file name may have" if longest > NAME_MAX
                else f"it is {len(os.fsencode(str(path)))} bytes long, over the {PATH_MAX} a path may have")
        raise InputError(f"{shown(path)[:200]}...: no such file can exist ({what}); check the name passed "
                         "to --nsys_database")


def _resolved(path: Path) -> Path:
    """`path` with its symbolic links followed; a loop of links (a link that leads back to itself) is one line."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11-3.12 raise RuntimeError on a loop, 3.13 OSError(ELOOP)
        if isinstance(exc, OSError) and exc.errno not in (errno.ELOOP, errno.ENAMETOOLONG):
            raise
        raise InputError(f"{shown(path)}: a symbolic link that leads back to itself (a loop of links), no file; "
                         "point it at the export (ls -l shows where each link leads) or pass the file itself") from None


@dataclass(frozen=True)
class _File:
    path: Path
    processes: tuple[tuple[int, tuple[int, ...]], ...]  # (globalPid, devices) with GPU work, by lowest device
    cuda_processes: int
    host: str
    env_ranks: tuple[int, ...]  # distinct rank numbers its environment strings name (a trace: its stated rank)
    size: int  # bytes
    format: str = SQLITE
    world_size: int | None = None  # a trace's distributedInfo
    span: tuple[int, int] | None = None  # a trace's (first, last) event time on the epoch clock, ns
    digest: str = ""  # its size and a hash of its first DIGEST_BYTES: a copy of another file has the same
    session: tuple[int, int] | None = None  # an nsys export's session (start, end) on the epoch clock, ns


def _gpu_processes(db: Database, session: int | None = None) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(globalPid, its device ids) of every process with GPU work, ordered by (lowest device, pid).

    Only rows the reader keeps count (validate.py: integer ids and times, not ending before they
    start, within `session` when given): a process whose every GPU row is damaged ran no GPU work the
    reports can see, and is no rank."""
    devices: dict[int, set[int]] = {}
    for table in GPU_TABLES:
        physical = db.find(table.sources)
        columns = set(db.columns(physical)) if physical is not None else set()
        if not {"globalPid", "deviceId"} <= columns:
            continue
        usable = " AND ".join(f"typeof(\"{c}\") = 'integer'" for c in ("globalPid", "deviceId", "start", "end")
                              if c in columns)
        if {"start", "end"} <= columns:
            usable += ' AND "start" >= 0 AND "end" >= "start"'
            if session is not None:
                usable += f' AND "end" <= {session}'
        for pid, device in db.query(f'SELECT DISTINCT "globalPid", "deviceId" FROM "{physical}" WHERE {usable}'):
            devices.setdefault(int(pid), set()).add(int(device))
    return tuple(sorted(((p, tuple(sorted(d))) for p, d in devices.items()), key=lambda x: (x[1][:1], x[0])))


def _probe(path: Path, many_files: bool = True, cache: tuple[bool, Path | str | None] = (False, None)) -> _File:
    """What discovery needs of one file; `many_files`: one of a job's files (a trace's time span is then read, to
    tell traces of other runs). `cache`: (use, folder) of the read cache, which keeps an export's answer (its
    queries scan the event tables; a trace's probe reads its first bytes only)."""
    if format_of(path).name == TRACE:
        return _probe_trace(path, many_files)
    use, folder = cache
    return cached_answer(path, "ranks", partial(_answer, path), partial(_from_answer, path), use=use, folder=folder)


def _answer(path: Path) -> dict[str, Any]:
    """An export's probe as JSON (the cache's form)."""
    found = _probe_export(path)
    return {"processes": found.processes, "cuda_processes": found.cuda_processes, "host": found.host,
            "env_ranks": found.env_ranks, "size": found.size, "digest": found.digest, "session": found.session}


def _from_answer(path: Path, answer: dict[str, Any]) -> _File:
    session = answer["session"]
    return _File(path, tuple((int(pid), tuple(int(d) for d in devices)) for pid, devices in answer["processes"]),
                 int(answer["cuda_processes"]), str(answer["host"]), tuple(int(r) for r in answer["env_ranks"]),
                 int(answer["size"]), digest=str(answer["digest"]),
                 session=None if session is None else (int(session[0]), int(session[1])))


def _probe_export(path: Path) -> _File:
    """What discovery needs of an nsys export or nvprof database."""
    db = Database(path)
    try:
        processes = _gpu_processes(db)
        if len(processes) > 1:  # ranks of one file: only GPU work within the session the reader trusts
            stated = stated_session(db)
            bound = trusted_session(stated, *file_late_events(db, stated)) if stated is not None else None
            if bound is not None:
                processes = _gpu_processes(db, bound)
        runtime = db.find(schema.RUNTIME.sources)
        callers: set[int] = {pid for pid, _ in processes}
        if runtime is not None and "globalTid" in db.columns(runtime):
            callers |= {int(p) << PID_SHIFT for (p,) in db.query(
                f'SELECT DISTINCT "globalTid" >> {PID_SHIFT} FROM "{runtime}" '
                """WHERE typeof("globalTid") = 'integer'""")}
        host = ""
        if "TARGET_INFO_SYSTEM_ENV" in db.tables and {"name", "value"} <= set(db.columns("TARGET_INFO_SYSTEM_ENV")):
            rows = db.query("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
            host = str(rows[0][0]) if rows else ""
        start, length = session_start(db), stated_session(db)
        session = (start, start + length) if start is not None and length is not None else None
        return _File(path, processes, len(callers), host, _env_ranks(db), path.stat().st_size,
                     digest=_digest(path), session=session)
    finally:
        db.close()


def _probe_trace(path: Path, span: bool) -> _File:
    """A trace is one process, one rank: the rank its distributedInfo states."""
    head = probe_kineto(path, span)
    info = head.distributed
    rank = (info.rank,) if info is not None and info.rank is not None else ()
    return _File(path, ((0, ()),), 1, "", rank, path.stat().st_size, TRACE,
                 info.world_size if info is not None else None, head.span, _digest(path))


def _digest(path: Path) -> str:
    """The file's size and a hash of its first DIGEST_BYTES: equal for a copy of one file given twice."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        digest.update(handle.read(DIGEST_BYTES))
    return f"{path.stat().st_size}:{digest.hexdigest()}"


def _same(path: Path, other: Path) -> bool:
    """Whether two files whose size and first bytes agree are the same, byte for byte (read to the first
    difference)."""
    try:
        return filecmp.cmp(path, other, shallow=False)
    except OSError:
        return False


def _rank_warnings(files: list[_File]) -> tuple[str, ...]:
    """What the user should know of files that may not be the ranks of one run: a file given twice under two names
    (the same content), nsys exports whose sessions do not overlap in time (recorded at different times, or on
    hosts whose clocks cannot be aligned). Traces of different times are refused (`_check_one_time`)."""
    said = []
    first: dict[str, Path] = {}
    for f in files:
        if f.digest and f.digest in first and _same(f.path, first[f.digest]):
            said.append(f"{shown(f.path)}: has the same content as {shown(first[f.digest].name)}: a copy of one rank "
                        "given as a second rank; its figures count twice")
        first.setdefault(f.digest, f.path)
    sessions = [(f.path, f.session, f.host) for f in files if f.session is not None]
    if len(sessions) > 1:
        late_path, late, late_host = max(sessions, key=lambda item: item[1][0])
        early_path, early, early_host = min(sessions, key=lambda item: item[1][1])
        gap = late[0] - early[1]
        if gap > RUN_GAP_NS:
            hosts = (f" on another host ({shown(late_host)}, {shown(early_host)})"
                     if late_host and early_host and late_host != early_host else "")
            said.append(f"{shown(late_path)}: its session began at {_utc(late[0])}, {gap / 1e9:,.0f} s after "
                        f"{shown(early_path.name)}'s ended ({_utc(early[1])}){hosts}: the files do not overlap in "
                        "time, so they are not the ranks of one run, or their hosts' clocks differ by that much and "
                        "the ranks' timelines cannot be aligned; pass the exports of one run")
    return tuple(said)


def _check_traces(files: list[_File]) -> tuple[str, ...]:
    """Refuse a job of traces that cannot be one run's ranks; notes on ranks missing (also of a single trace: one
    rank of a larger run)."""
    if len({f.format for f in files}) > 1:
        raise InputError(f"{shown(files[0].path.parent)}: the job mixes nsys exports and PyTorch profiler "
                         "traces; pass the files of one recording")
    if files[0].format != TRACE:
        return ()
    seen: dict[int, Path] = {}
    for f in files:
        for rank in f.env_ranks:
            if rank in seen:
                raise InputError(f"{shown(f.path)}: a second trace for rank {rank} (also {seen[rank].name}); "
                                 "pass one trace per rank (a folder of one run's traces)")
            seen[rank] = f.path
    worlds = {f.world_size: f.path for f in reversed(files) if f.world_size is not None}  # size -> its first file
    if len(worlds) > 1:
        (first, path), (size, other) = sorted(worlds.items(), key=lambda item: _natural(item[1]))[:2]
        raise InputError(f"{shown(other)}: a trace of a world of {size} ranks, {path.name} of {first}: the "
                         "traces come from "
                         f"runs of different world sizes ({', '.join(map(str, sorted(worlds)))}); pass the traces of "
                         "one run")
    _check_one_time(files)
    if worlds and seen:
        world = next(iter(worlds))
        beyond = sorted(r for r in seen if r >= world)
        if beyond:
            raise InputError(f"{shown(seen[beyond[0]])}: rank {beyond[0]} of a world of {world}; pass the "
                             f"traces of one run")
        missing = sorted(set(range(world)) - set(seen))
        if missing:
            listed = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
            return (f"the run had {world} ranks; no trace for rank{'s' if len(missing) > 1 else ''} {listed}: the "
                    "reports cover the ranks given",)
    return ()


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _check_one_time(files: list[_File]) -> None:
    """Refuse traces recorded at different times: the ranks of one run are profiled together (their windows begin at
    the same step), so their spans overlap; one that begins more than RUN_GAP_NS after another has ended (more than
    clocks of synchronised hosts differ, or than the probe's estimate of a span misses) is of another run."""
    spans = [(f.path, f.span) for f in files if f.span is not None]
    if len(spans) < 2:
        return
    late_path, late = max(spans, key=lambda item: item[1][0])
    early_path, early = min(spans, key=lambda item: item[1][1])
    gap = late[0] - early[1]
    if gap > RUN_GAP_NS:
        raise InputError(f"{shown(late_path)}: profiled from {_utc(late[0])}, {gap / 1e9:,.0f} s after "
                         f"{early_path.name} "
                         f"ended ({_utc(early[1])}): the traces do not overlap in time, so they are not the ranks of "
                         "one run; pass the traces of one run")


def _env_ranks(db: Database) -> tuple[int, ...]:
    """Distinct rank numbers named by the environment strings of the export (first variable that has any)."""
    strings = db.find(schema.STRING_TABLES)
    if strings is None or "value" not in db.columns(strings):  # (the reader says what the table lacks)
        return ()
    tests = " OR ".join(f"instr(value, '{name}=') > 0" for name in RANK_VARIABLES)
    blocks = [str(v) for (v,) in db.query(f'SELECT value FROM "{strings}" WHERE {tests}')]
    for name in RANK_VARIABLES:  # a handful of variables, over a few environment blocks
        values = {m.group(1) for block in blocks for m in re.finditer(rf"(?:^|\x00){name}=(\d+)(?:\x00|$)", block)}
        if values:
            return tuple(sorted(int(v) for v in values))
    return ()


def discover(paths: Sequence[Path], probe_all: ProbeAll | None = None,
             cache: tuple[bool, Path | str | None] = (False, None)) -> Job:
    """The ranks in `paths` (see the module docstring), numbered. `probe_all(probe, paths)` probes every file and
    gives the results in the order of `paths` (default: one after the other here; the pipeline shares them
    with its process pool, `pool.shared_map`). `cache`: (use, folder) of the read cache (reader/cache.py)."""
    ordered = [Path(p) for p in sorted(paths, key=_natural)]
    probe = partial(_probe, many_files=len(ordered) > 1, cache=cache)
    files: list[_File] = probe_all(probe, ordered) if probe_all is not None else [probe(p) for p in ordered]
    sources: list[tuple[Path, int | None, int, tuple[int, ...], str, int]] = []
    for f in files:
        if len(f.processes) <= 1:  # the whole file is one rank, as a single-GPU run always was
            pid, devs = f.processes[0] if f.processes else (0, ())
            sources.append((f.path, None, (pid >> PID_SHIFT) & PID_BITS, devs, f.host, f.size))
        else:
            export_bytes = f.size // len(f.processes)
            sources.extend((f.path, gpid, (gpid >> PID_SHIFT) & PID_BITS, devs, f.host, export_bytes)
                           for gpid, devs in f.processes)
    notes = (*_check_traces(files), *_rank_warnings(files)) if files else ()
    env = [f.env_ranks[0] for f in files if len(f.env_ranks) == 1 and len(f.processes) <= 1]
    if len(env) == len(files) == len(sources) > 1 and len(set(env)) == len(env):
        ranks = env
        numbering = ("ranks numbered by each trace's distributedInfo" if files[0].format == TRACE
                     else "ranks numbered by the RANK variable of each file's environment")
    else:
        ranks = list(range(len(sources)))
        numbering = "ranks numbered by order of (file, lowest GPU device id)"
        if len(sources) == 1:
            numbering = "one rank"
    by_rank = sorted(zip(ranks, sources, strict=True), key=lambda item: item[0])
    return Job(
        sources=tuple(RankSource(path, process, pid, devs, host, rank, export_bytes)
                      for rank, (path, process, pid, devs, host, export_bytes) in by_rank),
        files=len(files),
        processes=sum(max(f.cuda_processes, len(f.processes)) for f in files),
        numbering=numbering,
        notes=notes,
    )
