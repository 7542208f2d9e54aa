"""Invariants every dlagg run must satisfy, checked on the files it wrote (JSON reports).

Used by the property tests (generated exports), the per-class damage tests and the fuzz
regressions. The checks read only the written outputs and the export itself (direct SQL), never
dlagg's in-memory values, so the lead's pipeline and report refactors do not change them.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# One decimal per percentage: each of the seven partition rows is off by at most 0.05.
PARTITION_ROWS = ("Tensor Core Kernel Duration %", "Non-Tensor Core Kernel Duration %", "Memory Duration %",
                  "Dataloader Duration %", "IO Duration %", "CPU Duration %", "Other Duration %")
PARTITION_TOLERANCE = 0.05 * len(PARTITION_ROWS) + 1e-9


@dataclass(frozen=True)
class Cell:
    report: str
    table: str
    row: str
    column: str
    unit: str | None
    value: object


def load_reports(folder: Path, profile_name: str = "dlagg") -> dict[str, dict]:
    """Every JSON report dlagg wrote in `folder`, by report name."""
    found = {}
    for path in sorted(folder.glob(f"{profile_name}_*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        found[data["report"]] = data
    return found


def cells(report: dict) -> Iterator[Cell]:
    """Every value of a report with its field's title and unit (JSON format 2: tables of fields)."""
    for table in report["tables"]:
        fields = table["fields"]
        for row in table["rows"]:
            label = str(row[0]) if row else ""
            for field, value in zip(fields, row, strict=True):
                yield Cell(report["report"], table["title"], label, field["title"], field.get("unit"), value)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def impossible_numbers(reports: dict[str, dict]) -> list[str]:
    """Figures that cannot be right: percentages outside [0, 100], negative or non-finite times.

    Offsets are signed by definition (a position against a reference: a range that encloses the
    iteration starts before it, a rank's clock is moved back), so only durations and totals must
    be non-negative.
    """
    problems = []
    for report in reports.values():
        for cell in cells(report):
            value = _number(cell.value)
            if value is None:
                continue
            where = f"{cell.report}/{cell.table}/{cell.row!r}/{cell.column}={value}"
            if not math.isfinite(value):
                problems.append(f"non-finite {where}")
            elif (cell.unit == "percent" or "%" in cell.column) and not 0 <= value <= 100:
                problems.append(f"percentage out of range {where}")
            elif (cell.unit == "ns" or "(ns)" in cell.column) and value < 0 and "Offset" not in cell.column:
                problems.append(f"negative time {where}")
    return problems


def _table(report: dict, column: str) -> tuple[dict, list[str]] | None:
    """The first table of `report` with a field titled `column`, and its field titles."""
    for table in report["tables"]:
        titles = [f["title"] for f in table["fields"]]
        if column in titles:
            return table, titles
    return None


def summary_values(reports: dict[str, dict]) -> dict[str, object]:
    """Key/value rows of the summary report, all tables together (title -> value)."""
    values: dict[str, object] = {}
    for table in reports["summary"]["tables"]:
        if table.get("key_value") and table["rows"]:
            values.update(zip((f["title"] for f in table["fields"]), table["rows"][0], strict=True))
    return values


def partition_error(reports: dict[str, dict]) -> str | None:
    """The summary's duration rows must add up to 100 % (when the window has any length)."""
    values = summary_values(reports)
    if not values.get("Wall Clock Time (ns)"):
        return None
    parts = [values.get(name) for name in PARTITION_ROWS]
    if any(p is None for p in parts):
        return f"summary lacks a duration row: {dict(zip(PARTITION_ROWS, parts, strict=True))}"
    total = sum(float(p) for p in parts)  # type: ignore[arg-type]
    if abs(total - 100.0) > PARTITION_TOLERANCE:
        return f"summary duration partition adds up to {total}, not 100"
    return None


def iteration_error(reports: dict[str, dict], window: tuple[int, int], count: int) -> str | None:
    """Iterations partition the aggregated window: wall clock = window, mean x count = wall clock."""
    values = summary_values(reports)
    wall = values.get("Wall Clock Time (ns)")
    if wall != window[1] - window[0]:
        return f"wall clock {wall} is not the aggregated window {window}"
    if values.get("Aggregated Iterations") != count:
        return f"aggregated iterations {values.get('Aggregated Iterations')}, expected {count}"
    average = values.get("Average Iteration Time (ns)")
    if count and average is not None and abs(float(average) * count - (window[1] - window[0])) > 0.05 * count + 1:
        return f"mean iteration {average} x {count} does not cover the window {window}"
    for name, report in reports.items():
        its = report.get("iterations") or {}
        if its.get("window_ns") is not None and tuple(its["window_ns"]) != tuple(window):
            return f"{name}: window {its['window_ns']}, expected {window}"
    return None


