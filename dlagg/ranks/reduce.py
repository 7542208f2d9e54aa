"""A job of ranks: each rank reduced to figures where it is read (map), then combined (reduce).

Contract:

- ``reduce_rank(source, options, names, ...) -> RankFigures`` reads one rank (a file, or one
  process of a file), finds its iterations and builds the reports `names` for it. It is a pure
  function of its arguments, picklable, and returns no event table: it runs in this process, in a
  worker process or on a Dask worker alike.
- ``map_ranks(job, task, workers, scheduler) -> list[RankFigures]`` runs the task for every rank: in
  this process (one worker, or one rank), in this process and a local process pool of the other
  workers together, or on a Dask distributed cluster.
- ``combine(ranks, job, names) -> dict[str, Report]`` is the small reduce: clocks aligned and
  collectives matched (``comm.match``), every report's ranks merged (its ``@merges`` function), and
  the job reports built, but those that read an input the run gives the job (``reports.base.GIVEN``: the
  baseline of a comparison), which ``build_given`` builds once the run has read it.

With one rank the job's reports are that rank's, unchanged.

An Nsight Compute report (``--ncu_report``) measured one process: it is analysed on one rank,
``options.ncu_rank`` (``with_ncu_rank`` sets it: ``--ncu_rank``, else the job's first rank), whose
reports carry its figures; combined reports take that rank's.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..comm import RankInput, match_collectives, rank_comm
from ..context import RankContext
from ..errors import DlaggError, OptionsError, WorkerLost
from ..limits import available_memory, processes_that_fit, rank_memory, usable_cores
from ..log import Log, peak_mb
from ..model import Iterations, Profile, share
from ..ops.cache import OpsCache
from ..options import Options
from ..output.staging import output_error
from ..reader import load_profile, read_threads
from ..reader.cache import cached_profile
from ..reader.discover import Job, RankSource, with_profile_facts
from ..reports import REPORTS, Report
from ..reports.base import GIVEN, JOB, MERGERS, NCU, JobFigures, RankFigures, build_order
from ..reports.roofline import tc_warning
from ..reports.summary import config_env
from ..timeline.correlate import KERNEL
from ..timeline.iterations import detect_iterations, near_names
from .pool import pool_context, shared_map, start_early, worker_initializer
from .tuning import slow_setup

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

OPS_INDEX = ["op_key", "op_type", "order", "forward_op_key"]


def key_node_warning(its: Iterations, has_nvtx: bool, near: Sequence[str] = ()) -> str | None:
    """The warning for a rank whose key node was not found (None when it was): the range names closest to
    a --key_node given (`near`: a typo is the usual cause) and the most frequent top-level ranges."""
    if its.found:
        return None
    if has_nvtx:
        meant = f"closest range names: {', '.join(repr(n) for n in near)} (a typo?); " if near else ""
        frequent = f"; most frequent top-level ranges: {', '.join(its.candidates)}" if its.candidates else ""
        todo = f"{meant}set --key_node to the NVTX range of one training step{frequent}"
    else:
        todo = "wrap each training step in an NVTX range and record with 'nsys profile -t cuda,nvtx'"
    return f"{its.reason}: the whole profile is one iteration 0; {todo}"


def outside_warning(ctx: RankContext) -> str | None:
    """The warning for GPU work launched outside every iteration (after the last key-node range ends, or
    before the first iteration starts): how many kernels and memory operations, and their GPU time (sum of
    durations). Such work belongs to no iteration, so no iteration figure counts it. None when there is none."""
    its = ctx.iterations
    if not its.found or not (len(ctx.profile.kernels) or len(ctx.profile.memcpy) or len(ctx.profile.memset)):
        return None
    work = ctx.work
    outside = work["iteration"].to_numpy() < 0
    if not outside.any():
        return None
    kernel = work["kind"].to_numpy() == KERNEL
    duration = (work["end"].to_numpy() - work["start"].to_numpy()).astype(np.float64)
    parts = []
    for mask, what in ((kernel, "kernel"), (~kernel, "memory operation")):  # two kinds, not events
        count = int((outside & mask).sum())
        if count:
            time = float(duration[outside & mask].sum())
            parts.append(f"{count:,} {what}{'s' if count != 1 else ''} ({time / 1e6:,.3f} ms of GPU time, "
                         f"{share(time, float(duration[mask].sum())):.1f} % of all {what}s' GPU time)")
    before = outside & (work["t_attr"].to_numpy() < its.starts[0])
    where = ("after the last" if not before.any() else
             "before the first" if before.all() else "before the first or after the last")
    return (f"{' and '.join(parts)} launched {where} '{its.key_node}' range fall{'s' if outside.sum() == 1 else ''} "
            "outside every iteration: no iteration figure counts them (if that is training work, end the key node's "
            "range after it; evaluation or shutdown work may be left out)")


def _rank_iterations(profile: Profile, options: Options, source: RankSource, many_ranks: bool,
                     log: Log) -> tuple[Iterations, list[str]]:
    """The rank's iterations (key-node ranges), and its warnings so far: the export's own, a key node not
    found, fewer iterations than --iter_stop asks for (one rank of several)."""
    where = f" ({source.path.name}, rank {source.rank})" if many_ranks else ""
    try:
        iterations = detect_iterations(profile, options.key_node, options.iter_start, options.iter_stop,
                                       clamp=many_ranks)
    except OptionsError as exc:
        raise OptionsError(f"{exc}{where}") from None
    warnings: list[str] = list(profile.meta.warnings)
    near = near_names(profile, options.key_node) if options.key_node and not iterations.found else ()
    missing = key_node_warning(iterations, len(profile.nvtx) > 0, near)
    if missing:
        warnings.append(f"{missing}{where}")
    if many_ranks and options.iter_stop is not None and iterations.stop < options.iter_stop:
        warnings.append(f"rank {source.rank} ({source.path.name}) has {iterations.count} iterations: it aggregates "
                        f"{iterations.start} to {iterations.stop}, not to --iter_stop={options.iter_stop}")
    if iterations.found:
        log.info(f"key node '{iterations.key_node}' ({iterations.reason}): {iterations.count} iterations, "
                 f"aggregating {iterations.start} to {iterations.stop}{where}")
    return iterations, warnings


def reduce_rank(source: RankSource, options: Options, names: Sequence[str], *, comm: bool = False,
                many_ranks: bool = False, on_report: Callable[[Report, RankFigures], None] | None = None,
                log: Log | None = None, spill: Path | None = None, reader_threads: int | None = None) -> RankFigures:
    """One rank's figures (see the module docstring). `many_ranks`: one rank of several, which may have
    fewer iterations than asked for (--iter_stop stops at its last). `on_report` is called with each
    report as soon as it is built, and the rank's figures so far (its source, meta, GPUs and
    iterations): an in-process run writes the report while the next is built. `spill`: a folder where
    the rows of the reports' biggest tables (their ``spill``: one row per kernel launch, the GPU timeline) are
    kept instead of in the figures (reports/spilled.py: a local pool's process, so that the job's parent never
    holds them). `reader_threads`: the threads that read its file (default: one per core, up to 4)."""
    began = time.perf_counter()
    log = log or Log(0)
    with log.stage(f"read {source.path.name}"):
        profile = cached_profile(source.path, source.process, reader_threads, use=options.cache,
                                 folder=options.cache_dir, level=options.level, read=load_profile)
    source = with_profile_facts(source, profile)
    log.detail(f"{len(profile.kernels):,} kernels, {len(profile.memcpy) + len(profile.memset):,} memory operations, "
               f"{len(profile.runtime):,} CUDA API calls, {len(profile.nvtx):,} NVTX events; "
               f"nsys {profile.meta.nsys_version or 'version unknown'}")
    where = f" ({source.path.name}, rank {source.rank})" if many_ranks else ""
    iterations, warnings = _rank_iterations(profile, options, source, many_ranks, log)
    ctx = RankContext(profile, iterations, options, rank=source.rank,
                      ops_cache=OpsCache.of(source.path, source.process, options))
    iterations = ctx.iterations  # with GPU-side ends: what every report and output describes
    if ctx.has_roofline:  # before any report: a bad ncu CSV or peaks file stops the run before it writes
        with log.stage(f"read and matched {os.path.basename(str(options.ncu_report))}"):
            roof, match = ctx.roofline, ctx.roofline_match
        assert roof is not None and match is not None
        warnings += [*roof.warnings, *tc_warning(ctx)]
        if not match.unmatched_names:  # else a warning says it
            log.info(f"{match.summary()}{where}")
    reports: dict[str, Report] = {}
    so_far = RankFigures(source=source, meta=profile.meta, gpus=profile.gpus, iterations=iterations, reports=reports,
                         ops=pd.DataFrame(), comm=None, warnings=(), seconds=0.0)
    for name in build_order(names):
        spec = REPORTS[name]
        if spec.scope == JOB or (NCU in spec.inputs and not ctx.has_roofline):  # the ncu report is another rank's
            continue
        empty = [t for t in sorted(spec.requires) if len(getattr(profile, t)) == 0]
        if empty:
            warnings.append(f"{name} report not written: {profile.meta.source} has no CUDA {', '.join(empty)} "
                            "(was the run profiled with 'nsys profile -t cuda'?)")
            continue
        with log.stage(f"built {name} report"):
            reports[name] = spec.build(ctx, {dep: reports[dep] for dep in spec.depends})
        if on_report is not None:
            on_report(reports[name], so_far)
    if spill is not None:
        reports.update(_spilled(reports, spill, source.rank, Path(options.output_path)))
    outside = outside_warning(ctx)
    if outside:
        warnings.append(f"{outside}{where}")
    ops = ctx.ops.ops[OPS_INDEX].reset_index(drop=True) if "ops" in ctx.__dict__ else pd.DataFrame(
        {c: pd.Series(dtype=object) for c in OPS_INDEX})
    communication = rank_comm(ctx) if comm else None
    meta = replace(profile.meta, system_env=config_env(profile.meta.system_env))  # what travels: the config's part
    return RankFigures(source=source, meta=meta, gpus=profile.gpus, iterations=iterations, reports=reports,
                       ops=ops, comm=communication, warnings=tuple(warnings), seconds=time.perf_counter() - began,
                       peak_mb=peak_mb())


def _spilled(reports: dict[str, Report], folder: Path, rank: int, output_path: Path) -> dict[str, Report]:
    """The reports with spilled tables (their ``spill``), their rows in files of `folder`."""
    out = {}
    for name, built in reports.items():
        keep = REPORTS[name].spill
        if keep:
            try:
                out[name] = replace(built, tables=tuple(t.spill(folder / f"{name}.{t.key}.rank{rank}.pickle")
                                                        if t.key in keep else t for t in built.tables))
            except OSError as exc:  # a full disk: the outputs cannot be written either
                raise output_error(exc, output_path, f"the {name} report's rows") from None
    return out


def default_workers() -> int:
    """One process per core this process may use (`limits.usable_cores`: its affinity and CPU quota)."""
    return usable_cores()


def local_processes(workers: int | None, export_bytes: Sequence[int]) -> int:
    """How many processes reduce ranks of `export_bytes` bytes of export at once here (this one and its local
    pool's) with `workers` asked for (`plan_processes`)."""
    return plan_processes(workers, export_bytes)[0]


def plan_processes(workers: int | None, export_bytes: Sequence[int]) -> tuple[int, str, bool]:
    """How many processes reduce ranks of `export_bytes` bytes of export at once here, with `workers` asked for: that
    many, at most one per rank; by default one per core, but no more than the memory available holds at once (each takes
    one of the largest ranks: `limits.processes_that_fit`). And what to say about it, if anything: why fewer than
    one per core (information), or that the processes asked for may not fit in memory (True: a warning)."""
    count = max(1, min(workers or default_workers(), len(export_bytes)))
    available = available_memory() if count > 1 else None
    if available is None:
        return count, "", False
    fit = processes_that_fit(export_bytes, available)
    if fit >= count:
        return count, "", False
    largest = sorted(export_bytes, reverse=True)[:count]
    if workers is None:
        return fit, (f"{fit} process{'es' if fit > 1 else ''} reduce{'s' if fit == 1 else ''} the ranks at once, not "
                     f"one per core ({count}): {_size(available)} of memory is available and the largest ranks need "
                     f"about {_size(rank_memory(largest[0]))} each (docs/memory.md); --workers sets the number"), False
    need = sum(rank_memory(size) for size in largest)
    return count, (f"--workers={workers}: reducing {count} ranks at once needs about {_size(need)} of memory and "
                   f"{_size(available)} is available; a worker process may be killed for memory: --workers={fit} "
                   "fits"), True


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.0f} MB"


