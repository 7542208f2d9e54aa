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
from .context import RankContext
from .errors import OptionsError, OutputError
from .log import Log, release_free_memory
from .model import Iterations, Profile
from .options import Options
from .reader import check_input, load_profile
from .reports import REPORTS, Report
from .reports.base import build_order
from .timeline.iterations import detect_iterations
from .writers import WRITERS, RunInfo

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
    """The requested report names, in registry order; 'all' means every registered report."""
    names: set[str] = set()
    for name in requested:
        if name == "all":
            names.update(REPORTS)
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

    ctx = RankContext(profile, iterations, options)
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
        gpu_names=tuple(str(n) for n in profile.gpus["name"]),
        reports=tuple(names),
    )
    formats = _writers(options)
    needed = [n for fmt in formats for n in WRITERS[fmt].needs] if names else []
    built: dict[str, Report] = {}
    writes = _Writes(log)
    # A report is written (CSV, JSON) while the next ones are built: writers spend their time in
    # Arrow compute and file writes, which release the GIL, builders mostly in pandas. Bulk
    # reports (one row per kernel) are built first, so their writing overlaps the most.
    with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
        for name in build_order([*names, *needed]):
            spec = REPORTS[name]
            empty = [t for t in sorted(spec.requires) if len(getattr(profile, t)) == 0]
            if empty:
                warnings.append(f"{name} report not written: {profile.meta.source} has no CUDA {', '.join(empty)} "
                                "(was the run profiled with 'nsys profile -t cuda'?)")
                continue
            with log.stage(f"built {name} report"):
                built[name] = spec.build(ctx, {dep: built[dep] for dep in spec.depends})
            if name not in names:
                continue
            warnings.extend(built[name].warnings)
            for fmt in formats:
                if WRITERS[fmt].per_report:
                    writes.submit(pool, fmt, [built[name]], _out_dir(options, fmt), info)
        for warning in dict.fromkeys(warnings):
            log.warn(warning)
        reports = [built[n] for n in names if n in built]  # in the order reports are listed in
        if reports:
            for fmt in formats:
                if not WRITERS[fmt].per_report:
                    given = [built[n] for n in REPORTS if n in built and (n in names or n in WRITERS[fmt].needs)]
                    writes.submit(pool, fmt, given, _out_dir(options, fmt), info)
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
        order = {name: k for k, name in enumerate(REPORTS)}
        jobs = sorted(self.jobs, key=lambda j: order[j[1]])
        for fmt in formats:
            done = [job.result() for f, _, job in jobs if f == fmt]
            if done:
                self.log.info(f"wrote {fmt} ({sum(seconds for _, seconds in done):.2f} s)")
            for paths, _ in done:
                written.extend(paths)
        return written
