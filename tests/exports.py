"""Hypothesis strategies: valid nsys exports in every schema variant the reader supports, and damage.

`exports()` draws a `GeneratedExport`: a timeline (processes, threads, GPUs and streams; a key
node ``train_step`` cutting iterations on the main thread; nested and overlapping NVTX ranges on
several threads, start/end ranges crossing threads; kernels and copies launched from any thread
of any process, queued behind each other per stream, some running long after their launch, some
of zero length) and a schema variant (inline NVTX text or registered ``textId`` strings or both,
``_V2``/``_V3`` table names, ``EXPORT_META_DATA`` or ``META_DATA_EXPORT``, optional columns and
tables left out). ``write(path)`` makes the SQLite file with nsys's table and column names.

`damages()` draws a list of `Damage`: the mutation classes (text, reals and blobs in
integer columns, NULLs, end before start, huge and negative times, duplicated rows, dropped and
renamed tables and columns, non-UTF-8 text), applied with SQL to a written export. The key node's
rows and ``ANALYSIS_DETAILS`` are never damaged, so the iteration windows stay computable by SQL.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

KEY_NODE = "train_step"
PID_SHIFT = 24
RANGE_TYPES = {"pushpop": 59, "startend": 60}
DOMAIN_CREATE = 75
KERNELS = ("volta_h884gemm_64x64_ldg8_nn", "elementwise_kernel", "reduce_kernel", "sm80_xmma_fprop_tensorop",
           "vectorized_copy", "cutlass_tensorop_s1688gemm", "ffma_sgemm_kernel")
OP_NAMES = ("aten::conv2d", "aten::add", "aten::linear", "aten::relu", "forward", "backward", "optimizer",
            "data", "aten::mm, seq = 7, op_id = 3, sizes = [[2, 3], [3, 4]]", "ConvolutionBackward0",
            "loss", "aten::batch_norm, seq = 12")
API_LAUNCH = "cudaLaunchKernel_v7000"
API_COPY = "cudaMemcpyAsync_v3020"
API_MEMSET = "cudaMemsetAsync_v3020"

# nsys column lists, (name, SQL type); optional ones may be left out of a variant
KERNEL_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName",
                  "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
KERNEL_OPTIONAL = ("shortName", "gridY", "gridZ", "blockY", "blockZ", "globalPid")
RUNTIME_COLUMNS = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue")
RUNTIME_OPTIONAL = ("eventClass", "returnValue")
MEMCPY_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
                  "srcKind", "dstKind")
MEMCPY_OPTIONAL = ("srcKind", "dstKind")
MEMSET_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "memKind")
NVTX_COLUMNS = ("start", "end", "eventType", "rangeId", "text", "globalTid", "endGlobalTid", "textId", "domainId")
NVTX_OPTIONAL = ("rangeId", "endGlobalTid", "domainId")
OSRT_COLUMNS = ("start", "end", "eventClass", "globalTid", "nameId", "returnValue")


def global_tid(pid: int, tid: int) -> int:
    return (pid << PID_SHIFT) | tid


@dataclass
class GeneratedExport:
    """Rows per table (nsys column order as above, strings as text) and the schema variant."""

    kernels: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, pid, name
    runtime: list[tuple] = field(default_factory=list)  # start, end, pid, tid, corr, name
    memcpy: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, pid, bytes, kind
    memset: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, pid, bytes
    nvtx: list[tuple] = field(default_factory=list)  # start, end, type, pid, tid, end_tid, text, domain
    osrt: list[tuple] = field(default_factory=list)  # start, end, pid, tid, name
    devices: tuple[int, ...] = (0,)
    suffix: dict[str, str] = field(default_factory=dict)  # base table name -> "", "_V2" or "_V3"
    meta_table: str | None = "EXPORT_META_DATA"
    text_mode: str = "text"  # text, textId, both (some rows each), text_only (no textId column), id_only
    dropped: dict[str, tuple[str, ...]] = field(default_factory=dict)  # base table -> optional columns left out
    tables: frozenset[str] = frozenset()  # optional tables present
    session: int = 0  # ANALYSIS_DETAILS duration, 0 when the table is left out

    def table(self, base: str) -> str:
        return base + self.suffix.get(base, "")

    def write(self, path: Path) -> Path:
        strings: dict[str, int] = {}

        def sid(text: str) -> int:
            return strings.setdefault(text, len(strings) + 1)

        conn = sqlite3.connect(path)
        try:
            self._write(conn, sid)
            string_table = self.table("StringIds")
            conn.execute(f'CREATE TABLE "{string_table}" (id INTEGER PRIMARY KEY, value TEXT NOT NULL)')
            conn.executemany(f'INSERT INTO "{string_table}" VALUES (?, ?)', [(i, s) for s, i in strings.items()])
            conn.commit()
        finally:
            conn.close()
        return path

    def _create(self, conn: sqlite3.Connection, base: str, columns: tuple[str, ...], rows: list[dict]) -> None:
        keep = [c for c in columns if c not in self.dropped.get(base, ())]
        name = self.table(base)
        declared = ", ".join(f"{c} INTEGER" if c != "text" else "text TEXT" for c in keep)
        conn.execute(f'CREATE TABLE "{name}" ({declared})')
        conn.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" for _ in keep)})',
                         [tuple(row.get(c) for c in keep) for row in rows])

    def _write(self, conn: sqlite3.Connection, sid) -> None:  # noqa: ANN001 - the string-id callback
        kernel_rows = [dict(start=s, end=e, deviceId=d, streamId=st_, correlationId=c, globalPid=p << PID_SHIFT,
                            demangledName=sid(f"void {n}<float>(int)"), shortName=sid(n), gridX=8, gridY=1, gridZ=1,
                            blockX=128, blockY=1, blockZ=1)
                       for s, e, d, st_, c, p, n in self.kernels]
        self._create(conn, "CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLUMNS, kernel_rows)
        if "runtime" in self.tables:
            self._create(conn, "CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLUMNS,
                         [dict(start=s, end=e, eventClass=1, globalTid=global_tid(p, t), correlationId=c, nameId=sid(n),
                               returnValue=0) for s, e, p, t, c, n in self.runtime])
        if "memcpy" in self.tables:
            self._create(conn, "CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLUMNS,
                         [dict(start=s, end=e, deviceId=d, streamId=st_, correlationId=c, globalPid=p << PID_SHIFT,
                               bytes=b, copyKind=k, srcKind=0, dstKind=2) for s, e, d, st_, c, p, b, k in self.memcpy])
        if "memset" in self.tables:
            self._create(conn, "CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_COLUMNS,
                         [dict(start=s, end=e, deviceId=d, streamId=st_, correlationId=c, globalPid=p << PID_SHIFT,
                               bytes=b, memKind=2) for s, e, d, st_, c, p, b in self.memset])
        if "nvtx" in self.tables:
            columns = NVTX_COLUMNS
            if self.text_mode == "text_only":
                columns = tuple(c for c in columns if c != "textId")
            elif self.text_mode == "id_only":
                columns = tuple(c for c in columns if c != "text")
            rows = []
            for k, (s, e, kind, p, t, end_t, text, domain) in enumerate(self.nvtx):
                registered = self.text_mode == "id_only" or (self.text_mode == "textId" and kind != DOMAIN_CREATE) \
                    or (self.text_mode == "both" and k % 2 == 1 and kind != DOMAIN_CREATE)
                rows.append(dict(start=s, end=e, eventType=kind, rangeId=k, globalTid=global_tid(p, t),
                                 endGlobalTid=None if end_t is None else global_tid(p, end_t), domainId=domain,
                                 text=None if registered else text, textId=sid(text) if registered else None))
            self._create(conn, "NVTX_EVENTS", columns, rows)
        if "osrt" in self.tables:
            self._create(conn, "OSRT_API", OSRT_COLUMNS,
                         [dict(start=s, end=e, eventClass=27, globalTid=global_tid(p, t), nameId=sid(n), returnValue=0)
                          for s, e, p, t, n in self.osrt])
        if self.meta_table:
            conn.execute(f"CREATE TABLE {self.meta_table} (name TEXT, value TEXT)")
            conn.executemany(f"INSERT INTO {self.meta_table} VALUES (?, ?)",
                             [("EXPORT_PRODUCT_VERSION", "2023.4.1.97"), ("EXPORT_SCHEMA_VERSION", "3.11.1")])
        if "gpu" in self.tables:
            conn.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, computeMajor INTEGER, "
                         "computeMinor INTEGER, totalMemory INTEGER, smCount INTEGER)")
            conn.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, 8, 0, 42949672960, 108)",
                             [(d, f"Generated GPU {d}") for d in self.devices])
        if self.session:
            conn.execute("CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, "
                         "stopTime INTEGER)")
            conn.execute("INSERT INTO ANALYSIS_DETAILS VALUES (281474976710656, ?, 1000, ?)",
                         (self.session, 1000 + self.session))


class _Timeline:
    """Builds the rows while the strategy draws; keeps per-stream queues and correlation ids."""

    def __init__(self, export: GeneratedExport) -> None:
        self.export = export
        self.stream_free: dict[tuple[int, int], int] = {}
        self.corr: dict[int, int] = {}

    def next_corr(self, pid: int) -> int:
        self.corr[pid] = self.corr.get(pid, 0) + 1
        return self.corr[pid]

    def launch(self, draw, t: int, pid: int, tid: int) -> int:  # noqa: ANN001 - hypothesis' draw
        """A launch call at `t` on (pid, tid) and the GPU work it queues; returns the call's end."""
        api_len = draw(st.integers(0, 40))
        kind = draw(st.sampled_from(("kernel", "kernel", "kernel", "memcpy", "memset")))
        if kind != "kernel" and kind not in self.export.tables:
            kind = "kernel"
        correlated = "runtime" in self.export.tables and draw(st.integers(0, 9)) > 0  # some work has no call
        corr = self.next_corr(pid) if correlated else draw(st.integers(10_000, 10_010))
        if correlated:
            name = {"kernel": API_LAUNCH, "memcpy": API_COPY, "memset": API_MEMSET}[kind]
            self.export.runtime.append((t, t + api_len, pid, tid, corr, name))
        device = draw(st.sampled_from(self.export.devices))
        stream = draw(st.integers(1, 3))
        lag = draw(st.one_of(st.integers(0, 30), st.integers(200, 3_000)))  # CPU far ahead of the GPU
        start = max(t + lag, self.stream_free.get((device, stream), 0))
        end = start + draw(st.integers(0, 120))  # zero-length work too
        self.stream_free[(device, stream)] = end
        if kind == "kernel":
            self.export.kernels.append((start, end, device, stream, corr, pid, draw(st.sampled_from(KERNELS))))
        elif kind == "memcpy":
            self.export.memcpy.append((start, end, device, stream, corr, pid, draw(st.integers(0, 1 << 20)),
                                       draw(st.sampled_from((1, 2, 8)))))
        else:
            self.export.memset.append((start, end, device, stream, corr, pid, draw(st.integers(0, 1 << 20))))
        return t + api_len

    def ops(self, draw, lo: int, hi: int, pid: int, tid: int, depth: int) -> None:  # noqa: ANN001
        """Properly nested push/pop ranges between lo and hi on one thread, launching work."""
        t = lo
        for _ in range(draw(st.integers(0, 3 if depth < 2 else 1))):
            if t > hi:
                break
            a = draw(st.integers(t, hi))
            b = draw(st.integers(a, min(hi, a + 400)))  # zero-length ranges too
            if depth < 2 and b - a > 4 and draw(st.booleans()):
                self.ops(draw, a + 1, b - 1, pid, tid, depth + 1)
            elif draw(st.booleans()):
                self.launch(draw, draw(st.integers(a, b)), pid, tid)
            self.range(a, b, draw(st.sampled_from(OP_NAMES)), pid, tid)
            t = b
        if t < hi and draw(st.booleans()):
            self.launch(draw, draw(st.integers(t, hi)), pid, tid)

    def range(self, start: int, end: int | None, text: str, pid: int, tid: int, *, kind: str = "pushpop",
              end_tid: int | None = None, domain: int = 0) -> None:
        if "nvtx" in self.export.tables:
            self.export.nvtx.append((start, end, RANGE_TYPES[kind], pid, tid, end_tid, text, domain))


