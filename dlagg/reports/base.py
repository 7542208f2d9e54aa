"""Report values, the report registry and the context every builder receives.

Adding a report = adding one module in ``dlagg/reports/`` with one ``@report``-decorated builder.
The CLI's ``--reports`` choices and ``--help`` text come from the registry (first docstring line).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from ..model import Iterations, Profile, categorical, factorize_ids
from ..options import Options

if TYPE_CHECKING:
    from ..ops import Ops


@dataclass(frozen=True)
class Section:
    """One titled table of a report. ``header=False`` marks a key/value section (no header row)."""

    title: str
    table: pd.DataFrame
    header: bool = True


@dataclass(frozen=True)
class Report:
    name: str  # registry key, e.g. "kernel"
    file_suffix: str  # DLProf's file name part: <profile_name>_<file_suffix>.csv
    sections: tuple[Section, ...]
    scalars: Mapping[str, float] = field(default_factory=dict)  # headline numbers
    warnings: tuple[str, ...] = ()
    per_iteration: pd.DataFrame | None = None  # one row per iteration, for time-series writers

    @property
    def table(self) -> pd.DataFrame:
        """The main table (first section)."""
        return self.sections[0].table


class ReportBuilder(Protocol):
    def __call__(self, ctx: ReportContext) -> Report: ...


@dataclass(frozen=True)
class ReportSpec:
    name: str
    build: ReportBuilder
    description: str
    file_suffix: str  # DLProf's file name part: <profile_name>_<file_suffix>.<format>
    requires: frozenset[str] = frozenset()  # Profile frames that must be non-empty
    depends: tuple[str, ...] = ()
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


# Op text columns of a report -> op table column (one value per op) or instance column.
OP_TEXT = {"Op ID": "op_id", "Op Name": "op_name", "Direction": "direction", "Op Type": "op_type",
           "Data Types": "data_types"}


class ReportContext:
    """The profile, its iterations and the options, plus derived frames computed once and shared."""

    def __init__(self, profile: Profile, iterations: Iterations, options: Options) -> None:
        self.profile = profile
        self.iterations = iterations
        self.options = options
        self._reports: dict[str, Report] = {}

    def report(self, name: str) -> Report:
        """Build (once) and return another report, for reports that reuse others."""
        if name not in self._reports:
            self._reports[name] = REPORTS[name].build(self)
        return self._reports[name]

    @cached_property
    def work(self) -> pd.DataFrame:
        """All GPU work with launching API call and iteration (see timeline.correlate)."""
        from ..timeline.correlate import gpu_work

        work = gpu_work(self.profile)
        return work.assign(iteration=self.iterations.assign(work["t_attr"].to_numpy()))

    @cached_property
    def selected_work(self) -> pd.DataFrame:
        """GPU work attributed to the aggregated iterations."""
        work = self.work
        return rows_where(work, self.iterations.in_selection(work["iteration"].to_numpy()))

    @cached_property
    def kernel_uses_tc(self) -> pd.Series:
        """Tensor-core use per kernel-name id (decided once per distinct name)."""
        from ..classify import uses_tensor_cores

        ids = np.unique(self.profile.kernels["name_id"].to_numpy())
        names = self.profile.strings.decode(pd.Series(ids))
        return pd.Series(uses_tensor_cores(names).to_numpy(), index=ids)

    @cached_property
    def api_in_selection(self) -> pd.DataFrame:
        """CUDA API calls whose start lies in the aggregated iterations."""
        runtime = self.profile.runtime
        iteration = self.iterations.assign(runtime["start"].to_numpy())
        return rows_where(runtime, self.iterations.in_selection(iteration))

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        """Per-iteration partition of wall-clock time (see timeline.breakdown)."""
        from ..timeline.breakdown import time_breakdown

        return time_breakdown(self.profile, self.iterations, self.work, self.kernel_uses_tc)

    @cached_property
    def ops(self) -> Ops:
        """Op instances from NVTX, the ops they group into, and the op of each `work` row (see dlagg.ops)."""
        from ..ops import find_ops

        return find_ops(self.profile, self.iterations, self.work, self.kernel_uses_tc, self.options.domains)

    @cached_property
    def op_instances(self) -> pd.DataFrame:
        """Op instances of the aggregated iterations (by the op's start), with op columns joined."""
        ops = self.ops
        inst = ops.instances
        inst = rows_where(inst, self.iterations.in_selection(inst["iteration"].to_numpy()))
        return inst.join(ops.ops, on="key")

    def op_columns(self, work_index: pd.Index, columns: Iterable[str] = OP_TEXT) -> dict[str, pd.Categorical]:
        """Op ID, Op Name, Direction, Op Type, Data Types of the op that launched each of these `work`
        rows, as categorical columns ('' where no op is known)."""
        ops = self.ops
        instance = ops.work_instance[self.work.index.get_indexer(work_index)]
        has = instance >= 0
        key = np.full(len(instance), -1, dtype=np.int64)
        key[has] = ops.instances["key"].to_numpy()[instance[has]]
        out = {}
        for column in columns:
            source = OP_TEXT[column]
            if source in ops.ops:  # one value per op
                out[column] = categorical(key, ops.ops[source].to_numpy(dtype=object))
            else:  # per instance: already categorical
                values = ops.instances[source].array
                codes = np.append(np.asarray(values.codes), -1)[instance]  # instance -1: no op
                out[column] = categorical(codes, np.asarray(values.categories, dtype=object))
        return out

    def input_shapes(self, work_index: pd.Index) -> pd.Categorical:
        """Input shapes of the op instance that launched each of these `work` rows ('' when unknown).

        Dict markers carry them in the op's marker; emit_nvtx ranges in their text, which is read
        now, for these instances only (``Profile.nvtx_details``).
        """
        ops = self.ops
        instance = ops.work_instance[self.work.index.get_indexer(work_index)]
        own = ops.instances["input_shapes"].array  # categorical, from dict markers
        codes = np.append(np.asarray(own.codes), -1)  # per instance; last slot: no op
        texts = np.asarray(own.categories, dtype=object)
        wanted = factorize_ids(instance[instance >= 0])[0]
        wanted = wanted[ops.instances["emit"].to_numpy()[wanted]]
        if len(wanted) and self.profile.nvtx_details is not None:
            read = self.profile.nvtx_details.input_shapes(ops.instances["nvtx_row"].to_numpy()[wanted])
            codes[wanted] = len(texts) + np.asarray(read.codes)
            texts = np.concatenate((texts, np.asarray(read.categories, dtype=object)))
        return categorical(codes[instance], texts)





def stats(frame: pd.DataFrame, by: list[str] | str, column: str, prefix: str, unit: str = "(ns)") -> pd.DataFrame:
    """Total / Avg / Min / Max of `column` per group, with DLProf's column names."""
    grouped = frame.groupby(by, sort=False, dropna=False)[column]
    return pd.DataFrame({
        f"Total {prefix} {unit}": grouped.sum(),
        f"Avg {prefix} {unit}": grouped.mean().round(1),
        f"Min {prefix} {unit}": grouped.min(),
        f"Max {prefix} {unit}": grouped.max(),
    })


def rows_where(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]``, but `frame` itself when every row is kept (the default iteration range):
    a boolean selection copies every column."""
    return frame if mask.all() else frame[mask]


def yes_no(values: np.ndarray | pd.Series) -> pd.Categorical:
    """DLProf's yes/no cells (a two-category column)."""
    return pd.Categorical.from_codes(np.asarray(values, dtype=bool).astype(np.int8),
                                     categories=pd.Index(["no", "yes"], dtype=object))
