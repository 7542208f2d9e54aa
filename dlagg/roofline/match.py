"""ncu kernels matched to the kernels of an nsys `Profile`, so that each ncu kernel gets its
unprofiled duration (and, through the nsys kernel, its op).

Contract: ``match_kernels(kernels, profile, iterations) -> KernelMatch``, `kernels` being
``NcuReport.kernels`` or ``KernelWork.kernels`` (columns name, grid_*, block_*, device).

ncu profiles one step, in launch order; nsys records many. A kernel is identified by a key and
its rank among the kernels of that key within a step (its *slot*): the k-th launch of key K in
the ncu step is the k-th launch of K in every nsys step. Keys, most specific first:

1. the mangled name: ncu's Kernel Name (a CSV exported with ``--print-kernel-base mangled``, or
   an ``extern "C"`` kernel, whose names are all the same) equals nsys's ``mangledName``;
2. the demangled name, normalised: ncu prints ``void at::elementwise_kernel<128, ...>`` where
   nsys has ``void at::native::elementwise_kernel<(int)128, ...>``, so namespace qualifiers,
   literal casts and spaces are dropped on both sides;
3. the base name (the function's own identifier, nsys's shortName);

each with the grid and block dimensions (and the device, when the ncu devices are among the nsys
ones). Each ncu kernel takes the first key whose slot some nsys step has. nsys steps are the
aggregated iterations (`Iterations`; without them, the whole profile is one step), launch
order is the launching API call's start (``timeline.correlate``).

An ncu kernel's nsys time is the mean duration of its slot over the steps that have it: the
kernel as it runs unprofiled (ncu replays each kernel serialized, caches flushed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import LAUNCH_DIMS, Iterations, Profile, factorize_ids
from ..timeline.correlate import KERNEL, gpu_work

MANGLED, DEMANGLED, BASE = "mangled name", "demangled name", "base name"
TIERS = (MANGLED, DEMANGLED, BASE)

_ANONYMOUS = re.compile(r"<unnamed>|\(anonymous namespace\)")
_CAST = re.compile(r"\((?:(?:unsigned|signed|long|short|const)\s+)*[A-Za-z_][\w:]*\)(?=-?\d)")
_QUALIFIER = re.compile(r"(?:\b[A-Za-z_]\w*|\$anon)::")
_SPACE = re.compile(r"\s+")
_MANGLED_PART = re.compile(r"(\d+)")


def normalise_demangled(name: str) -> str:
    """A demangled kernel name as ncu and nsys both print it: no namespace qualifiers, no literal
    casts (``(int)128`` -> ``128``), no spaces."""
    name = _CAST.sub("", _ANONYMOUS.sub("$anon", name))
    previous = None
    while previous != name:  # nested qualifiers: a::b::c
        previous, name = name, _QUALIFIER.sub("", name)
    return _SPACE.sub("", name)


def base_name(name: str) -> str:
    """The function's own identifier: ``void at::native::foo<int, 2>(float *)`` -> ``foo``;
    ``_ZN2at6native3fooILi2EEvPf`` -> ``foo``; a C name stays as it is."""
    if name.startswith("_Z"):
        return _mangled_base(name)
    name = _ANONYMOUS.sub("$anon", name)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template arguments
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = name[:cut].rstrip()
    while head.endswith(">"):  # drop the template arguments
        depth, i = 0, len(head)
        for i in range(len(head) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(head[i], 0)
            if depth == 0:
                break
        head = head[:i].rstrip()
    head = head.split("::")[-1]
    return head.split()[-1] if head.split() else name


def _mangled_base(name: str) -> str:
    """Last source name of an Itanium-mangled prefix (``_ZN2at6native3fooI...`` -> ``foo``)."""
    at = 3 if name.startswith("_ZN") else 2
    last = name
    while at < len(name):
        length = _MANGLED_PART.match(name, at)
        if length is None:
            break
        size = int(length.group(1))
        start = length.end()
        last = name[start:start + size]
        at = start + size
    return last


@dataclass(frozen=True)
class KernelMatch:
    """Per ncu kernel (arrays in ncu order): how it matched, the nsys time and a representative
    nsys kernel row. ``pairs`` has every (ncu kernel, nsys kernel row) matched."""

    how: np.ndarray  # object: one of TIERS, "" when unmatched
    nsys_avg_ns: np.ndarray  # float64, NaN when unmatched
    nsys_count: np.ndarray  # int64: nsys kernels averaged (one per step that has the slot)
    nsys_row: np.ndarray  # int64: the match in the earliest step (row of profile.kernels), -1
    nsys_name: np.ndarray  # object: its demangled name, "" when unmatched
    pairs: pd.DataFrame  # ncu (ncu kernel index), row (profile.kernels row)
    steps: int  # nsys steps searched
    unmatched_names: tuple[tuple[str, int], ...]  # (ncu kernel name, count), most frequent first

    @property
    def matched(self) -> int:
        return int((self.nsys_row >= 0).sum())

    def summary(self) -> str:
        total = len(self.nsys_row)
        tiers = pd.Series(self.how[self.how != ""]).value_counts()
        how = ", ".join(f"{n} by {t}" for t, n in tiers.items())
        text = (f"roofline: {self.matched} of {total} ncu kernels matched nsys kernels in {self.steps} step(s)"
                + (f" ({how})" if how else ""))
        if self.unmatched_names:
            shown = "; ".join(f"{name[:80]} (x{n})" for name, n in self.unmatched_names[:5])
            more = f" and {len(self.unmatched_names) - 5} more names" if len(self.unmatched_names) > 5 else ""
            text += (f"; unmatched: {shown}{more}: their rates use the ncu time (was the nsys run the same "
                     "program, batch and library versions?)")
        return text


def _key_texts(names: np.ndarray) -> dict[str, np.ndarray]:
    """Demangled-name and base-name keys of distinct names (the mangled key is the name itself)."""
    return {MANGLED: names, DEMANGLED: np.array([normalise_demangled(str(n)) for n in names], dtype=object),
            BASE: np.array([base_name(str(n)) for n in names], dtype=object)}


def _codes(ncu: np.ndarray, nsys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One integer code per distinct key text across both sides; -1 for '' (no such name)."""
    codes, uniques = pd.factorize(np.concatenate([ncu, nsys]))
    codes = np.where(np.asarray(uniques, dtype=object)[codes] == "", -1, codes) if len(uniques) else codes
    return codes[:len(ncu)], codes[len(ncu):]


