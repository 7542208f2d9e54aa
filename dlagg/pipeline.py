"""The whole job, top to bottom: options -> ranks found -> each rank read and reduced -> reports
combined over ranks -> writers.

``run(options)`` is what the CLI calls; it is usable as a library function too. One rank (one
export with one GPU process) is reduced in this process, and each report is written while the next
is built; several ranks are reduced by ``job.map_ranks`` (a process pool or a Dask cluster) and
combined by ``job.combine`` before anything is written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .errors import OptionsError, OutputError
from .job import combine, communication_needed, map_ranks, rank_task, reduce_rank
from .log import Log, release_free_memory
from .model import Iterations
from .options import Options
from .reader import check_input
from .reader.discover import Job, discover, input_paths
from .reports import REPORTS, Report
from .reports.base import JobFigures, RankFigures, one_per_cause
from .writers import WRITERS, RunInfo

# Event files are written whenever this writer is registered, unless --suppress_tb_files.
TENSORBOARD = "tensorboard"
# Threads writing reports while the next ones are built (the CI machine has two cores).
WRITE_THREADS = 1


@dataclass(frozen=True)
class Result:
    job: Job
    ranks: tuple[RankFigures, ...]
    reports: tuple[Report, ...]
    written: tuple[Path, ...]
    warnings: tuple[str, ...]

    @property
    def iterations(self) -> Iterations:
        """The first rank's iterations (the only rank's, in a one-rank run)."""
        return self.ranks[0].iterations


def resolve_reports(requested: tuple[str, ...], several: bool = False) -> list[str]:
    """The requested report names, in registry order; 'all' means every registered report that applies
    (the ranks and collectives reports when there are several ranks)."""
    names: set[str] = set()
    for name in requested:
        if name == "all":
            names.update(n for n, spec in REPORTS.items() if several or not spec.only_with_ranks)
        elif name in REPORTS:
            names.add(name)
        else:
            raise OptionsError(f"--reports: unknown report '{name}'; choose from all, {', '.join(REPORTS)}")
    return [n for n in REPORTS if n in names]


def _check_formats(formats: tuple[str, ...]) -> None:
    for fmt in formats:
        if fmt not in WRITERS or fmt == TENSORBOARD:
            choices = ", ".join(w for w in WRITERS if w != TENSORBOARD)
            raise OptionsError(f"--formats: unknown format '{fmt}'; choose from {choices}")


def _prepare_output(options: Options, names: list[str], job: Job) -> None:
    out = options.output_path
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: --output_path is a file, not a folder; pass a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create the output folder ({exc.strerror}); "
                          "choose another --output_path") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: the output folder is not writable; choose another --output_path")
    for fmt in _writers(options):
        folder = _out_dir(options, fmt)
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"{folder}: is a file, not a folder; remove it or choose another --tb_dir")
    if options.force:
        return
    suffixes = [REPORTS[n].file_suffix for n in names]
    targets = [p for fmt in _writers(options)
               for p in WRITERS[fmt].targets(suffixes, _out_dir(options, fmt), options.profile_name)]
    if options.per_rank and len(job.sources) > 1:
        rank_suffixes = [REPORTS[n].file_suffix for n in names if REPORTS[n].scope != "job"]
        targets += [p for fmt in options.formats for s in job.sources
                    for p in WRITERS[fmt].targets(rank_suffixes, _rank_dir(options, s.rank), options.profile_name)]
    for path in targets:
        if path.exists():
                raise OutputError(f"{path}: already exists; pass --force=true to overwrite it, "
                                  "or choose another --output_path / --profile_name")


def _writers(options: Options) -> list[str]:
    formats = list(options.formats)
    if not options.suppress_tb_files and TENSORBOARD in WRITERS:
        formats.append(TENSORBOARD)
    return formats


def _out_dir(options: Options, fmt: str) -> Path:
    """Event files get their own folder (--tb_dir) so `tensorboard --logdir` sees only them."""
    return options.output_path / options.tb_dir if fmt == TENSORBOARD else options.output_path


def _rank_dir(options: Options, rank: int) -> Path:
    """Where --per_rank writes one rank's reports."""
    return options.output_path / f"rank{rank}"


