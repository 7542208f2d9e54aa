"""The whole job, top to bottom: options -> ranks found -> each rank read and reduced -> reports
combined over ranks -> writers.

``run(options)`` is what the CLI calls; it is usable as a library function too. One rank (one
export with one GPU process) is reduced in this process, and each report is written while the next
is built; several ranks are reduced by ``ranks.reduce.map_ranks`` (this process with a local process pool, or a
Dask cluster) and combined by ``ranks.reduce.combine``, and each combined report is written while the next is
merged: on the local pool's worker processes once they have reduced the ranks (the writers are
GIL-bound Python, so a writer thread would take its time from the merge), else on a writer thread.

With ``--ncu_report`` the roofline is analysed on the rank ncu profiled (``ranks.reduce.with_ncu_rank``);
with ``--ncu_report`` alone (no nsys export) the roofline report is the only one
(``reports.roofline.build_alone``), and asking for a report that needs an nsys export is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .baseline import baseline_input, no_baseline, reduce_side, saved_file
from .errors import OptionsError, OutputError
from .log import Log
from .model import Iterations
from .options import Options
from .output.folders import (
    IMAGES,
    TENSORBOARD,
    check_output_folders,
    out_dir,
    rank_dir,
    run_staging,
    writer_formats,
)
from .output.staging import check_output_names
from .output.writes import WRITE_THREADS, Writes
from .ranks.pool import pool_size, shared_map, start_early
from .ranks.reduce import (
    build_given,
    collector_spared,
    combine,
    communication_needed,
    local_pool,
    map_ranks,
    plan_processes,
    probe_on_dask,
    rank_task,
    reduce_rank,
    with_ncu_rank,
)
from .reader import check_input
from .reader.cache import checked_pages
from .reader.cache import usable as cache_usable
from .reader.discover import Job, ProbeAll, discover, input_paths
from .reader.integrity import PageCheck
from .reports import REPORTS, Report
from .reports.base import BASELINE, GIVEN, NCU, NSYS, JobFigures, RankFigures, choices, one_per_cause
from .reports.compare import COMPARE, Comparison, comparison_of
from .reports.roofline import build_alone
from .reports.side import NEEDS, Side
from .writers import WRITERS, RunInfo
from .writers.html_writer import charts_refused

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

ALL_FORMATS = "all"  # --formats=all: every file format


@dataclass(frozen=True)
class Result:
    job: Job
    ranks: tuple[RankFigures, ...]
    reports: tuple[Report, ...]
    written: tuple[Path, ...]
    warnings: tuple[str, ...]

    @property
    def comparison(self) -> Comparison | None:
        """With --baseline: the compare report (in `reports`) and its verdict."""
        return next((comparison_of(r) for r in self.reports if r.name == COMPARE), None)

    @property
    def iterations(self) -> Iterations:
        """The first rank's iterations (the only rank's, in a one-rank run; a run of an ncu report alone
        has no rank)."""
        return self.ranks[0].iterations


def resolve_reports(requested: tuple[str, ...], many_ranks: bool = False,
                    inputs: frozenset[str] = frozenset({NSYS})) -> list[str]:
    """The requested report names, in registry order; 'all' means every report --reports takes that applies
    (the ranks and collectives reports when there are several ranks; those whose `inputs` were given:
    the roofline report with an ncu report, the compare report with a baseline, the others with an nsys export).
    A report written whenever its inputs are given (compare) is among them, asked for or not."""
    choosable = choices()
    names = {n for n, spec in REPORTS.items() if spec.always and spec.inputs <= inputs}
    lacking: list[str] = []
    for name in requested:
        if name == "all":
            names.update(n for n in choosable if (many_ranks or not REPORTS[n].only_with_ranks)
                         and REPORTS[n].inputs <= inputs)
        elif name in choosable and REPORTS[name].inputs <= inputs:
            names.add(name)
        elif name in choosable:
            lacking.append(name)
        else:  # (compare is told by --baseline's help)
            listed = ", ".join(n for n in choosable if not REPORTS[n].always)
            raise OptionsError(f"--reports: unknown report '{name}'; choose from all, {listed}")
    if lacking:
        if any(BASELINE in REPORTS[n].inputs for n in lacking) and BASELINE not in inputs:
            raise OptionsError(no_baseline(tuple(n for n in lacking if BASELINE in REPORTS[n].inputs)))
        if NSYS not in inputs:
            raise OptionsError(f"--reports: {', '.join(lacking)} need an nsys export: pass --nsys_database (with "
                               "--ncu_report alone dlagg writes the roofline report only)")
        raise OptionsError(f"--reports: {', '.join(lacking)} needs Nsight Compute metrics: pass --ncu_report=step.csv "
                           "(ncu -i step.ncu-rep --csv --page raw > step.csv; docs/roofline.md)")
    return [n for n in REPORTS if n in names]


def _inputs(options: Options) -> frozenset[str]:
    """The inputs given: an nsys export, an ncu report, a baseline."""
    return frozenset({*([NSYS] if options.nsys_database is not None else []),
                      *([NCU] if options.ncu_report is not None else []),
                      *([BASELINE] if options.baseline is not None else [])})


def _check_roofline_options(options: Options) -> None:
    if options.ncu_report is None:
        for given, option in ((options.peaks, "--peaks"), (options.ncu_rank, "--ncu_rank")):
            if given is not None:
                raise OptionsError(f"{option} applies to the roofline of an Nsight Compute report: pass --ncu_report "
                                   "too, or leave it out")
    elif options.nsys_database is None and options.ncu_rank is not None:
        raise OptionsError("--ncu_rank chooses among the ranks of an nsys export: pass --nsys_database too, or leave "
                           "it out")


def format_choices() -> list[str]:
    """The formats --formats takes besides 'all': every registered file format (TensorBoard is -b's business,
    PNGs are written with the reports that draw them); what --help lists and the check accepts."""
    return [w for w in WRITERS if w not in (TENSORBOARD, IMAGES)]


def file_formats(formats: tuple[str, ...]) -> tuple[str, ...]:
    """--formats with 'all' replaced by every format of `format_choices`."""
    if ALL_FORMATS not in formats:
        return formats
    return tuple(dict.fromkeys([*(f for f in formats if f != ALL_FORMATS), *format_choices()]))


def _check_formats(formats: tuple[str, ...]) -> None:
    for fmt in formats:
        if fmt not in format_choices():
            raise OptionsError(f"--formats: unknown format '{fmt}'; choose from "
                               f"{', '.join([ALL_FORMATS, *format_choices()])}")


def check_outputs(options: Options) -> None:
    """What `run` checks before it reads anything, for a caller about to make the input (the CLI running
    a program under nsys): the formats and reports valid, the output folder writable and no output in
    the way. One rank is assumed: --per_rank's folders are checked by `run`, once the ranks are known."""
    options = replace(options, formats=file_formats(options.formats))
    _check_formats(options.formats)
    _check_roofline_options(options)
    check_output_names(options)
    baseline_input(options)
    names = resolve_reports(options.reports, inputs=_inputs(options))
    if names:
        _prepare_output(options, names, None, _baseline_targets(options))


