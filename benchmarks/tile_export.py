"""Make an N-times larger nsys export by tiling a real one in time, for the speed benchmark.

Contract: ``tile(source, target, copies) -> Path``. ``target`` is a new SQLite file holding the
source's tables plus ``copies - 1`` shifted copies of every event row; the source is only read
(opened ``mode=ro&immutable=1``), never changed.

Copy k of a row (k = 1 .. copies-1) is the row with
- every time column (``start``, ``end``, ``timestamp``) moved by ``k * shift``, where ``shift`` is
  the source's event span plus a gap, so copies follow one another without overlapping;
- ``correlationId`` moved by ``k * (max correlationId + 1)`` in every table that has it, so the
  kernel -> launching API join (correlation id within a process) stays one-to-one;
- NVTX ``rangeId`` moved the same way (start/end ranges pair on it);
- everything else unchanged: string ids (``StringIds`` is not copied, so every id still resolves),
  thread and process ids, NVTX domains, callchain and graph-node references.
NVTX domain-creation rows (one per domain and process) are not copied: a process registers a
domain once. ``ANALYSIS_DETAILS`` gets the longer duration. The result is a valid export that a
reader cannot tell from one long recording of the same loop repeated.

    python benchmarks/tile_export.py SOURCE.sqlite TARGET.sqlite --copies 10
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from pathlib import Path

TIME_COLUMNS = ("start", "end", "timestamp")  # nsys event time columns (ns)
ID_COLUMNS = ("correlationId", "rangeId")  # per-process ids that pair rows of different tables
NVTX_TABLES = ("NVTX_EVENTS", "NVTX_EVENTS_V2", "NVTX_EVENTS_V3")
NVTX_DOMAIN_CREATE = 75  # ENUM_NSYS_EVENT_TYPE: registered once per process, not per copy
GAP_NS = 1_000_000  # 1 ms of idle time between copies: iteration windows stay well separated


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({_quote(table)})")]


def _event_tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Tables (of the attached source) with a time column: table -> its columns."""
    names = [n for (n,) in conn.execute("SELECT name FROM src.sqlite_master WHERE type = 'table'")]
    tables = {name: _columns(conn, "src", name) for name in names}
    return {name: cols for name, cols in tables.items() if any(c in TIME_COLUMNS for c in cols)}


def _skip_clause(table: str, columns: list[str]) -> str:
    if table in NVTX_TABLES and "eventType" in columns:
        return f" WHERE eventType != {NVTX_DOMAIN_CREATE}"
    return ""


def _extent(conn: sqlite3.Connection, tables: dict[str, list[str]]) -> tuple[int, int, dict[str, int]]:
    """(earliest start, latest end, column -> max id) over the rows that get copied."""
    lo, hi = None, None
    max_id = dict.fromkeys(ID_COLUMNS, 0)
    for table, columns in tables.items():
        times = [c for c in TIME_COLUMNS if c in columns]
        ids = [c for c in ID_COLUMNS if c in columns]
        select = [f"min({_quote(c)}), max({_quote(c)})" for c in times] + [f"max({_quote(c)})" for c in ids]
        sql = f"SELECT {', '.join(select)} FROM src.{_quote(table)}{_skip_clause(table, columns)}"
        row = conn.execute(sql).fetchone()
        values = [v for v in row[: 2 * len(times)] if v is not None]
        if values:
            lo = min(values) if lo is None else min(lo, *values)
            hi = max(values) if hi is None else max(hi, *values)
        for column, value in zip(ids, row[2 * len(times):], strict=True):
            max_id[column] = max(max_id[column], value or 0)
    if lo is None or hi is None:
        raise SystemExit("tile_export: the source has no timed event rows to tile")
    return int(lo), int(hi), max_id


def tile(source: Path, target: Path, copies: int, log=print) -> Path:
    if copies < 1:
        raise SystemExit("tile_export: --copies must be at least 1")
    source, target = source.resolve(), target.resolve()
    if source == target:
        raise SystemExit("tile_export: the target must differ from the source (the source is never changed)")
    building = target.with_name(target.name + ".building")
    building.unlink(missing_ok=True)
    shutil.copyfile(source, building)
    conn = sqlite3.connect(str(building), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")  # a scratch file: rebuilt from scratch if interrupted
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("ATTACH DATABASE ? AS src", (source.as_uri() + "?mode=ro&immutable=1",))
        tables = _event_tables(conn)
        lo, hi, max_id = _extent(conn, tables)
        shift = hi - lo + GAP_NS
        id_shift = {column: value + 1 for column, value in max_id.items()}
        conn.execute("BEGIN")
        for k in range(1, copies):
            began = time.perf_counter()
            for table, columns in tables.items():
                select = []
                for column in columns:
                    if column in TIME_COLUMNS:
                        select.append(f"{_quote(column)} + {k * shift}")
                    elif column in ID_COLUMNS:
                        select.append(f"{_quote(column)} + {k * id_shift[column]}")
                    else:
                        select.append(_quote(column))
                names = ", ".join(_quote(c) for c in columns)
                conn.execute(f"INSERT INTO main.{_quote(table)} ({names}) SELECT {', '.join(select)} "
                             f"FROM src.{_quote(table)}{_skip_clause(table, columns)}")
            log(f"tile_export: copy {k} of {copies - 1} ({time.perf_counter() - began:.1f} s)")
        extra = (copies - 1) * shift
        details = _columns(conn, "main", "ANALYSIS_DETAILS") if tables else []
        if {"duration", "stopTime"} <= set(details):
            conn.execute(f"UPDATE main.ANALYSIS_DETAILS SET duration = duration + {extra}, "
                         f"stopTime = stopTime + {extra}")
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE src")
    finally:
        conn.close()
    building.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="nsys SQLite export to tile (read only)")
    parser.add_argument("target", type=Path, help="file to create (replaced if it exists)")
    parser.add_argument("--copies", type=int, default=10, help="how many times the source (default 10)")
    args = parser.parse_args(argv)
    if not args.source.is_file():
        print(f"tile_export: {args.source}: no such file", file=sys.stderr)
        return 2
    began = time.perf_counter()
    tile(args.source, args.target, args.copies)
    size = args.target.stat().st_size / 1e6
    print(f"tile_export: wrote {args.target} ({size:,.0f} MB, {args.copies}x) in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