def local_pool(workers: int | None, export_bytes: Sequence[int],
               initializer: Callable[[], None] | None = None) -> ProcessPoolExecutor | None:
    """The local process pool for ranks of `export_bytes` bytes of export: `local_processes` reduce them, this one among
    them, so the pool has one worker fewer (None when that leaves none: one worker asked for, one rank, or memory
    for one). Its workers fork from a fork server that has imported dlagg (dlagg/ranks/pool.py). The caller owns it (a
    ``with`` block): `map_ranks` reduces the ranks on it and in this process, and the run then writes its outputs
    on it too. Its processes end with this one, however this one ends (killed too: pool.py's `start_early` and
    `worker_initializer`)."""
    count = local_processes(workers, export_bytes) - 1
    if count < 1:
        return None
    from concurrent.futures import ProcessPoolExecutor  # loaded with the first pool (pool.py)

    start_early()  # from this thread, not the pool's (which starts its processes): the server ends with this one
    return ProcessPoolExecutor(max_workers=count, mp_context=pool_context(),
                               initializer=worker_initializer(initializer))  # workers end with this process too


def map_ranks(job: Job, task: Callable[[RankSource], RankFigures], *, workers: int | None = None,
              scheduler: str | None = None, initializer: Callable[[], None] | None = None,
              log: Log | None = None, pool: ProcessPoolExecutor | None = None) -> list[RankFigures]:
    """`task` for every rank of `job`, ordered by rank (see the module docstring for where it runs): on
    `pool` when one is given, else on a pool of its own (`local_pool`) or in this process; the largest ranks
    are started first (`largest_first`)."""
    log = log or Log(0)
    sources = largest_first(job.sources)
    if scheduler:
        results = _on_dask(sources, task, scheduler, log)
    elif pool is not None:
        results = _on_pool(sources, task, pool, log)
    else:
        own = local_pool(workers, [s.export_bytes for s in sources], initializer)
        if own is None:
            results = []
            for source in sources:  # ranks, not events
                results.append(task(source))
                _done(results[-1], len(results), len(sources), log)
        else:
            with own:
                results = _on_pool(sources, task, own, log)
    return sorted(results, key=lambda r: r.source.rank)


