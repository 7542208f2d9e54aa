"""Report values and the report registry.

Adding a report = adding one module in ``dlagg/reports/`` with one ``@report``-decorated builder,
``build(ctx, deps) -> Report``: `ctx` is the rank's `RankContext`, `deps` the reports it declared in
``depends`` (built first, by the runner). The CLI's ``--reports`` choices and ``--help`` text come
from the registry (first docstring line).

A report holds figures (``figures.Table``): exact values under stable keys. Formatting (titles,
rounding, yes/no) belongs to the writers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .figures import Table

if TYPE_CHECKING:
    from ..context import RankContext


@dataclass(frozen=True)
class Report:
    name: str  # registry key, e.g. "kernel"
    file_suffix: str  # DLProf's file name part: <profile_name>_<file_suffix>.csv
    tables: tuple[Table, ...]
    warnings: tuple[str, ...] = ()

    @property
    def main(self) -> Table:
        """The report's main table (its first)."""
        return self.tables[0]

    def table(self, key: str) -> Table:
        for table in self.tables:
            if table.key == key:
                return table
        raise KeyError(f"report {self.name} has no table {key!r}; it has {', '.join(t.key for t in self.tables)}")


class ReportBuilder(Protocol):
    def __call__(self, ctx: RankContext, deps: Mapping[str, Report]) -> Report: ...


@dataclass(frozen=True)
class ReportSpec:
    name: str
    build: ReportBuilder
    description: str
    file_suffix: str  # DLProf's file name part: <profile_name>_<file_suffix>.<format>
    requires: frozenset[str] = frozenset()  # Profile frames that must be non-empty
    depends: tuple[str, ...] = ()  # reports whose figures the builder reads (passed in `deps`)
    # One row per event (100 k+ rows): built first, so that writing it overlaps building the others.
    bulk: bool = False


REPORTS: dict[str, ReportSpec] = {}


def report(
    name: str,
    *,
    file_suffix: str | None = None,
    requires: Iterable[str] = (),
    depends: Iterable[str] = (),
    bulk: bool = False,
) -> Callable[[ReportBuilder], ReportBuilder]:
    """Register a report builder under `name`; its docstring's first line is the help text."""

    def register(fn: ReportBuilder) -> ReportBuilder:
        if name in REPORTS:
            raise RuntimeError(f"duplicate report {name!r}")
        doc = inspect.getdoc(fn) or ""
        REPORTS[name] = ReportSpec(
            name, fn, doc.splitlines()[0] if doc else name, file_suffix or name, frozenset(requires), tuple(depends),
            bulk,
        )
        return fn

    return register


def build_order(names: Iterable[str]) -> list[str]:
    """`names` and the reports they depend on, each after its dependencies; bulk reports (which
    depend on nothing) first, so that writing them overlaps building the others."""
    ordered: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise RuntimeError(f"reports depend on each other in a cycle: {' -> '.join((*path, name))}")
        if name not in ordered:
            for dep in REPORTS[name].depends:
                visit(dep, (*path, name))
            ordered.append(name)

    for name in dict.fromkeys(names):
        visit(name, ())
    return sorted(ordered, key=lambda n: not REPORTS[n].bulk)


def build_reports(ctx: RankContext, names: Iterable[str]) -> dict[str, Report]:
    """Build `names` (and the reports they depend on) for one rank, in dependency order."""
    built: dict[str, Report] = {}
    for name in build_order(names):
        spec = REPORTS[name]
        built[name] = spec.build(ctx, {dep: built[dep] for dep in spec.depends})
    return built