@st.composite
def exports(draw) -> GeneratedExport:  # noqa: ANN001
    """A valid export: see the module docstring."""
    suffixes = st.sampled_from(("", "", "_V2", "_V3"))
    optional = draw(st.sets(st.sampled_from(("memcpy", "memset", "osrt", "gpu")), max_size=4))
    if draw(st.integers(0, 4)):  # an export without CUDA API calls now and then
        optional.add("runtime")
    export = GeneratedExport(
        devices=tuple(sorted(draw(st.sets(st.integers(0, 3), min_size=1, max_size=3)))),
        suffix={base: draw(suffixes) for base in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                                                  "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                                                  "NVTX_EVENTS", "OSRT_API", "StringIds")},
        meta_table=draw(st.sampled_from(("EXPORT_META_DATA", "META_DATA_EXPORT", None))),
        text_mode=draw(st.sampled_from(("text", "textId", "both", "text_only", "id_only"))),
        dropped={
            "CUPTI_ACTIVITY_KIND_KERNEL": tuple(draw(st.sets(st.sampled_from(KERNEL_OPTIONAL), max_size=3))),
            "CUPTI_ACTIVITY_KIND_RUNTIME": tuple(draw(st.sets(st.sampled_from(RUNTIME_OPTIONAL)))),
            "CUPTI_ACTIVITY_KIND_MEMCPY": tuple(draw(st.sets(st.sampled_from(MEMCPY_OPTIONAL)))),
            "NVTX_EVENTS": tuple(draw(st.sets(st.sampled_from(NVTX_OPTIONAL)))),
        },
        tables=frozenset({"nvtx", *optional}),
    )
    timeline = _Timeline(export)
    processes = draw(st.integers(1, 2))
    threads = draw(st.integers(1, 3))
    main_pid, main_tid = 100, 100
    t = draw(st.integers(0, 2_000))
    for _ in range(draw(st.integers(0, 2))):  # work before the first step: iteration 0 starts with the profile
        t = timeline.launch(draw, t, main_pid, main_tid) + draw(st.integers(0, 50))
    if draw(st.booleans()):  # a domain-create row: negative start, no end, not a range
        export.nvtx.append((-draw(st.integers(1, 10**9)), None, DOMAIN_CREATE, main_pid, main_tid, None, "Dom", 1))
    for _ in range(draw(st.integers(1, 5))):  # iterations
        step_start = t
        step_end = t + draw(st.integers(50, 2_000))
        timeline.ops(draw, step_start + 1, step_end - 1, main_pid, main_tid, 0)
        for k in range(1, threads):  # other threads: start/end ranges that overlap, some crossing threads
            for _ in range(draw(st.integers(0, 2))):
                a = draw(st.integers(step_start, step_end))
                b = draw(st.integers(a, step_end + 300))
                timeline.range(a, b, draw(st.sampled_from(OP_NAMES)), main_pid, main_tid + k, kind="startend",
                               end_tid=draw(st.sampled_from((None, main_tid + k, main_tid))))
                if draw(st.booleans()):
                    timeline.launch(draw, draw(st.integers(a, b)), main_pid, main_tid + k)
        for pid in range(main_pid + 1, main_pid + processes):  # other processes launch on their own
            for _ in range(draw(st.integers(0, 2))):
                timeline.launch(draw, draw(st.integers(step_start, step_end)), pid, 7)
        if "osrt" in export.tables and draw(st.booleans()):
            a = draw(st.integers(step_start, step_end))
            export.osrt.append((a, a + draw(st.integers(0, 100)), main_pid, main_tid, draw(st.sampled_from(
                ("read", "write", "pthread_mutex_lock", "recv")))))
        timeline.range(step_start, step_end, KEY_NODE, main_pid, main_tid)
        t = step_end + draw(st.integers(0, 300))
    for _ in range(draw(st.integers(0, 2))):  # work after the last step: outside the aggregated window
        t = timeline.launch(draw, t, main_pid, main_tid) + draw(st.integers(0, 50))
    if not export.kernels:
        timeline.launch(draw, t, main_pid, main_tid)
    # nsys writes NVTX rows as ranges end: shuffle them (the reader must not rely on start order)
    export.nvtx = draw(st.permutations(export.nvtx)) if draw(st.booleans()) else sorted(
        export.nvtx, key=lambda r: (r[1] if r[1] is not None else -1))
    last = max(max((r[1] for r in rows if r[1] is not None), default=0)
               for rows in (export.kernels, export.runtime, export.memcpy, export.memset, export.nvtx, export.osrt))
    if draw(st.booleans()):
        export.session = last + draw(st.integers(0, 10_000))
    return export


# --- damage ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Damage:
    """One mutation: `kind` applied to `table` (a base name), `column`, rows picked by `where`."""

    kind: str
    table: str
    column: str = ""
    rows: int = 1  # every n-th row (by rowid) is hit

    def sql(self, export: GeneratedExport) -> list[str]:
        name = export.table(self.table)
        pick = f"rowid % {self.rows} = 0" + (f" AND NOT ({_key_row(export)})" if self.table == "NVTX_EVENTS" else "")
        col = f'"{self.column}"'
        values = {
            "text": "'abc'", "real": "0.5 + start", "huge_real": "1e300", "blob": "x'00ff'", "null": "NULL",
            "huge": "9223372036854775807", "negative": "-5000", "nan": "'NaN'",
        }
        if self.kind in values:
            return [f'UPDATE "{name}" SET {col} = {values[self.kind]} WHERE {pick}']
        if self.kind == "reversed":
            return [f'UPDATE "{name}" SET "end" = start - 1000 WHERE {pick}']
        if self.kind == "late":
            return [f'UPDATE "{name}" SET "end" = "end" + 1000000000 WHERE {pick}']
        if self.kind == "duplicate":
            return [f'INSERT INTO "{name}" SELECT * FROM "{name}" WHERE {pick}']
        if self.kind == "drop_table":
            return [f'DROP TABLE "{name}"']
        if self.kind == "drop_column":
            return [f'ALTER TABLE "{name}" DROP COLUMN {col}']
        if self.kind == "rename_column":
            return [f'ALTER TABLE "{name}" RENAME COLUMN {col} TO "{self.column}_renamed"']
        if self.kind == "non_utf8":
            return [f"UPDATE \"{name}\" SET {col} = CAST(x'41ff42fe' AS TEXT) WHERE {pick}"]
        if self.kind == "unclosed":  # a range without an end (nsys's unclosed ranges, here inside closed ones)
            return [f'UPDATE "{name}" SET "end" = NULL WHERE {pick}']
        if self.kind == "crossing":  # a push/pop range ending after the range it began in (and later ones)
            return [f'UPDATE "{name}" SET "end" = "end" + 700 WHERE {pick} AND eventType = 59']
        if self.kind == "fraction":  # a time that is not a whole number of ns
            return [f'UPDATE "{name}" SET {col} = {col} + 0.5 WHERE {pick}']
        if self.kind.startswith("strings_"):
            return _string_damage(name, self.kind, self.rows)
        raise ValueError(self.kind)


# StringIds damage (its table is rebuilt without the primary key and NOT NULL first, as a hand-made
# export may be); the key node's string is spared, so the iterations stay computable by SQL.
_STRING_DAMAGE = {
    "strings_text": "UPDATE {t} SET id = 'abc' WHERE {pick}",
    "strings_fraction": "UPDATE {t} SET id = id + 0.5 WHERE {pick}",
    "strings_null_id": "UPDATE {t} SET id = NULL WHERE {pick}",
    "strings_null_value": "UPDATE {t} SET value = NULL WHERE {pick}",
    "strings_duplicate": "INSERT INTO {t} SELECT * FROM {t} WHERE {pick}",
    "strings_same_id": "INSERT INTO {t} SELECT id, value || '_other' FROM {t} WHERE {pick}",
}


def _string_damage(table: str, kind: str, rows: int) -> list[str]:
    pick = f"rowid % {rows} = 0 AND value != '{KEY_NODE}'"
    return [f'CREATE TABLE loose_strings AS SELECT * FROM "{table}"', f'DROP TABLE "{table}"',
            f'ALTER TABLE loose_strings RENAME TO "{table}"', _STRING_DAMAGE[kind].format(t=f'"{table}"', pick=pick)]


def _key_row(export: GeneratedExport) -> str:
    """SQL: the NVTX row is an instance of the key node (whichever way its text is stored)."""
    inline = f"COALESCE(text, '') = '{KEY_NODE}'"
    strings = export.table("StringIds")
    registered = f"""COALESCE(textId, -1) IN (SELECT id FROM "{strings}" WHERE value = '{KEY_NODE}')"""
    return {"text_only": inline, "id_only": registered}.get(export.text_mode, f"{inline} OR {registered}")


# Damage per table: the columns a kind may hit (nsys names); the key node's rows are spared.
_TIME_KINDS = ("text", "real", "huge_real", "blob", "null", "huge", "negative", "reversed", "late", "nan", "fraction")
_TARGETS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "correlationId", "gridX"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "bytes"),
    "NVTX_EVENTS": ("start", "end", "globalTid", "eventType"),
}


