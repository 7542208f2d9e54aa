"""Op instances from NVTX ranges, GPU work and CUDA API calls assigned to them, ops grouped.

Contract: ``find_ops(profile, iterations, work, uses_tc, domains) -> Ops`` where

- ``instances``: one row per op instance (an NVTX range that is an op "head", see below):
  ``key`` (int, the op it is an instance of), ``iteration``, ``start``, ``end``, ``global_tid``,
  ``nvtx_row`` (its NVTX row id), ``emit`` (an emit_nvtx range: its input shapes are read on demand,
  ``Profile.nvtx_details``), ``path`` (group path, ``/`` or ``/forward/``...), ``data_types``,
  ``input_shapes`` and ``output_shapes`` (of dict markers), ``stack``,
  and the §1.5 figures ``cpu`` (range duration), ``gpu`` (union of its GPU intervals), ``gpu_idle``
  (span of its GPU work minus ``gpu``), ``api`` (union of the CUDA API calls made inside it on its
  thread), ``cpu_overhead`` (``cpu - api``), plus ``kernels``, ``tc_kernels``, ``kernel_time``,
  ``tc_kernel_time``;
- ``ops``: one row per op (index = key): ``op_id``, ``op_name``, ``direction``, ``op_type``,
  ``tc_eligible``, ``first_start``, ``forward_key`` (the key of the forward op a backward op is
  linked to, -1), and the op's name across files: ``op_key`` (text: group path, direction, domain
  and marker name, occurrence; a linked backward op's starts with its forward op's), ``forward_op_key``
  ('' when not linked) and ``order`` (rank by first appearance), from which ``op_ids`` numbers them;
- ``work_instance``: for each row of ``work`` (positionally), the instance that launched it, or -1.

Which ranges are ops (heads). Every range nests in a per-thread tree (``tree.Forest``); the key
node, ranges enclosing it, ranges ending on another thread and ranges of domains not selected
with ``--domains`` define nothing. Then:

- a DLProf/PyProf ``{'mod','op','args'}`` range is an op when no other such range encloses it
  (DLProf's rule: ``torch.relu`` inside ``F.relu``, ``has_torch_function_variadic`` inside
  ``F.linear`` are not ops, their work is the outer op's). The ``{'traceMarker': ...}`` range
  around it (its parent) gives the op's name (the function stack) and stack trace, and defines
  nothing itself; a traceMarker with no ``{'mod','op'}`` child is an op like one;
- an ``emit_nvtx`` range or library-domain range is an op when no framework range (those two, or
  a dict-marker op) encloses it: ``aten::conv2d`` is the op, the ``aten::convolution`` ->
  ``aten::cudnn_convolution`` chain below it is its implementation (splitting it would give four
  rows per layer, three without GPU work, and move autocast's casts out of the layer). In a
  profile with dict markers, an emit_nvtx range without an autograd ``seq`` that encloses one
  with a ``seq`` defines nothing (PyProf names such work by the ``seq`` markers:
  ``torch::autograd::AccumulateGrad`` > ``add_, seq = 0`` is the op ``add_``);
- a plain user range is an op when it encloses no other range (``data`` in a loop without
  ``emit_nvtx``); user ranges that enclose ops are group nodes (``/forward/``).

GPU work belongs to the innermost op enclosing its launching API call on the launching thread;
work from a thread without any NVTX range goes to the op open then in its process, and ops on a
thread without user ranges take the group of the user ranges open then (autograd's thread).

Grouping across iterations: an op is (group path, marker name, direction, occurrence of that
triple within its iteration and process). The k-th ``aten::conv2d`` under ``/forward/`` in every
iteration is one op with one call per iteration. A backward op linked to a forward op (autograd
``seq``, the latest forward range with that number in the same process) is grouped under that
forward op instead: (forward op, backward node name, occurrence), and shares its Op ID, so
``CONV2D_3`` fprop and ``CONV2D_3`` bprop are the same layer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..classify import op_tc_eligible
from ..errors import OptionsError
from ..model import Iterations, Profile, categorical, factorize_ids
from ..nesting import index_dtype
from ..reader.schema import PID_MASK
from ..timeline import intervals
from ..timeline.correlate import KERNEL
from ..timeline.iterations import key_name_ids
from . import markers as mk
from .tree import Forest

DIRECTIONS = ("", mk.FPROP, mk.BPROP)  # direction codes of the instance table
INSTANCE_COLUMNS = ("key", "iteration", "start", "end", "global_tid", "nvtx_row", "emit", "path", "data_types",
                    "input_shapes", "output_shapes", "stack", "cpu", "gpu", "gpu_idle", "api", "cpu_overhead",
                    "kernels", "tc_kernels",
                    "kernel_time", "tc_kernel_time")
# The instance columns of text (categorical: codes, never a string per row).
TEXT_COLUMNS = ("path", "data_types", "input_shapes", "output_shapes", "stack")
# The per-instance kernel counts and times (`_work_figures`), the last of INSTANCE_COLUMNS.
KERNEL_COLUMNS = INSTANCE_COLUMNS[-4:]


@dataclass(frozen=True)
class Ops:
    instances: pd.DataFrame
    ops: pd.DataFrame
    work_instance: np.ndarray
    warnings: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return len(self.instances) == 0


def union_by_group(group: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """Length of the union of the intervals of each group 0..groups-1 (vectorised)."""
    out = np.zeros(groups, dtype=np.int64)
    keep = (group >= 0) & (end > start)
    if not keep.any():
        return out
    g, s, e = group[keep], start[keep], end[keep]
    if (s[1:] >= s[:-1]).all():  # rows by start (event tables are): group order is nearly sorted too
        order = np.argsort(g, kind="stable")
    else:
        order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    first = np.r_[True, g[1:] != g[:-1]]
    new_block = first | np.r_[True, s[1:] > reach[:-1]]
    block = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(len(block_start), dtype=np.int64)
    np.maximum.at(block_end, block, reach)
    np.add.at(out, g[new_block], block_end - block_start)
    return out


def _domain_filter(profile: Profile, domains: tuple[str, ...]) -> np.ndarray | None:
    """Domain ids allowed by --domains (None = all)."""
    if not domains:
        return None
    known = {name: i for i, name in profile.meta.domains.items()}
    wanted = [("" if d in ("default", "") else d) for d in domains]
    missing = [d for d in wanted if d not in known]
    if missing:
        names = ", ".join(repr(n or "default") for n in sorted(known))
        raise OptionsError(f"--domains: no NVTX domain {', '.join(repr(m) for m in missing)} in "
                           f"{profile.meta.source}; its domains are {names}")
    return np.array([known[d] for d in wanted], dtype=np.int64)


def _op_id_stem(op_type: str) -> str:
    """``conv2d`` -> ``CONV2D``; a dict marker's in-place ``uniform_`` keeps its underscore (DLProf's
    ``UNIFORM__1``)."""
    stem = re.sub(r"[^A-Z0-9]+", "_", op_type.upper()).strip("_")
    return stem + "_" * (len(op_type) - len(op_type.rstrip("_"))) if stem else "OP"


def empty_ops(work_rows: int, warnings: tuple[str, ...] = ()) -> Ops:
    text = TEXT_COLUMNS
    instances = pd.DataFrame({c: pd.Series(categorical(np.empty(0, np.int64), [])) if c in text
                              else pd.Series(dtype=bool if c == "emit" else np.int64) for c in INSTANCE_COLUMNS})
    ops = pd.DataFrame({"op_id": pd.Series(dtype=object), "op_name": pd.Series(dtype=object),
                        "direction": pd.Series(dtype=object), "op_type": pd.Series(dtype=object),
                        "tc_eligible": pd.Series(dtype=bool), "first_start": pd.Series(dtype=np.int64),
                        "forward_key": pd.Series(dtype=np.int64), "op_key": pd.Series(dtype=object),
                        "forward_op_key": pd.Series(dtype=object), "order": pd.Series(dtype=np.int64)})
    return Ops(instances, ops, np.full(work_rows, -1, dtype=np.int64), warnings)


def find_ops(profile: Profile, iterations: Iterations, work: pd.DataFrame, uses_tc: Callable[[np.ndarray], np.ndarray],
             domains: tuple[str, ...] = ()) -> Ops:
    allowed = _domain_filter(profile, domains)
    rng = profile.nvtx
    start_all = rng["start"].to_numpy()
    end_all = rng["end"].to_numpy()
    same_thread = ~rng["crosses_thread"].to_numpy()
    warnings: list[str] = []
    if not same_thread.all():
        warnings.append(f"ops: {int((~same_thread).sum())} NVTX range(s) end on another thread than they start; "
                        "they define no op (a CUDA call cannot be placed inside them)")
    keep = same_thread & (end_all > start_all)
    if allowed is not None:
        keep &= np.isin(rng["domain_id"].to_numpy(), allowed)
    found = None
    if keep.any():
        seq_ids = factorize_ids(rng["text_id"].to_numpy()[rng["seq"].to_numpy() >= 0])[0]
        parsed = mk.parse_markers(profile.strings, profile.nvtx_names, seq_ids)
        found, loose = _instances(profile, iterations, work, parsed, keep)
    else:
        loose = outermost_calls(profile.runtime)  # no range at all: every CUDA call is outside them
    # A range ending on another thread defines no op, but a call made inside it is inside a range.
    crossing = ~same_thread & (allowed is None or np.isin(rng["domain_id"].to_numpy(), allowed))
    if crossing.any() and loose.any():
        loose &= ~_inside(rng[crossing], profile.runtime)
    if found is None:
        ops = empty_ops(len(work))
    else:
        h, paths, linked, work_instance, api_instance = found
        names = parsed.names
        op_names = _op_names(h, names, profile)
        texts = profile.strings.decode(parsed.ids).to_numpy(dtype=object)  # each distinct marker name's text
        keys, op_table = _group(h, linked, op_names, names, texts, paths, profile.meta.domains)
        h["key"] = keys
        path_text = _path_texts(h, paths, op_names)
        instances = _measure(h, names, path_text, work, work_instance, uses_tc, profile.runtime, api_instance)
        ops = Ops(instances, op_table, work_instance)
    ops = _with_unassociated(ops, profile, iterations, work, uses_tc, loose)
    if found is None:
        calls = f" (the only ops are the {len(ops.ops)} unassociated_<CUDA call> ops)" if len(ops.ops) else ""
        warnings.append(f"ops: no NVTX range below the key node defines an op{calls}; record with NVTX ranges (e.g. "
                        "torch.autograd.profiler.emit_nvtx) to get per-op figures")
    return replace(ops, warnings=tuple(warnings))


def _instances(profile: Profile, iterations: Iterations, work: pd.DataFrame, parsed: mk.Parsed,
               keep: np.ndarray) -> tuple[tuple[pd.DataFrame, list[str], np.ndarray, np.ndarray, np.ndarray] | None,
                                          np.ndarray]:
    """The per-range part: op instances (heads), their group paths and backward links, and the
    instance of every GPU work row and API call (None when no range is an op); and the mask of the
    CUDA calls outside every range (``outside_every_range``).

    Plain arrays only (the NVTX frame is the biggest one: no frame copies of it), each dropped as
    soon as it has been used: one per-range array is 34-68 MB per 8.5 M ranges.
    """
    rng = profile.nvtx
    kept = np.flatnonzero(keep) if not keep.all() else None
    forest = Forest.build(*(rng[c].to_numpy() if kept is None else rng[c].to_numpy()[kept]
                            for c in ("global_tid", "start", "end")))
    rows_of = forest.order if kept is None else kept[forest.order]
    del kept
    api = profile.runtime
    api_range = forest.innermost(api["global_tid"].to_numpy(), api["start"].to_numpy(), api["end"].to_numpy())
    loose = outside_every_range(forest, api, api_range)
    names = parsed.names
    name = parsed.codes(rng["text_id"].to_numpy()[rows_of])
    domain = rng["domain_id"].to_numpy()[rows_of]
    seq = rng["seq"].to_numpy()[rows_of]
    kind = _range_kinds(profile, iterations, forest, parsed, name, domain, seq)
    head = _heads(forest, kind)
    heads = np.flatnonzero(head)
    if len(heads) == 0:
        return None, loose
    instance_at = _instance_at(forest, head, heads)

    # Group paths: the user ranges that enclose an op, outermost first.
    group = (kind == mk.USER) & ~head
    del head
    path_code, paths = _group_paths(forest, group, name, names["op_name"].to_numpy())
    _adopt_orphans(forest, heads, group, path_code)
    del group

    h = _head_table(forest, heads, kind, name, domain, path_code, rng["row"].to_numpy()[rows_of[heads]], names,
                    iterations)
    del domain, path_code, name, rows_of
    linked = _link_backward(forest, kind, seq, instance_at, h)
    del seq, kind
    work_instance = _launch_instances(forest, heads, work, instance_at)
    api_instance = instance_at[api_range]
    return (h, paths, linked, work_instance, api_instance), loose


def _range_kinds(profile: Profile, iterations: Iterations, forest: Forest, parsed: mk.Parsed, name: np.ndarray,
                 domain: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Per range (in forest order; `name`: its name code, `domain`, `seq`), its marker kind (markers.py) after
    the rules that depend on where it is: a "::" name in a library's domain is the library's; in a dict-marker
    profile, emit_nvtx wrappers without a seq pass their work on; the key node and the ranges enclosing
    it are ignored."""
    kind = np.append(parsed.names["kind"].to_numpy(dtype=np.int8), mk.IGNORE)[name]  # code -1 takes the last slot
    # emit_nvtx writes to the default domain; a "::" name in a library's domain is the library's
    kind[_among(kind, mk.USER, mk.FORWARD) & (domain != 0)] = mk.LIBRARY
    if parsed.dict_markers:
        kind[_seq_less_wrappers(forest, kind, seq)] = mk.PASS
    # The key node and the ranges enclosing it are the iteration structure, not ops or groups.
    if iterations.found:
        kind[_key_ranges(profile, iterations, forest, parsed, name)] = mk.IGNORE
    return kind