def largest_first(sources: Sequence[RankSource]) -> list[RankSource]:
    """The order ranks are reduced in: the largest first (`RankSource.export_bytes`), ties in rank order. On several
    processes the last ranks taken are then small ones, and the processes end together: a rank ten times the
    others' size taken last would run alone at the end."""
    return sorted(sources, key=lambda s: -s.export_bytes)


def _done(figures: RankFigures, done: int, total: int, log: Log, where: str = "this process") -> None:
    """Say that a rank is reduced, and `where`: this process, a worker process or a Dask worker. And take what this
    process holds now, the ranks' figures so far among it, out of the garbage collector's sight (`gc.freeze`): they
    are kept until the merge, and a full collection visits every object held (about 2,000 per rank's figures) while
    no other thread of this process runs. Full collections come ever less often as more is held, and take ever longer:
    at 1,024 ranks the last ones 1.5 s each, 23 of them 13.3 s in all, while neither process reduced a rank (this one
    collecting, the pool's worker waiting for its next rank; docs/benchmarks.md). Frozen objects are still freed once
    unreferenced, as the figures are when merged; what it keeps from the collector is garbage in reference cycles,
    which the figures do not make. A run gives the frozen objects back when it ends (`collector_spared`)."""
    gc.freeze()
    if total > 1:
        log.info(f"rank {figures.source.rank} ({figures.source.path.name}): {figures.iterations.count} iterations, "
                 f"reduced in {figures.seconds:.2f} s ({done}/{total})")
        log.detail(f"rank {figures.source.rank}: peak memory of the process that reduced it ({where}) "
                   f"{figures.peak_mb:,.0f} MB")