def kernel_totals(reports: dict[str, dict]) -> dict[str, tuple[int, int]]:
    """(total GPU time, calls) per long kernel name, summed over the kernel report's rows (per op)."""
    found = _table(reports["kernel"], "Long Kernel Name")
    if found is None:
        return {}
    table, names = found
    total = next(n for n in names if n.startswith("Total GPU Time (ns"))  # "(ns, sum over 2 ranks)" too
    name_at, total_at, calls_at = (names.index(n) for n in ("Long Kernel Name", total, "Calls"))
    totals: dict[str, tuple[int, int]] = {}
    for row in table["rows"]:
        total, calls = totals.get(row[name_at], (0, 0))
        totals[row[name_at]] = (total + int(row[total_at]), calls + int(row[calls_at]))
    return totals


def time_at_stake(reports: dict[str, dict]) -> list[int]:
    report = reports.get("expert_systems")
    found = None if report is None else _table(report, "Time At Stake Per Iteration (ns)")
    if found is None:
        return []
    table, names = found
    at = names.index("Time At Stake Per Iteration (ns)")
    return [int(row[at]) for row in table["rows"] if row[at] is not None]


@dataclass(frozen=True)
class Expected:
    """What a run over an export must show, computed by SQL from the export itself."""

    window: tuple[int, int]
    iterations: int
    longest_iteration: int
    kernels: dict[str, tuple[int, int]]  # long name -> (total GPU ns, calls) in the window
    processes: int = 1  # processes with GPU work: more than one are ranks, each with its own iterations


# The reader's acceptance rules restated in SQL (dlagg/reader/validate.py's docstring is the spec):
# every read value an integer of its column's range, required ones not NULL, times not negative,
# ends not before starts, everything within the session (NVTX ends after it are opened), and exact
# copies counted once. The column lists are the reader's declaration (reader/schema.py).
MAX_TIME = 1 << 50
UNTRUSTED_SHARE = 0.1
NARROW = {"int8": (-(1 << 7), (1 << 7) - 1), "int32": (-(1 << 31), (1 << 31) - 1)}
RANGE_TYPES = "(59, 60, 70, 71)"
# times as the reader takes them (whole reals as integers; a time with a fraction is dropped)
START, END = "CAST(start AS INTEGER)", 'CAST("end" AS INTEGER)'


def _first(tables: set[str], base: str) -> str | None:
    return next((t for t in (f"{base}_V3", f"{base}_V2", base) if t in tables), None)


def _integer(column: str, dtype: str) -> str:
    """SQL: the value converts to an integer of `dtype` (integers, finite reals cut toward zero; in a time column
    only whole ones: a time with a fraction is damage)."""
    lo, hi = NARROW.get(dtype, (-(1 << 63), (1 << 63) - 1))
    bounds = f" AND {column} BETWEEN {lo} AND {hi}" if dtype in NARROW else ""
    whole = f" AND {column} = CAST({column} AS INTEGER)" if column.strip('"') in ("start", "end") else ""
    return (f"((typeof({column}) = 'integer'{bounds}) OR (typeof({column}) = 'real' AND abs({column}) < 9.2e18"
            f"{whole}{bounds.replace(column, f'CAST({column} AS INTEGER)')}))")