def _instance_at(forest: Forest, head: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Per range, the op instance of its innermost head at or above it (-1: none), and a last slot, -1, for
    index -1 ("no range")."""
    index = index_dtype(len(forest))
    instance_of_head = np.full(len(forest) + 1, -1, dtype=index)
    instance_of_head[heads] = np.arange(len(heads))
    head_at = forest.propagate(np.where(head, np.arange(len(forest), dtype=index), index(-1)))
    return np.append(instance_of_head[head_at], index(-1))


def _head_table(forest: Forest, heads: np.ndarray, kind: np.ndarray, name: np.ndarray, domain: np.ndarray,
                path_code: np.ndarray, nvtx_row: np.ndarray, names: pd.DataFrame,
                iterations: Iterations) -> pd.DataFrame:
    """One row per op instance (the ranges `heads`, `nvtx_row` their NVTX row ids): its range, marker kind,
    name and detail codes (`_dict_names`), domain, group path code, direction code, iteration and process."""
    h = pd.DataFrame({
        "row": heads,
        "start": forest.start[heads],
        "end": forest.end[heads],
        "global_tid": forest.tid[heads],
        "kind": kind[heads],
        "name": name[heads],
        "domain": domain[heads],
        "path": path_code[heads],
        "nvtx_row": nvtx_row,
    }, copy=False)
    h["name"], h["detail"] = _dict_names(h, kind, forest.parent, name)
    h["direction"] = _direction_codes(names)[h["detail"].to_numpy()]
    h["iteration"] = iterations.assign(h["start"].to_numpy())
    h["pid"] = h["global_tid"].to_numpy() & PID_MASK
    return h


def _launch_instances(forest: Forest, heads: np.ndarray, work: pd.DataFrame, instance_at: np.ndarray) -> np.ndarray:
    """Per GPU work row, the op instance that launched it: the innermost one enclosing its launching API call
    on the launching thread, or, from a thread without ranges, the one open in its process (-1: none)."""
    has_api = work["api_start"].to_numpy() >= 0
    work_range = np.full(len(work), -1, dtype=np.int64)
    work_range[has_api] = forest.innermost(work["api_tid"].to_numpy()[has_api], work["api_start"].to_numpy()[has_api],
                                           work["api_end"].to_numpy()[has_api])
    work_instance = instance_at[work_range].astype(np.int64)
    _adopt_unannotated_launches(forest, heads, work, work_instance)
    return work_instance


def outermost_calls(api: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
    """Mask of the CUDA API calls not made inside another call of their thread (the CUDA 13 runtime
    makes driver calls inside cudaLaunchKernel: only the runtime call counts); `rows`: of those calls
    only, enclosing calls sought among them alone (False elsewhere)."""
    tid, start, end = (api[c].to_numpy() for c in ("global_tid", "start", "end"))
    if rows is not None:
        outer = np.zeros(len(api), dtype=bool)
        outer[rows] = outermost_calls(pd.DataFrame({"global_tid": tid[rows], "start": start[rows], "end": end[rows]}))
        return outer
    outer = np.ones(len(api), dtype=bool)
    if len(api) < 2:
        return outer
    order = np.lexsort((-end, start, tid))  # by thread, then start; the longer of equal starts first
    t, e = tid[order], end[order]
    reach = pd.Series(e).groupby(t, sort=False).cummax().to_numpy()
    same = np.r_[False, t[1:] == t[:-1]]
    outer[order] = ~(same & (np.r_[0, reach[:-1]] >= e))
    return outer


def outside_every_range(forest: Forest, api: pd.DataFrame, api_range: np.ndarray) -> np.ndarray:
    """Mask of the outermost CUDA API calls that no NVTX range encloses: none on their thread, and, for
    a thread without any range (autograd's, a library's worker), none open in their process at the
    time (such calls belong to what the process is doing then, as their GPU work does)."""
    # A call that encloses one outside every range is outside them too (a range enclosing it would enclose both):
    # where `api_range` is exact (nested ranges), the calls outside every range are the only ones to look among.
    outside = api_range < 0
    loose = outermost_calls(api, np.flatnonzero(outside)) if forest.nested else outside & outermost_calls(api)
    tid = api["global_tid"].to_numpy()
    check = loose & ~np.isin(tid, np.array([t for t, _, _ in forest.threads], dtype=np.int64))
    if check.any():
        pid = tid & PID_MASK
        range_pid = forest.tid & PID_MASK
        # Nested ranges cover what the top-level ones do: their union is that of the top level's few.
        counted = forest.depth == 0 if forest.nested else np.ones(len(forest), dtype=bool)
        for process in np.unique(pid[check]):  # processes, not events
            mine_ranges = counted & (range_pid == process)
            s, e = intervals.merge(forest.start[mine_ranges], forest.end[mine_ranges])
            mine = np.flatnonzero(check & (pid == process))
            if len(s) == 0:
                continue
            t = api["start"].to_numpy()[mine]
            block = np.searchsorted(s, t, side="right") - 1
            inside = (block >= 0) & (t < e[np.maximum(block, 0)])
            loose[mine[inside]] = False
    return loose


def _inside(ranges: pd.DataFrame, api: pd.DataFrame) -> np.ndarray:
    """Mask of the API calls that start inside one of `ranges` on their thread (a few ranges: loop over threads)."""
    inside = np.zeros(len(api), dtype=bool)
    tid = api["global_tid"].to_numpy()
    for thread in np.unique(ranges["global_tid"].to_numpy()):  # threads of a few ranges, not events
        mine = ranges["global_tid"].to_numpy() == thread
        s, e = intervals.merge(ranges["start"].to_numpy()[mine], ranges["end"].to_numpy()[mine])
        if len(s) == 0:  # (only ranges of no length on this thread: nothing starts inside them)
            continue
        calls = np.flatnonzero(tid == thread)
        t = api["start"].to_numpy()[calls]
        block = np.searchsorted(s, t, side="right") - 1
        inside[calls[(block >= 0) & (t < e[np.maximum(block, 0)])]] = True
    return inside


UNASSOCIATED = "unassociated_"


def _with_unassociated(ops: Ops, profile: Profile, iterations: Iterations, work: pd.DataFrame,
                       uses_tc: Callable[[np.ndarray], np.ndarray], loose: np.ndarray) -> Ops:
    """`ops` with DLProf's ops for CUDA calls outside every NVTX range, named ``unassociated_<api>`` (op type:
    the API name; no direction, data type or group path), with the GPU work each call launched. As DLProf 1.8
    (its ``CUDADEVICESYNCHRONIZE_V3020_1`` and ``_2`` are two ops of one call each), an op is the k-th call of
    an API within its iteration and process, like the ``CUDA_n`` ops of ranges: one call per iteration. They
    count in All Ops and the group report's ``_CompleteModel_`` row, not under ``/``."""
    api = profile.runtime
    calls = np.flatnonzero(loose)
    # calls outside every iteration window belong to no iteration whatever the range aggregated: no op
    calls = calls[iterations.assign(api["start"].to_numpy()[calls]) >= 0]
    if len(calls) == 0:
        return ops
    name_id = api["name_id"].to_numpy()[calls]
    start = api["start"].to_numpy()[calls]
    end = api["end"].to_numpy()[calls]
    n_old, base = len(ops.instances), int(ops.ops.index.max()) + 1 if len(ops.ops) else 0
    occurrence, first = _unassociated_keys(name_id, start, iterations.assign(start),
                                           api["global_tid"].to_numpy()[calls] & PID_MASK)
    key = base + occurrence
    api_names = profile.strings.decode(first["name"].to_numpy()).to_numpy(dtype=object)
    api_names = np.where(api_names == "", "unknown", api_names)
    # their GPU work: launched by these calls (and not already an op's)
    instance_of_row = np.full(len(api) + 1, -1, dtype=np.int64)
    instance_of_row[calls] = n_old + np.arange(len(calls))
    work_instance = ops.work_instance.copy()
    mine = (work_instance < 0) & (work["api_row"].to_numpy() >= 0)
    work_instance[mine] = instance_of_row[work["api_row"].to_numpy()[mine]]
    n = len(calls)
    figures = _work_figures(work, np.where(work_instance >= n_old, work_instance - n_old, -1), n, uses_tc)
    cpu = end - start
    blank = categorical(np.full(n, -1, dtype=np.int64), [])
    instances = pd.DataFrame({
        "key": key,
        "iteration": iterations.assign(start),
        "start": start,
        "end": end,
        "global_tid": api["global_tid"].to_numpy()[calls],
        "nvtx_row": np.full(n, -1, dtype=np.int64),
        "emit": np.zeros(n, dtype=bool),
        "path": blank,  # no group path: not under "/"
        "data_types": blank,
        "input_shapes": blank,
        "output_shapes": blank,
        "stack": blank,
        "cpu": cpu,
        "gpu": figures["gpu"],
        "gpu_idle": figures["gpu_idle"],
        "api": cpu,  # the call itself (calls made inside it lie within it)
        "cpu_overhead": np.zeros(n, dtype=np.int64),
        **{c: figures[c] for c in KERNEL_COLUMNS},
    })
    table = _unassociated_ops(ops.ops, first, api_names, base)
    joined = pd.concat([ops.instances, instances], ignore_index=True)
    for column in TEXT_COLUMNS:  # categorical: codes, never a string per row
        joined[column] = union_categoricals([ops.instances[column].array, instances[column].array])
    return Ops(joined[list(INSTANCE_COLUMNS)], table[ops.ops.columns], work_instance, ops.warnings)


