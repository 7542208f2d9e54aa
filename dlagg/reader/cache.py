"""The read model of an input file kept on disk, so that the next run on the same file skips the read.

Contract: ``cached_profile(path, process, threads, use=, folder=, level=) -> Profile`` is ``load_profile`` with a
cache: what the reader yields for one file (and one process of it) is kept as Parquet files in one folder per entry,
and a later call on the unchanged file reads them back instead. Only the reader's output is kept, which no option
changes (iterations, key node, reports and formats are all decided later), so every option may differ between runs.
(ops/cache.py keeps the op search's result beside the entries, with its own key.)

- **Key.** The file's name, size, modification time and a SHA-256 of its first and last 64 KiB; the process read;
  dlagg's version, a digest of the reader's and the model's source, the cache format, pandas' and pyarrow's versions
  and how this process keeps inferred text (the reader's text columns follow it). The name is part of the key
  because the model quotes it (``ProfileMeta.source``, warnings); the folder is not, so a moved file still hits.
- **Layout.** ``<folder>/<key>/``: ``manifest.json`` (the key's parts, the metadata, each frame's columns, dtypes,
  Arrow types and row count) and one Parquet file per frame. Written in a temporary folder beside it, then renamed
  into place: readers see a whole entry or none, and of two runs writing the same entry the second's rename fails and
  its copy is discarded.
- **Never trusted blindly.** An entry whose manifest does not name this very file, whose files are missing or cut,
  or whose columns are not those recorded is a note on stderr, removed, and read again from the file.
- **Pages.** SQLite's page check (reader/integrity.py) is skipped for a file it found sound before under the same key
  (`checked_pages`, a ``<key>.sound`` mark written once the check passed): a damaged file is never marked.
- **Folder.** ``--cache_dir``, else ``$DLAGG_CACHE_DIR``, else ``$XDG_CACHE_HOME/dlagg``, else ``~/.cache/dlagg``
  (`cache_folder`). One that cannot be written leaves the run without a cache, with one note (`usable`).

Reading back makes the frames' columns of the Parquet files' Arrow data without a copy (pandas 3; pandas 2 copies
one column at a time): less memory than the read itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa

from .. import __version__
from ..limits import is_out_of_memory
from ..log import MINIMAL, Log, shown
from ..model import Profile, ProfileMeta, StringTable
from ..options import Options, cache_folder
from . import kineto, load_profile
from . import nvtx as nv
from .database import READ_THREADS, Database
from .integrity import PageCheck

if TYPE_CHECKING:
    import pyarrow.parquet as pq

FORMAT = 1  # of the entries: a change to the layout below bumps it
EDGE = 64 << 10  # bytes hashed at each end of the file
MANIFEST = "manifest.json"
FRAMES = ("kernels", "runtime", "memcpy", "memset", "sync", "nvtx", "osrt", "gpus", "nvtx_names")
# Rows per Parquet row group: every frame in one, so that a column reads back as one Arrow chunk, which numpy takes
# without a copy (a frame's encoded columns are held while its file is written: an eighth of its size, about).
ROW_GROUP = 1 << 26
# pandas 3 hands out frame columns read-only (copy on write), so a column may stay in Arrow's read-only buffer; pandas
# 2 gives callers the array itself, which they may write into.
_COPY_COLUMNS = int(pd.__version__.split(".")[0]) < 3
INDEX = "__index__"
T = TypeVar("T")
_noted_unwritable = False  # one note per process about a cache folder that cannot be written


class Damaged(Exception):
    """An entry that is not what its manifest says."""


class Unsupported(Exception):
    """A profile holding a value the entry format cannot keep exactly: it is not cached."""


def usable(options: Options, log: Log) -> Options:
    """`options`, with the cache off when its folder cannot be made or written (one note): checked once, before the
    ranks are read, so that workers do not each say it."""
    global _noted_unwritable
    if not options.cache:
        return options
    folder = cache_folder(options.cache_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK | os.X_OK)
    except OSError:
        writable = False
    if writable:
        return options
    if log.level >= MINIMAL:
        note(f"the cache folder {shown(folder)} cannot be written; reading without a cache (--cache_dir sets "
             "another, --cache=false turns it off)")
    _noted_unwritable = True
    return replace(options, cache=False)


def checked_pages(paths: Sequence[Path], options: Options) -> PageCheck:
    """The check of the inputs' pages (reader/integrity.py; none with --check=false), but for files the cache knows
    were found sound: an unchanged file (the same key, `identity`) was checked before, and its read comes from the
    cache. Each file found sound now is marked so (``<key>.sound`` in the cache folder)."""
    if not options.check:
        return PageCheck([])
    if not options.cache:
        return PageCheck(paths)
    root = cache_folder(options.cache_dir)
    marks: dict[Path, Path] = {}
    for path in paths:
        try:  # the file as it is now: a change while it is checked gives it another key
            marks[path] = root / f"{entry_name({**identity(path, None), 'pages': 'sound'})}.sound"
        except OSError:
            continue
    todo = [p for p in paths if p not in marks or not marks[p].is_file()]

    def sound(path: Path) -> None:
        try:
            marks[path].touch()
        except (OSError, KeyError):  # (a folder that cannot be written has had its note)
            pass

    return PageCheck(todo, sound)


def note(text: str) -> None:
    print(f"dlagg: note: {text}", file=sys.stderr, flush=True)


@cache
def _code_digest() -> str:
    """A digest of the source that decides what the reader yields, so that an edited reader never meets an entry
    an older one wrote under the same version number."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for source in [*sorted(here.glob("*.py")), here.parent / "model.py"]:
        try:
            digest.update(source.read_bytes())
        except OSError:  # an installation without its sources: the version alone
            pass
    return digest.hexdigest()


