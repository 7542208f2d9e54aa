"""TensorBoard event files: per-iteration scalars, a custom-scalars layout, Markdown report dashboards.

Contract: ``write(reports, out_dir, info)`` with ``out_dir = <output_path>/<tb_dir>``; `reports`
include the summary, whose per-iteration figures are charted whichever reports were asked for
(dashboards show the reports named in ``info.reports``; ``piece(report)`` makes one report's
beforehand, and ``write(..., pieces=)`` takes them). It writes one TensorBoard run per
profile, so several profiles sit side by side under one ``--logdir``:

    <out_dir>/<profile_name>/events.out.tfevents.*                     run "<profile_name>"
    <out_dir>/<profile_name>/before_iter_start/events.out.tfevents.*   run "<profile_name>/before_iter_start"
    <out_dir>/<profile_name>/after_iter_stop/events.out.tfevents.*     run "<profile_name>/after_iter_stop"

Run "<profile_name>" holds the scalars of the aggregated iterations (--iter_start..--iter_stop, the
ones every report describes) and, at step 0, the text dashboards and the custom-scalars layout. The
iterations outside that range go to the two sub-runs (written only when not empty), so every chart
shows all iterations, the selected range in the profile's own colour and the others apart; a filter
``^[^/]*$`` on run names keeps just the aggregated ranges when profiles are compared.

Scalar tags (float32, as every TensorBoard scalar; times in ms so float32 keeps ns precision):
    iteration/time_ms, iteration/cpu_side_time_ms, iteration/gpu_side_time_ms,
    iteration/gpu_utilization_pct, iteration/tensor_core_kernel_utilization_pct,
    iteration/kernel_count, duration_ms/<class> (tc_kernel, kernel, memory, dataloader, io, cpu,
    other: the wall-clock partition of timeline.breakdown), op_type_gpu_ms/<op type> (top op types).
With several ranks each rank is a run ``<profile_name>/rank<N>`` (and its sub-runs) whose tags are
``rank<N>/<tag>``, the ranks report's ``ranks/...`` figures among them: TensorBoard picks a chart's
lines by tag, so per-rank tags are what lets a chart show one rank.
Each percentage is the summary's figure of the same name, for one iteration (one definition per
figure): GPU Utilization % and Tensor Core Kernel Utilization % (TC share of the kernel time of
Tensor-Core-eligible ops); the summary's Tensor Core Kernel Duration % is duration_ms/tc_kernel.
Text tags (one Markdown text per tag): run/metadata, run/warnings, <report>/<section title>, and
``<report>/<section title>/page 01 of 12`` for tables of more than TEXT_PAGE_ROWS rows; and the reports'
figures in the views of PyTorch's retired profiler plugin, ``<view>/<title>`` (Overview, Operator, Kernel,
Distributed: VIEW_TABLES), whose names the custom-scalars categories have too.
Image tags (the PNGs a report draws, as TensorBoard's image summaries): <report>/<image key>, e.g.
roofline/kernels and roofline/op_types. Without the summary (an ncu report alone, no nsys export)
the run holds only these and the text dashboards.

The custom-scalars layout charts one quantity per chart (`scalars_layout`): TensorBoard tells a
chart's lines apart by colour only when they come from different runs. Its categories are the plugin's
views: Overview, Operator, Kernel, and Distributed with several ranks.

Event files are replaced as a whole: the run folder is built next to its final place and renamed
over it, so a re-run with --force never mixes stale event files into the new run (the pipeline stages
`out_dir` too: output/staging.py). An OSError is raised as it is; the staging names the folder. TensorBoard and
protobuf are imported inside ``write`` only, so CSV/JSON runs do not pay for them.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..reports.base import Report, one_per_cause
from ..reports.figures import Field, Table
from ..reports.summary import PARTITION
from .base import RunInfo, Writer, usual_permissions, writer
from .cells import Style, is_missing

# Sub-runs (TensorBoard's runs are folders) for the iterations outside the aggregated range.
BEFORE_RUN = "before_iter_start"
AFTER_RUN = "after_iter_stop"
# A dashboard card shows a page of this many rows (its box scrolls); every row is on some page.
TEXT_PAGE_ROWS = 50
# A text cell wider than this (px) is cut (the whole text is listed under the table): names hundreds of
# characters wide would squeeze every other column into one letter per line.
TEXT_CELL_PX = 380
PROSE_WORDS = 6  # a long text of this many words or more is a sentence
# A card's table can be about 960 px wide in a 1400 px window (measured in Chromium); columns that do
# not fit go to another column group. Widths are estimated per character of Roboto 16 px (measured):
TEXT_WIDTH_PX = 900
TEXT_CHAR_PX = 8.0  # lowercase letters and punctuation
TEXT_UPPER_PX = 11.0
TEXT_DIGIT_PX = 9.0
TEXT_BOLD = 1.1  # headers
TEXT_CELL_PAD_PX = 28
# Op types charted per iteration, by GPU time over the aggregated iterations: more lines than this
# in one chart cannot be told apart.
TOP_OP_TYPES = 8
# Reports with one row per kernel launch: their per-iteration content is charted as scalars instead
# (their card says so in one line).
TEXT_SKIP_REPORTS = frozenset({"iteration"})
# Tables DLProf's CSV files do not have that get a dashboard card all the same: (report, table key).
TEXT_EXTRA_TABLES = frozenset({("expert_systems", "detectors")})
# Tables whose card shows the columns DLProf's CSV leaves out too: the expert findings' evidence, severity and
# time at stake (the CSV keeps DLProf's Problem and Recommendation; a card is where the user reads the rest).
TEXT_EVERY_FIELD = frozenset({("expert_systems", "findings")})
# A dashboard card is about 1,000 px wide: columns that would squeeze the others into one character
# per line stay in the CSV/JSON only. Long kernel names are mangled C++ templates hundreds of
# characters wide (the short name is shown), kernel-name lists likewise; averages are the total over
# the call count shown next to it, and min/max are spreads the CSV/JSON keep.
TEXT_SKIP_COLUMNS = re.compile(r"Long Kernel Name|.*Kernel Names|(Avg\.?|Min|Max) .*")
NS_PER_MS = 1e6
TENSORBOARD_URL = "http://localhost:6006"  # tensorboard's default address

DURATION_TITLES = {
    "tc_kernel": "Tensor Core kernels (Tensor Core Kernel Duration %)",
    "kernel": "other kernels",
    "memory": "memory (memcpy/memset)",
    "dataloader": "dataloader",
    "io": "file/socket I/O",
    "cpu": "CPU (CUDA API calls, op ranges)",
    "other": "other (none of the above)",
}
SCALAR_DESCRIPTIONS = {
    "iteration/time_ms": "Wall-clock time of the iteration: from the previous iteration's end to the later of its "
                         "key-node range's end and the end of the GPU work launched in it, ms.",
    "iteration/cpu_side_time_ms": "CPU-side time of the iteration: key-node range end to key-node range end (the "
                                  "host's pace), ms.",
    "iteration/gpu_side_time_ms": "GPU-side time of the iteration: end of the GPU work launched in the previous "
                                  "iteration to the end of the GPU work launched in it (the GPU's pace), ms.",
    "iteration/gpu_utilization_pct": "GPU Utilization % (as in the summary) of the iteration: share of it during "
                                     "which a kernel runs, averaged over GPUs, %.",
    "iteration/tensor_core_kernel_utilization_pct": "Tensor Core Kernel Utilization % (as in the summary) of the "
                                                    "iteration: Tensor Core kernel time / kernel time of the "
                                                    "Tensor-Core-eligible ops called in it, %.",
    "iteration/kernel_count": "Kernels launched in the iteration.",
    **{f"duration_ms/{name}": f"Wall-clock time of the iteration spent in {title}, ms "
                              "(first active class wins; the classes sum to the iteration time)."
       for name, title in DURATION_TITLES.items()},
}
# The ranks report's per-iteration figures, charted per rank (one TensorBoard run per rank).
RANK_TAGS = {
    "compute_kernel_ns": "ranks/compute_kernel_ms",
    "comm_kernel_ns": "ranks/communication_kernel_ms",
    "comm_wait_ns": "ranks/communication_wait_ms",
    "exposed_comm_ns": "ranks/exposed_communication_ms",
    "gpu_idle_ns": "ranks/gpu_idle_ms",
    "launch_lateness_ns": "ranks/launch_lateness_ms",
}
SCALAR_DESCRIPTIONS.update({
    "ranks/compute_kernel_ms": "Union of the compute (not communication) kernels in the iteration, ms.",
    "ranks/communication_kernel_ms": "Union of the communication (NCCL) kernels in the iteration, ms.",
    "ranks/communication_wait_ms": "This rank's waits at the iteration's collectives (its duration minus the "
                                   "collective's shortest over ranks), ms.",
    "ranks/exposed_communication_ms": "Communication kernel time not overlapped by compute kernels, ms.",
    "ranks/gpu_idle_ms": "Time of the iteration with no kernel, copy or memset running, ms.",
    "ranks/launch_lateness_ms": "How late this rank arrived at the iteration's collectives (its kernel start minus "
                                "the earliest rank's, job clock), summed, ms.",
})
OP_TYPE_PREFIX = "op_type_gpu_ms/"
OP_TYPE_DESCRIPTION = ("GPU time of the calls of this op type starting in the iteration (per call: union of its "
                       "kernels and memory operations, as in the op_type report), ms.")


def _rank_rows(frame: pd.DataFrame, ranks: Sequence[int | None]) -> dict[int | None, np.ndarray]:
    """Row positions of each of `ranks` in a per-iteration table, in table order (none for a rank without
    rows); rank None: every row (a table without a rank column, of one rank)."""
    if "rank" not in frame:
        return {rank: np.arange(len(frame)) for rank in ranks}
    numbers = frame["rank"].to_numpy()
    order = np.argsort(numbers, kind="stable")
    found, firsts = np.unique(numbers[order], return_index=True)
    rows = dict(zip(found.tolist(), np.split(order, firsts[1:]), strict=True))
    return {rank: rows.get(rank, np.empty(0, dtype=np.intp)) for rank in ranks}


def iteration_scalars(summary: Report, ranks: Report | None = None,
                      of: Sequence[int | None] = (None,)) -> dict[int | None, pd.DataFrame]:
    """Per-iteration scalar values from the summary's per-iteration figures, of each rank in `of` (None: a
    summary of one rank): index = iteration, one column per tag (NaN where undefined); with the ranks report,
    each rank's communication figures too. Computed for every rank at once, then cut into ranks."""
    frame = summary.table("iterations").frame
    duration = frame["duration_ns"].to_numpy(dtype=np.float64)
    eligible_ns = frame["tc_eligible_kernel_time_ns"].to_numpy(dtype=np.float64)
    columns = {
        "iteration/time_ms": duration / NS_PER_MS,
        "iteration/cpu_side_time_ms": frame["cpu_side_ns"].to_numpy(dtype=np.float64) / NS_PER_MS,
        "iteration/gpu_side_time_ms": frame["gpu_side_ns"].to_numpy(dtype=np.float64) / NS_PER_MS,
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        columns["iteration/gpu_utilization_pct"] = np.where(
            duration > 0, 100.0 * frame["gpu_busy_ns"].to_numpy(dtype=np.float64) / duration, np.nan)
        columns["iteration/tensor_core_kernel_utilization_pct"] = np.where(
            eligible_ns > 0, 100.0 * frame["tc_eligible_tc_kernel_time_ns"].to_numpy(dtype=np.float64) / eligible_ns,
            np.nan)
    columns["iteration/kernel_count"] = frame["kernels"].to_numpy(dtype=np.float64)
    for name in PARTITION:
        columns[f"duration_ms/{name}"] = frame[f"{name}_ns"].to_numpy(dtype=np.float64) / NS_PER_MS
    if ranks is not None and "rank" in frame:
        comm = ranks.table("iterations").frame
        at = pd.MultiIndex.from_frame(comm[["rank", "iteration"]]).get_indexer(
            pd.MultiIndex.from_frame(frame[["rank", "iteration"]]))  # -1: the rank's iteration is not in the report
        for key, tag in RANK_TAGS.items():
            values = comm[key].to_numpy(dtype=np.float64)
            columns[tag] = np.where(at >= 0, values[at], np.nan) / NS_PER_MS
    iteration = frame["iteration"].to_numpy()
    aggregated = frame["aggregated"].to_numpy(dtype=bool)
    per = summary.table("op_type_iterations").frame
    known = per["op_type"].notna().to_numpy()
    calls = (per["iteration"].to_numpy()[known], per["op_type"].to_numpy(dtype=object)[known],
             per["gpu_time_ns"].to_numpy(dtype=np.int64)[known])
    per_rows = _rank_rows(per[known], of)
    scalars = {}
    for rank, rows in _rank_rows(frame, of).items():  # ranks, not events
        steps = iteration[rows]
        values = {tag: column[rows] for tag, column in columns.items()}
        call_iteration, call_type, call_ns = (c[per_rows[rank]] for c in calls)
        values.update(_op_types(call_iteration, call_type, call_ns, steps, steps[aggregated[rows]]))
        scalars[rank] = pd.DataFrame(values, index=pd.Index(steps, name="iteration"))
    return scalars


def _op_types(iteration: np.ndarray, op_type: np.ndarray, gpu_ns: np.ndarray, steps: np.ndarray,
              selected: np.ndarray) -> dict[str, np.ndarray]:
    """Tag -> GPU time (ms) in each of the iterations `steps` of the top op types of one rank's calls
    (iteration, op type, GPU time per row), the top by their time in the `selected` (aggregated) iterations,
    ties by name. An iteration without a call of the type spent no GPU time in it: 0, not a gap."""
    if not len(iteration):
        return {}
    iterations, at_iteration = np.unique(iteration, return_inverse=True)
    names, at_name = np.unique(op_type, return_inverse=True)  # sorted by name
    wide = np.zeros((len(iterations), len(names)), dtype=np.int64)
    np.add.at(wide, (at_iteration, at_name), gpu_ns)
    totals = wide[np.isin(iterations, selected)].sum(axis=0)
    top = np.argsort(-totals, kind="stable")[:TOP_OP_TYPES]
    at = np.minimum(np.searchsorted(iterations, steps), len(iterations) - 1)
    found = iterations[at] == steps
    return {f"{OP_TYPE_PREFIX}{names[k]}": np.where(found, wide[at, k], 0) / NS_PER_MS for k in top}


# --- Markdown -----------------------------------------------------------------------------------

# HTML as entities; Markdown's emphasis, link, code and cell-break characters escaped; a newline a space
_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": " ",
                             **{c: "\\" + c for c in "\\`*_[]|"}})


