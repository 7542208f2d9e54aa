"""The one typed options object every stage reads. Built by the CLI or by library users."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

VERBOSITIES = ("quiet", "minimal", "normal", "detailed", "diagnostic")

# What --help lists and the options accept, as plain data: the parser needs no report or writer module (they load
# pandas, pyarrow and numpy before a --help could print). tests/test_startup.py checks both against the
# registries they mirror (reports.REPORTS, pipeline.format_choices), so a new report or format fails there until
# it is added here.
REPORT_DESCRIPTIONS = {
    "summary": "System config, wall-clock partition (TC/kernel/memory/dataloader/IO/CPU/other), iterations, totals.",
    "detail": "Per op and direction: calls, Tensor Core eligibility/use, CPU/GPU time, CPU overhead, GPU idle.",
    "kernel": "Per kernel and op: GPU and launch-API time (total/avg/min/max) and calls, over the aggregated "
              "iterations.",
    "iteration": "Every kernel launch of the aggregated iterations: iteration, timing, launch API, grid and block.",
    "tensor": "Per Tensor-Core-eligible op: TC and non-TC kernel time, TC utilization, kernel counts and names.",
    "op_type": "Per op type: number of ops and calls, CPU/GPU time, CPU overhead and GPU idle.",
    "group_node": "Per group path prefix and for the whole model: op calls, TC-eligible and TC-using ops, CPU/GPU "
                  "time,",
    "expert_systems": "Problems found (GPU idle, input pipeline, launch bound, syncs, copies, AMP, ...) ranked by "
                      "time at stake.",
    "ranks": "Per rank: iteration time, compute and communication kernel time, waits, exposed communication, lateness.",
    "collectives": "Per collective instance and rank: aligned start, duration, wait, and whether the rank arrived "
                   "last.",
    "roofline": "Per kernel and op type, from Nsight Compute: FLOPs, bytes, intensity, achieved rates, bound, % of "
                "ceiling.",
    "compare": "With --baseline: every figure before and after, its change, and whether it is more than noise",
}
FILE_FORMATS = ("csv", "html", "json")  # --formats besides all (TensorBoard is -b's business, PNGs the reports')


@dataclass(frozen=True)
class Options:
    """What to read, how to cut it into iterations, and what to write.

    Field names follow DLProf's command line (``--nsys_database``, ``--key_node``, ...).
    """

    # one export, a comma list, a glob or a folder (reader.discover.input_paths); None: ncu_report alone
    nsys_database: Path | str | None = None
    reports: tuple[str, ...] = ()
    formats: tuple[str, ...] = ("csv",)
    output_path: Path = Path(".")
    profile_name: str = "dlagg"
    key_node: str | None = None
    iter_start: int | None = None
    iter_stop: int | None = None
    domains: tuple[str, ...] = ()
    force: bool = False
    verbosity: str = "normal"
    tb_dir: str = "event_files"
    suppress_tb_files: bool = False
    per_rank: bool = False  # also write every report per rank (<output_path>/rank<N>/)
    workers: int | None = None  # processes reading ranks at once (None: one per core; 1: in this process)
    scheduler: str | None = None  # address of a Dask distributed scheduler that reads the ranks instead
    # Roofline (docs/roofline.md): the 'ncu --csv --page raw' export of one training step, a peaks file
    # whose ceilings replace ncu's own, and the rank ncu profiled (None: the job's first rank)
    ncu_report: Path | str | None = None
    peaks: Path | str | None = None
    ncu_rank: int | None = None
    baseline: Baseline | None = None  # the profile to compare with (--baseline): report compare and a verdict
    check: bool = True  # SQLite's quick_check of every export beside the read (reader/integrity.py)
    cache: bool = True  # keep each file's read model for the next run on it (--cache; reader/cache.py)
    cache_dir: Path | str | None = None  # the cache's folder (--cache_dir); None: $DLAGG_CACHE_DIR or the XDG one
    raw_csv: bool = False  # CSV text cells exactly as the profile has them (--raw_csv): formula-like ones not defused

    def __post_init__(self) -> None:
        """A `str` (or any os.PathLike) given for a `Path` field (output_path) becomes a Path: library users write
        ``Options(output_path="out")``. Fields typed ``Path | str`` (a spec like nsys_database) stay as given."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "Path" and not isinstance(value, Path):
                object.__setattr__(self, f.name, Path(value))

    @property
    def level(self) -> int:
        """Verbosity as a number: 0 quiet ... 4 diagnostic."""
        return VERBOSITIES.index(self.verbosity)


@dataclass(frozen=True)
class Baseline:
    """The "before" profile of a comparison (``--baseline``), read like the current one.

    The key node, iteration range and domains are the current profile's unless given here
    (``--baseline_key_node`` etc., for two runs that differ in them).
    """

    nsys_database: Path | str  # a spec like Options.nsys_database: a file, comma list, glob or folder
    key_node: str | None = None
    iter_start: int | None = None
    iter_stop: int | None = None
    domains: tuple[str, ...] | None = None
    profile_name: str | None = None  # its TensorBoard run; None: "<profile_name>_baseline"

    def run_name(self, current: Options) -> str:
        return self.profile_name or f"{current.profile_name}_baseline"

    def options(self, current: Options, reports: tuple[str, ...]) -> Options:
        """The options the baseline is read with: the current ones, with the baseline's file, overrides,
        run name and `reports`."""
        return replace(
            current,
            nsys_database=self.nsys_database,
            reports=reports,
            profile_name=self.run_name(current),
            key_node=self.key_node if self.key_node is not None else current.key_node,
            iter_start=self.iter_start if self.iter_start is not None else current.iter_start,
            iter_stop=self.iter_stop if self.iter_stop is not None else current.iter_stop,
            domains=self.domains if self.domains is not None else current.domains,
            per_rank=False,
            baseline=None,
            ncu_report=None,  # the Nsight Compute metrics are the current profile's
            peaks=None,
            ncu_rank=None,
        )


CACHE_ENV = "DLAGG_CACHE_DIR"


def cache_folder(given: Path | str | None = None) -> Path:
    """dlagg's cache folder (the read cache, the HTML page's JavaScript bundle): `given` (--cache_dir), else
    $DLAGG_CACHE_DIR, else the XDG cache home's dlagg folder."""
    chosen = given or os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"  # (relative ones are invalid)
    return base / "dlagg"