def _text_kept_as() -> str:
    dtype = pd.Series(["text"]).dtype
    return f"{dtype!r}"


def identity(path: Path, process: int | None) -> dict[str, Any]:
    """What makes an entry this file's (see the module docstring)."""
    status = path.stat()
    with path.open("rb") as handle:
        edges = handle.read(EDGE)
        if status.st_size > EDGE:
            handle.seek(max(EDGE, status.st_size - EDGE))
            edges += handle.read(EDGE)
    return {"format": FORMAT, "dlagg": __version__, "code": _code_digest(), "pandas": pd.__version__,
            "pyarrow": pa.__version__, "text": _text_kept_as(), "name": path.name, "size": status.st_size,
            "mtime_ns": status.st_mtime_ns, "edges": hashlib.sha256(edges).hexdigest(), "process": process}


def entry_name(ident: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]


def cached_profile(path: str | Path, process: int | None = None, threads: int | None = None, *, use: bool = True,
                   folder: Path | str | None = None, level: int = MINIMAL,
                   read: Callable[[Path, int | None, int | None], Profile] = load_profile) -> Profile:
    """`read(path, process, threads)` (`load_profile`), from the cache when it holds this file's read (module
    docstring); `use=False`: straight from the file. `level`: the run's verbosity, for the notes."""
    path = Path(path)
    if not use:
        return read(path, process, threads)
    root = cache_folder(folder)
    try:
        ident = identity(path, process)
    except OSError:  # the reader says what is wrong with the file
        return read(path, process, threads)
    entry = root / entry_name(ident)
    if entry.is_dir():
        try:
            return read_entry(entry, ident, path, threads)
        except Exception as exc:  # any damage: the file is read again
            if is_out_of_memory(exc):  # (Arrow's thread pool too) no damage: the entry stays, the run says it
                raise
            if level >= MINIMAL:
                note(f"the cached read of {shown(path.name)} is damaged ({reason(exc)}); reading the file again")
            discard(entry)
    profile = read(path, process, threads)
    store(root, entry, ident, profile, level)
    return profile