def run(options: Options, log: Log | None = None, *, worker_init: Callable[[], None] | None = None) -> Result:
    """The whole job. `worker_init` runs first in every worker process (the CLI's allocator settings)."""
    log = log or Log(options.level)
    _check_formats(options.formats)
    paths = input_paths(options.nsys_database)
    for path in paths:
        check_input(path)
    job = discover(paths)
    several = len(job.sources) > 1
    if several or job.files > 1:
        log.info(f"found {job.describe()}")
    names = resolve_reports(options.reports, several)
    if names:
        _prepare_output(options, names, job)
    formats = _writers(options)
    needed = [n for fmt in formats for n in WRITERS[fmt].needs if several or not REPORTS[n].only_with_ranks]
    build = list(dict.fromkeys([*names, *needed])) if names else []
    comm = communication_needed(job, build)
    writes = _Writes(log)
    with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
        if several:
            task = rank_task(options, build, comm, several=True)
            ranks = map_ranks(job, task, workers=options.workers, scheduler=options.scheduler,
                              initializer=worker_init, log=log)
            with log.stage(f"combined {len(ranks)} ranks"):
                figures, built = combine(ranks, job, build)
            info = _run_info(options, figures, names)
            for name in names:
                if name in built:
                    _submit_per_report(writes, pool, formats, built[name], options, info)
        else:
            early: dict[str, RunInfo] = {}

            def write_now(report: Report, rank: RankFigures) -> None:  # one rank: written as soon as built
                early.setdefault("info", _run_info(options, JobFigures(job, (rank,), None), names))
                if report.name in names:
                    early[report.name] = early["info"]
                    _submit_per_report(writes, pool, formats, report, options, early["info"])

            ranks = [reduce_rank(job.sources[0], options, build, comm=comm, on_report=write_now, log=log)]
            figures, built = combine(ranks, job, build)
            info = _run_info(options, figures, names)
            for name in names:
                if name in built and name not in early:
                    _submit_per_report(writes, pool, formats, built[name], options, info)
        warnings = one_per_cause([*(w for r in ranks for w in r.warnings),
                                  *(w for n in names if n in built for w in built[n].warnings)])
        for warning in warnings:
            log.warn(warning)
        reports = [built[n] for n in names if n in built]  # in the order reports are listed in
        if reports:
            for fmt in formats:
                if not WRITERS[fmt].per_report:
                    given = [built[n] for n in REPORTS if n in built and (n in names or n in WRITERS[fmt].needs)]
                    writes.submit(pool, fmt, given, _out_dir(options, fmt), info)
        if options.per_rank and several:
            for rank in ranks:  # ranks, not events
                rank_info = _run_info(options, JobFigures(job, (rank,), None), names)
                try:
                    _rank_dir(options, rank.source.rank).mkdir(exist_ok=True)
                except OSError as exc:
                    raise OutputError(f"{_rank_dir(options, rank.source.rank)}: cannot create the folder "
                                      f"({exc.strerror}); choose another --output_path") from None
                for name in names:
                    if name in rank.reports:
                        for fmt in options.formats:
                            writes.submit(pool, fmt, [rank.reports[name]], _rank_dir(options, rank.source.rank),
                                          rank_info)
        written = writes.results(formats, names)
    return Result(job, tuple(ranks), tuple(reports), tuple(written), tuple(warnings))


def _submit_per_report(writes: _Writes, pool: ThreadPoolExecutor, formats: list[str], report: Report,
                       options: Options, info: RunInfo | None) -> None:
    for fmt in formats:
        if WRITERS[fmt].per_report:
            writes.submit(pool, fmt, [report], _out_dir(options, fmt), info)


def _run_info(options: Options, figures: JobFigures, names: list[str]) -> RunInfo:
    """What the outputs say about where they came from: the job's files and its first rank's iterations."""
    first = figures.ranks[0]
    its = first.iterations
    sources = list(dict.fromkeys(r.source.path.name for r in figures.ranks))
    return RunInfo(
        source=", ".join(sources),
        nsys_version=first.meta.nsys_version,
        key_node=its.key_node,
        key_node_reason=its.reason,
        iterations_total=its.count,
        iter_start=its.start,
        iter_stop=its.stop,
        iteration_window_ns=its.window,
        profile_name=options.profile_name,
        dlagg_version=__version__,
        gpu_names=tuple(str(n) for r in figures.ranks for n in r.gpus["name"]) if len(figures.ranks) == 1 else
        tuple(f"rank {r.source.rank}: GPU {','.join(map(str, r.source.devices))}" for r in figures.ranks),
        reports=tuple(names),
        ranks=tuple(r.source.rank for r in figures.ranks),
    )


class _Writes:
    """Writer jobs on a thread pool; a format's time is the sum of its jobs' (they overlap others)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.jobs: list[tuple[str, str, Future[tuple[list[Path], float]]]] = []  # format, report, job

    def submit(self, pool: ThreadPoolExecutor, fmt: str, reports: list[Report], out_dir: Path, info: RunInfo) -> None:
        def write() -> tuple[list[Path], float]:
            began = time.perf_counter()
            paths = WRITERS[fmt].write(reports, out_dir, info)
            return paths, time.perf_counter() - began

        self.jobs.append((fmt, reports[0].name, pool.submit(write)))

    def results(self, formats: list[str], names: list[str]) -> list[Path]:
        """Paths written, by format then report (in `names` order); the first failure is raised
        once every job has ended."""
        wait([job for _, _, job in self.jobs])
        for _, _, job in self.jobs:
            job.result()
        release_free_memory()
        written: list[Path] = []
        order = {name: k for k, name in enumerate(REPORTS)}
        jobs = sorted(self.jobs, key=lambda j: order[j[1]])
        for fmt in formats:
            done = [job.result() for f, _, job in jobs if f == fmt]
            if done:
                self.log.info(f"wrote {fmt} ({sum(seconds for _, seconds in done):.2f} s)")
            for paths, _ in done:
                written.extend(paths)
        return written