def _prepare_output(options: Options, names: list[str], job: Job | None, also: Sequence[Path] = ()) -> None:
    check_output_folders(options)
    if options.force:
        return
    suffixes = [REPORTS[n].file_suffix for n in names]
    targets = [p for fmt in writer_formats(options)
               for p in WRITERS[fmt].targets([*suffixes, *(REPORTS[n].file_suffix for n in _added(options, fmt))],
                                             out_dir(options, fmt), options.profile_name)] + list(also)
    if options.per_rank and job is not None and len(job.sources) > 1:
        rank_suffixes = [REPORTS[n].file_suffix for n in names if REPORTS[n].scope != "job"]
        targets += [p for fmt in options.formats for s in job.sources
                    for p in WRITERS[fmt].targets(rank_suffixes, rank_dir(options, s.rank), options.profile_name)]
    for path in targets:
        if path.exists():
                raise OutputError(f"{path}: already exists; pass --force=true to overwrite it, "
                                  "or choose another --output_path / --profile_name")


def _checked_inputs(options: Options, log: Log) -> tuple[list[Path], PageCheck]:
    """The profiles given (--nsys_database, --trace), each checked; files of a folder that are no profile are
    left out, with a note. And the check of their pages, under way (none with --check=false)."""
    skipped: list[str] = []
    assert options.nsys_database is not None
    paths = input_paths(options.nsys_database, skipped)
    for note in skipped:
        log.warn(note)
    for path in paths:
        check_input(path)
    return paths, checked_pages(paths, options)  # (none with --check=false, nor of files found sound before)


