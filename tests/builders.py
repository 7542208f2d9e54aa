"""Build tiny nsys-shaped SQLite exports for hand-made test cases.

Only the tables and columns dlagg reads, with nsys's names and id encodings
(globalTid = pid << 24 | tid, globalPid = pid << 24, strings in StringIds).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

PID = 100
TID = 101


def global_tid(pid: int = PID, tid: int = TID) -> int:
    return (pid << 24) | tid


def global_pid(pid: int = PID) -> int:
    return pid << 24


@dataclass
class ExportBuilder:
    strings: dict[str, int] = field(default_factory=dict)
    kernels: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    memcpy: list[tuple] = field(default_factory=list)
    nvtx: list[tuple] = field(default_factory=list)
    memset_rows: list[tuple] = field(default_factory=list)
    system_env: dict[str, str] = field(default_factory=dict)  # TARGET_INFO_SYSTEM_ENV rows, when given
    system_info: dict[str, str] = field(default_factory=dict)  # a SystemInfo table (nsys 2022.1), when given
    next_corr: int = 1

    def string(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 1)

    def api(self, start: int, end: int, name: str = "cudaLaunchKernel_v7000", *, pid: int = PID, tid: int = TID,
            corr: int | None = None) -> int:
        """A runtime API call; returns its correlation id."""
        if corr is None:
            corr, self.next_corr = self.next_corr, self.next_corr + 1
        self.runtime.append((start, end, 0, global_tid(pid, tid), corr, self.string(name)))
        return corr

    def kernel(self, start: int, end: int, name: str = "k", *, corr: int = 0, pid: int = PID, device: int = 0,
               stream: int = 7, grid: tuple[int, int, int] = (1, 1, 1),
               block: tuple[int, int, int] = (32, 1, 1), short: str | None = None) -> None:
        """A kernel; its short name is `short` (nsys's shortName), else the demangled `name` itself."""
        sid = self.string(name)
        self.kernels.append((start, end, device, stream, corr, global_pid(pid), sid,
                             sid if short is None else self.string(short), *grid, *block))

    def launch(self, api_start: int, api_end: int, k_start: int, k_end: int, name: str = "k", **kw: object) -> None:
        """A cudaLaunchKernel call and the kernel it launched."""
        pid = kw.pop("pid", PID)
        tid = kw.pop("tid", TID)
        corr = self.api(api_start, api_end, pid=pid, tid=tid)  # type: ignore[arg-type]
        self.kernel(k_start, k_end, name, corr=corr, pid=pid, **kw)  # type: ignore[arg-type]

    def copy(self, api_start: int, api_end: int, start: int, end: int, *, kind: int = 1, src_kind: int = 0,
             dst_kind: int = 2, nbytes: int = 1024, pid: int = PID, tid: int = TID,
             call: str = "cudaMemcpyAsync_v3020") -> None:
        corr = self.api(api_start, api_end, call, pid=pid, tid=tid)
        self.memcpy.append((start, end, 0, 7, corr, global_pid(pid), nbytes, kind, src_kind, dst_kind))

    def set(self, api_start: int, api_end: int, start: int, end: int, *, nbytes: int = 1024, pid: int = PID,
            tid: int = TID, call: str = "cudaMemsetAsync_v3020") -> None:
        """A memset and the call that issued it."""
        corr = self.api(api_start, api_end, call, pid=pid, tid=tid)
        self.memset_rows.append((start, end, 0, 7, corr, global_pid(pid), 0, nbytes))

    def range(self, start: int, end: int | None, text: str, *, tid: int = TID, pid: int = PID,
              event_type: int = 59, domain: int = 0, registered: bool = False) -> None:
        if registered:
            self.nvtx.append((start, end, event_type, None, global_tid(pid, tid), domain, self.string(text)))
        else:
            self.nvtx.append((start, end, event_type, text, global_tid(pid, tid), domain, None))

    def write(self, path: Path) -> Path:
        conn = sqlite3.connect(path)
        conn.executescript("""
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);
            CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, computeMajor INTEGER, computeMinor INTEGER,
                                          totalMemory INTEGER, smCount INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
                demangledName INTEGER, shortName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER,
                blockX INTEGER, blockY INTEGER, blockZ INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
                eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
                copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
                text TEXT, globalTid INTEGER, domainId INTEGER, textId INTEGER);
        """)
        conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        conn.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)",
                         [("EXPORT_PRODUCT_VERSION", "2022.4.2.1"), ("EXPORT_SCHEMA_VERSION", "3.0.0")])
        conn.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'Test GPU', 9, 0, 80000000000, 132)")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self.kernels)
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)", self.runtime)
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?)", self.memcpy)
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?)", self.nvtx)
        if self.memset_rows:
            conn.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER,
                bytes INTEGER)""")
            conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?)", self.memset_rows)
        if self.system_env:
            conn.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, "
                         "name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL)")
            conn.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'Init', ?, 0, ?)",
                             list(self.system_env.items()))
        if self.system_info:
            conn.execute("CREATE TABLE SystemInfo (name TEXT, value TEXT)")
            conn.executemany("INSERT INTO SystemInfo VALUES (?, ?)", list(self.system_info.items()))
        conn.commit()
        conn.close()
        return path


# --- nvprof databases -------------------------------------------------------------------------------

NVPROF_EPOCH = 1_583_978_808_000_000_000  # nvprof's timestamps are absolute (ns since 1970)
NVPROF_PID = 15938
NVPROF_TID = 0xEADC3740  # a pthread handle: nvprof stores it as a signed 32-bit int in the API tables
CBID_LAUNCH = 211  # cudaLaunchKernel_v7000
CBID_MEMCPY_ASYNC = 41  # cudaMemcpyAsync_v3020
CBID_CU_LAUNCH = 307  # cuLaunchKernel (driver API)


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def object_id(pid: int, tid: int) -> bytes:
    """CUPTI's objectId union as nvprof stores it: pid and tid, little-endian uint32, 4 bytes padding."""
    return pid.to_bytes(4, "little") + tid.to_bytes(4, "little") + bytes(4)


