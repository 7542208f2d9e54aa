"""The writer tasks of a run: each report written in its formats into the staging folder while the next reports
are built, on a writer thread or on the run's process pool (a big table in parts, joined by the first process
free), and every file moved into place together at the end (`Writes.results`, through output/staging.py)."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Executor, Future, wait
from dataclasses import dataclass, replace
from pathlib import Path

from ..log import Log, release_free_memory
from ..ranks.pool import worker_lost
from ..reports import REPORTS, Report
from ..reports.figures import Table
from ..writers import WRITERS, RunInfo
from .staging import Staging, write_staged, write_staged_file

# Threads writing reports while the next ones are built (the CI machine has two cores).
WRITE_THREADS = 1
# Rows of a big table formatted by one job when the pool writes it in parts (Writes): 16 of the writers' chunks,
# about 6 MB of the iteration report's CSV; tables of up to twice this many rows are written whole.
PART_ROWS = 1 << 16

Outcome = list[tuple[str, list[Path], float]]  # a writer job's: per format, the paths written and the time taken


@dataclass
class WriteTask:
    """A writer job not yet started: its report's name, its output folder, its task and the task's arguments; the
    files it makes that other jobs wait for (a part of a big table, a report's piece for a writer of every report
    at once), and the files it waits for (it then runs in this process, in `Writes.results`, once they are made)."""

    name: str
    out_dir: Path
    task: Callable[..., Outcome]
    args: tuple
    makes: tuple[Path, ...] = ()
    after: tuple[Path, ...] = ()


class Writes:
    """Writer jobs, written into `staging` and moved into place together by `results`; a format's time is the sum
    of its jobs' (they overlap each other and the building of the next reports). A job writes its reports in one
    or more formats: a report goes to a worker process once, whatever the number of its formats.

    On a writer thread (`workers` None) every job is queued at once. On the run's process pool of `workers`
    processes, a lane (a thread here) per pool process takes the next waiting job as soon as its last has ended,
    so the pool writes while this process merges the next reports; `results` then takes jobs too, from the same
    queue. There, a table of more than 2 x PART_ROWS rows (the iteration report of many ranks) is written in
    parts: each part's rows are formatted by a job of their own into a file of the staging folder, and the first
    process free joins the parts into the report's file (the writers' ``rows`` and ``write(..., rows=)``), so that
    every process formats a share of a big file instead of one formatting it while the others wait.

    A writer of every report at once that renders each report on its own (TensorBoard's text dashboards) gets
    each report's piece made by the job that writes the report's files (``make_pieces``), into a file of the
    staging folder: the pieces are made while the next reports are built, and on every process of the pool,
    and the writer's job (``take_pieces``), the last of a run, only puts them together."""

    def __init__(self, log: Log, staging: Staging, pool: Executor, workers: int | None = None) -> None:
        self.log = log
        self.staging = staging
        self.pool = pool
        self.jobs: list[tuple[str, Path, Future[Outcome]]] = []  # report, folder, job
        self.pending: deque[WriteTask] = deque()
        self.waiting: list[WriteTask] = []  # jobs waiting for files that other jobs make (run by `results`)
        self.made: set[Path] = set()
        self.pieces: dict[tuple[str, str], Path] = {}  # (format, report name) -> the file its piece is made in
        self.ready = threading.Condition()  # guards the above; notified when a job is queued or ends
        self.closed = False
        self.lanes = [threading.Thread(target=self._lane, daemon=True) for _ in range(workers or 0)]

    def submit(self, formats: Sequence[str], reports: list[Report], out_dir: Path, info: RunInfo,
               make_pieces: Sequence[str] = (), take_pieces: bool = False) -> None:
        """A job writing `reports` in `formats` into `out_dir`. `make_pieces`: formats of writers of every report at
        once whose piece of the report (one) the job makes too; `take_pieces`: the job (one such format) takes the
        pieces made for its reports."""
        folder = self.staging.folder(out_dir)
        make = {}
        for fmt in make_pieces:
            make[fmt] = folder / f".{info.profile_name}_{reports[0].file_suffix}.{fmt}.piece"
            self.pieces[fmt, reports[0].name] = make[fmt]
        given = {r.name: self.pieces.pop((formats[0], r.name)) for r in reports
                 if (formats[0], r.name) in self.pieces} if take_pieces else {}
        formats = [fmt for fmt in formats if not self._in_parts(fmt, reports, out_dir, folder, info)]
        if formats or make:
            args = (formats, reports, folder, out_dir, info, None, make, given)
            self._queue(WriteTask(reports[0].name, out_dir, write_reports, args, makes=tuple(make.values()),
                                  after=tuple(given.values())))

    def _in_parts(self, fmt: str, reports: list[Report], out_dir: Path, folder: Path, info: RunInfo) -> bool:
        """Whether the report (alone in `reports`) is written in parts in format `fmt`: the part jobs queued, their
        files in `folder` (`out_dir`'s in the staging folder)."""
        if not self.lanes or len(reports) != 1:
            return False
        report = reports[0]
        table = max(report.tables, key=len, default=None)
        if table is None or len(table) <= 2 * PART_ROWS or not WRITERS[fmt].writes_rows(table):
            return False
        parts = []
        for first in range(0, len(table), PART_ROWS):
            part = folder / f".{info.profile_name}_{report.file_suffix}.{fmt}.{first // PART_ROWS}.part"
            stop = min(first + PART_ROWS, len(table))
            rows = PartRows(fmt, table, first, stop, part, out_dir, info, ends=stop == len(table))
            self._queue(WriteTask(report.name, out_dir, write_part, (rows,), makes=(part,)))
            parts.append(part)
        self._queue(WriteTask(report.name, out_dir, join_parts, (fmt, report, folder, out_dir, info, table.key, parts),
                         after=tuple(parts)))
        return True

    def _queue(self, job: WriteTask) -> None:
        if not self.lanes:  # one writer thread (WRITE_THREADS): in the order queued, so after the jobs it waits for
            self.jobs.append((job.name, job.out_dir, self.pool.submit(job.task, *job.args)))
            return
        with self.ready:
            (self.waiting if job.after else self.pending).append(job)
            self.ready.notify()

    def _take(self) -> WriteTask | None:
        """A lane's next job: a join whose parts are all made, else the next waiting job, once there is one; None
        when the writes are closed. (Joins go to whichever process is free: the parts of the iteration report of
        1,024 ranks are 3 GB to copy, which a worker does while this process runs the TensorBoard job; that job,
        which waits for files too, stays here, where its reports are.)"""
        with self.ready:
            while not self.closed:
                job = self._made(join_parts) or (self.pending.popleft() if self.pending else None)
                if job is not None:
                    return job
                self.ready.wait()
            return None

    def _made(self, task: Callable[..., Outcome] | None = None,
              skip: Callable[..., Outcome] | None = None) -> WriteTask | None:
        """The first job waiting for files whose files are all made (of `task`, when given; not of `skip`), taken off
        the list; the lock held."""
        for k, job in enumerate(self.waiting):
            if (task is None or job.task is task) and job.task is not skip and self.made.issuperset(job.after):
                del self.waiting[k]
                return job
        return None

    def _lane(self) -> None:
        """A pool process's lane: its jobs one after the other, each started when the last has ended."""
        while (job := self._take()) is not None:
            try:  # a part of a table goes with its rows alone (sliced now: the queue holds no copies)
                future = self.pool.submit(job.task, *(job.args[0].sent(),) if job.task is write_part else job.args)
            except Exception as exc:  # a broken pool: raised by `results`
                future = Future()
                future.set_exception(exc)
            with self.ready:
                self.jobs.append((job.name, job.out_dir, future))
            self._ended(job, future.exception() is None)  # (waits for it; its failure is raised by `results`)

    def _ended(self, job: WriteTask, ok: bool) -> None:
        """A job has ended: the files it makes are ready for the jobs waiting for them; a failure stops the
        writes."""
        with self.ready:
            if ok:
                self.made.update(job.makes)
            self.ready.notify_all()
        if not ok:
            self._stop()

    def _stop(self) -> None:
        """No job starts any more (a failure, or the end): the lanes end with their running job."""
        with self.ready:
            self.pending.clear()
            self.closed = True
            self.ready.notify_all()

    def _done_here(self, job: WriteTask) -> None:
        """A job run in this process, kept with the pool's (its failure too, raised by `results`)."""
        future: Future[Outcome] = Future()
        try:
            future.set_result(job.task(*job.args))
        except Exception as exc:
            future.set_exception(exc)
        with self.ready:
            self.jobs.append((job.name, job.out_dir, future))
        self._ended(job, future.exception() is None)

    def _next(self) -> WriteTask | None:
        """This process's next job in `results`: a job whose files to wait for are all made (the join of a report
        written in parts, a writer that takes pieces), else the next waiting job, else (while lanes make those
        files) the next of the former once ready; None when none is left or a job has failed.

        A join is left to the lanes while a job that only this process runs (the TensorBoard job, which needs the
        reports) waits for its files: at 256 ranks this process joined the iteration report's parts (2 s) and only
        then ran the TensorBoard job (1.1 s), while the lane, free 0.4 s after the join was ready, waited."""
        with self.ready:
            while not self.closed:
                mine = any(job.task is not join_parts for job in self.waiting)
                job = self._made(skip=join_parts if self.lanes and mine else None)
                if job is not None:
                    return job
                if self.pending:
                    return self.pending.popleft()
                if not self.waiting:
                    return None
                self.ready.wait()
            return None

    def __enter__(self) -> Writes:
        for lane in self.lanes:
            lane.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Every job has ended (or, not yet started, is cancelled) before the staging folder is committed or
        removed: after a failure the jobs still running write into a folder that is about to go."""
        self._stop()
        for lane in self.lanes:
            lane.join()
        for *_, job in self.jobs:
            job.cancel()
        wait([job for *_, job in self.jobs])

    def results(self, formats: list[str], names: list[str], before: Callable[[], None] = lambda: None) -> list[Path]:
        """Paths written (moved into place), by format then report (in `names` order); the first failure is
        raised once every job has ended, and then nothing is moved, nor when `before` (run once every job has
        ended, the input's page check) raises. This process takes the waiting jobs too
        (one queue with the lanes), and those waiting for files (joins, writers taking pieces) as soon as their
        files are made."""
        while (job := self._next()) is not None:
            self._done_here(job)
        self._stop()
        for lane in self.lanes:
            lane.join()
        wait([job for *_, job in self.jobs])
        failed = next((exc for *_, job in self.jobs if (exc := job.exception()) is not None), None)
        if isinstance(failed, BrokenExecutor):  # a pool's worker killed while it wrote
            raise worker_lost(self.pool, "writing the reports")
        before()
        done = [(fmt, name, self.staging.record(out_dir, paths), seconds)
                for name, out_dir, job in self.jobs for fmt, paths, seconds in job.result()]
        self.staging.commit()
        release_free_memory()
        order = {name: k for k, name in enumerate(REPORTS)}
        done.sort(key=lambda d: order.get(d[1], len(order)))  # registry order: saved figures, comparison last
        written: list[Path] = []
        for fmt in formats:
            paths = [path for f, _, finals, _ in done if f == fmt for path in finals]
            if paths:  # the image writer writes only reports with images
                self.log.info(f"wrote {fmt} ({sum(seconds for f, *_, seconds in done if f == fmt):.2f} s)")
            written.extend(paths)
        return written


def write_reports(formats: list[str], reports: list[Report], staged: Path, out_dir: Path, info: RunInfo,
           rows: dict[str, list[Path]] | None = None, make: dict[str, Path] | None = None,
           given: dict[str, Path] | None = None) -> Outcome:
    """One writer job (in a writer thread or a worker process): per format, the paths written in `staged` and the
    time it took. `rows`: a table's rows are in these files (``write_part``'s parts, in order). `make`: format ->
    the file where the job saves that writer's piece of its report (one); `given`: report name -> the file holding
    its piece for the format written (one), which the job takes (the files then go; a piece not there is made by
    the writer)."""
    done = []
    pieces = {name: json.loads(path.read_bytes()) for name, path in (given or {}).items() if path.exists()}
    for fmt in formats:
        began = time.perf_counter()
        paths = write_staged(fmt, reports, staged, out_dir, info, rows, pieces)
        done.append((fmt, paths, time.perf_counter() - began))
    for path in (given or {}).values():
        path.unlink(missing_ok=True)
    for fmt, path in (make or {}).items():
        began = time.perf_counter()
        piece = WRITERS[fmt].piece(reports[0])  # (`make` names writers that make pieces)
        write_staged_file(path, json.dumps(piece), out_dir, fmt)
        done.append((fmt, [], time.perf_counter() - began))
    return done


def join_parts(fmt: str, report: Report, staged: Path, out_dir: Path, info: RunInfo, key: str,
          parts: list[Path]) -> Outcome:
    """A report written in parts: its file, with table `key`'s rows from the `parts` (which then go)."""
    done = write_reports([fmt], [report], staged, out_dir, info, {key: parts})
    for part in parts:
        part.unlink()
    return done


@dataclass(frozen=True)
class PartRows:
    """Rows first..stop-1 of a big table, to be formatted by the writer of `fmt` into `path`: a part of its file
    (in the staging folder of `out_dir`, where the report goes; the report's write then joins the parts)."""

    fmt: str
    table: Table
    first: int
    stop: int
    path: Path
    out_dir: Path
    info: RunInfo
    ends: bool  # these rows end the table (JSON: no comma after the last)

    def sent(self) -> PartRows:
        """What a worker process is sent: the part over its rows alone, or, rows kept in files (reports/spilled.py),
        the part as it is: the worker reads its rows there."""
        return self if self.table.spilled is not None else self.alone()

    def alone(self) -> PartRows:
        """The same part over a table of its rows alone (what a worker process is sent; rows kept in files are read
        there)."""
        if self.first == 0 and self.stop == len(self.table) and self.table.spilled is None:
            return self
        frame = self.table.rows(self.first, self.stop)
        return replace(self, table=self.table.with_frame(frame), first=0, stop=len(frame))


def write_part(rows: PartRows) -> Outcome:
    """A part of a big table written (by this process or a worker process); its time (it writes no output of its
    own)."""
    began = time.perf_counter()
    rows = rows.alone()
    write_staged_file(rows.path, WRITERS[rows.fmt].rows(rows.table, rows.info, rows.ends), rows.out_dir, rows.fmt)
    return [(rows.fmt, [], time.perf_counter() - began)]
