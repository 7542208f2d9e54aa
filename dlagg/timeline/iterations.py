"""Cut the timeline into training iterations with a key node (DLProf semantics).

Contract: ``detect_iterations(profile, key_node, iter_start, iter_stop) -> Iterations``.

Iteration i spans (end of key instance i-1, end of key instance i]; iteration 0 starts at the
start of the profile. The key node is an NVTX range name, or a glob with ``*`` (PyTorch's
``ProfilerStep#N`` differs per step). Without ``--key_node`` dlagg looks for well-known names,
then for the range that repeats most regularly at the top level of the busiest thread. When the
key node is not found, one iteration 0 spans the whole profile from time 0 of the session (as
DLProf: its CPU and Other shares then include what ran before the first event dlagg reads) and
the warning names candidates.

``with_gpu_work(iterations, iteration, end) -> Iterations`` then moves each iteration's end to
the end of the GPU work launched in it when that is later (the host ran ahead of the GPU; see
``model.Iterations``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace

import numpy as np
import pandas as pd

from ..errors import OptionsError
from ..model import Iterations, Profile, factorize_ids

# Tried in this order when no --key_node is given: TensorFlow's global step (DLProf's default),
# the name used by most PyTorch training loops and our recordings, PyTorch profiler's step
# ranges (emitted by torch.profiler schedules), then the bare word.
KNOWN_KEY_NODES = ("global_step", "train_step", "ProfilerStep#*", "step")

# A range repeating fewer times than this cannot define steady iterations on its own.
MIN_REPEATS = 3
# Start-to-start periods of an automatically chosen key node must be this regular
# (coefficient of variation); data-loading or logging ranges are far less regular than steps.
MAX_PERIOD_CV = 0.5
# Training steps follow each other: a range covering less than this share of the span from its
# first start to its last end is work inside a step (a data fetch, one layer), not the step.
MIN_STEP_COVERAGE = 0.5
# Names that are framework op markers (PyTorch emit_nvtx, DLProf/PyProf dict markers), never steps;
# ranges with an autograd seq number are ops too (PyTorch < 1.5 names them without a namespace).
OP_MARKER = r"^\{|, seq = |, op_id = |^aten::|^(?:torch::)?autograd::|Backward\d*$"
# How alike a range name must be to a --key_node that matches nothing to be offered as what it meant
# (difflib's ratio; 0.6 is its own default: 'trian_step' -> 'train_step' 0.9, 'step' -> 'train_step' 0.57).
NEAR_RATIO = 0.6

_RE2_SPECIAL = re.compile(r"([\\.^$|?+()\[\]{}])")


def glob_regex(pattern: str) -> str:
    """A ``*`` glob as a regular expression that both Python ``re`` and RE2 accept.

    ``*`` matches any text, line breaks included (``(?s:...)``: NVTX texts may span lines).
    """
    return "(?s:" + ".*".join(_RE2_SPECIAL.sub(r"\\\1", part) for part in pattern.split("*")) + ")"


def key_name_ids(profile: Profile, key_node: str) -> np.ndarray:
    """The string ids of the range names `key_node` (a name, or a ``*`` glob) matches."""
    if "*" not in key_node:
        return profile.strings.ids_equal(key_node)
    try:
        return profile.strings.ids_matching(glob_regex(key_node))
    except ValueError as exc:  # RE2 refuses patterns over its memory budget (about 1 MB of glob)
        shown = key_node if len(key_node) <= 60 else key_node[:57] + "..."
        raise OptionsError(f"--key_node='{shown}' ({len(key_node)} characters) cannot be matched ({exc}); "
                           "give the exact range name or a shorter glob") from None


def key_instances(profile: Profile, key_node: str) -> pd.DataFrame:
    """Instances of `key_node` on the thread that has most of them (one rank, one loop)."""
    found = profile.nvtx
    found = found[np.isin(found["text_id"].to_numpy(), key_name_ids(profile, key_node))]
    if found.empty:
        return found
    busiest = found["global_tid"].value_counts().index[0]
    return found[found["global_tid"] == busiest].sort_values("end", kind="stable")


def top_level(profile: Profile) -> pd.DataFrame:
    """Ranges not enclosed by another range of the same thread, with the glob of their name (step
    numbers as ``*``) and whether the name is a framework op marker (never a step)."""
    rng = profile.nvtx.sort_values(["global_tid", "start", "end"], ascending=[True, True, False], kind="stable")
    if rng.empty:
        return rng.assign(glob=pd.Series(dtype=object), marker=pd.Series(dtype=bool))
    reach = rng.groupby("global_tid", sort=False)["end"].cummax()
    before = reach.groupby(rng["global_tid"], sort=False).shift(1)
    top = rng[before.isna().to_numpy() | (rng["start"].to_numpy() >= before.fillna(0).to_numpy())]
    glob, marker = _name_facts(profile, top["text_id"].to_numpy())
    return top.assign(glob=glob, marker=marker | (top["seq"].to_numpy() >= 0))


def _name_facts(profile: Profile, text_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per range (by name id): the name as a glob (``ProfilerStep#12`` -> ``ProfilerStep#*``) and whether
    it is a framework op marker; both decided once per distinct name."""
    distinct, inverse = factorize_ids(text_ids)
    names = profile.strings.decode(distinct).astype(str)
    globs = names.str.replace(r"\d+", "*", regex=True).to_numpy(dtype=object)
    markers = names.str.contains(OP_MARKER, regex=True).to_numpy(dtype=bool)
    return globs[inverse], markers[inverse]