def _pool(options: Options, export_bytes: list[int], worker_init: Callable[[], None] | None, pools: ExitStack, log: Log,
          writes: bool = False, previous: ProcessPoolExecutor | None = None) -> ProcessPoolExecutor | None:
    """The local process pool for files or ranks of `export_bytes` bytes, owned by `pools` (None: one, --workers=1, or
    memory for one rank at a time: `ranks.reduce.plan_processes`, said on stderr). With --scheduler the Dask
    cluster reduces the ranks, and a local pool is made only to write the outputs of a job of several ranks here
    (`writes`); its fork server starts now, importing dlagg while the cluster works. `previous`: the pool that probed
    the files, kept when it has processes enough for these ranks, else shut down (its fork server stays, for the new
    one)."""
    if options.scheduler and not writes:
        return None
    count, note, warn = plan_processes(options.workers, export_bytes)
    if previous is not None:
        if count <= 1 + pool_size(previous):
            return previous
        previous.shutdown(wait=True)
    if note:
        (log.warn if warn else log.info)(note)
    pool = local_pool(count, export_bytes, worker_init)
    if pool is None:
        return None
    if options.scheduler:
        start_early()
    return pools.enter_context(pool)


def _ranks_pool(options: Options, job: Job, files_pool: ProcessPoolExecutor | None,
                worker_init: Callable[[], None] | None, pools: ExitStack, log: Log) -> ProcessPoolExecutor | None:
    """The local pool that reduces the job's ranks: the one that probed its files, unless there was none (one file;
    with --scheduler, the pool that writes) or the files hold several ranks each (it had a process per file at
    most)."""
    if len(job.sources) < 2 or (files_pool is not None and len(job.sources) == job.files):
        return files_pool
    sizes = [s.export_bytes for s in job.sources]
    return _pool(options, sizes, worker_init, pools, log, writes=True, previous=files_pool)


def _discovered(options: Options, paths: list[Path], workers: ProcessPoolExecutor | None, log: Log) -> Job:
    """The ranks of the files, said on stderr when there are several, with what the user should know of them."""
    job = discover(paths, _probe_all(options, len(paths), workers), (options.cache, options.cache_dir))
    for note in job.notes:
        log.warn(note)
    if len(job.sources) > 1 or job.files > 1:
        log.info(f"found {job.describe()}")
    return job


def _file_size(path: Path) -> int:
    """A checked input's size in bytes (`check_input` has stat'ed it)."""
    return path.stat().st_size


def _probe_all(options: Options, files: int, workers: ProcessPoolExecutor | None) -> ProbeAll | None:
    """Where several files are probed for their ranks (reader.discover's `probe_all`): on the Dask cluster, or
    by this process and the local pool together (None: one after the other in this process)."""
    if options.scheduler and files > 1:
        return partial(probe_on_dask, options.scheduler)
    if workers is not None:
        return lambda probe, paths: shared_map(paths, probe, workers, describe=lambda p: f"listing the ranks of {p}")
    return None


