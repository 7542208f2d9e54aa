"""Read an nsys SQLite export into a `Profile`, read-only, whatever the nsys version.

Contract: ``load_profile(path) -> Profile``. The file is opened ``mode=ro&immutable=1``: nothing is
written, no index or column is added (DLProf altered its input; dlagg never does). Event tables
are read through the Arrow-native ADBC SQLite driver (see docs/design.md, "Reader: why ADBC"),
with the standard ``sqlite3`` module as a fallback for the rare column whose values change type
mid-table.

Memory is the budget that matters on big exports (peak under twice the file size), so each table
arrives as one Arrow batch and its numeric columns become numpy arrays *without a copy*; the NVTX
inline text (most of an emit_nvtx export's bytes) arrives in the same query as the ``StringIds``
values, so the string table is that one Arrow array, never concatenated or converted to Python.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..model import Profile, ProfileMeta, StringTable
from . import schema
from .schema import NO_ID, Column, Table

SQLITE_MAGIC = b"SQLite format 3\x00"
# Rows per Arrow batch asked of the ADBC driver: a whole table in one batch, so columns arrive
# contiguous and numeric ones become numpy arrays with no copy (the default of 1024-row batches
# costs a concatenation per column and fragments the heap). The driver's maximum is 2**31 - 2.
ONE_BATCH_ROWS = 2**30
EXPORT_HINT = "export it first: nsys export --type sqlite --output run.sqlite {name}"


def _uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro&immutable=1"


def check_input(path: Path) -> None:
    """Refuse anything that is not an SQLite file, with one line that says what to do."""
    if not path.exists():
        raise InputError(f"{path}: no such file; pass the SQLite export of an nsys report with --nsys_database")
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass the .sqlite file exported by nsys, not its folder")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    if not head:
        raise InputError(f"{path}: the file is empty; export the nsys report again")
    if head != SQLITE_MAGIC:
        if path.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
            raise InputError(f"{path}: is an Nsight Systems report, not its SQLite export; "
                             + EXPORT_HINT.format(name=path.name))
        raise InputError(f"{path}: is not an SQLite database; pass the file made by "
                         "'nsys export --type sqlite'")


class Database:
    """A read-only view of one export: which tables and columns exist, and typed reads."""

    def __init__(self, path: Path) -> None:
        check_input(path)
        self.path = path
        self._adbc = None
        try:
            self.conn = sqlite3.connect(_uri(path), uri=True)
            # nsys stores some strings that are not valid UTF-8 (environment blocks): keep them.
            self.conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
            self.tables = {
                name: None
                for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{path}: the SQLite file is damaged or truncated ({exc}); "
                             "export the nsys report again") from None

    def close(self) -> None:
        self.conn.close()
        if self._adbc is not None:
            self._adbc.close()

    def find(self, candidates: Iterable[str]) -> str | None:
        return next((name for name in candidates if name in self.tables), None)

    def columns(self, table: str) -> list[str]:
        if self.tables.get(table) is None:
            self.tables[table] = [row[1] for row in self.conn.execute(f'PRAGMA table_info("{table}")')]
        return self.tables[table]  # type: ignore[return-value]

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: cannot read the database ({exc}); "
                             "the export may be truncated: export the nsys report again") from None

    def _adbc_table(self, sql: str, batch_rows: int | None) -> pa.Table:
        if self._adbc is None:
            import adbc_driver_sqlite.dbapi as adbc

            self._adbc = adbc.connect(_uri(self.path))
        cursor = self._adbc.cursor()
        try:
            if batch_rows is not None:
                from adbc_driver_sqlite import StatementOptions

                cursor.adbc_statement.set_options(**{StatementOptions.BATCH_ROWS.value: str(batch_rows)})
            cursor.execute(sql)
            return cursor.fetch_arrow_table()
        finally:
            cursor.close()

    def arrow(self, sql: str) -> pa.Table:
        """Run `sql` and return an Arrow table (ADBC; sqlite3 fallback on type surprises).

        One batch first; default batches when one does not fit (a string column over 2 GiB).
        """
        for batch_rows in (ONE_BATCH_ROWS, None):
            try:
                return self._adbc_table(sql, batch_rows)
            except Exception:  # noqa: BLE001, S112 - any driver failure: try the next, slower path
                continue
        try:
            cursor = self.conn.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: cannot read the database ({exc}); "
                             "the export may be truncated: export the nsys report again") from None
        return pa.table({n: pa.array([r[i] for r in rows]) for i, n in enumerate(names)})

    def read(
        self, table: Table, *, extra: str = "", where: str = "", prefix: str = "", skip: int = 0
    ) -> tuple[pd.DataFrame, str | None, pa.Table | None]:
        """Read `table` with its declared dlagg columns and dtypes (empty frame if absent).

        Returns the frame, the physical table name, and the Arrow table (for extra columns).
        `prefix` is a SELECT whose `skip` rows come first (``UNION ALL``) and are left out of the
        frame: it lets another table's values share one Arrow column with `extra`.
        """
        physical = self.find(table.sources)
        if physical is None:
            return empty_frame(table), None, None
        present = set(self.columns(physical))
        missing = [c.source for c in table.required if c.source not in present]
        if missing:
            raise InputError(f"{self.path}: table {physical} lacks column(s) {', '.join(missing)}; "
                             "this does not look like an nsys export")
        select = [_select(column, present) for column in table.columns]
        if extra:
            select.append(extra)
        sql = f'SELECT {", ".join(select)} FROM "{physical}"' + (f" WHERE {where}" if where else "")
        arrow = self.arrow(f"{prefix} UNION ALL {sql}" if prefix else sql)
        frame = pd.DataFrame(
            {column.name: _as_numpy(arrow.column(column.name), column)[skip:] for column in table.columns},
            copy=False,  # the arrays are views of the Arrow batch: keep them, do not consolidate
        )
        return frame, physical, arrow


def _select(column: Column, present: set[str]) -> str:
    if column.source not in present:
        return f"{column.default} AS {column.name}"
    if column.default is None:
        return f'"{column.source}" AS {column.name}'
    return f'COALESCE("{column.source}", {column.default}) AS {column.name}'


def _as_numpy(array: pa.ChunkedArray, column: Column) -> np.ndarray:
    """The column as numpy: a view of the Arrow buffer when it is one chunk of the right type."""
    if array.null_count:
        array = pc.fill_null(array, column.default if column.default is not None else 0)
    if pa.types.is_null(array.type):
        return np.full(len(array), column.default or 0, dtype=column.dtype)
    return array.to_numpy().astype(column.dtype, copy=False)


def empty_frame(table: Table) -> pd.DataFrame:
    return pd.DataFrame({c.name: np.empty(0, dtype=c.dtype) for c in table.columns})


def _key_values(db: Database, candidates: Iterable[str]) -> dict[str, str]:
    physical = db.find(candidates)
    if physical is None:
        return {}
    if not {"name", "value"} <= set(db.columns(physical)):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in db.query(f'SELECT name, value FROM "{physical}"')}


_GPU_COLUMNS = {  # dlagg column -> candidate nsys columns, across TARGET_INFO_GPU / _CUDA_GPU versions
    "device_id": ("cuDevice", "id", "deviceId"),
    "name": ("name",),
    "cc_major": ("computeMajor", "computeCapabilityMajor"),
    "cc_minor": ("computeMinor", "computeCapabilityMinor"),
    "total_memory": ("totalMemory", "globalMemorySize"),
    "sm_count": ("smCount", "numMultiprocessors"),
}


def _gpus(db: Database) -> pd.DataFrame:
    """One row per GPU, from whichever GPU table answers most of the columns."""
    best: tuple[int, pd.DataFrame] | None = None
    for physical in schema.GPU_TABLES:
        if physical not in db.tables:
            continue
        present = db.columns(physical)
        picks = {key: next((c for c in cands if c in present), None) for key, cands in _GPU_COLUMNS.items()}
        if picks["name"] is None or picks["device_id"] is None:
            continue
        select = ", ".join(f'"{col}" AS {key}' if col else f"NULL AS {key}" for key, col in picks.items())
        frame = pd.DataFrame(db.query(f'SELECT {select} FROM "{physical}"'), columns=list(_GPU_COLUMNS))
        score = sum(col is not None for col in picks.values())
        if len(frame) and (best is None or score > best[0]):
            best = (score, frame)
    if best is None:
        return pd.DataFrame(columns=list(_GPU_COLUMNS))
    gpus = best[1].drop_duplicates("device_id", keep="first")
    return gpus.sort_values("device_id", kind="stable").reset_index(drop=True)


def _utf8(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """`values` with invalid UTF-8 (nsys keeps some raw environment bytes) replaced, like sqlite3 would."""
    try:
        values.validate(full=True)
        return values
    except pa.ArrowInvalid:  # rare: decode in Python with replacement characters
        raw = values.cast(pa.binary()).to_pylist()
        return pa.chunked_array([pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw],
                                          type=pa.string())])


def _nvtx_and_strings(db: Database, strings_table: str) -> tuple[pd.DataFrame, str | None, pd.Series, dict[int, str]]:
    """NVTX events (without domain-creation rows), the string table, and NVTX domain names.

    Inline NVTX text (``NVTX_EVENTS.text``) gets string ids after the ``StringIds`` ones, one per
    row (emit_nvtx names are unique per row anyway: deduplicating 0.85 M strings cost more than the
    rest of the read). The StringIds values and the inline texts come out of one ``UNION ALL``
    query as one Arrow column, which *is* the string table: 0.1 GB of text per 0.85 M ranges is
    neither copied nor turned into Python objects.
    """
    string_ids = db.arrow(f'SELECT "id" FROM "{strings_table}" ORDER BY "id"').column("id")
    string_ids = string_ids.to_numpy().astype(np.int64, copy=False) if len(string_ids) else np.empty(0, np.int64)
    base = int(string_ids[-1]) + 1 if len(string_ids) else 0
    by_id = f'(SELECT "value" FROM "{strings_table}" ORDER BY "id")'
    nvtx_table = db.find(schema.NVTX.sources)
    inline = nvtx_table is not None and "text" in db.columns(nvtx_table)
    not_domain = f'"eventType" != {schema.NVTX_DOMAIN_CREATE}'
    if inline:
        defaults = ", ".join(f"{c.default if c.default is not None else 0} AS {c.name}" for c in schema.NVTX.columns)
        nvtx, _, arrow = db.read(schema.NVTX, extra='"text" AS text', where=not_domain,
                                 prefix=f'SELECT {defaults}, "value" AS text FROM {by_id}', skip=len(string_ids))
        values = arrow.column("text")
        has_text = values.is_valid().to_numpy(zero_copy_only=False)[len(string_ids):]
        inline_ids = base + np.arange(len(nvtx), dtype=np.int64)
        if has_text.any():
            nvtx = nvtx.assign(text_id=np.where(has_text, inline_ids, nvtx["text_id"].to_numpy()))
        ids = np.concatenate((string_ids, inline_ids))
    else:
        nvtx, _, _ = db.read(schema.NVTX, where=not_domain) if nvtx_table else (empty_frame(schema.NVTX), None, None)
        values = db.arrow(f'SELECT "value" FROM {by_id}').column("value")
        ids = string_ids
    if pa.types.is_null(values.type):
        values = values.cast(pa.string())
    strings = pd.Series(pd.array(_utf8(values), dtype="str"), index=pd.Index(ids, dtype=np.int64, copy=False))
    table = StringTable(strings)
    domains = {0: ""}
    if nvtx_table is not None:
        present = db.columns(nvtx_table)
        text = '"text"' if "text" in present else "NULL"
        text_id = '"textId"' if "textId" in present else "NULL"
        domain = '"domainId"' if "domainId" in present else "0"
        for domain_id, name, name_id in db.query(
            f'SELECT {domain}, {text}, {text_id} FROM "{nvtx_table}" WHERE "eventType" = {schema.NVTX_DOMAIN_CREATE}'
        ):
            if name is None:
                name = table.get(int(name_id), "") if name_id is not None else ""
            domains[int(domain_id or 0)] = str(name)
    return nvtx, nvtx_table, strings, domains


def _nvtx_and_strings_of(path: Path, strings_table: str) -> tuple[pd.DataFrame, str | None, pd.Series, dict[int, str]]:
    db = Database(path)
    try:
        return _nvtx_and_strings(db, strings_table)
    finally:
        db.close()


def load_profile(path: str | Path) -> Profile:
    """Read every table dlagg uses from the nsys export at `path`."""
    path = Path(path)
    db = Database(path)
    try:
        known = [t for t in schema.EVENT_TABLES if db.find(t.sources)]
        strings_table = db.find(schema.STRING_TABLES)
        if strings_table is None or not known:
            raise InputError(f"{path}: is an SQLite database but not an nsys export (no StringIds or "
                             "event tables); pass the file made by 'nsys export --type sqlite'")
        frames: dict[str, pd.DataFrame] = {}
        physical: dict[str, str] = {}
        # NVTX (most of an emit_nvtx export) is read on a second thread, with its own connection,
        # while this one reads the other tables: SQLite and the ADBC driver release the GIL.
        with ThreadPoolExecutor(max_workers=1) as pool:
            nvtx_job = pool.submit(_nvtx_and_strings_of, path, strings_table)
            for table in schema.EVENT_TABLES:
                if table is not schema.NVTX:
                    frames[table.name], physical[table.name], _ = db.read(table)
            meta_values = _key_values(db, schema.META_TABLES)
            env = _key_values(db, schema.SYSTEM_ENV_TABLES)
            gpus = _gpus(db)
            frames["nvtx"], physical["nvtx"], strings, domains = nvtx_job.result()
        frames = {table.name: frames[table.name] for table in schema.EVENT_TABLES}
        physical = {t.name: physical[t.name] for t in schema.EVENT_TABLES if physical[t.name] is not None}
    finally:
        db.close()

    start, end = _time_range(frames)
    frames["nvtx"] = _close_nvtx(frames["nvtx"], end)
    meta = ProfileMeta(
        source=path.name,
        nsys_version=meta_values.get("EXPORT_PRODUCT_VERSION", ""),
        schema_version=meta_values.get("EXPORT_SCHEMA_VERSION", ""),
        tables=physical,
        system_env=env,
        domains=domains,
        start=start,
        end=end,
    )
    return Profile(strings=StringTable(strings), gpus=gpus, meta=meta, **frames)


def _close_nvtx(nvtx: pd.DataFrame, profile_end: int) -> pd.DataFrame:
    """Marks get end = start; ranges left open (NULL end) end with the profile."""
    end = nvtx["end"].to_numpy()
    start = nvtx["start"].to_numpy()
    is_mark = nvtx["event_type"].to_numpy() == schema.NVTX_MARK
    open_range = ~is_mark & (end < start)
    if not (is_mark.any() or open_range.any()):
        return nvtx
    return nvtx.assign(end=np.where(is_mark, start, np.where(open_range, profile_end, end)))


def _time_range(frames: dict[str, pd.DataFrame]) -> tuple[int, int]:
    starts = [f["start"].min() for f in frames.values() if len(f)]
    ends = [f["end"].max() for f in frames.values() if len(f)]  # NULL ends read as -1: harmless here
    if not starts:
        return 0, 0
    return int(min(starts)), int(max(max(ends), max(starts)))


__all__ = ["load_profile", "Database", "check_input", "NO_ID"]
