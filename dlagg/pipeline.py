"""The whole job, top to bottom: options -> read -> iterations -> reports -> writers.

``run(options)`` is what the CLI calls; it is usable as a library function too.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .errors import OptionsError, OutputError
from .log import Log, release_free_memory
from .model import Iterations, Profile
from .options import Options
from .reader import check_input, load_profile
from .reports import REPORTS, Report, ReportContext
from .timeline.iterations import detect_iterations
from .writers import WRITERS, RunInfo

# DLProf's report names; those not registered yet are refused by name with this note.
DLPROF_REPORTS = ("summary", "detail", "kernel", "iteration", "tensor", "op_type", "group_node", "expert_systems")
NOT_YET = "is not available in this dlagg version yet (it needs op correlation, planned next)"
# Event files are written whenever this writer is registered, unless --suppress_tb_files.
TENSORBOARD = "tensorboard"
# Threads writing reports while the next ones are built (the CI machine has two cores).
WRITE_THREADS = 1


@dataclass(frozen=True)
class Result:
    profile: Profile
    iterations: Iterations
    reports: tuple[Report, ...]
    written: tuple[Path, ...]
    warnings: tuple[str, ...]


def resolve_reports(requested: tuple[str, ...]) -> list[str]:
    """Report names in build order; 'all' means every registered report."""
    names: list[str] = []
    for name in requested:
        if name == "all":
            names.extend(REPORTS)
        elif name in REPORTS:
            names.append(name)
        elif name in DLPROF_REPORTS:
            raise OptionsError(f"--reports: report '{name}' {NOT_YET}; available: {', '.join(REPORTS)}")
        else:
            raise OptionsError(f"--reports: unknown report '{name}'; choose from all, {', '.join(REPORTS)}")
    ordered: list[str] = []

    def visit(name: str) -> None:
        if name not in ordered:
            for dep in REPORTS[name].depends:
                visit(dep)
            ordered.append(name)

    for name in dict.fromkeys(names):
        visit(name)
    return [n for n in ordered if n in names]


def build_order(names: list[str]) -> list[str]:
    """`names` with the bulk reports (one row per kernel) first, so that writing them overlaps the
    building of the others; they depend on no other report."""
    return sorted(names, key=lambda n: not REPORTS[n].bulk)


def _check_formats(formats: tuple[str, ...]) -> None:
    for fmt in formats:
        if fmt not in WRITERS or fmt == TENSORBOARD:
            choices = ", ".join(w for w in WRITERS if w != TENSORBOARD)
            raise OptionsError(f"--formats: unknown format '{fmt}'; choose from {choices}")


def _prepare_output(options: Options, names: list[str]) -> None:
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
    for fmt in _writers(options):
        for path in WRITERS[fmt].targets(suffixes, _out_dir(options, fmt), options.profile_name):
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


def run(options: Options, log: Log | None = None) -> Result:
    log = log or Log(options.level)
    names = resolve_reports(options.reports)
    _check_formats(options.formats)
    check_input(Path(options.nsys_database))
    if names:
        _prepare_output(options, names)

    with log.stage(f"read {Path(options.nsys_database).name}"):
        profile = load_profile(options.nsys_database)
    log.detail(f"{len(profile.kernels):,} kernels, {len(profile.memcpy) + len(profile.memset):,} memory operations, "
               f"{len(profile.runtime):,} CUDA API calls, {len(profile.nvtx):,} NVTX events; "
               f"nsys {profile.meta.nsys_version or 'version unknown'}")
    warnings: list[str] = list(profile.meta.warnings)

    iterations = detect_iterations(profile, options.key_node, options.iter_start, options.iter_stop)
    if iterations.found:
        log.info(f"key node '{iterations.key_node}' ({iterations.reason}): {iterations.count} iterations, "
                 f"aggregating {iterations.start} to {iterations.stop}")
    else:
        if len(profile.nvtx):
            hint = (f"; candidates: {', '.join(iterations.candidates)}" if iterations.candidates else "")
            todo = f"set --key_node to the NVTX range of one training step{hint}"
        else:
            todo = "wrap each training step in an NVTX range and record with 'nsys profile -t cuda,nvtx'"
        warnings.append(f"{iterations.reason}: the whole profile is one iteration 0; {todo}")

    ctx = ReportContext(profile, iterations, options)
    info = RunInfo(
        source=profile.meta.source,
        nsys_version=profile.meta.nsys_version,
        key_node=iterations.key_node,
        key_node_reason=iterations.reason,
        iterations_total=iterations.count,
        iter_start=iterations.start,
        iter_stop=iterations.stop,
        iteration_window_ns=iterations.window,
        profile_name=options.profile_name,
        dlagg_version=__version__,
        context=ctx,
    )
    formats = _writers(options)
    reports: list[Report] = []
    writes = _Writes(log)
    # A report is written (CSV, JSON) while the next ones are built: writers spend their time in
    # Arrow compute and file writes, which release the GIL, builders mostly in pandas. Bulk
    # reports (one row per kernel) are built first, so their writing overlaps the most.
    with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
        for name in build_order(names):
            spec = REPORTS[name]
            empty = [t for t in sorted(spec.requires) if len(getattr(profile, t)) == 0]
            if empty:
                warnings.append(f"{name} report not written: {profile.meta.source} has no CUDA {', '.join(empty)} "
                                "(was the run profiled with 'nsys profile -t cuda'?)")
                continue
            with log.stage(f"built {name} report"):
                built = ctx.report(name)
            reports.append(built)
            warnings.extend(built.warnings)
            for fmt in formats:
                if WRITERS[fmt].per_report:
                    writes.submit(pool, fmt, [built], _out_dir(options, fmt), info)
        for warning in dict.fromkeys(warnings):
            log.warn(warning)
        reports.sort(key=lambda r: names.index(r.name))  # back in the order reports are listed in
        if reports:
            for fmt in formats:
                if not WRITERS[fmt].per_report:
                    writes.submit(pool, fmt, reports, _out_dir(options, fmt), info)
        written = writes.results(formats, names)
    return Result(profile, iterations, tuple(reports), tuple(written), tuple(dict.fromkeys(warnings)))


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
        jobs = sorted(self.jobs, key=lambda j: names.index(j[1]))
        for fmt in formats:
            done = [job.result() for f, _, job in jobs if f == fmt]
            if done:
                self.log.info(f"wrote {fmt} ({sum(seconds for _, seconds in done):.2f} s)")
            for paths, _ in done:
                written.extend(paths)
        return written