@contextmanager
def collector_spared() -> Iterator[None]:
    """A run's scope for the `gc.freeze` of its ranks' figures (`_done`): when the run ends, what was frozen is the
    collector's again, unless the caller had frozen objects before (a server that forks: those stay frozen, and the
    run's with them)."""
    frozen_before = gc.get_freeze_count()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


def _on_pool(sources: list[RankSource], task: Callable[[RankSource], RankFigures], pool: ProcessPoolExecutor,
             log: Log) -> list[RankFigures]:
    """The ranks reduced by this process and the pool's workers together (`pool.shared_map`): this process is
    warm for the merge that follows."""
    ended = 0

    def done(figures: RankFigures, where: str) -> None:
        nonlocal ended
        ended += 1
        _done(figures, ended, len(sources), log, where)

    return shared_map(sources, task, pool, done, describe=lambda s: f"reducing rank {s.rank} ({s.path.name})")


def dask_client(address: str) -> Any:
    """A client of the Dask distributed scheduler at `address` (dask is an optional extra)."""
    try:
        from distributed import Client
    except ImportError:
        raise OptionsError("--scheduler needs Dask distributed: pip install 'dlagg[dask]' (or leave --scheduler out "
                           "to use a local process pool)") from None
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise OptionsError(f"--scheduler {address}: cannot connect to the Dask scheduler ({exc}); check the address "
                           "(tcp://host:8786) and that the scheduler runs") from None