def md_escape(text: str) -> str:
    """Text safe in a Markdown table cell: no emphasis, links, code or cell breaks; HTML as entities."""
    return text.translate(_MD_ESCAPES)


# Markdown table cells: the CSV's values with thousands separators, text escaped.
MARKDOWN = Style(missing="", true="yes", false="no", integer="{:,}".format,
                 number=lambda value, digits: f"{value:,.{1 if digits is None else digits}f}", text=md_escape)


def md_table(titles: list[str], rows: list[list[str]], numeric: list[bool], note: str = "") -> str:
    """One Markdown table of formatted cells (numbers right-aligned); `note` is a line above it."""
    lines = [f"_{md_escape(note)}_", ""] if note else []
    lines.append("| " + " | ".join(md_escape(t) for t in titles) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype)


def _shown_fields(table: Table, skip: re.Pattern[str] | None = TEXT_SKIP_COLUMNS,
                  every_field: bool = False) -> list[Field]:
    """The CSV columns a card shows (`every_field`: the others too): not the too-wide ones (titles `skip`
    matches), not those empty in every row."""
    frame = table.frame
    fields = table.fields if every_field else table.csv_fields()
    return [f for f in fields if not (skip is not None and skip.fullmatch(f.title))
            and not frame[f.key].isna().all() and not (frame[f.key].astype(str) == "").all()]