def run(options: Options, log: Log | None = None, *, worker_init: Callable[[], None] | None = None,
        keep_rows: bool = True) -> Result:
    """The whole job. `worker_init` runs first in every worker process (the CLI's allocator settings). `keep_rows`:
    the result's reports hold all their rows; else the rows a local pool kept in files while it reduced the ranks
    (reports/spilled.py) go with the run's staging folder (the command line, which prints findings only).

    Several files are probed for their ranks where the ranks will be reduced: on the Dask cluster, or on the local
    pool (this process and its workers), which then reduces the ranks and writes the reports; a file holding
    several ranks gets its pool once probed."""
    log = log or Log(options.level)
    options = cache_usable(replace(options, formats=file_formats(options.formats)), log)  # (cache: one note)
    _check_formats(options.formats)
    _check_roofline_options(options)
    check_output_names(options)
    if options.reports or options.baseline is not None:  # an output folder that cannot be written: before any reading
        check_output_folders(options)
    baseline = baseline_input(options)  # None without --baseline
    if options.nsys_database is None:
        return _run_ncu_alone(options, log)
    with collector_spared(), ExitStack() as pools:  # pools end after the staging folder, once its writes have
        paths, pages = _checked_inputs(options, log)  # the pages' verdict comes before outputs are moved into place
        workers = _pool(options, [_file_size(p) for p in paths], worker_init, pools, log)
        job = _discovered(options, paths, workers, log)
        options = with_ncu_rank(options, job)
        many_ranks = len(job.sources) > 1
        names = resolve_reports(options.reports, many_ranks, _inputs(options))
        if names:
            _prepare_output(options, names, job, _baseline_targets(options))
        formats = _writers_warned(options, log)
        build = _to_build(options, names, formats, many_ranks)
        workers = _ranks_pool(options, job, workers, worker_init, pools, log)
        executor = workers or pools.enter_context(ThreadPoolExecutor(WRITE_THREADS))
        staging = run_staging(options, log)
        with staging, Writes(log, staging, executor, pool_size(workers) if workers else None) as writes:
            ranks, figures, built, written_early = _reduce(job, options, build, names, writes, log, worker_init,
                                                           workers)
            info = _run_info(options, figures, names)
            for name in build:  # those asked for, then those a writer adds (the saved figures)
                if name in built and name not in written_early:
                    _submit_per_report(writes, formats, built[name], options, info)
            if baseline is not None:  # the input of the compare report, read once the job's other reports are built
                side = _baseline_side(baseline, options, writes, log, worker_init)
                with log.stage(f"compared with the {'saved ' if side.saved is not None else ''}baseline"):
                    given = build_given(replace(figures, given={BASELINE: side}), build, built)
                for report in given:
                    _submit_per_report(writes, formats, report, options, info)
            reports = [built[n] for n in names if n in built]  # in the order reports are listed in
            warnings = _warn(log, ranks, reports)
            info = replace(info, warnings=tuple(dict.fromkeys(log.warnings)))  # the page: every warning said so far
            if reports:
                _submit_whole_job(writes, formats, built, names, options, info)
            if options.per_rank and many_ranks:
                _submit_per_rank(writes, ranks, job, names, options)
            if keep_rows:  # read before the files go with the staging folder
                reports = _loaded(reports)
                for rank in ranks:  # ranks, not events
                    rank.reports.update(zip(rank.reports, _loaded(list(rank.reports.values())), strict=True))
            written = writes.results(formats, names, before=pages.verdict)
    return Result(job, tuple(ranks), tuple(reports), tuple(written), tuple(warnings))


def _writers_warned(options: Options, log: Log) -> list[str]:
    """`_writers`, and the warning of an HTML page that will lack its charts, said before the page lists the run's
    warnings."""
    formats = writer_formats(options)
    if "html" in formats and (undrawn := charts_refused()) is not None:
        log.warn(undrawn)
    return formats


def _to_build(options: Options, names: list[str], formats: list[str], many_ranks: bool) -> list[str]:
    """The reports a run builds: those asked for, those its writers need and those they add (a JSON run's saved
    figures), and (by `build_order`) those these read; those that read an input given to the job (the comparison)
    last, as they are built last. None when the run writes no report."""
    if not names:
        return []
    needed = [n for fmt in formats for n in WRITERS[fmt].needs if many_ranks or not REPORTS[n].only_with_ranks]
    added = [n for fmt in formats for n in _added(options, fmt)]
    return list(dict.fromkeys([*(n for n in names if not REPORTS[n].inputs & GIVEN), *needed, *added, *names]))


def _added(options: Options, fmt: str) -> list[str]:
    """The reports the writer of `fmt` adds to those asked for (``Writer.adds``) whose inputs the run has: the saved
    figures of a JSON run of an nsys export."""
    return [n for n in WRITERS[fmt].adds if REPORTS[n].inputs <= _inputs(options)]


def _loaded(reports: list[Report]) -> list[Report]:
    """The reports with every table's rows in memory (read from files where a pool kept them)."""
    return [replace(r, tables=tuple(t.loaded() for t in r.tables)) if any(t.spilled for t in r.tables) else r
            for r in reports]


