"""Read ``ncu --csv --page raw`` output (plain or gzip) into an `NcuReport`, read-only.

Contract: ``read_ncu_csv(path) -> NcuReport``; a file that is not ncu's raw page (another page,
another tool's CSV, a truncated export) raises one `InputError` line saying what to do.

The raw page has one row of metric names, one row of units, then one row per profiled kernel in
launch order. Numbers carry thousands separators (``"2,570,448,979,591.84"``) even with
``--print-units base``; without it ncu scales each column (``Mbyte``, ``usecond``,
``cycle/nsecond``), so every metric is converted to base units with its units-row entry:
durations to ns, frequencies to Hz, rates to per second. Only the columns the roofline uses are
parsed (pyarrow's reader skips the other ~1,500).
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from ..errors import InputError
from .metrics import known_metrics

EXPORT = "export it with: ncu -i report.ncu-rep --csv --page raw > step.csv"
GZIP_MAGIC = b"\x1f\x8b"
# Identity columns of every raw page (ncu 2019.5 to 2025.3).
ID, NAME, GRID, BLOCK = "ID", "Kernel Name", "Grid Size", "Block Size"
IDENTITY = {"ID": "id", "Process ID": "pid", "Device": "device", "Context": "context", "Stream": "stream",
            "Kernel Name": "name", "Grid Size": "grid", "Block Size": "block"}
GRID_DIMS = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
BLOCK_DIMS = ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_PER_TIME = {unit: 1e9 / ns for unit, ns in _TIME_NS.items()}  # a rate per <unit> -> per second
_COUNTED = re.compile(r"([KMGTP]?)([a-z]+)")
_TRIPLE = r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)"


def unit_scale(unit: str) -> float | None:
    """Factor from a unit of ncu's units row to dlagg's base unit, None when not understood.

    ``ns``/``usecond``/... -> ns; ``hz``/``Ghz``/``cycle/nsecond`` -> Hz; ``byte``/``Kbyte``/
    ``Gbyte/second`` -> bytes (per second); ``inst/cycle``, ``byte/cycle`` stay per cycle; an empty
    unit (``sm__ops_path_*``) or ``%`` is a plain number. ncu's prefixes are decimal.
    """
    unit = unit.strip()
    if unit in ("", "%"):
        return 1.0
    head, _, per = unit.partition("/")
    if head in _TIME_NS and not per:
        return _TIME_NS[head]
    counted = _COUNTED.fullmatch(head)
    if counted is None:
        return None
    scale = _PREFIX[counted.group(1)]
    if not per:
        return scale
    if per in _PER_TIME:
        return scale * _PER_TIME[per]
    return scale if re.fullmatch(r"[a-z]+", per) else None  # per cycle, per block, ...


@dataclass(frozen=True)
class NcuReport:
    """One ncu raw-page export.

    ``kernels``: one row per profiled kernel in ncu's order (launch order), index 0..n-1, columns
    id (ncu's ID), pid, device, context, stream (int64, -1 when absent), name (ncu's Kernel Name:
    demangled or mangled, as exported), grid_x/y/z and block_x/y/z (int64, 0 when absent).
    ``metrics``: metric name -> float64 array per kernel in base units (NaN where ncu printed no
    number), for the metrics dlagg knows that the file has.
    """

    source: str  # file name, for messages
    kernels: pd.DataFrame
    metrics: dict[str, np.ndarray]
    units: dict[str, str]  # metric -> unit as the file's units row printed it
    warnings: tuple[str, ...] = ()


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise InputError(f"{path}: no such file; pass the CSV of 'ncu --csv --page raw'")
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass the CSV file of 'ncu --csv --page raw'")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"{path}: the gzip file is damaged or truncated ({exc}); compress the CSV again") from None
    if not raw.strip():
        raise InputError(f"{path}: the file is empty; {EXPORT}")
    if path.suffix == ".ncu-rep" or raw.startswith(b"NVIDIA Nsight Compute"):
        raise InputError(f"{path}: is an Nsight Compute report, not its CSV; {EXPORT}")
    return raw


def _header_offset(raw: bytes, path: Path) -> int:
    """Byte offset of the metric-names row: the first line that starts with the ID column.

    ncu writes ``==PROF==`` lines (and the application's own output, when profiling and printing
    the CSV in one command) before it; they are skipped.
    """
    found = re.search(rb'(?m)^"?ID"?,', raw)
    if found is not None:
        return found.start()
    raise InputError(f"{path}: is not an Nsight Compute raw-page CSV (no 'ID' header row); {EXPORT}")


def _head_rows(raw: bytes, offset: int, path: Path) -> tuple[list[str], list[str]]:
    """The metric-names row and the row after it."""
    try:
        text = io.StringIO(raw[offset:offset + (1 << 22)].decode("utf-8", "replace"))
        rows = csv.reader(text)
        header = next(rows)
        second = next(rows, [])
    except csv.Error as exc:
        raise InputError(f"{path}: cannot parse the CSV header ({exc}); {EXPORT}") from None
    return header, second


def _check_header(header: list[str], path: Path) -> None:
    if "Metric Name" in header and "Metric Value" in header:
        raise InputError(f"{path}: is ncu's details page (one row per metric), not the raw page; {EXPORT}")
    if NAME not in header or not any("__" in column for column in header):
        raise InputError(f"{path}: is not an Nsight Compute raw-page CSV (no 'Kernel Name' or no metric "
                         f"columns); {EXPORT}")
    duplicated = sorted(c for c, n in Counter(header).items() if n > 1)
    if duplicated:
        raise InputError(f"{path}: repeats column(s) {', '.join(duplicated[:3])}; this is not one ncu raw page "
                         f"(were two exports concatenated?); {EXPORT}")


def _numbers(values: pa.ChunkedArray) -> np.ndarray:
    """ncu's printed numbers as float64: thousands separators dropped, anything else (n/a) NaN."""
    text = pd.Series(values.to_numpy(zero_copy_only=False), dtype=object).str.replace(",", "", regex=False)
    return pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)


