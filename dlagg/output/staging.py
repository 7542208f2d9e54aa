"""All-or-nothing outputs: a run writes every file into a staging folder and moves the complete set into place
at the end, replacing the previous set of its profile name as a whole.

Contract (``pipeline.run`` is the user)::

    with Staging(output_path, event_dir, profile_name, force=..., events=..., suffixes=..., log=log) as staging:
        staging.write(fmt, reports, final_dir, info)   # instead of WRITERS[fmt].write; any thread; final paths back
        # or, the writing in another process: write_staged(fmt, reports, staging.folder(final_dir), final_dir, info)
        # there, then staging.record(final_dir, the paths it gave) here
        staging.commit()                               # once every write has ended
    # leaving the block without a commit (an error, Ctrl-C, out of memory) removes the staging folder

**Layout.** ``<root>/.dlagg-staging.<host>.<pid>.<random>/`` in the output folder (the same filesystem, so a
move is a rename), holding::

    files/         the outputs, laid out as they will be under <root> (rank<N>/..., <tb_dir>/<profile_name>/...)
    journal.json   the commit's moves; written (atomically) once every output is complete
    trash/         what the moves replaced; removed with the staging folder
    scratch/       the run's files that are no output (a bulk report's rows kept out of memory: reports/spilled.py)
    primary        (an absolute --tb_dir outside --output_path, which gets a staging folder of its own) the
                   path of the output folder's staging folder, which holds the journal

**Units.** What a writer writes directly in its folder is one unit, moved by one rename: a report file, the
HTML page, a PNG, or TensorBoard's run folder ``<tb_dir>/<profile_name>`` (replaced as a whole).

**The set of a profile name** (`Staging.ours`): every file a writer could write for it (each report's CSV,
JSON and PNG, the HTML page, the compare report) in --output_path and its ``rank<N>/`` folders, and its
event folder ``<tb_dir>/<profile_name>``. With --force the commit also removes those the run did not write,
so what is left is the new set, never a mix of old and new; files of other profile names and anything else
in the folders are never touched. Without --force, a unit already in place stops the commit (however it got
there since the run's first check): nothing is overwritten.

**Killed runs.** Until ``journal.json`` exists the outputs in place are the previous set, and a kill (or a
full disk, or running out of memory) leaves only the staging folder. Once it exists the commit is decided:
its renames take milliseconds, and a run killed among them leaves the journal, from which the next run
finishes them. Every run, before it writes, looks at the staging folders in its folders: one whose process
is gone (no such pid, or a pid reused by a process started after the folder was made) is finished when it
has a journal and removed when not; one made on another host (a shared filesystem) is left alone for
OTHER_HOST_S, since its process cannot be checked from here. It also removes the temporary files older
dlagg versions left beside this profile name's outputs when killed. Each is said on stderr (info).
Recovery and commit hold an exclusive lock (flock) on the folders, so concurrent runs commit in turn.
Outputs are not fsynced: the guarantees cover a killed process, not a power cut.

**Errors.** An OSError while staging (disk full, file-size limit, quota, read-only filesystem) is an
`OutputError` naming the final folder and what to do; the previous set is untouched.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..errors import OptionsError, OutputError
from ..log import shown
from ..reports.base import Report
from ..writers.base import WRITERS, RunInfo, atomic_write

if TYPE_CHECKING:
    from ..log import Log
    from ..options import Options

try:
    import fcntl
except ImportError:  # not POSIX: commits of concurrent runs are not ordered
    fcntl = None  # type: ignore[assignment]

STAGING = ".dlagg-staging"
FILES, JOURNAL, TRASH, PRIMARY, SCRATCH = "files", "journal.json", "trash", "primary", "scratch"
CLAIM = "profile"  # in a staging folder: the --profile_name whose outputs the run makes (Staging.claim)
HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
# <STAGING>.<host>.<pid>.<tempfile's random part>
STAGING_NAME = re.compile(re.escape(STAGING) + r"\.(?P<host>.+)\.(?P<pid>\d+)\.[a-z0-9_]+")
# A process started this long after its pid's staging folder was made is not the one that made it (the
# process start time from /proc is in whole seconds of boot time plus clock ticks).
START_SLACK_S = 2.0
# A staging folder made on another host is left alone this long (no dlagg run lasts a day); then it is stale.
OTHER_HOST_S = 24 * 3600.0
FORCED_NAMES = 20  # earlier outputs --force removed, named on stderr (then how many more)
RANK_FOLDER = re.compile(r"rank\d+")  # --per_rank's folders (output/folders.py: rank_dir)
TENSORBOARD = "tensorboard"
# What older dlagg versions left when killed: atomic_write's `.<name>.<random>.tmp` files beside a report
# and the TensorBoard writer's `.<profile_name>.<random>.tmp` and `.<profile_name>.old.<random>` folders.
LEGACY_TEMP = r"\.{name}\.(?:[a-z0-9_]{{8}}\.tmp|old\.[a-z0-9_]{{8}})"
NAME_MAX = 255  # bytes in a file name (Linux, macOS)
PATH_MAX = 4096  # bytes in a path (Linux)

# errno -> (what happened, what to do)
CAUSES = {
    errno.ENOSPC: ("the disk is full", "free some space or choose another --output_path"),
    errno.EDQUOT: ("the disk quota is used up", "free some space or choose another --output_path"),
    errno.EFBIG: ("a file would pass the file-size limit (ulimit -f)",
                  "raise the limit (ulimit -f unlimited) or write fewer reports or formats"),
    errno.EROFS: ("the filesystem is read-only", "choose another --output_path"),
    errno.EACCES: ("permission denied", "choose another --output_path"),
}

Unit = tuple[int, str]  # (area: 0 the output folder, 1 an absolute --tb_dir outside it; path under its root)


def output_error(exc: OSError, folder: Path, what: str) -> OutputError:
    """The one line an OSError while writing outputs becomes."""
    cause, todo = CAUSES.get(exc.errno or 0, (exc.strerror or str(exc), "choose another --output_path"))
    return OutputError(f"{folder}: cannot write {what}: {cause}; the previous outputs are unchanged; {todo}")


def check_output_names(options: Options) -> None:
    """--profile_name (and the baseline's) is a file-name prefix, not a path; a relative --tb_dir stays inside
    --output_path (an absolute one is taken as meant)."""
    names = [("--profile_name", options.profile_name)]
    if options.baseline is not None and options.baseline.profile_name is not None:
        names.append(("--baseline_profile_name", options.baseline.profile_name))
    for option, name in names:
        _check_prefix(option, name)
    _check_folder_name(options)
    tb_dir = str(options.tb_dir)
    if _control(tb_dir) or not tb_dir:
        raise OptionsError(f"--tb_dir={tb_dir!r}: give a folder name without control characters (default event_files)")
    if not os.path.isabs(tb_dir) and os.path.normpath(tb_dir).split(os.sep)[0] == os.pardir:
        raise OptionsError(f"--tb_dir={tb_dir}: leaves --output_path; give a folder inside it (event_files, tb/run1), "
                           "or an absolute path to put the event files elsewhere on purpose")
    events = os.path.normpath(os.path.join(os.path.abspath(options.output_path), tb_dir, options.profile_name))
    taken = RANK_FOLDER.fullmatch(options.profile_name) and os.path.dirname(events) == os.path.abspath(
        options.output_path)
    if options.per_rank and not options.suppress_tb_files and taken:
        raise OptionsError(f"--tb_dir={tb_dir} --profile_name={options.profile_name}: TensorBoard's run folder would "
                           f"be {options.profile_name} in --output_path, the folder --per_rank writes rank "
                           f"{options.profile_name[4:]}'s reports to; choose another --profile_name (not rank<N>) "
                           "or --tb_dir (default event_files)")


def _control(text: str) -> bool:
    return any(unicodedata.category(c) == "Cc" for c in text)


def _check_prefix(option: str, name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or os.sep in name:
        raise OptionsError(f"{option}={name!r}: a prefix of file names, not a path: not empty, not . or .., no / or "
                           "\\ (the folder is --output_path)")
    if _control(name):
        raise OptionsError(f"{option}={name!r}: no control characters (newline, tab, ...) in a prefix of file names")
    longest = max([len(".html"), *(len(f"_{s}.json") for s in _suffixes())])
    if len(name.encode("utf-8", "surrogateescape")) + longest > NAME_MAX:
        raise OptionsError(f"{option}: {len(name)} characters make file names longer than {NAME_MAX} bytes; "
                           "choose a shorter prefix")


def _check_folder_name(options: Options) -> None:
    """An --output_path the filesystem cannot hold (a part over NAME_MAX bytes, or with the longest output file
    name over PATH_MAX) is an option error, not the OSError making the folder raises."""
    folder = os.path.abspath(options.output_path)
    longest = max((len(os.fsencode(part)) for part in Path(folder).parts), default=0)
    whole = len(os.fsencode(folder)) + 1 + NAME_MAX
    if longest > NAME_MAX or whole > PATH_MAX:
        what = (f"a part of it is {longest} bytes long, over the {NAME_MAX} a folder name may have"
                if longest > NAME_MAX else f"it is {len(os.fsencode(folder))} bytes long: with the output file "
                f"names, over the {PATH_MAX} a path may have")
        raise OptionsError(f"--output_path={shown(options.output_path)[:200]}...: no such folder can be made ({what}); "
                           "choose a shorter path")


def _suffixes() -> list[str]:
    from ..reports import REPORTS

    return [suffix for spec in REPORTS.values() for suffix in (spec.file_suffix, spec.detail_csv) if suffix]


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist yet: what ``mkdir(parents=True)`` makes."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _inside(path: Path, root: Path) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))


class Staging:
    """One run's outputs, staged and moved into place together (see the module docstring).

    `event_dir`: <output_path>/<tb_dir>; `events`: whether event files are written (not -b). `suffixes`: every
    report file suffix (the set of the profile name); `force`: replace that set, else add beside it.
    """

    def __init__(self, output_path: Path, event_dir: Path, profile_name: str, *, force: bool, events: bool,
                 suffixes: Sequence[str], log: Log) -> None:
        self.roots = [output_path]
        if events and not _inside(event_dir, output_path):
            self.roots.append(event_dir)
            log.info(f"event files go to {event_dir / profile_name} (an absolute --tb_dir, outside --output_path)")
        self.event_dir = event_dir if events or _inside(event_dir, output_path) else None
        self.profile_name = profile_name
        self.force = force
        self.suffixes = list(suffixes)
        self.log = log
        self.folders: list[Path] = []  # each root's staging folder, made at the first write
        self.made: list[Path] = []  # the folders made for the roots (output path, event folder) that were not there
        self.units: dict[Unit, None] = {}  # in the order written
        self.journaled = False
        self._lock = threading.Lock()

    def __enter__(self) -> Staging:
        try:
            self.claim()  # another run making these outputs here now: said before the work, not after it
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.journaled:  # the previous set stays as it was, and a run that wrote none leaves no folder
            for folder in self.folders:
                shutil.rmtree(folder, ignore_errors=True)
            for folder in sorted(set(self.made), key=lambda p: len(p.parts), reverse=True):  # deepest first
                try:
                    folder.rmdir()  # only if empty: another run may have written there meanwhile
                except OSError:
                    pass

    def write(self, fmt: str, reports: Sequence[Report], out_dir: Path, info: RunInfo) -> list[Path]:
        """``WRITERS[fmt].write(reports, out_dir, info)`` into the staging folder; the paths the files will have."""
        return self.record(out_dir, write_staged(fmt, reports, self.folder(out_dir), out_dir, info))

    def folder(self, out_dir: Path) -> Path:
        """Where the outputs meant for the final folder `out_dir` are written (made now): for `write_staged` in
        another process, whose paths `record` then takes."""
        area, rel = self._locate(out_dir)
        try:
            staged = self._open()[area] / FILES / rel
            staged.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise output_error(exc, out_dir, "the outputs") from None
        return staged

    def scratch(self) -> Path:
        """A folder (made now) for the run's own files that are no output, gone with the staging folder: the rows
        of a bulk report kept where its rank was reduced (reports/spilled.py)."""
        try:
            folder = self._open()[0] / SCRATCH
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise output_error(exc, self.roots[0], "the outputs") from None
        return folder

    def record(self, out_dir: Path, paths: Sequence[Path]) -> list[Path]:
        """The outputs `write_staged` wrote for `out_dir` (`paths`, in ``folder(out_dir)``), to be moved by the
        commit; the paths they will have."""
        area, rel = self._locate(out_dir)
        staged = self._open()[area] / FILES / rel  # made by folder(out_dir)
        finals = []
        with self._lock:
            for path in paths:
                inner = path.relative_to(staged)
                self.units[(area, (rel / inner.parts[0]).as_posix())] = None
                finals.append(out_dir / inner)
        return finals

    def commit(self) -> None:
        """Move every unit written into place (and, with --force, remove the rest of the profile's old set).
        Nothing written: nothing changes."""
        if not self.units:
            return
        folders = self._open()
        with _locked(self.roots):
            for root in self.roots:
                self._recover(root)
            moves = list(self.units)
            if not self.force:
                taken = [self._final(u) for u in moves if os.path.lexists(self._final(u))]
                if taken:
                    raise OutputError(f"{taken[0]}: already exists; pass --force=true to overwrite it, "
                                      "or choose another --output_path / --profile_name")
            removes = [u for u in self.ours() if u not in self.units] if self.force else []
            replaced = [u for u in moves if os.path.lexists(self._final(u))]  # (only with --force: else stopped above)
            journal = {"roots": [None, *(os.path.abspath(r) for r in self.roots[1:])],
                       "staging": [f.name for f in folders], "moves": moves, "removes": removes}
            try:
                _write_journal(folders[0], journal)
            except OSError as exc:
                raise output_error(exc, self.roots[0], "the list of outputs to move into place") from None
            self.journaled = True
            try:
                try:
                    finish(folders[0])
                except KeyboardInterrupt:  # the commit is decided: a Ctrl-C among its renames does not halve it
                    finish(folders[0])
                    raise
            except OSError as exc:
                raise OutputError(f"{self.roots[0]}: could not move every output into place ({exc.strerror}); "
                                  "the next dlagg run in this folder finishes it") from None
        if removes or replaced:
            self.log.result(self._forced(replaced, removes))

    def _forced(self, replaced: Sequence[Unit], removed: Sequence[Unit]) -> str:
        """What --force did to the earlier outputs: the ones replaced (how many) and, by name, the ones removed (an
        earlier run's outputs this run did not write: another --reports, --formats or --per_rank)."""
        said = [f"--force: replaced {len(replaced)} earlier output{'s' if len(replaced) != 1 else ''}"] if replaced \
            else ["--force:"]
        if removed:
            names = [self._shown(u) for u in removed]
            more = f" and {len(names) - FORCED_NAMES} more" if len(names) > FORCED_NAMES else ""
            plural = "s" if len(removed) != 1 else ""
            said.append(f"{'and ' if replaced else ''}removed {len(removed)} earlier output{plural} this run did not "
                        f"write, in {self.roots[0]}: {', '.join(names[:FORCED_NAMES])}{more}")
        return " ".join(said)

    def _shown(self, unit: Unit) -> str:
        """A unit as the user knows it: its path under --output_path, or whole (an event folder elsewhere)."""
        area, rel = unit
        return rel if area == 0 else str(self._final(unit))

    def ours(self) -> list[Unit]:
        """The profile name's outputs in place now (see `_possible`)."""
        return [u for u in self._possible() if os.path.lexists(self._final(u))]

    def _final(self, unit: Unit) -> Path:
        area, rel = unit
        return self.roots[area] / rel

    def _locate(self, folder: Path) -> tuple[int, PurePosixPath]:
        """The area of a final folder, and the folder's path under its root."""
        full = Path(os.path.abspath(folder))
        for area, root in enumerate(self.roots):
            if full.is_relative_to(os.path.abspath(root)):
                return area, PurePosixPath(full.relative_to(os.path.abspath(root)).as_posix())
        raise ValueError(f"{folder} is outside the run's output folders {self.roots}")

    def _open(self) -> list[Path]:
        """Each root's staging folder, made (after the stale ones are dealt with) on the first call."""
        with self._lock:
            if self.folders:
                return self.folders
            for root in self.roots:
                self.made += missing_folders(root)
                root.mkdir(parents=True, exist_ok=True)
            with _locked(self.roots):
                for root in self.roots:
                    self._recover(root)
                self._remove_legacy_temp()
                for k, root in enumerate(self.roots):
                    folder = Path(tempfile.mkdtemp(prefix=f"{STAGING}.{HOST}.{os.getpid()}.", dir=root))
                    self.folders.append(folder)
                    (folder / FILES).mkdir()
                    if k:
                        (folder / PRIMARY).write_text(os.path.abspath(self.folders[0]), encoding="utf-8")
            return self.folders

    def claim(self) -> None:
        """Without --force, refuse now, before the work, when another run going on writes the same profile's outputs
        into the same folder: its commit or ours would find them "already exists" only once the work is done.
        Checked and claimed under the folder's lock, so of runs started together one goes on, the others stop."""
        if self.force:
            return
        try:
            folders = self._open()
        except OSError as exc:
            raise output_error(exc, self.roots[0], "the outputs") from None
        with _locked(self.roots[:1]):
            root = self.roots[0]
            try:
                entries = [p for p in root.iterdir() if p.name.startswith(STAGING + ".") and p != folders[0]]
            except OSError:
                entries = []
            for folder in sorted(entries):
                match = STAGING_NAME.fullmatch(folder.name)
                try:
                    claimed = (folder / CLAIM).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                if match is None or claimed != self.profile_name:
                    continue
                if not (_running(int(match["pid"]), folder) if match["host"] == HOST else _age(folder) < OTHER_HOST_S):
                    continue
                raise OutputError(f"{shown(root)}: another dlagg run (process {match['pid']} on {match['host']}) is "
                                  f"making the outputs of --profile_name={shown(self.profile_name)} there now; wait "
                                  "for it to end, or choose another --output_path / --profile_name (--force=true: "
                                  "the last run to finish wins)")
            try:
                (folders[0] / CLAIM).write_text(self.profile_name, encoding="utf-8")
            except OSError as exc:
                raise output_error(exc, root, "the outputs") from None

    def _recover(self, root: Path) -> None:
        """Finish or remove the staging folders in `root` left by runs that are gone."""
        try:
            entries = sorted(p for p in root.iterdir() if p.name.startswith(STAGING + "."))
        except OSError:
            return
        for folder in entries:
            match = STAGING_NAME.fullmatch(folder.name)
            if match is None or os.path.abspath(folder) in map(str, self.folders) or not folder.is_dir():
                continue
            pid = int(match["pid"])
            if match["host"] != HOST:
                if _age(folder) < OTHER_HOST_S:
                    self.log.info(f"{root}: left {folder.name} alone: a run on host {match['host']} made it, and "
                                  "whether that run still goes on cannot be checked from here")
                    continue
            elif _running(pid, folder):
                continue
            self._clean(folder, pid)

    def _clean(self, folder: Path, pid: int) -> None:
        """A dead run's staging folder: its commit finished (journal), or the folder removed (none)."""
        try:
            primary = Path((folder / PRIMARY).read_text(encoding="utf-8")) if (folder / PRIMARY).exists() else folder
            if (primary / JOURNAL).exists():
                finish(primary)
                self.log.info(f"{primary.parent}: finished moving into place the outputs of a run killed while it "
                              f"moved them (process {pid}; {folder.name})")
                return
            shutil.rmtree(folder)
        except (OSError, ValueError) as exc:
            self.log.warn(f"{folder}: a killed run's staging folder could not be cleaned up ({exc}); remove it by "
                          "hand once no dlagg runs in this folder")
            return
        self.log.info(f"{folder.parent}: removed {folder.name}, the unfinished outputs of a run that was killed "
                      f"(process {pid}); they never replaced any output")

    def _remove_legacy_temp(self) -> None:
        """Temporary files of killed runs of older dlagg versions, beside this profile name's outputs."""
        patterns: dict[Path, list[str]] = {}
        for area, rel in self._possible():
            final = self.roots[area] / rel
            patterns.setdefault(final.parent, []).append(LEGACY_TEMP.format(name=re.escape(final.name)))
        removed = []
        for folder, names in patterns.items():
            pattern = re.compile("|".join(names))
            try:
                found = [p for p in folder.iterdir() if pattern.fullmatch(p.name)]
            except OSError:
                continue
            for path in found:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed.append(path)
        if removed:
            self.log.info(f"removed {len(removed)} temporary file(s) left by killed dlagg runs: "
                          + ", ".join(str(p) for p in removed))

    def _possible(self) -> list[Unit]:
        """Every output the profile name could have in the output folder, its rank folders and its event folder."""
        out = self.roots[0]
        try:
            folders = [out, *sorted(p for p in out.iterdir() if RANK_FOLDER.fullmatch(p.name) and p.is_dir())]
        except OSError:
            folders = [out]
        paths = []
        for name, registered in WRITERS.items():
            if name != TENSORBOARD:
                paths += [p for f in folders for p in registered.targets(self.suffixes, f, self.profile_name)]
            elif self.event_dir is not None:
                paths += registered.targets(self.suffixes, self.event_dir, self.profile_name)
        return [(area, (rel / p.name).as_posix()) for p in paths for area, rel in [self._locate(p.parent)]]


def write_staged(fmt: str, reports: Sequence[Report], staged: Path, out_dir: Path, info: RunInfo,
                 rows: Mapping[str, Sequence[Path]] | None = None,
                 pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
    """``WRITERS[fmt].write`` into `staged` (`Staging.folder(out_dir)`), in this process or a worker process; an
    OSError is the output error that names `out_dir`. `rows`: a table's rows are in these files (CSV and JSON);
    `pieces`: report name -> the writer's piece of it, made beforehand (writers/base.py)."""
    try:
        return WRITERS[fmt].write(reports, staged, info, rows=rows or None, pieces=pieces or None)
    except OSError as exc:
        raise output_error(exc, out_dir, f"the {fmt} outputs") from None


def write_staged_file(path: Path, content: str | bytes | Iterable[str | bytes | memoryview], out_dir: Path,
                      fmt: str) -> None:
    """`content` saved at `path`, a file of `Staging.folder(out_dir)` that a later job takes (a report's piece for
    a writer of every report, a part of a big table), atomically, in this process or a worker process; an OSError
    is the output error that names `out_dir`, as in `write_staged`."""
    try:
        atomic_write(path, content)
    except OSError as exc:
        raise output_error(exc, out_dir, f"the {fmt} outputs") from None


def finish(primary: Path) -> None:
    """Carry out the journal of the staging folder `primary`: move each unit into place, remove the old
    ones, then remove the staging folders (the one with the journal last, its journal first). Each step can
    be repeated, so a run killed in the middle is finished by the next."""
    journal = json.loads((primary / JOURNAL).read_text(encoding="utf-8"))
    roots = [primary.parent, *(Path(r) for r in journal["roots"][1:])]
    stagings = [primary, *(root / name for root, name in zip(roots[1:], journal["staging"][1:], strict=True))]
    for area, rel in journal["moves"]:
        _move(stagings[area] / FILES / rel, roots[area] / rel, stagings[area] / TRASH)
    emptied: set[Path] = set()
    for area, rel in journal["removes"]:
        _discard(roots[area] / rel, stagings[area] / TRASH)
        emptied.update(p for p in (roots[area] / rel).parents if p != roots[area] and p.is_relative_to(roots[area]))
    for folder in sorted(emptied, key=lambda p: -len(p.parts)):  # an event or rank folder the removals emptied
        try:
            folder.rmdir()
        except OSError:
            pass
    for staging in stagings[1:]:
        shutil.rmtree(staging, ignore_errors=True)
    (primary / JOURNAL).unlink()  # first: a folder that could not be removed whole is then only stale
    shutil.rmtree(primary, ignore_errors=True)


def _move(staged: Path, final: Path, trash: Path) -> None:
    if not os.path.lexists(staged):  # moved by an earlier attempt
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    if staged.is_dir() or (final.is_dir() and not final.is_symlink()):  # a folder is replaced whole
        _discard(final, trash)
    os.replace(staged, final)


def _discard(path: Path, trash: Path) -> None:
    """Move `path` (a file or a folder) into `trash`, on the same filesystem: one rename."""
    if not os.path.lexists(path):
        return
    trash.mkdir(exist_ok=True)
    os.replace(path, Path(tempfile.mkdtemp(dir=trash)) / path.name)


def _write_journal(folder: Path, journal: dict) -> None:
    """journal.json, complete or absent: written beside, flushed to the disk, renamed."""
    temporary = folder / (JOURNAL + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        json.dump(journal, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, folder / JOURNAL)


@contextmanager
def _locked(roots: Sequence[Path]) -> Iterator[None]:
    """An exclusive flock on each root folder (in one order, so two runs cannot wait for each other); where a
    filesystem has no flock (some NFS mounts), concurrent commits are not ordered."""
    handles = []
    try:
        for root in sorted({os.path.abspath(r) for r in roots}):
            try:
                handle = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            handles.append(handle)
            if fcntl is not None:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX)
                except OSError:
                    pass
        yield
    finally:
        for handle in handles:
            os.close(handle)


def _age(folder: Path) -> float:
    try:
        return time.time() - folder.stat().st_mtime
    except OSError:
        return 0.0


def _running(pid: int, folder: Path) -> bool:
    """Whether the process that made `folder` may still run: pid `pid` exists and started before the folder
    last changed (a pid reused by a later process does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # EPERM: another user's process
    started = process_start(pid)
    if started is None:
        return True
    try:
        changed = folder.stat().st_mtime
    except OSError:
        return True  # gone meanwhile: nothing to clean
    return started <= changed + START_SLACK_S


def process_start(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch (Linux /proc); None where that is unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, StopIteration, ValueError):
        return None