def _reduce(job: Job, options: Options, build: list[str], names: list[str], writes: Writes, log: Log,
            worker_init: Callable[[], None] | None, workers: ProcessPoolExecutor | None,
            ) -> tuple[list[RankFigures], JobFigures, dict[str, Report], set[str]]:
    """The job's ranks reduced and combined into the reports `build`. Each report asked for (`names`) is submitted
    for writing as soon as it is built: a one-rank job's while the rank's next report is built, a several-rank
    job's while the next is merged (on `workers`, the local pool, once it has reduced the ranks). The ranks, the
    job's figures and reports, and the names of the reports submitted."""
    formats = writer_formats(options)
    comm = communication_needed(job, build)
    submitted: set[str] = set()

    def write_now(report: Report, info: RunInfo) -> None:
        if report.name in names:
            submitted.add(report.name)
            _submit_per_report(writes, formats, report, options, info)

    if len(job.sources) > 1:
        # on the local pool, the rows of the biggest tables stay where their rank was reduced (docs/ranks.md)
        spill = writes.staging.scratch() if workers is not None and not options.scheduler and any(
            REPORTS[n].spill for n in build) else None
        task = rank_task(options, build, comm, many_ranks=True, spill=spill,
                         processes=1 + (pool_size(workers) if workers else 0))
        ranks = map_ranks(job, task, workers=options.workers, scheduler=options.scheduler, initializer=worker_init,
                          log=log, pool=workers)
        info = _run_info(options, JobFigures(job, tuple(ranks), None), names)
        with log.stage(f"combined {len(ranks)} ranks"):
            figures, built = combine(ranks, job, build, on_report=lambda report: write_now(report, info),
                                     release=not options.per_rank)
        return ranks, figures, built, submitted
    first: dict[str, RunInfo] = {}  # the rank's run info, from the figures of its first report

    def write_one(report: Report, rank: RankFigures) -> None:
        write_now(report, first.setdefault("info", _run_info(options, JobFigures(job, (rank,), None), names)))

    ranks = [reduce_rank(job.sources[0], options, build, comm=comm, on_report=write_one, log=log)]
    figures, built = combine(ranks, job, build)
    return ranks, figures, built, submitted


def _warn(log: Log, ranks: list[RankFigures], reports: list[Report]) -> list[str]:
    """The job's warnings, one per cause (the ranks', then the reports'), each logged."""
    warnings = one_per_cause([*(w for r in ranks for w in r.warnings), *(w for r in reports for w in r.warnings)])
    for warning in warnings:
        log.warn(warning)
    return warnings


def _submit_whole_job(writes: Writes, formats: list[str], built: dict[str, Report], names: list[str],
                      options: Options, info: RunInfo) -> None:
    """The formats that write all reports at once (the HTML page): the reports asked for and those the format
    needs, in registry order."""
    for fmt in formats:
        if not WRITERS[fmt].per_report:
            given = [built[n] for n in REPORTS if n in built and (n in names or n in WRITERS[fmt].needs)]
            writes.submit([fmt], given, out_dir(options, fmt), info, take_pieces=True)


def _submit_per_rank(writes: Writes, ranks: list[RankFigures], job: Job, names: list[str],
                     options: Options) -> None:
    """--per_rank: each rank's reports in its own folder (made in the staging folder when written)."""
    per_report = [fmt for fmt in options.formats if WRITERS[fmt].per_report]
    listed = [n for n in names if not REPORTS[n].inputs & GIVEN]  # a comparison is the job's, no rank's
    for rank in ranks:  # ranks, not events
        rank_info = replace(_run_info(options, JobFigures(job, (rank,), None), listed), warnings=tuple(one_per_cause(
            [*rank.warnings, *(w for n in names if n in rank.reports for w in rank.reports[n].warnings)])))
        folder = rank_dir(options, rank.source.rank)
        for name in names:
            if name in rank.reports:
                writes.submit(per_report, [rank.reports[name]], folder, rank_info)
        given = [rank.reports[n] for n in REPORTS if n in rank.reports]
        for fmt in options.formats:
            if not WRITERS[fmt].per_report and given:  # the HTML page: all the rank's reports at once
                writes.submit([fmt], given, folder, rank_info)