def _unassociated_keys(name_id: np.ndarray, start: np.ndarray, iteration: np.ndarray,
                       pid: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    """Per loose call, its op (0..): the (API name, occurrence) pair, the occurrence counted by start within the
    call's iteration and process, so that the k-th ``cudaDeviceSynchronize`` of every iteration is one op; and
    per op (in op order, by first call), its API name id, occurrence and first call's start."""
    frame = pd.DataFrame({"name": name_id, "iteration": iteration, "pid": pid, "start": start})
    order = np.argsort(start, kind="stable")
    occ = np.empty(len(frame), dtype=np.int64)
    occ[order] = frame.iloc[order].groupby(["iteration", "pid", "name"], sort=False).cumcount().to_numpy()
    frame["occ"] = occ
    first = frame.groupby(["name", "occ"], sort=False)["start"].min().sort_values(kind="stable").reset_index()
    op_of = pd.Series(np.arange(len(first)), index=pd.MultiIndex.from_frame(first[["name", "occ"]]))
    return op_of.reindex(pd.MultiIndex.from_arrays([name_id, occ])).to_numpy(), first


def _unassociated_ops(table: pd.DataFrame, first: pd.DataFrame, api_names: np.ndarray, base: int) -> pd.DataFrame:
    """The op table `table` with the ``unassociated_<api>`` ops (`first`: per op, in key order from `base` on,
    its occurrence and first call's start), all renumbered by first appearance."""
    extra = pd.DataFrame({
        "op_id": "",
        "op_name": UNASSOCIATED + api_names,
        "direction": "",
        "op_type": api_names,
        "tc_eligible": False,
        "first_start": first["start"].to_numpy(),
        "forward_key": -1,
        "op_key": "unassociated|" + api_names + "#" + first["occ"].astype(str).to_numpy(dtype=object),
        "forward_op_key": "",
        "order": 0,
    }, index=pd.Index(base + np.arange(len(first)), name="key"))
    joined = pd.concat([table, extra]) if len(table) else extra
    joined["order"] = joined["first_start"].rank(method="first").astype(np.int64).to_numpy() - 1
    joined["op_id"] = op_ids(joined)
    return joined


def _work_figures(work: pd.DataFrame, work_instance: np.ndarray, n: int,
                  uses_tc: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
    """The GPU figures of instances 0..n-1 from the work they launched (`work_instance`: each work row's
    instance, -1 for none): ``gpu`` (the union of its intervals), ``gpu_idle`` (the span from its first start
    to its last end, minus ``gpu``), and the KERNEL_COLUMNS (kernels, those using Tensor Cores, their times)."""
    start = work["start"].to_numpy()
    end = work["end"].to_numpy()
    gpu = union_by_group(work_instance, start, end, n)
    mine = work_instance >= 0
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, work_instance[mine], start[mine])
    np.maximum.at(last, work_instance[mine], end[mine])
    is_kernel = (work["kind"].to_numpy() == KERNEL) & mine
    tc = np.zeros(len(work), dtype=bool)
    tc[is_kernel] = uses_tc(work["name_id"].to_numpy()[is_kernel])
    duration = end - start
    return {
        "gpu": gpu,
        "gpu_idle": np.where(last >= first, last - first, 0) - gpu,
        "kernels": np.bincount(work_instance[is_kernel], minlength=n),
        "tc_kernels": np.bincount(work_instance[tc], minlength=n),
        "kernel_time": np.bincount(work_instance[is_kernel], weights=duration[is_kernel], minlength=n).astype(np.int64),
        "tc_kernel_time": np.bincount(work_instance[tc], weights=duration[tc], minlength=n).astype(np.int64),
    }


def _among(kind: np.ndarray, *kinds: int) -> np.ndarray:
    """Mask of `kind` values in `kinds` (a lookup in a 256-entry table: np.isin sorts the big array)."""
    table = np.zeros(256, dtype=bool)
    table[list(kinds)] = True
    return table[kind.astype(np.uint8)]


def _direction_codes(names: pd.DataFrame) -> np.ndarray:
    """Per name code: DIRECTIONS index of its direction."""
    return np.array([DIRECTIONS.index(d) for d in names["direction"]], dtype=np.int8).reshape(-1)


def _key_ranges(profile: Profile, iterations: Iterations, forest: Forest, parsed: mk.Parsed,
                name: np.ndarray) -> np.ndarray:
    """Mask of the key node's ranges (on every thread: each rank has its own) and of every range enclosing one."""
    ids = key_name_ids(profile, iterations.key_node)
    is_key = np.zeros(len(parsed.ids) + 1, dtype=bool)  # last slot: ranges without a name
    codes = parsed.codes(ids)
    is_key[codes[codes >= 0]] = True
    above = is_key[name]
    for level in reversed(forest.levels[1:]):  # bottom-up: mark the parents of marked ranges
        marked = level[above[level] & (forest.parent[level] >= 0)]
        above[forest.parent[marked]] = True
    return above


def _seq_less_wrappers(forest: Forest, kind: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Mask of emit_nvtx ranges without an autograd seq that enclose one with a seq.

    PyProf names a kernel by the ``seq`` markers around it before any other (``add_, seq = 0``
    inside ``torch::autograd::AccumulateGrad``; a backward node inside autograd's
    ``evaluate_function`` range), so in a dict-marker profile those wrappers define nothing.
    """
    emit = _among(kind, mk.FORWARD, mk.BACKWARD)
    below = np.zeros(len(forest), dtype=bool)  # some emit range with a seq strictly below
    reach = emit & (seq >= 0)
    for level in reversed(forest.levels[1:]):  # bottom-up, nesting levels, not events
        parent = forest.parent[level]
        marked = (reach[level] | below[level]) & (parent >= 0)
        below[parent[marked]] = True
    return emit & (seq < 0) & below


def _heads(forest: Forest, kind: np.ndarray) -> np.ndarray:
    """Mask of the ranges that are ops (the rules of the module docstring)."""
    parent = forest.parent
    # dict-marker ops: {'mod','op'} ranges, and traceMarkers without a {'mod','op'} child
    has_modop_child = np.zeros(len(forest) + 1, dtype=bool)  # last slot: "no parent" (-1)
    has_modop_child[parent[kind == mk.MODOP]] = True
    dict_op = (kind == mk.MODOP) | ((kind == mk.TRACE) & ~has_modop_child[:-1])
    emit_or_library = _among(kind, mk.FORWARD, mk.BACKWARD, mk.LIBRARY)
    # which kinds a range or one of its ancestors has, as bits, pushed down the nesting levels once
    framework, dict_bit = 1, 2
    bits = ((emit_or_library | dict_op) * framework | dict_op * dict_bit).astype(np.int8)
    above = np.append(forest.propagate_or(bits), 0)[parent]  # strictly above: the parent's (0 for no parent)
    framework_above = (above & framework) != 0
    dict_above = (above & dict_bit) != 0
    has_child = np.zeros(len(forest) + 1, dtype=bool)
    has_child[parent[kind != mk.IGNORE]] = True
    has_child = has_child[:-1]
    return ((dict_op & ~dict_above)
            | (emit_or_library & ~framework_above)
            | ((kind == mk.USER) & ~has_child & ~framework_above))


def _group_paths(forest: Forest, group: np.ndarray, name: np.ndarray, texts: np.ndarray) -> tuple[np.ndarray,
                                                                                                     list[str]]:
    """Per range, a code into `paths` of the group path of the ranges enclosing it (and itself if a group)."""
    paths = ["/"]
    index = {("/", -1): 0}
    code = np.zeros(len(forest), dtype=np.int32)
    for level in forest.levels:  # top-down: a range's path extends its parent's
        parent = forest.parent[level]
        inherited = np.where(parent >= 0, code[np.maximum(parent, 0)], 0)
        code[level] = inherited
        grouping = group[level]
        if not grouping.any():
            continue
        pairs = pd.DataFrame({"p": inherited[grouping], "n": name[level][grouping]})
        uniq, inverse = np.unique(pairs.to_numpy(), axis=0, return_inverse=True)
        new_codes = []
        for p, n in uniq:  # distinct (parent path, name) pairs: a handful
            key = (paths[p], int(n))
            if key not in index:
                index[key] = len(paths)
                paths.append(f"{paths[p]}{texts[n]}/")
            new_codes.append(index[key])
        code[level[grouping]] = np.asarray(new_codes, dtype=np.int64)[np.ravel(inverse)]
    return code, paths


def _adopt_orphans(forest: Forest, heads: np.ndarray, group: np.ndarray, path_code: np.ndarray) -> None:
    """Ops on a thread without user ranges take the group of their process's user ranges open then.

    Autograd runs backward on its own thread while the main thread waits inside the user's
    ``backward`` range: by the same-thread rule alone every backward op would sit at ``/``.
    """
    groups = np.flatnonzero(group)
    threads_with_groups = np.unique(forest.tid[groups])
    orphan = heads[(path_code[heads] == 0) & ~np.isin(forest.tid[heads], threads_with_groups)]
    if len(orphan) == 0 or len(groups) == 0:
        return
    by_process = Forest.build(forest.tid[groups] & PID_MASK, forest.start[groups], forest.end[groups])
    hit = by_process.innermost(forest.tid[orphan] & PID_MASK, forest.start[orphan], forest.end[orphan])
    adopted = hit >= 0
    path_code[orphan[adopted]] = path_code[groups[by_process.order[hit[adopted]]]]


def _adopt_unannotated_launches(forest: Forest, heads: np.ndarray, work: pd.DataFrame,
                                work_instance: np.ndarray) -> None:
    """GPU work launched from a thread with no NVTX range at all goes to the op open then in its process.

    Without emit_nvtx, autograd launches the whole backward pass from its own, unannotated thread
    while the main thread waits in the user's ``backward`` range; the same-thread rule alone would
    leave all of it without an op. Threads that have ranges keep the same-thread rule.
    """
    todo = np.flatnonzero((work_instance < 0) & (work["api_start"].to_numpy() >= 0)
                          & ~np.isin(work["api_tid"].to_numpy(), np.unique(forest.tid)))
    if len(todo) == 0:
        return
    by_process = Forest.build(forest.tid[heads] & PID_MASK, forest.start[heads], forest.end[heads])
    hit = by_process.innermost(work["api_tid"].to_numpy()[todo] & PID_MASK, work["api_start"].to_numpy()[todo],
                               work["api_end"].to_numpy()[todo])
    adopted = hit >= 0
    work_instance[todo[adopted]] = by_process.order[hit[adopted]]  # heads are numbered like instances


@dataclass(frozen=True)
class OpNames:
    """What the reports call each instance's op: ``texts[code]``."""

    code: np.ndarray  # per instance
    texts: np.ndarray  # object array
    from_stack: np.ndarray  # per instance: the name is a DLProf function stack (/module/Net::forward/...)


def _op_names(h: pd.DataFrame, names: pd.DataFrame, profile: Profile) -> OpNames:
    """The marker's op name; library-domain ops are named like nsys does: ``domain:text``; a
    {'mod','op'} op whose traceMarker has no function stack (PyProf's) by its own ``mod.op``."""
    texts = names["op_name"].to_numpy(dtype=object)
    code = h["name"].to_numpy().astype(np.int64)
    stack_named = names["stack_named"].to_numpy(dtype=bool)
    unnamed = (h["kind"] == mk.MODOP).to_numpy() & ~stack_named[code]
    code[unnamed] = h["detail"].to_numpy()[unnamed]
    from_stack = stack_named[code]
    lib = (h["kind"] == mk.LIBRARY).to_numpy()
    if lib.any():
        pairs = pd.DataFrame({"domain": h["domain"].to_numpy()[lib], "name": code[lib]})
        distinct, inverse = np.unique(pairs.to_numpy(), axis=0, return_inverse=True)
        extra = [f"{profile.meta.domains.get(int(d), '')}:{texts[n]}" for d, n in distinct]  # distinct pairs
        code[lib] = len(texts) + np.ravel(inverse)
        texts = np.concatenate((texts, np.array(extra, dtype=object)))
    return OpNames(code, texts, from_stack)


def _dict_names(h: pd.DataFrame, kind: np.ndarray, parent: np.ndarray,
                name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per instance, (name code, detail code): the name that names the op and gives its stack trace,
    and the one that gives its op type, direction, data types and shapes. Both are the range's own
    name, but a {'mod','op'} op is named by the traceMarker range around it (DLProf's funcStack)."""
    label = h["name"].to_numpy().copy()
    detail = label.copy()
    modop = np.flatnonzero((h["kind"] == mk.MODOP).to_numpy())
    if len(modop) == 0:
        return label, detail
    up = parent[h["row"].to_numpy()[modop]]
    traced = (up >= 0) & (np.append(kind, mk.IGNORE)[up] == mk.TRACE)
    label[modop[traced]] = name[up[traced]]
    return label, detail


def _path_texts(h: pd.DataFrame, paths: list[str], op_names: OpNames) -> tuple[np.ndarray, np.ndarray]:
    """(code per instance, texts) of the instances' group paths.

    A DLProf function-stack op also sits below the directories of its stack: /module/net::forward/...
    """
    code = h["path"].to_numpy().astype(np.int64)
    texts = np.asarray(paths, dtype=object)
    trace = np.flatnonzero(op_names.from_stack)
    if len(trace):
        pairs = np.stack((code[trace], op_names.code[trace]), axis=1)
        distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
        extra = []
        for path, op in distinct:  # distinct (path, stack) pairs
            stack_dir = str(op_names.texts[op]).strip("/").rpartition("/")[0]
            extra.append(f"{texts[path]}{stack_dir}/".replace("//", "/"))
        code[trace] = len(texts) + np.ravel(inverse)
        texts = np.concatenate((texts, np.array(extra, dtype=object)))
    return code, texts


def _link_backward(forest: Forest, kind: np.ndarray, seq: np.ndarray, instance_at: np.ndarray,
                   h: pd.DataFrame) -> np.ndarray:
    """For each instance, the forward instance its backward op belongs to (autograd seq), else -1.

    A backward node ``XBackward0, seq = N`` was created by the last forward op that recorded
    ``seq = N`` on its process before it: the sequence counter only moves on when a node is made.
    """
    linked = np.full(len(h), -1, dtype=np.int64)
    candidate = np.flatnonzero(seq >= 0)
    instance = instance_at[candidate]
    candidate, instance = candidate[instance >= 0], instance[instance >= 0]
    is_node = kind[candidate] == mk.BACKWARD
    is_forward = (_among(kind[candidate], mk.FORWARD, mk.TRACE, mk.MODOP)
                  & (h["direction"].to_numpy()[instance] == DIRECTIONS.index(mk.FPROP)))
    if not is_node.any() or not is_forward.any():
        return linked
    def frame(mask: np.ndarray, label: str) -> pd.DataFrame:
        rows = candidate[mask]
        return pd.DataFrame({"pid": forest.tid[rows] & PID_MASK, "seq": seq[rows], "start": forest.start[rows],
                             label: instance[mask]}).sort_values("start", kind="stable")

    matched = pd.merge_asof(frame(is_node, "instance"), frame(is_forward, "forward"), on="start",
                            by=["pid", "seq"], direction="backward", allow_exact_matches=False)
    matched = matched.dropna(subset=["forward"])
    first = matched.groupby("instance", sort=False)["forward"].first()
    linked[first.index.to_numpy(dtype=np.int64)] = first.to_numpy(dtype=np.int64)
    return linked


def _group(h: pd.DataFrame, linked: np.ndarray, op_names: OpNames, names: pd.DataFrame, texts: np.ndarray,
           paths: list[str], domains: Mapping[int, str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Op key of each instance and the op table (see the module docstring)."""
    keys, occurrence = _op_keys(h, linked)
    first = pd.DataFrame({"key": keys, "start": h["start"].to_numpy(), "i": np.arange(len(h))}).sort_values(
        "start", kind="stable").drop_duplicates("key")
    rep = first["i"].to_numpy()
    rep_name = op_names.texts[op_names.code[rep]]
    ops = pd.DataFrame({
        "op_name": rep_name,
        "direction": np.asarray(DIRECTIONS, dtype=object)[h["direction"].to_numpy()[rep]],
        "op_type": names["op_type"].to_numpy(dtype=object)[h["detail"].to_numpy()[rep]],
        "first_start": first["start"].to_numpy(),
        "forward_key": np.where(linked[rep] >= 0, keys[np.maximum(linked[rep], 0)], -1),
    }, index=pd.Index(first["key"].to_numpy(), name="key")).sort_index()
    # Two backward nodes of one forward op with the same name (AMP casts weight and bias: two
    # ToCopyBackward0 under one linear) are told apart as DLProf writes repeats: "ToCopyBackward0[2]".
    again = (linked[rep] >= 0) & (occurrence[rep] > 0)
    if again.any():
        ops.loc[first["key"].to_numpy()[again], "op_name"] = [
            f"{n}[{k + 1}]" for n, k in zip(rep_name[again], occurrence[rep[again]], strict=True)]
    # Eligibility is decided on the op's own marker; a linked backward op is then reported under its
    # forward op's type (AddmmBackward0 under aten::linear is a "linear" op, eligible; the
    # TBackward0 of the same layer is "linear" too, but not eligible: it only transposes).
    distinct_types = pd.Series(ops["op_type"].astype(str).unique())
    eligible = pd.Series(op_tc_eligible(distinct_types).to_numpy(), index=distinct_types.to_numpy())
    ops["tc_eligible"] = eligible.reindex(ops["op_type"].astype(str).to_numpy()).to_numpy(dtype=bool)
    fk = ops["forward_key"].to_numpy()
    is_linked = fk >= 0
    ops.loc[is_linked, "op_type"] = ops["op_type"].reindex(fk[is_linked]).to_numpy()
    text = _op_key_texts(h, linked, pd.Series(rep, index=first["key"].to_numpy()), occurrence, texts, paths, domains)
    forward_text = text.reindex(np.maximum(fk, 0)).to_numpy(dtype=object)
    ops["op_key"] = np.where(is_linked, forward_text + " > " + text.to_numpy(dtype=object), text.to_numpy(dtype=object))
    ops["forward_op_key"] = np.where(is_linked, ops["op_key"].reindex(np.maximum(fk, 0)).to_numpy(dtype=object), "")
    ops["order"] = ops["first_start"].rank(method="first").astype(np.int64).to_numpy() - 1
    ops["op_id"] = op_ids(ops)
    return keys, ops[["op_id", "op_name", "direction", "op_type", "tc_eligible", "first_start", "forward_key", "op_key",
                      "forward_op_key", "order"]]


def _op_keys(h: pd.DataFrame, linked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(op key, occurrence) of each instance: an op is (group path, marker name and domain, direction,
    occurrence of that triple within its iteration and process); a backward op linked to a forward
    instance is (that instance's op, its own name, occurrence under that instance), numbered after the others."""
    n = len(h)
    name_key = h["name"].to_numpy() * 1_000_003 + h["domain"].to_numpy()  # distinct markers per domain
    frame = pd.DataFrame({
        "iteration": h["iteration"].to_numpy(),
        "pid": h["pid"].to_numpy(),
        "path": h["path"].to_numpy(),
        "name": name_key,
        "direction": h["direction"].to_numpy(),
        "start": h["start"].to_numpy(),
    })
    order = np.argsort(frame["start"].to_numpy(), kind="stable")
    own = linked < 0
    occurrence = np.zeros(n, dtype=np.int64)
    by = ["iteration", "pid", "path", "name", "direction"]
    sub = frame.iloc[order][own[order]]
    occurrence[sub.index.to_numpy()] = sub.groupby(by, sort=False).cumcount().to_numpy()
    keys = np.full(n, -1, dtype=np.int64)
    own_idx = np.flatnonzero(own)
    keys[own_idx] = frame.iloc[own_idx].assign(occ=occurrence[own_idx]).groupby(
        ["path", "name", "direction", "occ"], sort=False).ngroup().to_numpy()
    # Backward ops linked to a forward instance: grouped under that instance's op.
    link_idx = np.flatnonzero(~own)
    if len(link_idx):
        sub = frame.iloc[order][~own[order]].assign(forward=lambda f: linked[f.index.to_numpy()])
        occurrence[sub.index.to_numpy()] = sub.groupby(["forward", "name"], sort=False).cumcount().to_numpy()
        base = keys.max() + 1 if len(own_idx) else 0
        linked_frame = pd.DataFrame({"fkey": keys[linked[link_idx]], "name": name_key[link_idx],
                                     "occ": occurrence[link_idx]})
        keys[link_idx] = base + linked_frame.groupby(["fkey", "name", "occ"], sort=False).ngroup().to_numpy()
    return keys, occurrence


def _op_key_texts(h: pd.DataFrame, linked: np.ndarray, rep: pd.Series, occurrence: np.ndarray, texts: np.ndarray,
                  paths: list[str], domains: Mapping[int, str]) -> pd.Series:
    """Per op (`rep`: op key -> the instance that represents it), its name across files, in text: what it
    groups by (the same op of every rank, or of two runs of one model, gets the same text), by op key. A linked
    backward op's text is completed with its forward op's by the caller."""
    at = rep.to_numpy()
    marker = (pd.Series(h["domain"].to_numpy()[at]).map(domains).fillna("").to_numpy(dtype=object) + ":"
              + texts[h["name"].to_numpy()[at]])
    text = pd.Series(marker + "#" + occurrence[at].astype(str).astype(object), index=rep.index.to_numpy())
    own_rep = linked[at] < 0
    text[own_rep] = (np.asarray(paths, dtype=object)[h["path"].to_numpy()[at[own_rep]]] + "|"
                     + np.asarray(DIRECTIONS, dtype=object)[h["direction"].to_numpy()[at[own_rep]]] + "|"
                     + text[own_rep].to_numpy(dtype=object))
    return text.sort_index()


def op_ids(ops: pd.DataFrame) -> np.ndarray:
    """DLProf's Op IDs: upper-cased op type + ordinal in order of first appearance (CONV2D_1, LINEAR_3);
    a backward op linked to a forward op shares its ID. `ops` has op_key, op_type, order and
    forward_op_key ('' for an op that is not linked); the same function numbers one rank's ops and
    the ops of several ranks combined. Numbered in Python over the ops (a few hundred a rank, twice a rank and
    once a merge), where pandas' sort and group-by cost far more than the work on so few rows."""
    keys = ops["op_key"].to_numpy(dtype=object)
    forward = ops["forward_op_key"].to_numpy(dtype=object)
    types = ops["op_type"].astype(str).to_numpy(dtype=object)
    order = ops["order"].to_numpy().tolist()
    stems = {op_type: _op_id_stem(op_type) for op_type in set(types.tolist())}
    counts: dict[str, int] = {}
    ids: dict[str, str] = {}
    for k in sorted(np.flatnonzero(forward == "").tolist(), key=lambda k: (order[k], keys[k])):  # stable
        stem = stems[types[k]]
        counts[stem] = counts.get(stem, 0) + 1
        ids[keys[k]] = f"{stem}_{counts[stem]}"
    return np.array([ids[key] if linked == "" else ids.get(linked, "")
                     for key, linked in zip(keys, forward, strict=True)], dtype=object)


OP_ID_PARTS = re.compile(r"^(.*?)_(\d+)$")  # type stem, ordinal


def op_id_order(ids: pd.Series | np.ndarray) -> np.ndarray:
    """Positions that sort Op IDs as DLProf's detailed report lists them: by type stem, then ordinal as a
    number (``CONV2D_2`` before ``CONV2D_10``); empty IDs first. Computed per distinct ID (a few hundred: sorted
    in Python, where pandas' string extraction and sort cost far more than the work)."""
    distinct, inverse = np.unique(np.asarray(ids, dtype=object).astype(str), return_inverse=True)

    def key(text: str) -> tuple[str, int, str]:
        parts = OP_ID_PARTS.match(text)
        return (parts[1], int(parts[2]), text) if parts else (text, 0, text)

    position = np.empty(len(distinct), dtype=np.int64)
    position[sorted(range(len(distinct)), key=lambda k: key(str(distinct[k])))] = np.arange(len(distinct))
    return position[np.ravel(inverse)]


def _measure(h: pd.DataFrame, names: pd.DataFrame, path: tuple[np.ndarray, np.ndarray], work: pd.DataFrame,
             work_instance: np.ndarray, uses_tc: Callable[[np.ndarray], np.ndarray], api: pd.DataFrame,
             api_instance: np.ndarray) -> pd.DataFrame:
    """The §1.5 figures of each instance, and its text columns (categorical: few distinct values)."""
    n = len(h)
    figures = _work_figures(work, work_instance, n, uses_tc)
    api_time = union_by_group(api_instance, api["start"].to_numpy(), api["end"].to_numpy(), n)
    cpu = (h["end"] - h["start"]).to_numpy()
    detail = h["detail"].to_numpy()
    return pd.DataFrame({
        "key": h["key"].to_numpy(),
        "iteration": h["iteration"].to_numpy(),
        "start": h["start"].to_numpy(),
        "end": h["end"].to_numpy(),
        "global_tid": h["global_tid"].to_numpy(),
        "nvtx_row": h["nvtx_row"].to_numpy(),
        "emit": _among(h["kind"].to_numpy(), mk.FORWARD, mk.BACKWARD),
        "path": categorical(*path),
        "data_types": categorical(detail, names["data_types"].to_numpy(dtype=object)),
        "input_shapes": categorical(detail, names["input_shapes"].to_numpy(dtype=object)),
        "output_shapes": categorical(detail, names["output_shapes"].to_numpy(dtype=object)),
        "stack": categorical(h["name"].to_numpy(), names["stack"].to_numpy(dtype=object)),
        "cpu": cpu,
        "gpu": figures["gpu"],
        "gpu_idle": figures["gpu_idle"],
        "api": api_time,
        "cpu_overhead": cpu - api_time,
        **{c: figures[c] for c in KERNEL_COLUMNS},
    })