@dataclass
class NvprofBuilder:
    """A tiny database with nvprof's schema (its table and column names, ``_id_`` keys, one
    ``StringTable``, cbid-coded API rows, start/end marker rows); times are given relative to
    `NVPROF_EPOCH` and stored absolute, like nvprof does."""

    strings: dict[str, int] = field(default_factory=lambda: {"-- null --": 0})
    kernels: list[tuple] = field(default_factory=list)
    serial_kernels: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    driver: list[tuple] = field(default_factory=list)
    memcpy: list[tuple] = field(default_factory=list)
    markers: list[tuple] = field(default_factory=list)
    next_corr: int = 100
    next_marker: int = 5000

    def string(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings))

    def api(self, start: int, end: int, cbid: int = CBID_LAUNCH, *, tid: int = NVPROF_TID,
            driver: bool = False) -> int:
        corr, self.next_corr = self.next_corr, self.next_corr + 1
        row = (cbid, NVPROF_EPOCH + start, NVPROF_EPOCH + end, NVPROF_PID, _signed32(tid), corr, 0)
        (self.driver if driver else self.runtime).append(row)
        return corr

    def launch(self, api_start: int, api_end: int, start: int, end: int, name: str, *, stream: int = 7,
               tid: int = NVPROF_TID, serial: bool = False, driver: bool = False,
               grid: tuple[int, int, int] = (1, 1, 1), block: tuple[int, int, int] = (128, 1, 1)) -> int:
        corr = self.api(api_start, api_end, CBID_CU_LAUNCH if driver else CBID_LAUNCH, tid=tid, driver=driver)
        row = (NVPROF_EPOCH + start, NVPROF_EPOCH + end, 0, 1, stream, *grid, *block, corr, self.string(name))
        (self.serial_kernels if serial else self.kernels).append(row)
        return corr

    def copy(self, api_start: int, api_end: int, start: int, end: int, *, nbytes: int = 4096,
             copy_kind: int = 1, src_kind: int = 1, dst_kind: int = 3) -> None:
        """A cudaMemcpyAsync (CUPTI kinds: 1 HtoD; memory 1 pageable, 2 pinned, 3 device)."""
        corr = self.api(api_start, api_end, CBID_MEMCPY_ASYNC)
        self.memcpy.append((copy_kind, src_kind, dst_kind, 0, nbytes, NVPROF_EPOCH + start, NVPROF_EPOCH + end,
                            0, 1, 7, corr, corr))

    def range(self, start: int, end: int | None, text: str, *, tid: int = NVPROF_TID,
              end_tid: int | None = None) -> None:
        """A start marker row and, unless `end` is None, its end row (same id)."""
        marker, self.next_marker = self.next_marker, self.next_marker + 1
        self.markers.append((2, NVPROF_EPOCH + start, marker, 2, object_id(NVPROF_PID, tid), self.string(text), 0))
        if end is not None:
            self.markers.append((4, NVPROF_EPOCH + end, marker, 2, object_id(NVPROF_PID, end_tid or tid), 0, 0))

    def mark(self, at: int, text: str) -> None:
        """An instantaneous marker (nvtxMark)."""
        marker, self.next_marker = self.next_marker, self.next_marker + 1
        self.markers.append((1, NVPROF_EPOCH + at, marker, 2, object_id(NVPROF_PID, NVPROF_TID), self.string(text), 0))

    def write(self, path: Path) -> Path:
        kernel_columns = """(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, start INT NOT NULL, end INT NOT NULL,
                deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, gridX INT NOT NULL,
                gridY INT NOT NULL, gridZ INT NOT NULL, blockX INT NOT NULL, blockY INT NOT NULL,
                blockZ INT NOT NULL, correlationId INT NOT NULL, name INT NOT NULL)"""
        api_columns = """(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, cbid INT NOT NULL, start INT NOT NULL,
                end INT NOT NULL, processId INT NOT NULL, threadId INT NOT NULL, correlationId INT NOT NULL,
                returnValue INT NOT NULL)"""
        conn = sqlite3.connect(path)
        conn.executescript(f"""
            CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY AUTOINCREMENT, value TEXT NOT NULL UNIQUE);
            CREATE TABLE Version (version INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL {kernel_columns};
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL {kernel_columns};
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME {api_columns};
            CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER {api_columns};
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (_id_ INTEGER PRIMARY KEY AUTOINCREMENT, copyKind INT NOT NULL,
                srcKind INT NOT NULL, dstKind INT NOT NULL, flags INT NOT NULL, bytes INT NOT NULL,
                start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL, contextId INT NOT NULL,
                streamId INT NOT NULL, correlationId INT NOT NULL, runtimeCorrelationId INT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MARKER (_id_ INTEGER PRIMARY KEY AUTOINCREMENT, flags INT NOT NULL,
                timestamp INT NOT NULL, id INT NOT NULL, objectKind INT NOT NULL, objectId BLOB NOT NULL,
                name INT NOT NULL, domain INT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_DEVICE (_id_ INTEGER PRIMARY KEY AUTOINCREMENT,
                globalMemorySize INT NOT NULL, numMultiprocessors INT NOT NULL,
                computeCapabilityMajor INT NOT NULL, computeCapabilityMinor INT NOT NULL, id INT NOT NULL,
                name INT NOT NULL);
        """)
        device = self.string("Tesla V100-SXM2-16GB")
        conn.executemany("INSERT INTO StringTable VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        conn.execute("INSERT INTO Version VALUES (12)")
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_DEVICE VALUES (1, 16914055168, 80, 7, 0, 0, ?)", (device,))
        for table, rows, width in (("CONCURRENT_KERNEL", self.kernels, 13), ("KERNEL", self.serial_kernels, 13),
                                   ("RUNTIME", self.runtime, 7), ("DRIVER", self.driver, 7),
                                   ("MEMCPY", self.memcpy, 12), ("MARKER", self.markers, 7)):
            marks = ",".join("?" * width)
            conn.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_{table} VALUES (NULL,{marks})", rows)
        conn.commit()
        conn.close()
        return path
