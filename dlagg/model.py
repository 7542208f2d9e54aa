"""Values passed between stages. Frozen dataclasses: stages return new values, never edit their inputs
(the one exception is `StringTable`'s cache of regular-expression answers, which never changes
what the table says).

Frames carry the columns declared in ``reader/schema.py``; times are int64 nanoseconds on the
nsys session clock, strings are int64 ids into the profile's ``StringTable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd


def _text_dtype() -> pd.StringDtype | str:
    """The dtype of an export's strings: Arrow-backed text, NaN where missing (what pandas 3 infers for text), also
    in a process that keeps inferred text in Python strings or objects (tuning.keep_text_in_python), where "str"
    would mean another storage or NumPy's fixed-width strings. pandas before 2.3 has no such dtype: its "str"."""
    try:
        return pd.StringDtype("pyarrow", na_value=np.nan)
    except TypeError:
        return "str"


TEXT = _text_dtype()


def factorize_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ids, position of each id among them), like ``np.unique(return_inverse=True)``
    but in O(n) through a mark table when the ids span a small range (string ids, row numbers)."""
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=np.int64)
    low, high = int(ids.min()), int(ids.max())
    if high - low > 4 * len(ids) + 1_000_000:  # sparse: a sort is cheaper than the table
        uniq, inverse = np.unique(ids, return_inverse=True)
        return uniq, np.ravel(inverse)
    seen = np.zeros(high - low + 1, dtype=bool)
    seen[ids - low] = True
    uniq = np.flatnonzero(seen)
    position = np.cumsum(seen) - 1
    return uniq + low, position[ids - low]


def categorical(codes: np.ndarray, texts: np.ndarray | list[str]) -> pd.Categorical:
    """``texts[codes]`` as a categorical column, ``""`` where a code is -1.

    For text columns that repeat a few values over many rows (kernel and op names): no Python
    string per row, and the writers format each category once. `texts` may repeat values.
    """
    values = np.append(np.asarray(texts, dtype=object), "")  # last slot: code -1
    distinct, remap = np.unique(values.astype(str), return_inverse=True)
    return pd.Categorical.from_codes(np.ravel(remap)[np.asarray(codes)], categories=pd.Index(distinct, dtype=object))


def share(part: float, whole: float) -> float:
    """`part` as a percentage of `whole` (0 when `whole` is 0): the one definition; texts format it."""
    return 100.0 * part / whole if whole else 0.0


def stack_ranks(frames: Sequence[pd.DataFrame], ranks: Sequence[int], *, first: bool = False) -> pd.DataFrame:
    """Several ranks' frames one after the other, each row with its rank in a column `rank` (the last, or the
    `first`): stacked once, and the ranks repeated once (not a copy of each frame with its rank added, a thousand
    frames at 1,024 ranks)."""
    frame = pd.concat(frames, ignore_index=True)
    rank = np.repeat(np.asarray(ranks, dtype=np.int64), [len(f) for f in frames])
    if first:
        frame.insert(0, "rank", rank)
    else:
        frame["rank"] = rank
    return frame


def rows_where(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]``, but `frame` itself when every row is kept (the default iteration range):
    a boolean selection copies every column."""
    return frame if mask.all() else frame[mask]