class _Table:
    """One event table of the export as the reader sees it: present columns, value checks."""

    def __init__(self, conn: sqlite3.Connection, tables: set[str], declared) -> None:  # noqa: ANN001
        self.declared = declared
        self.name = _first(tables, declared.sources[-1])
        self.present: set[str] = set()
        if self.name:
            self.present = {row[1] for row in conn.execute(f'PRAGMA table_info("{self.name}")')}
            if any(c.source not in self.present for c in declared.columns if c.default is None):
                self.name = None  # a required column is missing: the reader ignores the table

    def column(self, source: str) -> str:
        """The column's SQL expression: itself, or the reader's default when the table lacks it."""
        declared = next(c for c in self.declared.columns if c.source == source)
        if source not in self.present:
            return str(declared.default)
        value = f'CAST("{source}" AS INTEGER)'  # reals are cut toward zero, as the reader does (times: whole ones)
        return f"COALESCE({value}, {declared.default})" if declared.default is not None else value

    def values_ok(self, among: str = "1") -> str:
        """SQL: every read value usable (checked only on rows matching `among`, as the reader does)."""
        checks = []
        for c in self.declared.columns:
            if c.source not in self.present:
                continue
            ok = _integer(f'"{c.source}"', c.dtype)
            checks.append(ok if c.default is None else f'("{c.source}" IS NULL OR {ok})')
        return " AND ".join(checks) if checks else "1"

    def distinct(self, where: str) -> str:
        """SQL of the table's read columns over the rows `where`, exact copies once."""
        columns = ", ".join(f"{self.column(c.source)} AS {c.source}" for c in self.declared.columns)
        return f'SELECT DISTINCT {columns} FROM "{self.name}" WHERE {where}'


def sql_expected(db: Path, key_node: str) -> Expected:
    """Independent figures for an export whose key node runs on one thread (never damaged), all
    iterations aggregated. GPU work belongs to the iteration its launching API call started in
    (the outermost call of its process and correlation id), else to its own start."""
    from dlagg.reader import schema  # the declaration of what is read, not a computed value

    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        event = {t.name: _Table(conn, tables, t) for t in schema.EVENT_TABLES}
        strings = _first(tables, "StringIds")
        nvtx = event["nvtx"]
        nvtx_range = f"eventType IN {RANGE_TYPES}"
        nvtx_usable = (f"{nvtx_range} AND {nvtx.values_ok()} AND {START} >= 0 AND (\"end\" IS NULL OR "
                       f"({END} >= 0 AND {END} >= {START}))")
        session = _session(conn, tables, event, nvtx_usable)
        valid = {name: (f"{t.values_ok()} AND {START} >= 0 AND {END} >= {START} AND {START} <= {session} "
                        f"AND {END} <= {session}") for name, t in event.items() if name != "nvtx"}
        starts = [conn.execute(f'SELECT min({START}) FROM "{t.name}" WHERE {valid[name]}').fetchone()[0]
                  for name, t in event.items() if name != "nvtx" and t.name]
        ends: list[int] = []
        if nvtx.name:
            usable = f"{nvtx_usable} AND {START} <= {session}"
            starts.append(conn.execute(f'SELECT min({START}) FROM "{nvtx.name}" WHERE {usable}').fetchone()[0])
            text = _nvtx_text(nvtx, strings)
            ends = sorted(end for _, end in conn.execute(
                f'SELECT DISTINCT start, "end" FROM "{nvtx.name}" WHERE {usable} AND {text} = ?', (key_node,)))
        if not ends:
            raise AssertionError(f"{db}: key node {key_node!r} not found by SQL")
        first = min(s for s in starts if s is not None)
        # an iteration ends with its key-node range or with the last GPU work launched in it, when
        # that ends later (the host may run ahead of the GPU); the next one starts there
        union, last = _gpu_work(conn, event, valid, ends)
        gpu_ends = np.maximum.accumulate(np.maximum(np.array(ends, dtype=np.int64), last))
        bounds = [first, *(int(e) for e in gpu_ends)]
        window = (first, bounds[-1])
        # no time at stake can exceed the longest iteration or the GPU work launched in one
        longest = max(max(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)), union)
        return Expected(window, len(ends), longest, _kernel_totals(conn, event, valid, strings, ends[-1]),
                        _gpu_processes(conn, event, valid))
    finally:
        conn.close()


def _session(conn: sqlite3.Connection, tables: set[str], event: dict, nvtx_usable: str) -> int:  # noqa: ANN001
    """The session bound: ANALYSIS_DETAILS' duration unless over a tenth of the events end after it."""
    if "ANALYSIS_DETAILS" not in tables:
        return MAX_TIME
    stated = conn.execute("SELECT max(duration) FROM ANALYSIS_DETAILS WHERE typeof(duration) = 'integer'").fetchone()[0]
    if stated is None or not 0 < stated <= MAX_TIME:
        return MAX_TIME
    rows = late = 0
    for name, t in event.items():
        if not t.name:
            continue
        ok = nvtx_usable if name == "nvtx" else t.values_ok()
        after = (f'{START} > {stated} OR ("end" IS NOT NULL AND {END} > {stated})' if name == "nvtx"
                 else f"{START} > {stated} OR {END} > {stated}")
        n, m = conn.execute(f'SELECT count(*), total(({after})) FROM "{t.name}" WHERE {ok}').fetchone()
        rows, late = rows + n, late + int(m)
    return MAX_TIME if rows and late > UNTRUSTED_SHARE * rows else stated


