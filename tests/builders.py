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
               block: tuple[int, int, int] = (32, 1, 1)) -> None:
        sid = self.string(name)
        self.kernels.append((start, end, device, stream, corr, global_pid(pid), sid, sid, *grid, *block))

    def launch(self, api_start: int, api_end: int, k_start: int, k_end: int, name: str = "k", **kw: object) -> None:
        """A cudaLaunchKernel call and the kernel it launched."""
        pid = kw.pop("pid", PID)
        tid = kw.pop("tid", TID)
        corr = self.api(api_start, api_end, pid=pid, tid=tid)  # type: ignore[arg-type]
        self.kernel(k_start, k_end, name, corr=corr, pid=pid, **kw)  # type: ignore[arg-type]

    def copy(self, api_start: int, api_end: int, start: int, end: int, *, kind: int = 1, src_kind: int = 0,
             dst_kind: int = 2, nbytes: int = 1024, pid: int = PID, tid: int = TID) -> None:
        corr = self.api(api_start, api_end, "cudaMemcpyAsync_v3020", pid=pid, tid=tid)
        self.memcpy.append((start, end, 0, 7, corr, global_pid(pid), nbytes, kind, src_kind, dst_kind))

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
        conn.commit()
        conn.close()
        return path