def candidates(profile: Profile, limit: int = 5) -> tuple[str, ...]:
    """The most frequent top-level range names (as globs), most frequent first."""
    top = top_level(profile)
    top = top[~top["marker"].to_numpy()]
    if top.empty:
        return ()
    counts = top["glob"].value_counts()
    return tuple(counts.index[:limit])


def near_names(profile: Profile, key_node: str, limit: int = 3) -> tuple[str, ...]:
    """The range names closest in spelling to `key_node`, closest first: what a mistyped --key_node meant.

    Compared case-blind over the distinct names that are not framework op markers, decided once per
    name; numbered names (``ProfilerStep#12``) are offered as their glob (``ProfilerStep#*``) when
    several share it. Nothing close enough (difflib ratio under NEAR_RATIO): ().
    """
    ids = factorize_ids(profile.nvtx["text_id"].to_numpy())[0]
    if not len(ids):
        return ()
    globs, markers = _name_facts(profile, ids)
    names = profile.strings.decode(ids).astype(str).to_numpy(dtype=object)
    frame = pd.DataFrame({"glob": globs[~markers], "name": names[~markers]})
    shared = frame.groupby("glob")["name"].transform("size").to_numpy() > 1
    shown = np.where(shared, frame["glob"].to_numpy(), frame["name"].to_numpy())
    choices = {str(text).lower(): str(text) for text in dict.fromkeys(shown)}  # a few hundred names
    close = difflib.get_close_matches(key_node.lower(), list(choices), n=limit, cutoff=NEAR_RATIO)
    return tuple(choices[c] for c in close)


def auto_key_node(profile: Profile) -> tuple[str, str]:
    """(key node, why) chosen without user input; ("", why-not) when nothing qualifies."""
    rng = profile.nvtx
    for name in KNOWN_KEY_NODES:
        instances = key_instances(profile, name)
        if len(instances):
            return name, f"well-known key node name '{name}' ({len(instances)} instances)"
    top = top_level(profile)
    if top.empty:
        return "", "the profile has no NVTX ranges" if rng.empty else "no top-level NVTX range"
    # (With no ranges at all there is nothing to choose from: the pipeline says how to add them.)
    # The busiest thread is the one that launches most CUDA work (else the one with most ranges).
    if len(profile.runtime):
        threads = profile.runtime["global_tid"].value_counts()
        threads = threads[threads.index.isin(top["global_tid"].unique())]
        busiest = threads.index[0] if len(threads) else top["global_tid"].value_counts().index[0]
    else:
        busiest = top["global_tid"].value_counts().index[0]
    top = top[(top["global_tid"] == busiest).to_numpy() & ~top["marker"].to_numpy()]
    # Every instance of a step is top-level; a name that also occurs nested is something else.
    on_thread = rng[rng["global_tid"] == busiest]
    all_counts = pd.Series(_name_facts(profile, on_thread["text_id"].to_numpy())[0]).value_counts()
    stats = top.sort_values("start").groupby("glob").agg(
        count=("start", "size"),
        first=("start", "min"),
        last=("end", "max"),
        busy=("end", "sum"),
        idle=("start", "sum"),
        cv=("start", lambda s: float(np.std(np.diff(s)) / np.mean(np.diff(s))) if len(s) > 2 else 0.0),
    )
    stats["coverage"] = (stats["busy"] - stats["idle"]) / (stats["last"] - stats["first"]).clip(lower=1)
    stats = stats[
        (stats["count"] >= MIN_REPEATS)
        & (stats["cv"] <= MAX_PERIOD_CV)
        & (stats["coverage"] >= MIN_STEP_COVERAGE)
        & (stats["count"] == all_counts.reindex(stats.index).fillna(0))
    ]
    if stats.empty:
        return "", "no top-level NVTX range repeats like a training step"
    ranked = stats.sort_values(["count", "cv"], ascending=[False, True])
    name, best = str(ranked.index[0]), ranked.iloc[0]
    return name, (f"'{name}' repeats most regularly at the top level of the busiest thread "
                  f"({int(best['count'])} instances, period variation {best['cv']:.0%}, "
                  f"covering {best['coverage']:.0%} of their span)")