def _baseline_targets(options: Options) -> list[Path]:
    """What reading a baseline export writes besides the reports: its TensorBoard run (saved figures have none)."""
    if options.baseline is None:
        return []
    if TENSORBOARD in writer_formats(options) and saved_file(options.baseline.nsys_database) is None:  # saved: no run
        return WRITERS[TENSORBOARD].targets([], out_dir(options, TENSORBOARD), options.baseline.run_name(options))
    return []


def _baseline_side(baseline: tuple[Options, Job | Side], options: Options, writes: Writes, log: Log,
                   worker_init: Callable[[], None] | None) -> Side:
    """The baseline's figures (the compare report's input, reports/compare.py): a saved baseline as loaded; an
    export reduced like the current profile, after it (its reports are written meanwhile), with its TensorBoard run
    submitted (next to the current profile's, under the baseline's run name). A saved baseline holds figures, not
    the reports a TensorBoard run shows, so it has none."""
    reads, job = baseline
    if isinstance(job, Side):
        return job
    many_ranks = len(job.sources) > 1
    needed = [n for n in WRITERS[TENSORBOARD].needs if many_ranks or not REPORTS[n].only_with_ranks] \
        if TENSORBOARD in writer_formats(options) else []
    names = tuple(dict.fromkeys([*NEEDS, *needed]))
    with log.stage(f"read the baseline ({job.describe()})"):
        side = reduce_side(reads, job, names, log=log, worker_init=worker_init)
    if needed:
        given = [side.reports[n] for n in REPORTS if n in side.reports]
        assert side.figures is not None  # reduced here, not saved
        info = _run_info(reads, side.figures, list(NEEDS))
        writes.submit([TENSORBOARD], given, out_dir(options, TENSORBOARD), info)
    return side


def _run_ncu_alone(options: Options, log: Log) -> Result:
    """--ncu_report without an nsys export: the roofline report of the ncu kernels alone."""
    if options.ncu_report is None:
        raise OptionsError("nothing to read: pass --nsys_database (an nsys SQLite export) and/or --ncu_report (an "
                           "Nsight Compute raw-page CSV)")
    job = Job(sources=(), files=0, processes=0, numbering="no nsys export")
    names = resolve_reports(options.reports, inputs=_inputs(options))
    if not names:
        return Result(job, (), (), (), ())
    if "all" in options.reports:
        log.info("no nsys export: the roofline report only (the other reports need --nsys_database)")
    _prepare_output(options, names, job)
    with log.stage(f"built roofline report from {Path(str(options.ncu_report)).name} alone"):
        report = build_alone(options)
    for warning in report.warnings:
        log.warn(warning)
    info = RunInfo(source=Path(str(options.ncu_report)).name, nsys_version="", key_node="",
                   key_node_reason="no nsys export: the ncu report's kernels alone", iterations_total=0, iter_start=0,
                   iter_stop=0, iteration_window_ns=(0, 0), profile_name=options.profile_name,
                   dlagg_version=__version__, reports=tuple(names), ranks=(), raw_csv=options.raw_csv)
    formats = writer_formats(options)
    with (staging := run_staging(options, log)), ThreadPoolExecutor(WRITE_THREADS) as pool:
        writes = Writes(log, staging, pool)
        for fmt in formats:
            writes.submit([fmt], [report], out_dir(options, fmt), info)
        written = writes.results(formats, names)
    return Result(job, (), (report,), tuple(written), report.warnings)


def _submit_per_report(writes: Writes, formats: list[str], report: Report, options: Options,
                       info: RunInfo) -> None:
    """The report's files: when asked for (in ``info.reports``), in every format written a file per report, else in
    those whose writer adds it (``Writer.adds``: the saved figures); and, when asked for, its piece for each writer
    of every report at once that makes pieces (TensorBoard's text dashboards: writers/base.py), which that writer's
    job then takes."""
    asked = report.name in info.reports
    pieces = [fmt for fmt in formats if not WRITERS[fmt].per_report and WRITERS[fmt].makes_pieces and asked]
    files = [fmt for fmt in formats if WRITERS[fmt].per_report and (asked or report.name in WRITERS[fmt].adds)]
    if files or pieces:  # (a report built only for a writer of every report at once is given to it there)
        writes.submit(files, [report], options.output_path, info, make_pieces=pieces)


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
        raw_csv=options.raw_csv,
    )