def _nvtx_text(nvtx: _Table, strings: str | None) -> str:
    registered = f'(SELECT value FROM "{strings}" WHERE id = textId)'
    if "text" in nvtx.present and "textId" in nvtx.present:
        return f"COALESCE(text, {registered})"
    return "text" if "text" in nvtx.present else registered


def _launch(event: dict, valid: dict[str, str], table: str) -> tuple[str, str]:  # noqa: ANN001
    """(FROM clause aliased w, SQL of the time that places a row of `table` in an iteration)."""
    work, runtime = event[table], event["runtime"]
    source = f"({work.distinct(valid[table])}) w"
    if not runtime.name:
        return source, "w.start"
    calls = (f"SELECT (globalTid & -16777216) AS pid, correlationId AS corr, min(start) AS start "
             f"FROM ({runtime.distinct(valid['runtime'])}) WHERE correlationId != -1 GROUP BY 1, 2")
    return (f"{source} LEFT JOIN ({calls}) r ON r.corr = w.correlationId AND r.pid = w.globalPid",
            "CASE WHEN w.correlationId != -1 AND r.start IS NOT NULL THEN r.start ELSE w.start END")


def _gpu_work(conn: sqlite3.Connection, event: dict, valid: dict[str, str],  # noqa: ANN001
              ends: list[int]) -> tuple[int, np.ndarray]:
    """(the longest union of GPU work (kernels, copies, memsets) launched in one iteration, the end
    of the last GPU work launched in each iteration (-1 when none))."""
    last = np.full(len(ends), -1, dtype=np.int64)
    rows = []
    for table in ("kernels", "memcpy", "memset"):
        if event[table].name:
            source, launch = _launch(event, valid, table)
            rows += conn.execute(f'SELECT {launch}, w.start, w."end" FROM {source}').fetchall()
    if not rows:
        return 0, last
    at, start, end = (np.array(column, dtype=np.int64) for column in zip(*rows, strict=True))
    iteration = np.searchsorted(np.array(ends), at, side="left")
    longest = 0
    for i in np.unique(iteration[iteration < len(ends)]):  # iterations, not events
        mine = np.flatnonzero(iteration == i)
        s, e = start[mine], end[mine]
        last[i] = e.max()
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        before = np.r_[s[0], reach[:-1]]
        longest = max(longest, int(np.sum(np.maximum(reach - np.maximum(before, s), 0))))
    return longest, last


def _gpu_processes(conn: sqlite3.Connection, event: dict, valid: dict[str, str]) -> int:  # noqa: ANN001
    pids: set[int] = set()
    for table in ("kernels", "memcpy", "memset"):
        t = event[table]
        if t.name:
            pids |= {p for (p,) in conn.execute(f'SELECT DISTINCT {t.column("globalPid")} FROM "{t.name}" '
                                                f"WHERE {valid[table]}")}
    return len(pids)


def _kernel_totals(conn: sqlite3.Connection, event: dict, valid: dict[str, str], strings: str | None,  # noqa: ANN001
                   window_end: int) -> dict[str, tuple[int, int]]:
    if not event["kernels"].name:
        return {}
    source, launch = _launch(event, valid, "kernels")
    name = f'COALESCE((SELECT value FROM "{strings}" WHERE id = w.demangledName), \'\')' if strings else "''"
    rows = conn.execute(f'SELECT {name}, sum(w."end" - w.start), count(*) FROM {source} WHERE {launch} <= ? '
                        "GROUP BY 1", (window_end,)).fetchall()
    return {str(n): (int(total), int(calls)) for n, total, calls in rows}


def check_run(out: Path, expected: Expected | None = None) -> list[str]:
    """Every invariant on a finished run's JSON outputs; `expected` adds the SQL cross-checks."""
    reports = load_reports(out)
    problems = impossible_numbers(reports)
    if "summary" in reports and (expected is None or expected.kernels):
        error = partition_error(reports)
        if error:
            problems.append(error)
    if expected is None or expected.processes > 1:  # ranks: per-rank windows, not checked by SQL here
        return problems
    if "summary" in reports and expected.kernels:
        error = iteration_error(reports, expected.window, expected.iterations)
        if error:
            problems.append(error)
    if "kernel" in reports:
        got = kernel_totals(reports)
        if got != expected.kernels:
            diff = {k: (got.get(k), expected.kernels.get(k)) for k in set(got) | set(expected.kernels)
                    if got.get(k) != expected.kernels.get(k)}
            problems.append(f"kernel totals (report, SQL) differ: {diff}")
    for stake in time_at_stake(reports):
        if stake > expected.longest_iteration:
            problems.append(f"time at stake {stake} ns exceeds the longest iteration {expected.longest_iteration} ns")
    return problems