def detect_iterations(
    profile: Profile,
    key_node: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    *,
    clamp: bool = False,
) -> Iterations:
    """Iteration windows from the key node's instances, restricted to iter_start..iter_stop.

    With `clamp` (one rank of several, which may have fewer iterations than the others), an
    --iter_stop past the last iteration stops at the last one instead of being an error.
    """
    if key_node:
        reason = "given with --key_node"
    else:
        key_node, reason = auto_key_node(profile)
    instances = key_instances(profile, key_node) if key_node else pd.DataFrame()
    found = len(instances) > 0
    if found:
        ends = np.unique(instances["end"].to_numpy(dtype=np.int64))
        starts = np.concatenate(([min(profile.meta.start, int(instances["start"].min()))], ends[:-1]))
    else:  # DLProf: one iteration 0 from the session's time 0 to the end of the profile
        ends = np.array([profile.meta.end], dtype=np.int64)
        starts = np.array([min(0, profile.meta.start)], dtype=np.int64)
    count = len(ends)
    start = 0 if iter_start is None else iter_start
    stop = count - 1 if iter_stop is None else iter_stop
    if clamp and stop >= count:
        stop = count - 1
    for label, value in (("--iter_start", start), ("--iter_stop", stop)):
        if not 0 <= value < count:
            raise OptionsError(f"{label}={value} is out of range: {profile.meta.source} has {count} "
                               f"iteration{'s' if count != 1 else ''} (0 to {count - 1}) with key node "
                               f"'{key_node or '(none)'}'")
    if start > stop:
        raise OptionsError(f"--iter_start={start} is after --iter_stop={stop}; give a start <= stop")
    return Iterations(
        key_node=key_node if found else "",
        reason=reason if found else (f"key node '{key_node}' not found" if key_node else reason),
        starts=starts,
        ends=ends,
        start=start,
        stop=stop,
        found=found,
        candidates=() if found else candidates(profile),
    )


def with_gpu_work(iterations: Iterations, iteration: np.ndarray, end: np.ndarray) -> Iterations:
    """`iterations` with each iteration ending at the later of its key-node instance's end and the end
    of the last GPU work launched in it (`iteration`: the launch-attributed iteration of each GPU
    work row, -1 outside every window; `end`: its end), kept non-decreasing; iteration i starts where
    iteration i-1 ends. Host-side attribution (``Iterations.assign``) is unchanged."""
    key_ends = iterations.launch_ends
    count = len(key_ends)
    last = np.full(count, -1, dtype=np.int64)
    inside = (iteration >= 0) & (iteration < count)
    np.maximum.at(last, np.asarray(iteration)[inside], np.asarray(end, dtype=np.int64)[inside])
    ends = np.maximum.accumulate(np.maximum(key_ends, last))
    starts = np.concatenate((iterations.starts[:1], ends[:-1]))
    return replace(iterations, starts=starts, ends=ends, key_ends=key_ends, gpu_ends=last)