_NOT_UPPER = str.maketrans("", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NOT_DIGIT = str.maketrans("", "", "0123456789")


def _text_px(text: str) -> float:
    """Rendered width estimate of a text in TensorBoard's text cards (Roboto 16 px)."""
    if text.isascii():  # the usual case: count by deleting, in C
        upper, digits = len(text) - len(text.translate(_NOT_UPPER)), len(text) - len(text.translate(_NOT_DIGIT))
    else:
        upper, digits = sum(map(str.isupper, text)), sum(map(str.isdigit, text))
    return TEXT_UPPER_PX * upper + TEXT_DIGIT_PX * digits + TEXT_CHAR_PX * (len(text) - upper - digits)


# `_text_px` of each ASCII character, by code
_ASCII_PX = np.full(128, TEXT_CHAR_PX)
_ASCII_PX[ord("A"):ord("Z") + 1] = TEXT_UPPER_PX
_ASCII_PX[ord("0"):ord("9") + 1] = TEXT_DIGIT_PX


def _texts_px(texts: Sequence[str]) -> np.ndarray:
    """`_text_px` of each of `texts` (the same numbers), at once: a column's cells are thousands of texts."""
    joined = "".join(texts)
    if not joined.isascii():
        return np.array([_text_px(t) for t in texts], dtype=np.float64)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ends = np.cumsum(lengths)
    px = np.concatenate([[0.0], np.cumsum(_ASCII_PX[np.frombuffer(joined.encode("ascii"), dtype=np.uint8)])])
    return px[ends] - px[ends - lengths]


def _column_width(title: str, cells: list[str]) -> tuple[float, float]:
    """(width unwrapped, width of its widest word) of a column, in px, cell padding included: cells
    are single words (names, numbers), headers (bold) wrap between words."""
    cells_px = float(_texts_px(cells).max(initial=0.0))
    header_px = TEXT_BOLD * _text_px(title)
    word_px = max([cells_px] + [TEXT_BOLD * _text_px(w) for w in title.split()])
    return max(cells_px, header_px) + TEXT_CELL_PAD_PX, word_px + TEXT_CELL_PAD_PX


def _fits(columns: list[tuple[float, float]]) -> bool:
    """Whether a table of these columns, (width unwrapped, widest word) each, is shown without a word
    broken: a browser gives a table too wide for its box the columns' minimum widths (a letter, as
    TensorBoard's cards break words anywhere) plus the rest of the box in proportion to how much
    wider each column would be unwrapped."""
    widest = sum(w for w, _ in columns)
    if widest <= TEXT_WIDTH_PX:
        return True
    least = TEXT_UPPER_PX + TEXT_CELL_PAD_PX
    share = (TEXT_WIDTH_PX - least * len(columns)) / (widest - least * len(columns))
    return all(least + (w - least) * share >= word for w, word in columns)


def _column_groups(columns: list[tuple[float, float]]) -> list[list[int]]:
    """Column indices in groups that each fit a card (`_fits`), the first (identifying) column in each."""
    groups: list[list[int]] = [[0]]
    for k in range(1, len(columns)):  # columns, not events
        if len(groups[-1]) > 1 and not _fits([columns[c] for c in (*groups[-1], k)]):
            groups.append([0])
        groups[-1].append(k)
    return groups


def _cut(text: str, width: float, notes: dict[str, int]) -> str:
    """A cell's text of `width` px (`_text_px`), cut to about TEXT_CELL_PX wide with a numbered note holding
    the whole of it."""
    if width <= TEXT_CELL_PX:
        return md_escape(text)
    number = notes.setdefault(text, len(notes) + 1)
    marker = f"…[{number}]"
    room = TEXT_CELL_PX - _text_px(marker)
    widths = np.cumsum(_texts_px(list(text)))
    return md_escape(text[:int(np.searchsorted(widths, room, side="right"))] + marker)


def _is_prose(values: list[str], widths: np.ndarray) -> bool:
    """Sentences (findings, recommendations), not names (C++ signatures have spaces too): shown as
    paragraphs, which wrap between words. `widths`: the values' (`_texts_px`)."""
    long = [values[k] for k in np.flatnonzero(widths > TEXT_CELL_PX)]
    return bool(long) and sum(len(v.split()) >= PROSE_WORDS and "::" not in v for v in long) > len(long) / 2


def _records(titles: list[str], rows: list[list[str]], first: int) -> str:
    """Rows as numbered blocks of "**title**: value" lines (values already escaped)."""
    blocks = []
    for k, row in enumerate(rows):  # a page of rows
        lines = [f"- **{md_escape(t)}**: {v}" for t, v in zip(titles, row, strict=True) if v]
        blocks.append(f"**{first + k + 1}.**\n\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def why_empty(report: Report) -> str:
    """One line saying why a report's table has no rows (its own warning when it gave one)."""
    own = [w.split(":", 1)[1].strip() for w in report.warnings if w.startswith(f"{report.name}:")]
    reason = own[0] if own else (report.warnings[0] if report.warnings else "none in the aggregated iterations")
    return f"_No rows: {md_escape(reason)}._"


def table_markdown(table: Table, report: Report | None = None, skip: re.Pattern[str] | None = TEXT_SKIP_COLUMNS,
                   every_field: bool = False) -> list[str]:
    """A figure table as Markdown pages of at most TEXT_PAGE_ROWS rows (every row), without the columns
    a card cannot show (those whose titles `skip` matches); long texts are cut, their whole text listed
    under the table; a table too wide for a card is shown in column groups, its first column in each; a
    table of sentences (the expert findings) as numbered blocks of lines."""
    if table.key_value:
        values = table.values
        cells = [[md_escape(f.title), MARKDOWN.value(values[f.key], f.digits)] for f in table.csv_fields()]
        return [md_table(["Name", "Value"], cells, [False, False])]
    frame = table.frame
    if frame.empty:
        return [why_empty(report) if report is not None else "_No rows._"]
    fields = _shown_fields(table, skip, every_field)
    if not fields:
        return ["_No column of this table has a value; see the CSV/JSON report._"]
    numeric = [_numeric(frame[f.key]) for f in fields]
    # cells by column: text raw (cut and escaped per page), everything else as the Markdown style shows it
    columns = [["" if is_missing(v) else v if isinstance(v, str) else MARKDOWN.value(v, f.digits)
                for v in frame[f.key].tolist()] for f in fields]
    px = [_texts_px(c) for c in columns]  # each cell's width
    prose = any(_is_prose(c, w) for c, w, n in zip(columns, px, numeric, strict=True) if not n)
    pages = []
    total = len(frame)
    count = -(-total // TEXT_PAGE_ROWS)
    for page in range(count):  # pages of TEXT_PAGE_ROWS rows
        first, stop = page * TEXT_PAGE_ROWS, min(total, (page + 1) * TEXT_PAGE_ROWS)
        if prose:  # a table of sentences reads better, and wraps right, as blocks of lines
            rows = [[md_escape(c[r]) for c in columns] for r in range(first, stop)]
            pages.append(_records([f.title for f in fields], rows, first))
            continue
        notes: dict[str, int] = {}
        cells = [[_cut(c[r], w[r], notes) for r in range(first, stop)] for c, w in zip(columns, px, strict=True)]
        widths = [_column_width(f.title, [c.replace("\\", "") for c in col]) for f, col in zip(fields, cells,
                                                                                                strict=True)]
        groups = _column_groups(widths)
        parts = [f"_rows {first + 1:,}–{stop:,} of {total:,}_" if count > 1 else ""]
        for k, group in enumerate(groups):  # column groups of one page
            if len(groups) > 1:
                parts.append(f"_columns {k + 1} of {len(groups)}_")
            parts.append(md_table([fields[c].title for c in group],
                                  [[cells[c][r] for c in group] for r in range(stop - first)],
                                  [numeric[c] for c in group]))
        if notes:
            parts.append("Whole texts:\n\n" + "\n".join(f"{n}. {md_escape(text)}" for text, n in notes.items()))
        pages.append("\n\n".join(p for p in parts if p))
    return pages


def metadata_markdown(info: RunInfo, reports: Sequence[Report]) -> str:
    gpu_names = ", ".join(info.gpu_names) if info.gpu_names else "(none recorded)"
    first, last = info.iteration_window_ns
    rows = [
        ("Profile name", info.profile_name),
        ("Source file", info.source),
        ("NSys version", info.nsys_version or "(not recorded in the export)"),
        ("GPUs", f"{len(info.gpu_names)}: {gpu_names}"),
        ("Key node", info.key_node or "(not found)"),
        ("Key node chosen by", info.key_node_reason),
        ("Iterations", info.iterations_total),
        ("Aggregated iterations", f"{info.iter_start} to {info.iter_stop}"),
        ("Aggregated window (ns)", f"{first} to {last}"),
        ("Reports", ", ".join(r.name for r in reports)),
        ("dlagg version", info.dlagg_version),
    ]
    return md_table(["Name", "Value"], [[md_escape(n), MARKDOWN.value(v)] for n, v in rows], [False, False])


def report_texts(report: Report) -> dict[str, str]:
    """One report's text dashboards, tag -> Markdown in display order: ``<report>/<section title>``, and
    for a table of several pages ``<report>/<section title>/page 01 of 12``."""
    if report.name in TEXT_SKIP_REPORTS:
        return {f"{report.name}/{report.main.title}": (
            f"_One row per kernel launch ({len(report.main):,} rows): charted per iteration in the scalars "
            "(kernels launched, Tensor Core share); the rows are in the CSV/JSON report._")}
    texts = {}
    for table in report.tables:
        if table.csv or (report.name, table.key) in TEXT_EXTRA_TABLES:
            every = (report.name, table.key) in TEXT_EVERY_FIELD
            texts.update(paged(f"{report.name}/{table.title}", table_markdown(table, report, every_field=every)))
    return texts


def paged(tag: str, pages: Sequence[str]) -> dict[str, str]:
    """A table's pages as text tags: `tag` for one page, ``<tag>/page 01 of 12`` for several."""
    digits = len(str(len(pages)))
    return {f"{tag}/page {k + 1:0{digits}d} of {len(pages)}" if len(pages) > 1 else tag: page
            for k, page in enumerate(pages)}


# --- The views of PyTorch's profiler plugin ------------------------------------------------------

# torch-tb-profiler (retired in 2026) showed a profile in views; dlagg's dashboards of the same names hold the
# reports' figures that answer the same questions: custom-scalars categories (`scalars_layout`) and text tags
# "<view>/<title>" (VIEW_TABLES). Distributed only with several ranks (its reports exist only then).
OVERVIEW, OPERATOR, KERNEL, DISTRIBUTED = "Overview", "Operator", "Kernel", "Distributed"


@dataclass(frozen=True)
class ViewTable:
    """A view's text dashboard ``<view>/<title>``: some figures of a report's table (`fields`: keys, in the order
    shown, each shown; none: the columns the table's own card shows), its rows by the figure `order`, largest
    first."""

    view: str
    title: str
    report: str
    table: str
    fields: tuple[str, ...] = ()
    order: str | None = None


OP_FIGURES = ("gpu_time_total_ns", "cpu_time_total_ns", "cpu_overhead_total_ns", "gpu_idle_total_ns")
VIEW_TABLES = (
    ViewTable(OVERVIEW, "Step time breakdown", "summary", "summary",
              ("wall_clock_ns", "gpu_utilization_pct", *(f"{name}_duration_pct" for name in PARTITION))),
    ViewTable(OVERVIEW, "Iterations", "summary", "iterations_summary",
              ("aggregated_iterations", "start_iteration", "stop_iteration", "iteration_time_avg_ns",
               "iteration_time_std_ns", "cpu_iteration_time_avg_ns", "gpu_iteration_time_avg_ns")),
    ViewTable(OPERATOR, "Op types by GPU time", "op_type", "op_types", ("op_type", "calls", *OP_FIGURES, "ops"),
              order="gpu_time_total_ns"),
    ViewTable(OPERATOR, "Ops by GPU time", "detail", "ops",
              ("op_name", "calls", *OP_FIGURES, "direction", "op_type", "tc_eligible", "using_tc", "data_type"),
              order="gpu_time_total_ns"),
    # the plugin's kernel table has each kernel's mean, min and max duration (its card: column groups if need be)
    ViewTable(KERNEL, "Kernels by GPU time", "kernel", "kernels",
              ("kernel_name", "calls", "gpu_time_total_ns", "gpu_time_avg_ns", "gpu_time_min_ns", "gpu_time_max_ns",
               "uses_tc", "op_name", "direction"), order="gpu_time_total_ns"),
    ViewTable(KERNEL, "Tensor Core share", "summary", "summary",
              ("tc_kernel_utilization_pct", "tc_kernel_duration_pct", "kernel_duration_pct")),
    ViewTable(KERNEL, "Kernel totals", "summary", "all_kernels"),
    ViewTable(KERNEL, "Tensor Core use of eligible ops by GPU time", "tensor", "ops",
              ("op_name", "kernel_time_ns", "tc_kernel_time_ns", "non_tc_kernel_time_ns", "tc_utilization_pct",
               "op_type", "direction"), order="kernel_time_ns"),
    ViewTable(DISTRIBUTED, "Ranks", "ranks", "ranks",
              ("rank", "iterations", "iteration_time_ns", "compute_kernel_ns", "comm_kernel_ns", "comm_wait_ns",
               "exposed_comm_ns", "gpu_idle_ns", "launch_lateness_ns", "collectives", "arrived_last")),
    ViewTable(DISTRIBUTED, "Collectives by duration", "collectives", "collectives",
              ("iteration", "collective", "operation", "rank", "duration_ns", "wait_ns", "lateness_ns",
               "arrived_last", "algorithm", "bytes", "bus_bandwidth_gbs"), order="duration_ns"),
)


def view_table(table: Table, view: ViewTable) -> Table:
    """The figures of `table` a view shows (those of `view.fields` the table has, each shown even where its CSV
    leaves it out), its rows ordered by `view.order`, largest first (ties in the report's order)."""
    have = {f.key: f for f in table.fields}
    fields = tuple(replace(have[k], csv=True) for k in view.fields if k in have) or table.fields
    frame = table.frame
    if view.order in have and len(frame) > 1:
        frame = frame.sort_values(view.order, ascending=False, kind="stable", na_position="last")
    return Table(table.key, table.title, fields, frame[[f.key for f in fields]].reset_index(drop=True),
                 table.key_value, table.csv)


def view_texts(report: Report) -> dict[str, str]:
    """`report`'s text dashboards in the plugin's views (VIEW_TABLES), tag -> Markdown: each page says which of the
    report's dashboards the figures are from."""
    texts = {}
    tables = {t.key: t for t in report.tables}
    for view in VIEW_TABLES:  # a dozen
        if view.report != report.name or view.table not in tables:
            continue
        table = tables[view.table]
        shown = view_table(table, view)
        order = f", by {table.field(view.order).title}, largest first" if view.order in {f.key for f in table.fields} \
            else ""
        note = f"_{md_escape(f'From {report.name}/{table.title}{order}.')}_\n\n"
        pages = table_markdown(shown, report, None if view.fields else TEXT_SKIP_COLUMNS)
        texts.update(paged(f"{view.view}/{view.title}", [note + page for page in pages]))
    return texts


def report_pieces(report: Report) -> dict[str, str]:
    """Every text dashboard made of `report` alone, tag -> Markdown: its own (`report_texts`), then its tables in
    the views of PyTorch's profiler plugin (`view_texts`)."""
    return {**report_texts(report), **view_texts(report)}


def text_dashboards(reports: Sequence[Report], info: RunInfo,
                    given: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, str]:
    """Text tag -> Markdown, in display order: the run's metadata and warnings, then each report's
    (`report_pieces`; those in `given`, report name -> its texts, as given)."""
    texts = {"run/metadata": metadata_markdown(info, reports)}
    warnings = list(info.warnings) or one_per_cause(w for r in reports for w in r.warnings)
    if warnings:
        texts["run/warnings"] = "\n".join(f"- {md_escape(w)}" for w in warnings)
    for report in reports:
        texts.update(given[report.name] if given and report.name in given else report_pieces(report))
    return texts


# --- Layout and event files ---------------------------------------------------------------------


# Single-tag charts of each view in display order (the most useful first); lines are the runs that hold the tag.
# Overview: the plugin's step time breakdown, a chart per class (the seven sum to the iteration time).
OVERVIEW_CHARTS = {
    "iteration/time_ms": "Iteration time (ms)",
    "iteration/cpu_side_time_ms": "CPU-side iteration time (ms)",
    "iteration/gpu_side_time_ms": "GPU-side iteration time (ms)",
    "iteration/gpu_utilization_pct": "GPU Utilization %",
    **{f"duration_ms/{name}": f"Step time breakdown (ms): {title}" for name, title in DURATION_TITLES.items()},
}
KERNEL_CHARTS = {
    "iteration/tensor_core_kernel_utilization_pct": "Tensor Core Kernel Utilization %",
    "iteration/kernel_count": "Kernels launched",
}
# Distributed: the ranks report's figures per iteration, with the iteration time they are parts of.
RANK_CHARTS = {
    "iteration/time_ms": "Iteration time (ms)",
    "ranks/communication_wait_ms": "Communication wait (ms)",
    "ranks/launch_lateness_ms": "Launch lateness (ms)",
    "ranks/exposed_communication_ms": "Exposed communication (ms)",
    "ranks/compute_kernel_ms": "Compute kernels (ms)",
    "ranks/communication_kernel_ms": "Communication kernels (ms)",
    "ranks/gpu_idle_ms": "GPU idle (ms)",
    "iteration/gpu_utilization_pct": "GPU Utilization %",
}
# TensorBoard colours a custom-scalars line by its run (lines of one run differ only by marker shape),
# so every chart charts one quantity and its lines are runs; at most this many in a chart.
MAX_LINES = 5
RANK_PREFIX = re.compile(r"rank(\d+)/")


def _chart(title: str, pattern: str):  # -> layout_pb2.Chart
    from tensorboard.plugins.custom_scalar import layout_pb2

    return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=[pattern]))


def _view_charts(tags: Sequence[str], prefix: str = "") -> list[tuple[str, dict[str, str]]]:
    """(view, {tag: chart title}) of one rank's tags (or the only rank's; tags without `prefix`), in the views'
    order: Overview, Operator (a chart per op type), Kernel; the tags written only."""
    present = set(tags)
    op_types = {t[len(prefix):]: f"GPU time (ms): {t[len(prefix) + len(OP_TYPE_PREFIX):]}" for t in tags
                if t.startswith(prefix + OP_TYPE_PREFIX)}
    return [(view, {tag: title for tag, title in titles.items() if prefix + tag in present})
            for view, titles in ((OVERVIEW, OVERVIEW_CHARTS), (OPERATOR, op_types), (KERNEL, KERNEL_CHARTS))]


def _compared(titles: Mapping[str, str], ranks: Sequence[int], present: set[str], per_chart: int) -> list:
    """Charts of each quantity (tag: title) with a line per rank that has it, `per_chart` ranks a chart."""
    charts = []
    for tag, title in titles.items():  # quantities, then groups of ranks
        having = [r for r in ranks if f"rank{r}/{tag}" in present]
        for k in range(0, len(having), per_chart):
            group = having[k:k + per_chart]
            which = "" if len(group) == len(having) else (f", rank {group[0]}" if len(group) == 1 else
                                                          f", ranks {group[0]}-{group[-1]}")
            charts.append(_chart(f"{title} per rank{which}", rf"^rank({'|'.join(map(str, group))})/{re.escape(tag)}$"))
    return charts


def scalars_layout(tags: Sequence[str], runs_per_rank: int = 1):  # -> layout_pb2.Layout (imported lazily)
    """Custom-scalars layout: one quantity per chart (its lines: the runs, told apart by colour), the
    charts of the tags written only, in categories named after the views of PyTorch's profiler plugin.

    One rank: Overview (iteration time first, then a chart per class of the step time breakdown),
    Operator (a chart per op type), Kernel (Tensor Core share, kernels launched): the same titles for
    every profile, so that TensorBoard merges the layouts of profiles side by side. Several ranks (tags
    ``rank<N>/...``): the same views with a line per rank, up to MAX_LINES lines a chart (`runs_per_rank`
    runs per rank: with its iterations outside the aggregated range), and Distributed (the ranks report's
    figures); then a category per rank (closed) with that rank's charts.
    """
    from tensorboard.plugins.custom_scalar import layout_pb2

    of_rank: dict[int, list[str]] = {}  # each rank's tags, in order: a rank's charts look at its own only
    for t in tags:  # tags: a few dozen per rank
        if m := RANK_PREFIX.match(t):
            of_rank.setdefault(int(m.group(1)), []).append(t)
    if not of_rank:
        return layout_pb2.Layout(category=[layout_pb2.Category(
            title=view, chart=[_chart(title, f"^{re.escape(tag)}$") for tag, title in titles.items()])
            for view, titles in _view_charts(tags) if titles])
    ranks = sorted(of_rank)
    present = set(tags)
    per_chart = max(1, MAX_LINES // max(runs_per_rank, 1))
    own = {rank: _view_charts(of_rank[rank], f"rank{rank}/") for rank in ranks}
    views: dict[str, dict[str, str]] = {}  # view -> the charts of every rank's tags (tag: title)
    for rank in ranks:  # ranks, not events
        for view, titles in own[rank]:
            views.setdefault(view, {}).update(titles)
    views[DISTRIBUTED] = RANK_CHARTS
    categories = [layout_pb2.Category(title=view, chart=charts, closed=view in (OPERATOR, KERNEL))
                  for view, titles in views.items() if (charts := _compared(titles, ranks, present, per_chart))]
    for rank in ranks:  # ranks, not events
        charts = [_chart(title, f"^{re.escape(f'rank{rank}/{tag}')}$")
                  for _, titles in own[rank] for tag, title in titles.items()]
        categories.append(layout_pb2.Category(title=f"Rank {rank}", chart=charts, closed=True))
    return layout_pb2.Layout(category=categories)


def _write_runs(folder: Path, runs: Mapping[str, list[bytes]]) -> list[Path]:
    """Per run (a folder under `folder`, "" for `folder` itself), one event file holding its events (serialized),
    written in order (TFRecord framing: the bytes TensorBoard's writer writes, with a faster CRC: writers/tfrecord.py).

    Written synchronously: tensorboard's EventFileWriter hands every event to a writer thread
    through a 10-slot queue, which costs more than the encoding for thousands of iterations.
    """
    from tensorboard.compat.proto import event_pb2

    from .tfrecord import framed

    name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.0"
    header = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2",
                             source_metadata=event_pb2.SourceMetadata(writer="dlagg")).SerializeToString()
    files = framed([[header, *events] for events in runs.values()])
    paths = []
    for run, data in zip(runs, files, strict=True):  # runs: the job's, then one or a few per rank
        (folder / run).mkdir(parents=True, exist_ok=True)
        paths.append(folder / run / name)
        paths[-1].write_bytes(data)
    return paths


def _scalar_events(values: pd.DataFrame, wall_time: float) -> list[bytes]:
    """One event per iteration holding every defined scalar; descriptions on each tag's first value: the
    serialized events of the protos ``scalar_pb`` makes (a float32 tensor, the scalars plugin's metadata on a
    tag's first value only, as TensorFlow's writers do), put together directly (writers/event_wire.py)."""
    from .event_wire import scalar_events

    tags = [str(tag) for tag in values.columns]
    described = [_scalar_metadata(SCALAR_DESCRIPTIONS.get(tag, OP_TYPE_DESCRIPTION)) for tag in tags]
    return scalar_events(values.index.to_numpy().tolist(), tags, values.to_numpy(dtype=np.float32), described,
                         wall_time)


@functools.cache
def _scalar_metadata(description: str) -> bytes:
    """The scalars plugin's metadata with this description, serialized (a few descriptions, for every rank's tags)."""
    from tensorboard.plugins.scalar import metadata as scalar_metadata

    return scalar_metadata.create_summary_metadata(display_name=None, description=description).SerializeToString()


def string_tensor(value: str | bytes | Sequence[bytes]):  # -> tensor_pb2.TensorProto (imported lazily)
    """The tensor ``tensor_util.make_tensor_proto(value, dtype=np.object_)`` makes of one string (a scalar, text
    in UTF-8) or a list of byte strings (a vector), the value of TensorBoard's text, image and custom-scalars
    summaries. Built directly: tensor_util imports tensorboard's TensorFlow stub and its protos (a noticeable part
    of a run's start), for three fields."""
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

    one = isinstance(value, (str, bytes))
    items = [value] if one else list(value)
    dims = [] if one else [tensor_shape_pb2.TensorShapeProto.Dim(size=len(items))]
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims),
                                  string_val=[v.encode() if isinstance(v, str) else v for v in items])