def cached_answer(path: Path, kind: str, compute: Callable[[], dict[str, Any]], build: Callable[[dict[str, Any]], T],
                  *, use: bool = True, folder: Path | str | None = None) -> T:
    """`build(compute())`: `compute` gives a small JSON object about the file at `path` (what discovery learns of
    it), kept as ``<key>.<kind>.json`` in the cache folder under the read's key (`identity`), so that a later call on
    the unchanged file builds from it without computing. One that cannot be read or built from is computed again and
    written over; a folder that cannot be written leaves it uncached (the read's entry says so, once)."""
    if not use:
        return build(compute())
    root = cache_folder(folder)
    try:
        stored = root / f"{entry_name({**identity(path, None), 'kind': kind})}.{kind}.json"
    except OSError:  # the file cannot be read: what computes the answer says why
        return build(compute())
    try:
        return build(json.loads(stored.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError, IndexError):  # none yet, or damaged
        pass
    answer = compute()
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{stored.name}.", dir=root)
    except OSError:
        return build(answer)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(answer, out)
        os.replace(temporary, stored)
    except OSError:  # a full disk: no half-written answer left
        Path(temporary).unlink(missing_ok=True)
    return build(answer)


def reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return shown(text[:200] or type(exc).__name__)


def discard(entry: Path) -> None:
    """Remove `entry`, first renamed out of the way so that no run sees it half removed."""
    try:
        gone = Path(tempfile.mkdtemp(prefix=".discard-", dir=entry.parent))
        os.rename(entry, gone / "entry")
    except OSError:  # another run removed or replaced it, or the folder is read-only
        return
    shutil.rmtree(gone, ignore_errors=True)


def store(root: Path, entry: Path, ident: dict[str, Any], profile: Profile, level: int = MINIMAL) -> None:
    """Write `profile` as the entry `entry` of `root` (`store_entry`)."""
    store_entry(root, entry, partial(write_entry, ident=ident, profile=profile), level)


def store_entry(root: Path, entry: Path, write: Callable[[Path], None], level: int = MINIMAL) -> None:
    """The entry folder `entry` of `root`, its files written by `write(folder)` into a temporary folder renamed into
    place; `write` raising `Unsupported` leaves no entry. A folder that cannot be written is one note per process
    (`usable` has usually said it before) and the run goes on."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=root))
    except OSError as exc:
        _unwritable(root, exc, level)
        return
    try:
        write(temporary)
        os.rename(temporary, entry)
    except Unsupported:
        pass
    except OSError as exc:
        if not entry.is_dir():  # else another run wrote it first: this copy is discarded
            _unwritable(root, exc, level)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)  # (gone when it was renamed into place)


def _unwritable(root: Path, exc: OSError, level: int) -> None:
    global _noted_unwritable
    if not _noted_unwritable and level >= MINIMAL:
        note(f"could not write the cache in {shown(root)} ({exc.strerror or exc}); the run goes on without it")
    _noted_unwritable = True


def write_entry(folder: Path, ident: dict[str, Any], profile: Profile) -> None:
    """The entry's files in `folder`, the manifest last."""
    frames = {name: getattr(profile, name) for name in FRAMES}
    strings = profile.strings.values
    if strings.name is not None:
        raise Unsupported("a named string table")
    frames["strings"] = strings.to_frame("text")
    details = profile.nvtx_details
    if details is None:
        described: dict[str, Any] = {"kind": "none"}
    elif type(details) is nv.NvtxDetails:
        described = {"kind": "sqlite", "table": details.table, "text": details.text}
    elif type(details) is kineto.Shapes:
        described = {"kind": "shapes"}
        frames["shapes"] = pd.DataFrame({"shapes": details.shapes})
    else:
        raise Unsupported(f"NVTX details of type {type(details).__name__}")
    manifest = {"identity": ident, "meta": _meta_out(profile.meta), "details": described,
                "frames": {name: write_frame(folder / f"{name}.parquet", frame) for name, frame in frames.items()}}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _meta_out(meta: ProfileMeta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(meta):
        value = getattr(meta, f.name)
        if isinstance(value, dict):
            out[f.name] = {"pairs": [[k, v] for k, v in value.items()]}
        elif isinstance(value, tuple):
            out[f.name] = {"items": list(value)}
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[f.name] = {"value": value}
        else:
            raise Unsupported(f"metadata {f.name} of type {type(value).__name__}")
    return out


def _meta_in(stored: dict[str, Any]) -> ProfileMeta:
    values: dict[str, Any] = {}
    for f in fields(ProfileMeta):
        held = stored[f.name]
        if "pairs" in held:
            values[f.name] = {k: v for k, v in held["pairs"]}
        elif "items" in held:
            values[f.name] = tuple(held["items"])
        else:
            values[f.name] = held["value"]
    return ProfileMeta(**values)


def _encoded(values: pd.Series | pd.Index) -> tuple[pa.Array, dict[str, Any]]:
    """One column as Arrow, and how to make it again exactly (its dtype's description)."""
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        categories = dtype.categories
        text = isinstance(categories.dtype, pd.StringDtype) or categories.dtype == object
        if not text or not all(isinstance(c, str) for c in categories):
            raise Unsupported("categories other than text")
        codes = np.asarray(values.cat.codes if isinstance(values, pd.Series) else values.codes)
        return pa.array(codes), {"kind": "category", "ordered": bool(dtype.ordered), "categories": list(categories),
                                 "text": _text_dtype(categories.dtype)}
    if isinstance(dtype, pd.StringDtype):
        return pa.array(values.array), {"kind": "string", **_text_dtype(dtype)}
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.name in ("Int64", "Int32", "Float64", "boolean"):
        return pa.array(values.array), {"kind": "masked", "dtype": dtype.name}
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        return pa.array(np.asarray(values)), {"kind": "numpy", "dtype": dtype.str}
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        try:
            return pa.array(np.asarray(values), type=pa.string()), {"kind": "object"}
        except (pa.ArrowException, UnicodeError) as exc:  # not all text: not kept
            raise Unsupported(f"object column: {exc}") from None
    raise Unsupported(f"dtype {dtype}")


def _text_dtype(dtype: Any) -> dict[str, Any]:
    """How text of `dtype` is kept (object, or a string dtype's storage and missing value), for `_string_dtype`."""
    if not isinstance(dtype, pd.StringDtype):
        return {"storage": "object"}
    return {"storage": dtype.storage, "na": "nan" if dtype.na_value is np.nan else "NA"}


def _string_dtype(stored: dict[str, Any]) -> Any:
    """The dtype `_text_dtype` described."""
    if stored.get("storage", "object") == "object":
        return np.dtype(object)
    return pd.StringDtype(stored["storage"], na_value=np.nan if stored["na"] == "nan" else pd.NA)


def write_frame(path: Path, frame: pd.DataFrame) -> dict[str, Any]:
    """`frame` as a Parquet file; what the manifest says of it."""
    import pyarrow.parquet as pq

    names, arrays, columns = [], [], []
    index = frame.index
    plain = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None
    if not plain:
        array, spec = _encoded(index)
        names.append(INDEX)
        arrays.append(array)
        columns.append({"name": INDEX, "index_name": index.name, **spec, "arrow": str(array.type)})
    for name in frame.columns:
        if not isinstance(name, str) or name == INDEX:
            raise Unsupported(f"column name {name!r}")
        array, spec = _encoded(frame[name])
        names.append(name)
        arrays.append(array)
        columns.append({"name": name, **spec, "arrow": str(array.type)})
    table = pa.Table.from_arrays(arrays, names=names) if arrays else pa.table({})
    pq.write_table(table, path, row_group_size=ROW_GROUP, compression="lz4", use_dictionary=False,
                   write_statistics=False)
    return {"rows": len(frame), "columns": columns}


def read_entry(entry: Path, ident: dict[str, Any], path: Path, threads: int | None) -> Profile:
    """The profile an entry holds, each part checked against its manifest (`Damaged` otherwise)."""
    manifest = json.loads((entry / MANIFEST).read_text())
    if manifest.get("identity") != ident:
        raise Damaged("the entry is another file's")
    stored = manifest["frames"]
    frames = {name: read_frame(entry / f"{name}.parquet", stored[name]) for name in (*FRAMES, "strings")}
    strings = frames.pop("strings")
    if list(strings.columns) != ["text"]:
        raise Damaged("the string table has other columns")
    details = manifest["details"]
    if details["kind"] == "sqlite":
        found: Any = nv.NvtxDetails(partial(Database, path.resolve()), details["table"], details["text"],
                                    threads or READ_THREADS)
    elif details["kind"] == "shapes":
        found = kineto.Shapes(read_frame(entry / "shapes.parquet", stored["shapes"])["shapes"].array)
    elif details["kind"] == "none":
        found = None
    else:
        raise Damaged(f"unknown NVTX details {details['kind']!r}")
    return Profile(strings=StringTable(strings["text"].rename(None)), meta=_meta_in(manifest["meta"]),
                   nvtx_details=found, **frames)


def read_frame(path: Path, stored: dict[str, Any]) -> pd.DataFrame:
    """A frame `write_frame` wrote, one column at a time (the memory of one column's Arrow data at most)."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    columns = stored["columns"]
    schema = parquet.schema_arrow
    if schema.names != [c["name"] for c in columns] or parquet.metadata.num_rows != stored["rows"]:
        raise Damaged(f"{path.name} does not hold the columns or rows recorded")
    data: dict[str, Any] = {}
    index = None
    for column in columns:
        if str(schema.field(column["name"]).type) != column["arrow"]:
            raise Damaged(f"{path.name}: column {column['name']} is not of the type recorded")
    # Columns that stay in Arrow's buffers (pandas 3) are read at once, decoded on every core: the frame is then the
    # Arrow data itself. Columns copied out of it are read one by one, so that one column's Arrow data is held.
    whole = None if _COPY_COLUMNS else parquet.read(use_threads=True)
    for column in columns:
        array = _column(parquet, column["name"]) if whole is None else whole.column(column["name"])
        values = _decoded(array, column)
        if column["name"] == INDEX:
            index = pd.Index(values, name=column["index_name"], copy=False, dtype=values.dtype)
        elif column["kind"] == "object":  # (a frame built from an object array infers text where pandas does)
            data[column["name"]] = pd.Series(values, index=index, dtype=object, copy=False)
        else:
            data[column["name"]] = values
    if index is None:
        index = pd.RangeIndex(stored["rows"])
    if not data:
        return pd.DataFrame(index=index)
    return pd.DataFrame(data, index=index, copy=False)


def _column(parquet: pq.ParquetFile, name: str) -> pa.ChunkedArray:
    return parquet.read(columns=[name], use_threads=True).column(0)


def _decoded(array: pa.ChunkedArray, column: dict[str, Any]) -> Any:
    """The pandas values of one stored column, of the dtype recorded."""
    kind = column["kind"]
    if kind in ("numpy", "category"):
        if array.null_count:
            raise Damaged(f"column {column['name']} has missing values")
        values = array.to_numpy()
        if _COPY_COLUMNS and not values.flags.writeable:  # Arrow's own buffer
            values = values.copy()
        if kind == "category":
            categories = pd.Index(column["categories"], dtype=_string_dtype(column.get("text", {})))
            return pd.Categorical.from_codes(values, categories=categories, ordered=column["ordered"])
        expected = np.dtype(column["dtype"])
        if values.dtype != expected:
            raise Damaged(f"column {column['name']} is not of the dtype recorded")
        return values
    if kind == "object":
        return array.to_numpy(zero_copy_only=False).astype(object, copy=False)
    if kind == "string":
        dtype = _string_dtype(column)
        if not isinstance(dtype, pd.StringDtype):
            raise Damaged(f"column {column['name']} of text kept as {column.get('storage')!r}")
        return dtype.__from_arrow__(array)
    if kind == "masked":
        return pd.api.types.pandas_dtype(column["dtype"]).__from_arrow__(array)
    raise Damaged(f"column {column['name']} of an unknown kind {kind!r}")
