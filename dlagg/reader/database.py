"""Open an SQLite file read-only and query it: whichever profiler wrote it (an nsys export, an nvprof database).

Contract: ``Database(path)``, after ``check_input(path)``: which tables and columns the file has, queries through
the standard ``sqlite3`` module (``query``) and Arrow reads (``arrow``). The file is opened
``mode=ro&immutable=1``: nothing is written, no index or column is added (DLProf altered its input; dlagg never
does). Arrow reads go through the Arrow-native ADBC SQLite driver (see docs/design.md, "Reader"), with the
standard ``sqlite3`` module as a fallback for the rare column whose values change type mid-table.

Memory is the budget that matters on big exports (peak under twice the file size): each query arrives as one
Arrow batch whose numeric columns become numpy arrays *without a copy*. Each thread that reads has its own
connection: SQLite and the driver release the GIL.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import struct
import sys
import threading
from collections.abc import Iterable
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import limits
from ..errors import InputError
from ..log import shown

try:
    import fcntl
except ImportError:  # not on Windows: a writer's lock is not looked for there
    fcntl = None  # type: ignore[assignment]

SQLITE_MAGIC = b"SQLite format 3\x00"
# Rows per Arrow batch asked of the ADBC driver: the whole result in one batch, so columns arrive
# contiguous and numeric ones become numpy arrays with no copy (the default of 1024-row batches
# costs a concatenation per column and fragments the heap). The driver reserves this many rows of
# every column up front (8 bytes and a validity bit each) before it reads a row, so the batch is
# sized to the result (a row-id span, or a count), never to a fixed maximum: a reservation of
# 2**30 rows per column was 8 GiB of address space per column, which any `ulimit -v` refused, and
# the driver then freed buffers it had never set up (SIGSEGV). The driver's maximum is 2**31 - 2.
MAX_BATCH_ROWS = 2**31 - 2
# A table's row-id span is taken as its row count up to this; beyond it (a sparse or damaged row
# id), the rows are counted.
SPAN_TRUSTED = 1 << 24
# Batches when the address-space room left cannot take a whole-result reservation (limits.py):
# a concatenation per column then, but no reservation the limit refuses.
SMALL_BATCH_ROWS = 1 << 16
# Bytes the driver reserves per result row: 8 per column and a validity bit, for up to 16 columns.
RESERVED_PER_ROW = 16 * 9


def read_threads(processes: int = 1) -> int:
    """Threads for one file's reads while `processes` processes read files at once: the machine's cores shared
    among them (more only adds memory and, where another process reads, takes turns on its core), at most 4."""
    return max(1, min(4, limits.usable_cores() // max(1, processes)))


READ_THREADS = read_threads()  # one process: a Database's threads unless told otherwise
EXPORT_HINT = "export it first: nsys export --type sqlite --output run.sqlite {name}"
DAMAGED = "{path}: cannot read the database ({exc}{what}); the file may be truncated or damaged: {again}"
AGAIN = "export the nsys report again"  # what to do about a damaged file (nvprof databases: record again)
WAL = ("{wal}: holds {size:,} bytes of changes that are not in {name} yet (an un-checkpointed write-ahead log), "
       "and dlagg reads the main file only, read-only; copy both files elsewhere and fold the log into the copy: "
       "cp {path} {wal} /tmp/ && sqlite3 /tmp/{name} 'PRAGMA wal_checkpoint'; then pass /tmp/{name}")


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # the header of a rollback journal that is hot (sqlite's pager.c)
# The lock bytes of an SQLite file (os_unix.c): a writer holds RESERVED_BYTE (and more) while its transaction is open.
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1
LIVE = ("{path}: is being written now (a process holds its write lock: an open transaction), and dlagg reads "
        "committed data only; wait until the writer has finished (or stop it), then run dlagg again")
HOT = ("{journal}: a hot rollback journal ({size:,} bytes): a writer was stopped mid-transaction, so {name} holds "
       "changes that were never committed, and dlagg reads the main file only, read-only; copy both files "
       "elsewhere and let sqlite roll the changes back in the copy: cp {path} {journal} /tmp/ && "
       "sqlite3 /tmp/{name} 'PRAGMA quick_check'; then pass /tmp/{name}")


def _uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro&immutable=1"


def check_file(path: Path) -> None:
    """Refuse anything that is not a regular, non-empty file, with one line that says what to do.

    Only regular files (or symlinks to them) are opened: opening a FIFO would wait for a writer
    forever, a device would be read without end.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{shown(path)}: no such file; pass the SQLite export of an nsys report with "
                         "--nsys_database") from None
    except OSError as exc:
        raise InputError(f"{shown(path)}: cannot be read ({exc.strerror}); check the path and its "
                         "permissions") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{shown(path)}: is a directory; pass the .sqlite file exported by nsys, not its folder")
    if not stat.S_ISREG(info.st_mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a regular file")
        raise InputError(f"{shown(path)}: is {kind}, not a file; dlagg reads a regular .sqlite file: save the export "
                         "to a file first")
    if not _head(path):
        raise InputError(f"{shown(path)}: the file is empty; export the nsys report again")


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(f"{shown(path)}: cannot be read ({exc.strerror}); check its permissions") from None


def check_input(path: Path) -> None:
    """Refuse anything that is not a regular SQLite file, with one line that says what to do.

    A non-empty ``-wal`` beside the file holds changes the main file lacks, which the read-only,
    immutable open would silently ignore.
    """
    check_file(path)
    if _head(path) != SQLITE_MAGIC:
        if path.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
            raise InputError(f"{shown(path)}: is an Nsight Systems report, not its SQLite export; "
                             + EXPORT_HINT.format(name=shown(path.name)))
        raise InputError(f"{shown(path)}: is not an SQLite database; pass the file made by "
                         "'nsys export --type sqlite'")
    wal = path.with_name(path.name + "-wal")
    try:
        size = wal.stat().st_size if wal.exists() else 0
    except OSError:
        size = 0
    if size > 0:
        raise InputError(WAL.format(wal=shown(wal), size=size, name=shown(path.name), path=shown(path)))
    if _write_locked(path):
        raise InputError(LIVE.format(path=shown(path)))
    journal = path.with_name(path.name + "-journal")
    try:
        with journal.open("rb") as handle:
            header = handle.read(len(JOURNAL_MAGIC))
        size = journal.stat().st_size
    except OSError:  # none (the usual case), or unreadable: sqlite would not roll it back either
        return
    if header == JOURNAL_MAGIC:  # (a zeroed header, journal_mode=PERSIST's leftover, is no hot journal)
        raise InputError(HOT.format(journal=shown(journal), size=size, name=shown(path.name), path=shown(path)))


def _write_locked(path: Path) -> bool:
    """Whether a process holds `path`'s write lock (SQLite's RESERVED byte, which every writer holds while its
    transaction is open): one fcntl query, no lock taken. False where locks cannot be queried, and off Linux (the
    layout of `struct flock` packed here is Linux's). Closing the descriptor drops this process's own POSIX locks on
    the file, which dlagg's immutable connections never take."""
    if fcntl is None or not sys.platform.startswith("linux"):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, RESERVED_BYTE, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        return struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK
    except OSError:
        return False
    finally:
        os.close(fd)


class Database:
    """A read-only view of one SQLite file: which tables and columns exist, queries, and reads as Arrow tables.

    Metadata queries use one ``sqlite3`` connection; Arrow reads use one ADBC connection per
    thread, so several threads can read at once.
    """

    def __init__(self, path: Path, threads: int | None = None) -> None:
        check_input(path)
        self.path = path
        self.threads = threads or READ_THREADS  # that read it at once (`read_threads`)
        self.again = AGAIN
        self._local = threading.local()
        self._adbc: list[object] = []
        try:
            self.conn = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
            # nsys stores some strings that are not valid UTF-8 (environment blocks): keep them.
            self.conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
            self.tables: dict[str, list[str] | None] = {  # table -> its columns, once asked for
                name: None
                for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # (a damaged schema: undecodable text)
            raise InputError(f"{shown(path)}: the SQLite file is damaged or truncated ({exc}); "
                             "export the nsys report (or record the nvprof database) again") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close every connection (a second call does nothing)."""
        self.conn.close()
        while self._adbc:
            self._adbc.pop().close()  # type: ignore[attr-defined]

    def find(self, candidates: Iterable[str]) -> str | None:
        return next((name for name in candidates if name in self.tables), None)

    def columns(self, table: str) -> list[str]:
        with self._lock:
            columns = self.tables.get(table)
            if columns is None:
                try:
                    columns = [row[1] for row in self.conn.execute(f'PRAGMA table_info("{table}")')]
                except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # (a damaged schema: undecodable text)
                    raise InputError(DAMAGED.format(path=shown(self.path), what=f", table {table}", exc=exc,
                                                    again=self.again)) from None
                self.tables[table] = columns
            return columns

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        # (SQLite types each value, not the column: an int, float, str, bytes or None)
        try:
            with self._lock:
                return self.conn.execute(sql, params).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # (a damaged schema: undecodable text)
            raise InputError(DAMAGED.format(path=shown(self.path), what="", exc=exc, again=self.again)) from None

    def rows(self, table: str, where: str = "") -> int:
        """An upper bound of the rows of `table` (its row-id span; counted when the span is huge)."""
        clause = f" WHERE {where}" if where else ""
        first = self.query(f'SELECT min(rowid) FROM "{table}"{clause}')[0][0]
        if first is None:
            return 0
        last = self.query(f'SELECT max(rowid) FROM "{table}"{clause}')[0][0]
        span = int(last) - int(first) + 1
        if 0 < span <= SPAN_TRUSTED:
            return span
        return int(self.query(f'SELECT count(*) FROM "{table}"{clause}')[0][0])

    def _adbc_table(self, sql: str, batch_rows: int | None) -> pa.Table:
        conn = getattr(self._local, "adbc", None)
        if conn is None:
            import adbc_driver_sqlite.dbapi as adbc

            conn = self._local.adbc = adbc.connect(_uri(self.path))
            self._adbc.append(conn)
        cursor = conn.cursor()
        try:
            if batch_rows is not None:
                from adbc_driver_sqlite import StatementOptions

                cursor.adbc_statement.set_options(**{StatementOptions.BATCH_ROWS.value: str(batch_rows)})
            cursor.execute(sql)
            return cursor.fetch_arrow_table()
        finally:
            cursor.close()

    def arrow(self, sql: str, rows: int | None = None, what: str = "") -> pa.Table:
        """Run `sql`, whose result has at most `rows` rows, and return an Arrow table (ADBC; sqlite3
        fallback on type surprises). `what` (", table X") names the table in error messages.

        One batch of `rows` first (when the address space left can take the driver's reservation,
        limits.py), then the driver's default batches (a string column over 2 GiB).
        """
        attempts: list[int | None] = [None]
        if not limits.fits_driver():  # the driver's own allocations refused are a SIGSEGV too
            raise MemoryError(f"no address space left to run a query{what}")
        if rows is not None:
            batch = max(1, min(rows, MAX_BATCH_ROWS))
            if not limits.fits(batch * RESERVED_PER_ROW):
                batch = min(batch, SMALL_BATCH_ROWS)
                if not limits.fits(batch * RESERVED_PER_ROW):  # a reservation the driver is refused is a SIGSEGV
                    raise MemoryError(f"no address space left for a batch of {batch} rows{what}")
            attempts.insert(0, batch)
        from adbc_driver_manager import Error as DriverError  # (loaded with the driver: on first use)

        for batch_rows in attempts:
            try:
                return self._adbc_table(sql, batch_rows)
            except MemoryError:  # (Arrow's too) the caller says how much memory the run needs
                raise
            # The driver refused the result: its own errors, Arrow's, and the OSError Arrow raises for a
            # stream the driver broke off (a type mismatch mid-table, a damaged page). Try the next path.
            except (DriverError, pa.ArrowException, OSError):
                continue
        return self._sqlite3_table(sql, what)

    def _sqlite3_table(self, sql: str, what: str) -> pa.Table:
        """`sql` through the standard module: slow, but it takes any mix of value types in a column."""
        conn = sqlite3.connect(_uri(self.path), uri=True)  # this thread's own: the fallback is rare
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            cursor = conn.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # (a damaged schema: undecodable text)
            raise InputError(DAMAGED.format(path=shown(self.path), what=what, exc=exc, again=self.again)) from None
        finally:
            conn.close()
        # The module has no columnar interface: a tuple per row is its cost. Columns are taken out of the
        # rows by map(itemgetter), so no Python code runs per row (a list built per column was slower;
        # benchmarks/bench_reader.py, method "fallback", compares this path with the Arrow read). Slow, but only
        # a column changing type mid-table, beyond what one Arrow batch can hold, ever takes it.
        return pa.table({n: _column(list(map(itemgetter(i), rows))) for i, n in enumerate(names)})


def _column(values: list[object]) -> pa.Array:
    """A column of Python values; one whose values mix types (text in an integer column) as text,
    which the conversion to integers then marks (validate.integers)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([v if v is None else v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                         for v in values], type=pa.string())


__all__ = ["Database", "check_file", "check_input", "read_threads"]