def _static_events(reports: Sequence[Report], info: RunInfo, tags: Sequence[str], runs_per_rank: int,
                   wall_time: float, texts: Mapping[str, Mapping[str, str]] | None = None) -> list[bytes]:
    """Step 0: the text dashboards (those of `texts` as given), the reports' images and the custom-scalars
    layout (when there are scalars): the values tensorboard's text, image and custom-scalars summaries make
    (``text_pb``, and the image and custom-scalars summaries' ``pb``, which import TensorFlow)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.custom_scalar import metadata as layout_metadata
    from tensorboard.plugins.image import metadata as image_metadata
    from tensorboard.plugins.text import metadata as text_metadata

    summary = summary_pb2.Summary()
    text = text_metadata.create_summary_metadata(display_name=None, description=None)
    for tag, markdown in text_dashboards(reports, info, texts).items():
        summary.value.add(tag=tag, metadata=text, tensor=string_tensor(markdown))
    for report in reports:
        for image in report.images:
            width, height = image.size  # [width, height, PNG]
            summary.value.add(
                tag=f"{report.name}/{image.key}",
                metadata=image_metadata.create_summary_metadata(display_name=image.title, description=image.title),
                tensor=string_tensor([str(width).encode(), str(height).encode(), image.png]))
    if tags:
        summary.value.add(tag=layout_metadata.CONFIG_SUMMARY_TAG, metadata=layout_metadata.create_summary_metadata(),
                          tensor=string_tensor(scalars_layout(tags, runs_per_rank).SerializeToString()))
    return [event_pb2.Event(wall_time=wall_time, step=0, summary=summary).SerializeToString()]


def _swap_in(built: Path, final: Path) -> None:
    """Put the folder `built` at `final`, replacing whatever is there, by renames."""
    old = None
    if final.exists() or final.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
        os.replace(final, old / final.name)
    os.replace(built, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@writer("tensorboard")
class TensorboardWriter(Writer):
    """TensorBoard event files: per-iteration scalars, custom-scalars layout, Markdown report tables."""

    per_report = False
    needs = ("summary",)
    makes_pieces = True

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        return [out_dir / profile_name]

    def piece(self, report: Report) -> dict[str, str]:
        """What `write` shows of `report` alone, made beforehand (see writers/base.py): its text dashboards, its
        own and its tables in the plugin's views."""
        return report_pieces(report)

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo,
              rows: Mapping[str, Sequence[Path]] | None = None,
              pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
        summary = next((r for r in reports if r.name == "summary"), None)
        if summary is None and not any(r.images for r in reports):
            raise TypeError("the TensorBoard writer charts the summary report's per-iteration figures: pass it")
        ranks = next((r for r in reports if r.name == "ranks"), None)
        many_ranks = summary is not None and "rank" in summary.table("iterations").frame
        wall_time = time.time()
        shown = [r for r in reports if r.name in info.reports]
        runs: dict[str, list[bytes]] = {}  # run folder (relative) -> events (serialized)
        tags: list[str] = []
        runs_per_rank = 1
        shown_ranks = info.ranks if many_ranks else (None,)
        scalars = iteration_scalars(summary, ranks, shown_ranks) if summary is not None else {}
        for rank, values in scalars.items():  # ranks, not events
            if many_ranks:  # per-rank tags, so that a chart can show one rank (TensorBoard selects tags, not runs)
                values.columns = [f"rank{rank}/{tag}" for tag in values.columns]
            steps = values.index.to_numpy()
            tags += values.columns[values.notna().to_numpy().any(axis=0)].tolist()
            folder = f"rank{rank}" if many_ranks else ""
            runs[folder] = _scalar_events(values[(steps >= info.iter_start) & (steps <= info.iter_stop)], wall_time)
            outside = ((BEFORE_RUN, values[steps < info.iter_start]), (AFTER_RUN, values[steps > info.iter_stop]))
            sub_runs = [run for run, part in outside if len(part)]
            runs_per_rank = max(runs_per_rank, 1 + len(sub_runs))
            for run, part in outside:
                if len(part):
                    runs[f"{folder}/{run}".strip("/")] = _scalar_events(part, wall_time)
        runs[""] = _static_events(shown, info, tags, runs_per_rank, wall_time, pieces) + runs.get("", [])
        final = out_dir / info.profile_name
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{info.profile_name}.", suffix=".tmp", dir=out_dir))
        try:
            usual_permissions(staging, 0o777)  # mkdtemp makes 0700
            written = _write_runs(staging, runs)
            _swap_in(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return [final / path.relative_to(staging) for path in written]

    def how_to_open(self, written: Sequence[Path]) -> str | None:
        events = [p for p in written if p.name.startswith("events.out.tfevents.")]
        if not events:
            return None
        logdir = min(events, key=lambda p: len(p.parts)).parent.parent  # <tb_dir>: the profile's run is below it
        return (f"TensorBoard: tensorboard --logdir {logdir}, then open {TENSORBOARD_URL}/#custom_scalars "
                f"(charts per iteration) or {TENSORBOARD_URL}/#text (report tables)")
