"""Writer registry, run metadata shared by all writers, and atomic file output."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from ..reports.base import Report

if TYPE_CHECKING:
    from ..reports.figures import Table


@dataclass(frozen=True)
class RunInfo:
    """What every output says about where it came from."""

    source: str  # database file name
    nsys_version: str
    key_node: str
    key_node_reason: str
    iterations_total: int
    iter_start: int
    iter_stop: int
    iteration_window_ns: tuple[int, int]
    profile_name: str
    dlagg_version: str
    gpu_names: tuple[str, ...] = ()
    reports: tuple[str, ...] = ()  # the reports the user asked for (a writer may be given more)
    ranks: tuple[int, ...] = (0,)  # the ranks the outputs describe
    raw_csv: bool = False  # CSV text cells as the profile has them (--raw_csv), formula-like ones not defused
    # The run's warnings, one per cause, as stderr says them (pipeline._warn); empty: the reports' own are shown
    warnings: tuple[str, ...] = ()


class Writer:
    """A writer of reports in one format: registered with ``@writer(name)``, which makes its one instance. What it can
    do besides `targets` and `write` is declared below, with what a writer that does not do it has, so that a caller
    asks, never probes.

    `out_dir` is this writer's folder: --output_path, or <output_path>/<tb_dir> for TensorBoard."""

    name: str = ""  # its --formats name (set by ``@writer``)
    # True: one file per report, so a report can be written alone as soon as it is built;
    # False: the writer needs every report of the run at once.
    per_report: bool = True
    # Reports the writer needs besides the requested ones (built for it, not written as files).
    needs: tuple[str, ...] = ()
    # Reports the writer writes besides the requested ones, whenever the run writes reports and has their inputs
    # (built for it, and written by it alone): JSON's saved figures (reports/saved.py), for a later --baseline.
    adds: tuple[str, ...] = ()
    # For a writer of every report at once (``per_report`` False) that renders each report on its own
    # (TensorBoard's text dashboards): `piece` makes what it shows of one report beforehand (by the job that writes
    # the report's files, while the next reports are built), and `write` takes those pieces.
    makes_pieces: bool = False

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        """Every path `write` will create (checked for --force before anything is read)."""
        raise NotImplementedError

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo,
              rows: Mapping[str, Sequence[Path]] | None = None,
              pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
        """`reports` written into `out_dir`; the paths written. `rows` (given only where `writes_rows` said yes):
        table key -> files holding that table's rows, the texts of `rows` in order, to be taken in place of its
        rows. `pieces` (given only to a writer that `makes_pieces`): report name -> its piece, made beforehand; the
        writer makes those not given."""
        raise NotImplementedError

    def writes_rows(self, table: Table) -> bool:
        """Whether the writer's file holds `table`'s rows one after the other (CSV, JSON), so that a big table can
        be formatted in parts by several processes (output.writes.Writes) with `rows`. No, unless a writer says so."""
        return False

    def rows(self, table: Table, info: RunInfo, last: bool) -> Iterable[memoryview]:
        """The text of `table`'s rows alone (a table of some rows of the report's; `last`: they end it), for a
        table `writes_rows` accepted."""
        raise NotImplementedError(f"the {self.name} writer writes no table in parts")

    def piece(self, report: Report) -> dict[str, str]:
        """What a writer that `makes_pieces` makes of `report` alone (JSON-able), for `write`'s `pieces`."""
        raise NotImplementedError(f"the {self.name} writer makes no pieces")

    def how_to_open(self, written: Sequence[Path]) -> str | None:
        """One line telling how to look at what the writer wrote among the run's `written` paths (printed at the
        end of the run), None when it wrote none of them or there is nothing to tell."""
        return None


WRITERS: dict[str, Writer] = {}
W = TypeVar("W", bound=Writer)


def writer(name: str) -> Callable[[type[W]], type[W]]:
    """Register a `Writer` subclass under `name` (its --formats name): its one instance."""

    def register(cls: type[W]) -> type[W]:
        if name in WRITERS:
            raise RuntimeError(f"duplicate writer {name!r}")
        instance = cls()
        instance.name = name
        WRITERS[name] = instance
        return cls

    return register


def how_to_open(written: Sequence[Path]) -> list[str]:
    """A line per writer that says how to look at its outputs among `written` (the writers that recognise some of
    them)."""
    return [line for registered in WRITERS.values() if (line := registered.how_to_open(written))]


def written_line(written: Sequence[Path]) -> str:
    """What a run wrote, in one line: each folder and its files' names, in the order written; folders holding
    files of the same names (each rank's folder with --per_rank, each rank's TensorBoard run) named once, with
    how many there are."""
    by_folder: dict[Path, list[str]] = {}
    for path in written:  # files, not events
        by_folder.setdefault(path.parent, []).append(path.name)
    alike: dict[tuple[str, ...], list[Path]] = {}
    for folder, names in by_folder.items():
        alike.setdefault(tuple(names), []).append(folder)
    parts = []
    for same_names, folders in alike.items():
        where = str(folders[0])
        if len(folders) > 1 and len({f.parent for f in folders}) == 1:
            where = f"{len(folders)} folders in {folders[0].parent} ({folders[0].name} to {folders[-1].name})"
        elif len(folders) > 1:  # a TensorBoard run and its ranks' runs below it
            where = f"{len(folders)} folders under {os.path.commonpath(folders)}"
        parts.append(f"{where}: {', '.join(same_names)}")
    return f"wrote {len(written)} file{'' if len(written) == 1 else 's'}: {'; '.join(parts)}"


def _read_umask() -> int:
    umask = os.umask(0)  # the only way to read it is to set it: done once, at import, before any writer thread
    os.umask(umask)
    return umask


UMASK = _read_umask()


def usual_permissions(path: Path, mode: int) -> None:
    """Give an output made private by mkstemp/mkdtemp the permissions a plain open() would have."""
    os.chmod(path, mode & ~UMASK)


def atomic_write(path: Path, content: str | bytes | Iterable[str | bytes | memoryview | Path]) -> None:
    """Write `content` (text, bytes, or pieces of either, in order) to `path` via a temporary file
    in the same folder and an atomic rename. Pieces let big reports stream out without one huge
    string in memory; text is written as UTF-8; a Path piece is that file's content, copied by the
    kernel where it can (the parts of a table formatted by several processes)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for piece in [content] if isinstance(content, (str, bytes)) else content:
                if isinstance(piece, Path):
                    handle.flush()
                    _append_file(piece, handle)
                    handle.seek(0, os.SEEK_END)  # the buffered writer's position, where the kernel left the file
                else:
                    handle.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
        usual_permissions(Path(tmp), 0o666)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _append_file(source: Path, handle: BinaryIO) -> None:
    """`source`'s bytes written at `handle`'s end (its buffer flushed): in the kernel (copy_file_range), else
    through a buffer."""
    with source.open("rb") as src:
        if hasattr(os, "copy_file_range"):
            try:
                while os.copy_file_range(src.fileno(), handle.fileno(), 1 << 30):
                    pass
                return
            except OSError:  # not on this file system: copy what is left the usual way
                pass
        shutil.copyfileobj(src, handle, 1 << 22)


def report_path(out_dir: Path, profile_name: str, file_suffix: str, extension: str) -> Path:
    return out_dir / f"{profile_name}_{file_suffix}.{extension}"
