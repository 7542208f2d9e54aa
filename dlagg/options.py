"""The one typed options object every stage reads. Built by the CLI or by library users."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

VERBOSITIES = ("quiet", "minimal", "normal", "detailed", "diagnostic")


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

    @property
    def level(self) -> int:
        """Verbosity as a number: 0 quiet ... 4 diagnostic."""
        return VERBOSITIES.index(self.verbosity)