def _on_dask(sources: list[RankSource], task: Callable[[RankSource], RankFigures], address: str,
             log: Log) -> list[RankFigures]:
    """A Dask distributed cluster: each worker reads its ranks' files from its own path."""
    from distributed import KilledWorker
    from distributed import as_completed as dask_completed

    client = dask_client(address)
    futures: list[Any] = []
    try:
        setup_note(client, log)
        futures = client.map(task, sources, pure=False)
        source = {future.key: s for future, s in zip(futures, sources, strict=True)}
        results: list[RankFigures] = []
        for future in dask_completed(futures):  # ranks, not events
            try:
                results.append(future.result())
            except DlaggError:
                raise
            except KilledWorker:  # the scheduler gave up on the rank: every worker that ran it died
                raise _killed_on_dask(source[future.key]) from None
            except Exception as exc:  # a worker's failure: say which rank
                raise RuntimeError(f"a Dask worker failed on a rank: {type(exc).__name__}: {exc}") from exc
            _done(results[-1], len(results), len(sources), log, "a Dask worker")
        return results
    except BaseException:  # a failure, or SIGINT/SIGTERM: the workers are the user's, the job's tasks are cancelled
        _cancel(client, futures)  # (killed outright, this process's client goes, and the scheduler releases them)
        raise
    finally:
        client.close()


def _cancel(client: Any, futures: list[Any]) -> None:
    """Cancel the job's tasks not ended on the cluster (best effort: the run is ending for another reason)."""
    try:
        if futures:
            client.cancel(futures)
    except Exception:  # a scheduler already gone: nothing left to cancel
        pass


def setup_note(client: Any, log: Log) -> None:
    """Say what in the cluster's workers makes a rank slower than in dlagg's own processes (tuning.py): dlagg leaves
    them as it finds them, and workers started for it can preload what its own processes do. Only a note: a worker
    that cannot answer (another dlagg, without tuning.py) leaves it out; its ranks say what is wrong, if anything."""
    try:
        found = client.run(slow_setup)
    except Exception as exc:  # whatever a worker raised: the run goes on without the note
        log.detail(f"the Dask workers' setup not known ({type(exc).__name__}: {exc})")
        return
    slow = [phrases for phrases in found.values() if phrases]
    if slow:
        phrases = list(dict.fromkeys(p for worker in slow for p in worker))
        log.info(f"{len(slow)} of the Dask cluster's {len(found)} workers {' and '.join(phrases)}, which makes a rank "
                 "slower than in dlagg's own processes (1.25-1.5x with both, in dlagg's benchmark; the reports are the "
                 "same): start the workers with 'dask worker --preload dlagg.dask_preload' (docs/ranks.md)")


def _killed_on_dask(rank: RankSource) -> WorkerLost:
    return WorkerLost(f"Dask gave up on rank {rank.rank} ({rank.path.name}): the workers that ran it died while it ran "
                      "(KilledWorker), most likely for memory (a worker's nanny restarts it past 95% of its memory "
                      "limit, the system kills it past the machine's); give each Dask worker more memory (dask worker "
                      "--memory-limit, fewer --nthreads) (docs/memory.md)")


def probe_on_dask(address: str, probe: Callable[[Path], Any], files: list[Path]) -> list[Any]:
    """`probe` of every file on the Dask cluster at `address` (reader.discover's `probe_all`), in their order:
    at a thousand ranks, opening every file in this process would take minutes before any rank starts."""
    client = dask_client(address)
    futures: list[Any] = []
    try:
        futures = client.map(probe, files, pure=False)
        return list(client.gather(futures))
    except BaseException:
        _cancel(client, futures)
        raise
    finally:
        client.close()