# --- the other formats: CSV, HTML, TensorBoard -----------------------------------------------------

def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def csv_problems(out: Path, reports: dict[str, dict], profile_name: str = "dlagg") -> list[str]:
    """The CSV reports: no non-finite number, every percentage in [0, 100] (a column or a key titled with %),
    and the summary's key/value figures equal the JSON's (to the CSV's one decimal)."""
    import csv

    problems = []
    json_values = summary_values(reports) if "summary" in reports else {}
    for path in sorted(out.glob(f"{profile_name}_*.csv")):
        header: list[str] = []
        for row in csv.reader(path.read_text(encoding="utf-8").splitlines()):
            numbers = [_float(cell) for cell in row]
            if len(row) >= 2 and all(n is None for n in numbers[1:]):
                header = row  # a table's field titles (or a section title)
                continue
            titles = [row[0]] * len(row) if len(row) == 2 else header
            for title, cell, value in zip(titles, row, numbers, strict=False):
                if value is None:
                    continue
                where = f"{path.name}: {title}={cell}"
                if not math.isfinite(value):
                    problems.append(f"non-finite {where}")
                elif "%" in title and not 0 <= value <= 100:
                    problems.append(f"percentage out of range {where}")
            if path.name == f"{profile_name}_summary.csv" and len(row) == 2 and row[0] in json_values:
                expected = _number(json_values[row[0]])
                # (the CSV rounds to one decimal, the JSON keeps every digit)
                if expected is not None and (numbers[1] is None or abs(numbers[1] - expected) > 0.05 + 1e-9):
                    problems.append(f"{path.name}: {row[0]} is {row[1]} in the CSV, {expected} in the JSON")
    return problems


def html_problems(out: Path, profile_name: str = "dlagg") -> list[str]:
    """The HTML page: written whole, every percentage in its text in [0, 100], no NaN or infinity shown."""
    import html
    import re

    page = out / f"{profile_name}_report.html"
    if not page.exists():
        return [f"no {page.name}"]
    text = page.read_text(encoding="utf-8")
    if "</html>" not in text:
        return [f"{page.name} is cut short"]
    text = re.sub(r"(?is)<(style|script)\b.*?</\1>", " ", text)  # (CSS holds percentages of another kind)
    text = html.unescape(re.sub(r"(?s)<[^>]*>", " ", text))
    # (a finding's time at stake "N % of the mean iteration" is a ratio, not a share: the JSON check bounds it by
    # the longest iteration instead)
    problems = [f"{page.name}: percentage out of range {v} %"
                for v in re.findall(r"(?<![\w.-])(-?\d+(?:\.\d+)?)\s*%(?! of the mean iteration)", text)
                if not 0 <= float(v) <= 100]
    problems += [f"{page.name}: shows {m.group(0)!r}" for m in re.finditer(r".{0,60}\b(?:NaN|nan|inf)\b.{0,20}", text)]
    return problems


def tensorboard_problems(out: Path, folder: str = "event_files", profile_name: str = "dlagg") -> list[str]:
    """The TensorBoard event files: they parse, their scalars are finite, percentages in [0, 100]."""
    from .test_tensorboard import read_run

    run_dir = out / folder / profile_name
    if not list(run_dir.glob("events.out.tfevents.*")):
        return [f"no event file in {run_dir.name}"]
    try:
        run = read_run(run_dir)
    except Exception as exc:  # noqa: BLE001 - any failure to parse is the finding
        return [f"event files do not parse: {type(exc).__name__}: {exc}"]
    problems = []
    for tag, values in run.scalars.items():
        if not np.isfinite(values.to_numpy()).all():
            problems.append(f"non-finite scalar {tag}")
        elif tag.endswith("_pct") and not ((values >= 0) & (values <= 100 + 1e-4)).all():
            problems.append(f"percentage out of range {tag}: {values.tolist()}")
    return problems
