"""Which SQLite reader: ``pandas.read_sql`` vs the Arrow-native ADBC driver, measured on NVTX rows.

Reads the NVTX columns dlagg reads (start, end, eventType, globalTid, endGlobalTid, domainId,
textId and the inline ``text``) of an export into a pandas DataFrame, each method in its own
subprocess (so peak RSS is that method's alone), page cache warm:

- ``read_sql``: ``pandas.read_sql(sql, sqlite3_connection)`` (rows become Python objects, then columns);
- ``sqlite3``: ``cursor.fetchall()`` only, no DataFrame: the floor of any row-by-row Python reader;
- ``adbc``: ``adbc_driver_sqlite`` ``fetch_arrow_table()`` in one batch, numeric columns as numpy
  views and the text as an Arrow-backed ``str`` column (what dlagg's reader does);
- ``fallback``: dlagg's own ``sqlite3`` fallback (``Database._sqlite3_table``, for a column whose values
  change type mid-table) into an Arrow table, then the same DataFrame as ``adbc``.

    python benchmarks/bench_reader.py DB.sqlite [DB2.sqlite ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

METHODS = ("read_sql", "sqlite3", "adbc", "fallback")
COLUMNS = ('start, COALESCE("end", -1) AS "end", eventType, COALESCE(globalTid, 0) AS globalTid, '
           'COALESCE(endGlobalTid, 0) AS endGlobalTid, COALESCE(domainId, 0) AS domainId, '
           'COALESCE(textId, -1) AS textId, text')
SQL = f"SELECT {COLUMNS} FROM NVTX_EVENTS"


def _uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro&immutable=1"


def read(method: str, path: Path) -> int:
    """Read with `method`; returns the row count."""
    if method in ("adbc", "fallback"):
        import adbc_driver_sqlite.dbapi as adbc
        import pandas as pd
        from adbc_driver_sqlite import StatementOptions

        if method == "fallback":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from dlagg.reader.database import Database

            db = Database(path)
            try:
                table = db._sqlite3_table(SQL, "")
            finally:
                db.close()
        else:
            with adbc.connect(_uri(path)) as conn, conn.cursor() as cursor:
                # one batch sized to the table (its row-id span), as dlagg/reader/database.py asks
                cursor.execute("SELECT max(rowid) - min(rowid) + 1 FROM NVTX_EVENTS")
                rows = max(1, int(cursor.fetchone()[0] or 1))
                cursor.adbc_statement.set_options(**{StatementOptions.BATCH_ROWS.value: str(rows)})
                cursor.execute(SQL)
                table = cursor.fetch_arrow_table()
        frame = pd.DataFrame({name: (pd.array(table.column(name), dtype="str") if name == "text"
                                     else table.column(name).to_numpy()) for name in table.column_names}, copy=False)
        return len(frame)
    import sqlite3

    conn = sqlite3.connect(_uri(path), uri=True)
    try:
        if method == "sqlite3":
            return len(conn.execute(SQL).fetchall())
        import pandas as pd

        return len(pd.read_sql(SQL, conn))
    finally:
        conn.close()


def measure(method: str, path: Path) -> tuple[float, int, int]:
    """(seconds, rows, peak RSS bytes) of one read in a fresh subprocess."""
    done = subprocess.run([sys.executable, __file__, "--child", method, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench_reader: {method} failed on {path}:\n{done.stderr}")
    seconds, rows, rss = done.stdout.split()
    return float(seconds), int(rows), int(rss)


def child(method: str, path: Path) -> None:
    import resource

    import pandas  # noqa: F401 - imports are not part of the read time

    began = time.perf_counter()
    rows = read(method, path)
    elapsed = time.perf_counter() - began
    print(elapsed, rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # one measurement, run by measure()
        child(argv[1], Path(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("databases", type=Path, nargs="+", help="nsys SQLite exports")
    args = parser.parse_args(argv)
    print(f"{'export':<40}{'rows':>12}{'method':>10}{'read s':>9}{'peak RSS MB':>13}{'x adbc':>8}")
    for path in args.databases:
        with path.open("rb") as handle:  # warm the page cache
            while handle.read(16 << 20):
                pass
        results = {method: measure(method, path) for method in METHODS}
        base = results["adbc"][0]
        for method, (seconds, rows, rss) in results.items():
            print(f"{path.name:<40}{rows:>12,}{method:>10}{seconds:>9.2f}{rss / 1e6:>13,.0f}{seconds / base:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