def communication_needed(job: Job, names: Iterable[str]) -> bool:
    """Whether ranks must reduce their communication: several ranks, or a job report relating ranks (ranks,
    collectives) was asked for."""
    return len(job.sources) > 1 or any(REPORTS[n].scope == JOB and REPORTS[n].only_with_ranks for n in names)


def combine(ranks: Sequence[RankFigures], job: Job, names: Sequence[str],
            on_report: Callable[[Report], None] | None = None,
            release: bool = False) -> tuple[JobFigures, dict[str, Report]]:
    """The job's reports from its ranks' (see the module docstring); `on_report` gets each as soon as it is
    built (the run writes it while the next is merged). `release`: each rank's own report is dropped from its
    figures once merged (a run that writes the job's reports only): the parent then holds every rank's rows
    once, in the merged report, not twice."""
    matched = None
    comms = [r.comm for r in ranks if r.comm is not None]
    if len(comms) == len(ranks):  # every rank reduced its communication
        matched = match_collectives([RankInput(r.source.rank, str(r.source.path), r.meta.session_start_utc, comm)
                                     for r, comm in zip(ranks, comms, strict=True)])
    figures = JobFigures(job, tuple(ranks), matched)
    built: dict[str, Report] = {}
    for name in build_order(names):
        spec = REPORTS[name]
        deps = {dep: built[dep] for dep in spec.depends if dep in built}
        parts = [r.reports[name] for r in ranks if name in r.reports]
        if spec.scope == JOB and spec.inputs & GIVEN:  # read later: `build_given`
            continue
        if spec.scope == JOB:
            built[name] = spec.build(figures, deps)
        elif not parts:
            continue
        elif len(ranks) == 1:
            built[name] = parts[0]
        elif len(parts) < len(ranks):  # some ranks lack the data (a rank without kernels): merge those that have it
            built[name] = MERGERS[name](parts, _subset(figures, name), deps)
        else:
            built[name] = MERGERS[name](parts, figures, deps)
        if release and len(ranks) > 1:
            for rank in ranks:  # ranks, not events
                rank.reports.pop(name, None)
        if on_report is not None:
            on_report(built[name])
    return figures, built


def build_given(figures: JobFigures, names: Sequence[str], built: dict[str, Report]) -> list[Report]:
    """The job reports among `names` (and their dependencies) that read an input the run gives the job
    (``GIVEN``), built from `figures`, which now holds it (``JobFigures.given``), and the job's reports `built`
    (by `combine`), and added to them; in build order."""
    made = []
    for name in build_order(names):
        spec = REPORTS[name]
        if spec.scope == JOB and spec.inputs & GIVEN and name not in built:
            built[name] = spec.build(figures, {dep: built[dep] for dep in spec.depends if dep in built})
            made.append(built[name])
    return made


def _subset(figures: JobFigures, name: str) -> JobFigures:
    """The job restricted to the ranks that built report `name`."""
    ranks = tuple(r for r in figures.ranks if name in r.reports)
    return JobFigures(figures.job, ranks, figures.matched)


def with_ncu_rank(options: Options, job: Job) -> Options:
    """`options` with ``ncu_rank`` set to the rank the ncu report belongs to: the one asked for
    (checked against the job's ranks), else the job's first rank. Unchanged without an ncu report."""
    if options.ncu_report is None:
        return options
    ranks = [s.rank for s in job.sources]
    if options.ncu_rank is None:
        return replace(options, ncu_rank=ranks[0])
    if options.ncu_rank not in ranks:
        raise OptionsError(f"--ncu_rank={options.ncu_rank}: the job has no such rank; its ranks are "
                           f"{', '.join(map(str, ranks))} (pass the rank whose process ncu profiled)")
    return options


def rank_task(options: Options, names: Sequence[str], comm: bool, many_ranks: bool, spill: Path | None = None,
              processes: int = 1) -> Callable[[RankSource], RankFigures]:
    """`reduce_rank` with everything but the rank bound: picklable, for worker processes and Dask. `processes`: how
    many of this machine's processes reduce ranks at once (they share its cores for their reads); not used on Dask
    (--scheduler), whose workers read with their own machine's cores."""
    return partial(reduce_rank, options=options, names=tuple(names), comm=comm, many_ranks=many_ranks, spill=spill,
                   reader_threads=None if options.scheduler else read_threads(processes))