@dataclass(frozen=True)
class StringTable:
    """nsys ``StringIds`` plus the distinct NVTX range names (ids after the StringIds ones): id -> text.

    Classifiers run over this small table (one decision per distinct string); the big frames
    only ever see the integer ids.
    """

    values: pd.Series  # index: int64 id, values: str
    _matches: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)
    _texts: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    def decode(self, ids: pd.Series | np.ndarray) -> pd.Series:
        """Texts for `ids` (missing ids give an empty string).

        Looks up each distinct id once (binary search on the sorted ids) and repeats the resulting
        objects, so 100 k kernel rows with 70 names cost 70 strings, not 100 k copies.
        """
        ids = pd.Series(ids) if not isinstance(ids, pd.Series) else ids
        codes = ids.to_numpy()
        known = ~pd.isna(codes) if codes.dtype.kind not in "iu" else np.ones(len(codes), dtype=bool)
        uniq, inverse = np.unique(codes[known].astype(np.int64), return_inverse=True)
        texts = np.full(len(codes), "", dtype=object)
        texts[known] = self._lookup(uniq)[inverse]
        return pd.Series(texts, index=ids.index, dtype=object)

    def categorical(self, ids: np.ndarray) -> pd.Categorical:
        """Texts for `ids` as a categorical column (missing ids give an empty string); each distinct
        id is looked up once."""
        uniq, inverse = factorize_ids(ids)
        return categorical(inverse, self._lookup(uniq))

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id in `values` (-1 when absent); binary search when ids are sorted (the reader's case)."""
        index = self.values.index
        if not index.is_monotonic_increasing:
            return index.get_indexer(ids)
        keys = index.to_numpy()
        if len(keys) == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        return np.where(keys[pos] == ids, pos, -1)

    def _lookup(self, ids: np.ndarray) -> np.ndarray:
        """Texts (object array) for `ids`, "" for absent ids and missing values."""
        pos = self._positions(ids)
        texts = np.full(len(ids), "", dtype=object)
        found = pos >= 0
        if found.any():
            texts[found] = self._texts_at(pos[found])
        return texts

    def _texts_at(self, rows: np.ndarray) -> np.ndarray:
        """The texts at these rows of `values` as Python strings ("" for missing values), each row converted from
        Arrow once, when first asked for: a rank's reports decode many times, and each conversion from Arrow is
        costly."""
        if not self._texts:
            self._texts.update(text=np.empty(len(self.values), dtype=object), done=np.zeros(len(self.values), bool))
        text, done = self._texts["text"], self._texts["done"]
        new = np.unique(rows[~done[rows]])
        if len(new):
            text[new] = self.values.iloc[new].fillna("").to_numpy(dtype=object)
            done[new] = True
        return text[rows]

    def ids_matching(self, pattern: str, among: np.ndarray | None = None) -> np.ndarray:
        """Ids whose whole text matches the regular expression `pattern` (vectorised).

        With `among`, only those ids are tried (a caller that knows its candidates, e.g. OS
        runtime call names, skips the rest of the table). Answers over the whole table are kept
        per pattern: several reports ask the same question.
        """
        if among is not None:
            ids = np.unique(np.asarray(among, dtype=np.int64))
            pos = self._positions(ids)
            ids, pos = ids[pos >= 0], pos[pos >= 0]
            hits = self.values.iloc[pos].str.fullmatch(pattern).fillna(False).to_numpy(dtype=bool)
            return ids[hits]
        if pattern not in self._matches:
            hits = self.values.str.fullmatch(pattern).fillna(False).to_numpy(dtype=bool)
            found = self.values.index[hits].to_numpy(dtype=np.int64)
            found.setflags(write=False)
            self._matches[pattern] = found
        return self._matches[pattern]

    def ids_equal(self, text: str) -> np.ndarray:
        return self.values.index[(self.values == text).to_numpy()].to_numpy(dtype=np.int64)


SYSTEM_INFO = "SystemInfo:"  # the prefix of the SystemInfo table's lines in ProfileMeta.system_env


@dataclass(frozen=True)
class ProfileMeta:
    source: str  # file name, not an absolute path, for report metadata
    nsys_version: str  # EXPORT_PRODUCT_VERSION, or "" when the export does not say
    tables: Mapping[str, str]  # dlagg table name -> physical table it was read from
    system_env: Mapping[str, str]  # TARGET_INFO_SYSTEM_ENV name -> value, and SYSTEM_INFO + name -> value
    domains: Mapping[int, str]  # NVTX domain id -> domain name (0 = default domain)
    start: int  # earliest event start (ns)
    end: int  # latest event end (ns)
    warnings: tuple[str, ...] = ()
    session_start_utc: int | None = None  # TARGET_INFO_SESSION_START_TIME.utcEpochNs: the session clock's 0
    process: int | None = None  # globalPid of the one process read, None when the whole file was read


class NvtxDetails(Protocol):
    """What the NVTX frame leaves out, read on demand for a few ranges (reader/nvtx.py)."""

    def input_shapes(self, rows: np.ndarray) -> pd.Categorical:
        """emit_nvtx ``sizes = [...]`` text per NVTX row id (``nvtx["row"]``), '' when absent."""
        ...


# A kernel's launch configuration: its columns in ``Profile.kernels``.
LAUNCH_DIMS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


@dataclass(frozen=True)
class Profile:
    """What the reader returns. Nothing downstream touches SQLite, but for `nvtx_details`, which
    reads the few NVTX texts a report needs whole, on demand.

    ``nvtx`` holds the NVTX ranges (push/pop and start/end, no marks): start, end, global_tid,
    domain_id, crosses_thread (a start/end range that ended on another thread), row (the row id in
    the export), text_id (the range's name, without emit_nvtx's per-call details) and seq (autograd
    sequence number of emit_nvtx markers, -1 when none).
    """

    kernels: pd.DataFrame
    runtime: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    sync: pd.DataFrame
    nvtx: pd.DataFrame
    osrt: pd.DataFrame
    gpus: pd.DataFrame  # device_id, name, cc_major, cc_minor, total_memory, sm_count
    strings: StringTable
    meta: ProfileMeta
    # One row per distinct NVTX range name (index: the name's id, as in nvtx["text_id"]); "emit":
    # some range of that name was a PyTorch emit_nvtx marker (its text carried seq/op_id/sizes).
    nvtx_names: pd.DataFrame = field(default_factory=lambda: pd.DataFrame({"emit": np.empty(0, bool)}))
    nvtx_details: NvtxDetails | None = None


@dataclass(frozen=True)
class Iterations:
    """Iteration windows: iteration i spans (ends[i-1], ends[i]].

    Two clocks meet here. The host cuts the timeline: ``key_ends[i]`` is the end of key-node
    instance i, and every event the host issues (API calls, op ranges, and GPU work through its
    launching call) belongs to the iteration whose *launch window* (key_ends[i-1], key_ends[i]]
    holds it (``assign``). The GPU may finish that work later: when the host runs ahead of the
    GPU (a training loop that never synchronises fills the launch queue, up to many steps
    ahead), ``gpu_ends[i]``, the end of the last GPU work launched in iteration i, lies after
    key_ends[i]. Iteration i then ends at the later of the two, ``ends[i]`` (kept non-decreasing),
    so iteration times follow the GPU's pace when the GPU lags and the host's when the host lags,
    and the windows cover all the work (``timeline.iterations.with_gpu_work``).
    """

    key_node: str  # the key node used ("" when none was found)
    reason: str  # how it was chosen, for the log and the reports
    starts: np.ndarray  # int64, window i is (starts[i], ends[i]]; starts[0] = profile start; starts[i] = ends[i-1]
    ends: np.ndarray  # int64: the later of key_ends[i] and gpu_ends[i] (running maximum)
    start: int  # first aggregated iteration
    stop: int  # last aggregated iteration (inclusive)
    found: bool = True  # False: key node not found, one iteration spans the profile
    candidates: tuple[str, ...] = field(default=())  # key-node candidates when not found
    key_ends: np.ndarray | None = None  # host-side ends (key-node instances' ends); None: the same as `ends`
    gpu_ends: np.ndarray | None = None  # end of the last GPU work launched in each iteration (-1: none; None: unknown)

    @property
    def count(self) -> int:
        return int(len(self.ends))

    @property
    def selected(self) -> range:
        return range(self.start, self.stop + 1)

    @property
    def window(self) -> tuple[int, int]:
        """(start, end) of the aggregated range in ns: from the first aggregated iteration's start to the
        end of the last one, its GPU work included."""
        return int(self.starts[self.start]), int(self.ends[self.stop])

    @property
    def launch_ends(self) -> np.ndarray:
        """Host-side ends of the iterations (the key-node instances' ends): the launch windows' ends."""
        return self.ends if self.key_ends is None else self.key_ends

    def assign(self, t: np.ndarray) -> np.ndarray:
        """Iteration of each host-side timestamp (a launch, an API call, an op range's start) by the
        launch windows, -1 outside every window. Vectorised (searchsorted)."""
        t = np.asarray(t, dtype=np.int64)
        ends = self.launch_ends
        idx = np.searchsorted(ends, t, side="left")
        inside = (idx < len(ends)) & (t >= self.starts[0])
        return np.where(inside, idx, -1).astype(np.int64)

    def in_selection(self, iteration: np.ndarray) -> np.ndarray:
        return (iteration >= self.start) & (iteration <= self.stop)

    @property
    def cpu_times(self) -> np.ndarray:
        """CPU-side time of each iteration: from the previous key-node instance's end to its own (the host's pace)."""
        ends = self.launch_ends
        return ends - np.concatenate((self.starts[:1], ends[:-1]))

    @property
    def gpu_times(self) -> np.ndarray:
        """GPU-side time of each iteration (float, NaN where it launched no GPU work or nothing is known): from
        the end of the GPU work launched before it to the end of the GPU work it launched (the GPU's pace)."""
        if self.gpu_ends is None:
            return np.full(self.count, np.nan)
        ran = self.gpu_ends >= 0
        reach = np.maximum.accumulate(np.where(ran, self.gpu_ends, self.starts[0]))
        before = np.concatenate((self.starts[:1], reach[:-1]))
        return np.where(ran, (reach - before).astype(np.float64), np.nan)