def _triples(text: pd.Series) -> np.ndarray:
    """``(x, y, z)`` cells as an (n, 3) int64 array, zeros where a cell is not such a triple."""
    parts = text.str.extract(_TRIPLE).apply(pd.to_numeric, errors="coerce")
    return parts.fillna(0).to_numpy(dtype=np.int64).reshape(len(text), 3)


def read_ncu_csv(path: str | Path) -> NcuReport:
    """Read the kernels and the metrics the roofline uses from an ncu raw-page CSV (plain or .gz)."""
    path = Path(path)
    raw = _read_bytes(path)
    offset = _header_offset(raw, path)
    header, second = _head_rows(raw, offset, path)
    _check_header(header, path)
    has_units = bool(second) and second[header.index(ID)].strip() == ""
    warnings = [] if has_units else [f"{path.name}: no units row after the metric names; values are read as "
                                     "printed (export with --print-units base to be sure)"]
    units = dict(zip(header, second, strict=False)) if has_units else {}
    metrics = [m for m in known_metrics() if m in header]
    wanted = [c for c in (*IDENTITY, *GRID_DIMS, *BLOCK_DIMS) if c in header] + metrics
    try:
        table = pacsv.read_csv(
            io.BytesIO(raw[offset:]),
            read_options=pacsv.ReadOptions(skip_rows_after_names=1 if has_units else 0, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(include_columns=wanted, strings_can_be_null=False,
                                                 column_types={c: pa.string() for c in wanted}))
    except pa.ArrowInvalid as exc:
        reason = str(exc).splitlines()[0][:160]
        raise InputError(f"{path}: is not a complete ncu raw-page CSV ({reason}); the file may be truncated: "
                         f"{EXPORT}") from None
    if table.num_rows == 0:
        raise InputError(f"{path}: holds no profiled kernel; check the ncu run's filters (-k, -c, --nvtx-include)")
    ids = _numbers(table.column(ID))
    if np.isnan(ids).any():
        raise InputError(f"{path}: a kernel row has no numeric ID; the file is damaged or not one ncu raw page: "
                         f"{EXPORT}")
    kernels = _kernel_frame(table, ids)
    values: dict[str, np.ndarray] = {}
    for metric in metrics:
        scale = unit_scale(units.get(metric, ""))
        if scale is None:
            warnings.append(f"{path.name}: unit '{units[metric]}' of {metric} is not understood; the metric is "
                            "ignored (export with --print-units base)")
            continue
        values[metric] = _numbers(table.column(metric)) * scale
    return NcuReport(path.name, kernels, values, {m: units.get(m, "") for m in values}, tuple(warnings))


def _kernel_frame(table: pa.Table, ids: np.ndarray) -> pd.DataFrame:
    n = table.num_rows
    frame = pd.DataFrame({"id": ids.astype(np.int64)})
    for column, name in IDENTITY.items():
        if name in ("id", "grid", "block"):
            continue
        if name == "name":
            present = column in table.column_names
            frame[name] = table.column(column).to_numpy(zero_copy_only=False) if present else np.full(n, "", object)
            continue
        number = _numbers(table.column(column)) if column in table.column_names else np.full(n, np.nan)
        frame[name] = np.where(np.isnan(number), -1, number).astype(np.int64)
    for label, column, dims in (("grid", GRID, GRID_DIMS), ("block", BLOCK, BLOCK_DIMS)):
        if column in table.column_names:
            triple = _triples(pd.Series(table.column(column).to_numpy(zero_copy_only=False), dtype=object))
        elif all(d in table.column_names for d in dims):
            triple = np.stack([np.nan_to_num(_numbers(table.column(d))) for d in dims], axis=1).astype(np.int64)
        else:
            triple = np.zeros((n, 3), dtype=np.int64)
        for axis, values in zip("xyz", triple.T, strict=True):
            frame[f"{label}_{axis}"] = values
    return frame
