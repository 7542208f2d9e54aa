"""One profile as a comparison reads it: a `Side`, its job's figures and the reports ``NEEDS`` names.

The compare report (compare.py) reads two sides, the baseline's and the current profile's; the saved-figures
report (saved.py) keeps what a side holds so that a later run reads it back as one (``dlagg/baseline.py``). A
module of its own, registering no report, so that both build on it without importing each other (the registry's
order is that of ``reports/__init__.py``'s ``MODULES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .base import JobFigures, RankFigures, Report
from .figures import Table

NEEDS = ("summary", "op_type", "kernel", "expert_systems")  # reports each side is reduced to


@dataclass(frozen=True)
class RankFacts:
    """What a comparison reads of one rank besides its reports; a saved baseline (saved.py) keeps these instead of
    the rank's figures."""

    source: str  # the file name of its export
    iterations: int  # aggregated iterations
    key_node: str  # "(not found)" without one
    gpus: tuple[str, ...]  # the name of every GPU it ran on (the export's GPUs when its devices are not known)
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, rank: RankFigures) -> RankFacts:
        table = dict(zip(rank.gpus["device_id"].to_numpy().tolist(), rank.gpus["name"].astype(str), strict=True))
        devices = rank.source.devices or tuple(table)
        return cls(rank.source.path.name, rank.iterations.stop - rank.iterations.start + 1,
                   rank.iterations.key_node or "(not found)",
                   tuple(table.get(d, "") or "(unnamed GPU)" for d in devices), tuple(rank.warnings))


@dataclass(frozen=True)
class Side:
    """One profile of a comparison: its job's figures and its reports (combined over its ranks). A saved
    baseline (saved.py) has no job figures, only its ranks' facts (`saved`)."""

    figures: JobFigures | None
    reports: Mapping[str, Report]
    saved: tuple[RankFacts, ...] | None = None

    @property
    def ranks(self) -> tuple[RankFacts, ...]:
        if self.saved is not None:
            return self.saved
        assert self.figures is not None
        return tuple(RankFacts.of(r) for r in self.figures.ranks)

    @property
    def source(self) -> str:
        return ", ".join(dict.fromkeys(r.source for r in self.ranks))

    @property
    def iterations(self) -> int:
        """Aggregated iterations, summed over ranks: per-iteration figures of several ranks are per rank."""
        return sum(r.iterations for r in self.ranks)

    @property
    def key_nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.key_node for r in self.ranks))

    @property
    def gpus(self) -> tuple[str, ...]:
        """The name of every GPU the ranks ran on (the export's GPUs when the devices are not known)."""
        return tuple(name for r in self.ranks for name in r.gpus)

    def table(self, report: str, key: str) -> Table | None:
        """A table of one of the side's reports, None when the report (or table) was not built."""
        built = self.reports.get(report)
        if built is None:
            return None
        return next((t for t in built.tables if t.key == key), None)
