"""The nsys SQLite tables dlagg reads, declared once: nsys column -> dlagg column, dtype, default.

Nsight Systems creates tables lazily (a run without memsets has no MEMSET table), renames them
between versions (``EXPORT_META_DATA`` -> ``META_DATA_EXPORT``, ``_V2``/``_V3`` suffixes in the
newest exports) and adds optional columns (``mangledName``, ``greenContextId``, ``graphNodeId``).
So the reader decides by table and column *presence*, never by version number: every logical
table lists the physical names it may have, newest first, and every column says what to use
when it is absent. A missing table yields an empty frame with the full typed columns.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of an event table.

    Tables read whole are int64 even where values are small: their frames' arrays are then views
    of the Arrow batch the driver returned, and a narrower copy would sit beside that batch, which
    lives as long as any of its columns. NVTX columns are copied slice by slice into preallocated
    arrays, so they take the narrowest type that holds them.
    """

    source: str  # nsys column name
    name: str  # dlagg column name
    dtype: str  # numpy dtype of the dlagg column
    default: int | None = None  # used when the column is absent or NULL; None = required


@dataclass(frozen=True)
class Table:
    name: str  # dlagg's name for the frame
    sources: tuple[str, ...]  # physical table names, newest first
    columns: tuple[Column, ...]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def required(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.default is None)


def _suffixed(base: str) -> tuple[str, ...]:
    return (f"{base}_V3", f"{base}_V2", base)


NO_ID = -1  # sentinel for "no string / no correlation" in integer id columns

# The columns every CUPTI GPU activity table (kernel, memcpy, memset, synchronization) starts with.
GPU_WORK = (
    Column("start", "start", "int64"),
    Column("end", "end", "int64"),
    Column("deviceId", "device_id", "int64", 0),
    Column("streamId", "stream_id", "int64", 0),
    Column("correlationId", "correlation_id", "int64", NO_ID),
    Column("globalPid", "global_pid", "int64", 0),
)

KERNELS = Table(
    "kernels",
    _suffixed("CUPTI_ACTIVITY_KIND_KERNEL"),
    (
        *GPU_WORK,
        Column("demangledName", "name_id", "int64", NO_ID),
        Column("shortName", "short_name_id", "int64", NO_ID),
        Column("mangledName", "mangled_name_id", "int64", NO_ID),  # absent from older exports
        Column("gridX", "grid_x", "int64", 0),
        Column("gridY", "grid_y", "int64", 0),
        Column("gridZ", "grid_z", "int64", 0),
        Column("blockX", "block_x", "int64", 0),
        Column("blockY", "block_y", "int64", 0),
        Column("blockZ", "block_z", "int64", 0),
    ),
)

RUNTIME = Table(
    "runtime",
    _suffixed("CUPTI_ACTIVITY_KIND_RUNTIME"),
    (
        Column("start", "start", "int64"),
        Column("end", "end", "int64"),
        Column("globalTid", "global_tid", "int64"),
        Column("correlationId", "correlation_id", "int64", NO_ID),
        Column("nameId", "name_id", "int64", NO_ID),
    ),
)

MEMCPY = Table(
    "memcpy",
    _suffixed("CUPTI_ACTIVITY_KIND_MEMCPY"),
    (
        *GPU_WORK,
        Column("bytes", "bytes", "int64", 0),
        Column("copyKind", "copy_kind", "int64", 0),
        Column("srcKind", "src_kind", "int64", NO_ID),
        Column("dstKind", "dst_kind", "int64", NO_ID),
    ),
)

MEMSET = Table(
    "memset",
    _suffixed("CUPTI_ACTIVITY_KIND_MEMSET"),
    (
        *GPU_WORK,
        Column("bytes", "bytes", "int64", 0),
    ),
)

SYNC = Table(
    "sync",
    _suffixed("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    (
        *GPU_WORK,
        Column("syncType", "sync_type", "int64", NO_ID),
    ),
)

# NVTX ranges (push/pop and start/end; marks are not read, domain-creation rows only for the
# domain names). The text is read apart, cut and dictionary-encoded (reader/nvtx.py): the frame gets
# text_id (name id in the string table), seq (autograd sequence number, -1), crosses_thread and row
# besides these; whether a name was an emit_nvtx marker is kept per name (Profile.nvtx_names).
NVTX = Table(
    "nvtx",
    _suffixed("NVTX_EVENTS"),
    (
        Column("start", "start", "int64"),
        Column("end", "end", "int64", NO_ID),
        Column("eventType", "event_type", "int8"),  # only to set domain-creation rows apart
        Column("globalTid", "global_tid", "int64", 0),
        Column("endGlobalTid", "end_global_tid", "int64", 0),
        Column("domainId", "domain_id", "int32", 0),
    ),
)

OSRT = Table(
    "osrt",
    _suffixed("OSRT_API"),
    (
        Column("start", "start", "int64"),
        Column("end", "end", "int64"),
        Column("globalTid", "global_tid", "int64", 0),
        Column("nameId", "name_id", "int64", NO_ID),
    ),
)

EVENT_TABLES = (KERNELS, RUNTIME, MEMCPY, MEMSET, SYNC, NVTX, OSRT)

STRING_TABLES = _suffixed("StringIds")
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023.x+ first, then <= 2022.x
SYSTEM_ENV_TABLES = ("TARGET_INFO_SYSTEM_ENV",)
SYSTEM_INFO_TABLES = ("SystemInfo",)  # nsys 2022.1 exports; gone by 2022.4 (reference section 2.1)
GPU_TABLES = ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU")

# NVTX event types (ENUM_NSYS_EVENT_TYPE): the ones that carry a range or a domain name.
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTXT_PUSHPOP = 70
NVTXT_STARTEND = 71
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_TYPES = (NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND)

# ENUM_CUDA_MEMCPY_OPER ids, stable since the first exports.
HTOD, DTOH = 1, 2  # the two host<->device kinds below
MEMCPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "Unified HtoD",
    12: "Unified DtoH",
    13: "Unified DtoD",
}

# ENUM_CUDA_MEM_KIND ids (memcpy srcKind/dstKind, memset memKind).
MEM_KIND_PAGEABLE = 0
MEM_KIND_PINNED = 1

# The process part of a globalTid: globalTid & PID_MASK == globalPid of that process's GPU rows.
PID_MASK = -0x1000000  # == 0xFFFFFFFFFF000000 as int64