@st.composite
def damages(draw, export: GeneratedExport) -> list[Damage]:  # noqa: ANN001
    """One to three mutations of `export`'s tables (see the module docstring)."""
    present = {"CUPTI_ACTIVITY_KIND_KERNEL"} | {t for t, name in (("CUPTI_ACTIVITY_KIND_RUNTIME", "runtime"),
                                                                  ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                                                                  ("NVTX_EVENTS", "nvtx")) if name in export.tables}
    out = []
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(sorted(present)))
        kind = draw(st.sampled_from((*_TIME_KINDS, "duplicate", "drop_table", "drop_column", "rename_column",
                                     "non_utf8", "crossing", "unclosed", "strings")))
        if kind == "strings":
            out.append(Damage(draw(st.sampled_from(sorted(_STRING_DAMAGE))), "StringIds", "id",
                              draw(st.sampled_from((1, 2, 3, 5)))))
            continue
        if kind in ("crossing", "unclosed") and table != "NVTX_EVENTS":
            kind = "fraction"
        columns = [c for c in _TARGETS[table] if c not in export.dropped.get(table, ())]
        if kind in ("drop_column", "rename_column"):
            columns = [c for c in columns if c not in ("start", "end")] + ["start", "end"]
        if kind == "non_utf8":
            if table != "NVTX_EVENTS" or export.text_mode == "id_only":
                continue
            columns = ["text"]
        if kind in ("reversed", "late", "crossing", "unclosed"):
            columns = ["end"]
        if kind == "drop_table" and table in ("CUPTI_ACTIVITY_KIND_KERNEL",):
            kind = "duplicate"
        if kind in ("drop_table", "drop_column", "rename_column") and table == "NVTX_EVENTS":
            continue  # the key node lives there: its loss is covered by the per-class tests
        out.append(Damage(kind, table, draw(st.sampled_from(columns)), draw(st.sampled_from((1, 2, 3, 5)))))
        if kind in ("drop_table",):
            present.discard(table)
    return out


def apply(path: Path, export: GeneratedExport, damage: list[Damage]) -> None:
    conn = sqlite3.connect(path)
    try:
        for d in damage:
            for statement in d.sql(export):
                try:
                    conn.execute(statement)
                except sqlite3.OperationalError:  # a column an earlier damage removed or renamed
                    pass
        conn.commit()
    finally:
        conn.close()