def _ranked(code: np.ndarray, dims: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot key of code + launch shape, rank among the rows of its step with that key); rows must
    come in launch order within each step."""
    key = pd.DataFrame(np.column_stack([code, dims])).groupby(list(range(1 + dims.shape[1])), sort=False).ngroup()
    rank = key.groupby([step, key.to_numpy()]).cumcount().to_numpy()
    return key.to_numpy(), rank


def match_kernels(kernels: pd.DataFrame, profile: Profile, iterations: Iterations | None = None,
                  gpu: pd.DataFrame | None = None) -> KernelMatch:
    """Match ncu kernels to the kernels of `profile` in the aggregated iterations.

    Args:
        kernels: ncu kernels in ncu order (``NcuReport.kernels`` or ``KernelWork.kernels``).
        profile: the nsys profile.
        iterations: its iterations; None: the whole profile is one step.
        gpu: ``timeline.correlate.gpu_work(profile)`` when the caller has it (saves its cost).
    """
    if gpu is None:
        gpu = gpu_work(profile)
    launched = gpu[gpu["kind"].to_numpy() == KERNEL]
    t_attr = launched["t_attr"].to_numpy()
    if iterations is not None:
        step = iterations.assign(t_attr)
        keep = iterations.in_selection(step)
        steps = len(iterations.selected)
    else:
        step, keep, steps = np.zeros(len(launched), dtype=np.int64), np.ones(len(launched), dtype=bool), 1
    order = np.lexsort((launched["start"].to_numpy()[keep], t_attr[keep], step[keep]))
    rows = launched["row"].to_numpy()[keep][order]  # rows of profile.kernels, by step then launch
    nsys_step = step[keep][order]
    nk = profile.kernels.iloc[rows]
    strings = profile.strings

    ncu_names = kernels["name"].astype(str).to_numpy(dtype=object)
    use_device = "device" in kernels and np.isin(kernels["device"].to_numpy(), nk["device_id"].to_numpy()).all()
    ncu_dims = kernels[list(LAUNCH_DIMS)].to_numpy(dtype=np.int64)
    nsys_dims = nk[list(LAUNCH_DIMS)].to_numpy(dtype=np.int64)
    if use_device:
        ncu_dims = np.column_stack([ncu_dims, kernels["device"].to_numpy()])
        nsys_dims = np.column_stack([nsys_dims, nk["device_id"].to_numpy()])
    # keys per distinct name (ncu) and per distinct string id (nsys), then integers only
    ncu_distinct, ncu_at = np.unique(ncu_names, return_inverse=True)
    ncu_texts = _key_texts(ncu_distinct)
    name_ids, name_at = factorize_ids(nk["name_id"].to_numpy())
    nsys_texts = _key_texts(strings.decode(name_ids).to_numpy(dtype=object))
    mangled_ids, mangled_at = factorize_ids(nk["mangled_name_id"].to_numpy())
    nsys_texts[MANGLED] = strings.decode(mangled_ids).to_numpy(dtype=object)
    nsys_at = {MANGLED: mangled_at, DEMANGLED: name_at, BASE: name_at}

    n = len(ncu_names)
    how = np.full(n, "", dtype=object)
    slots: list[pd.DataFrame] = []
    position = np.arange(len(rows))  # in step, then launch order
    for tier in TIERS:  # three keys, not events
        ncu_code, nsys_code = _codes(ncu_texts[tier], nsys_texts[tier])
        code = np.concatenate([ncu_code[ncu_at], nsys_code[nsys_at[tier]]])
        key, rank = _ranked(code, np.vstack([ncu_dims, nsys_dims]), np.concatenate([np.full(n, -1), nsys_step]))
        valid = code >= 0
        found = pd.DataFrame({"key": key[n:], "rank": rank[n:], "row": rows, "position": position})[valid[n:]]
        open_ = np.flatnonzero((how == "") & valid[:n])
        wanted = pd.DataFrame({"ncu": open_, "key": key[:n][open_], "rank": rank[:n][open_]})
        pairs = wanted.merge(found, on=["key", "rank"])[["ncu", "row", "position"]]
        how[pd.unique(pairs["ncu"])] = tier
        slots.append(pairs)
    pairs = pd.concat(slots, ignore_index=True).sort_values(["ncu", "position"], kind="stable", ignore_index=True)
    return _result(how, pairs[["ncu", "row"]], profile, steps, ncu_names)


def _result(how: np.ndarray, pairs: pd.DataFrame, profile: Profile, steps: int, ncu_names: np.ndarray) -> KernelMatch:
    """`pairs` come in ncu order, then step and launch order."""
    n = len(how)
    kernels = profile.kernels
    duration = (kernels["end"].to_numpy() - kernels["start"].to_numpy())[pairs["row"].to_numpy()]
    grouped = pd.Series(duration, dtype="float64").groupby(pairs["ncu"].to_numpy())
    avg = grouped.mean().reindex(range(n)).to_numpy()
    count = grouped.size().reindex(range(n), fill_value=0).to_numpy(dtype=np.int64)
    first = pairs.drop_duplicates("ncu")  # the match in the earliest step
    nsys_row = np.full(n, -1, dtype=np.int64)
    nsys_row[first["ncu"].to_numpy()] = first["row"].to_numpy()
    nsys_name = np.full(n, "", dtype=object)
    nsys_name[first["ncu"].to_numpy()] = profile.strings.decode(
        kernels["name_id"].to_numpy()[first["row"].to_numpy()]).to_numpy(dtype=object)
    unmatched = pd.Series(ncu_names[nsys_row < 0], dtype=object).value_counts()
    return KernelMatch(how, avg, count, nsys_row, nsys_name, pairs, steps,
                       tuple((str(k), int(v)) for k, v in unmatched.items()))
