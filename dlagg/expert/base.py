"""Findings, the detector registry and the shared helpers every detector uses.

Contract: a detector is ``fn(facts: Facts) -> list[Finding]`` registered with ``@detector(name)``.
It returns no finding when its condition does not hold, and raises ``MissingData`` when the
export lacks what it needs (it then stays silent; the report lists it as not run, with why).
``dlagg.expert.run_detectors(ctx)`` runs them all and returns the findings sorted by time at stake.

Times at stake are per iteration, for a *typical* iteration: the median over the aggregated
iterations, so one warm-up iteration does not decide every finding (the iteration-variation
detector reports the warm-up itself). Findings may overlap (the same idle time can be "launch
bound" and "GPU underutilized"); times at stake are not additive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import share

HIGH, MEDIUM, LOW = "high", "medium", "low"

# Severity from the time at stake as a share of the typical (median) iteration time.
# A quarter of the step is what DLProf's own examples flagged loudest (GPU idle most of the
# step); below 5% a change is hard to tell from run-to-run noise (our recordings' iteration
# times vary by 2-5% between steady steps).
HIGH_SHARE = 0.25
MEDIUM_SHARE = 0.05
# A finding must have something at stake that the report can show: stakes are shown in ms with three
# decimals, so less than half a microsecond would read "0.000 ms" (nothing to gain: no finding).
MIN_STAKE_NS = 500

# Findings listed first whatever their time at stake: without iterations every other figure covers the
# whole profile, so a reader must see that before anything else.
LEADING = ("key_node",)


def finding_rank(detector: str, time_at_stake_ns: float | None) -> tuple[bool, bool, float]:
    """Sort key of a finding: leading detectors first, then by time at stake (largest first, unknown last)."""
    return detector not in LEADING, time_at_stake_ns is None, -(time_at_stake_ns or 0.0)


class MissingData(Exception):
    """The export lacks what a detector needs; the message says what (shown in the report)."""


@dataclass(frozen=True)
class Finding:
    detector: str
    problem: str  # DLProf's "Problem" column
    recommendation: str  # DLProf's "Recommendation" column
    evidence: str  # the figures that triggered it, checkable against the other reports
    time_at_stake_ns: float | None  # per typical iteration; None when it cannot be estimated
    estimate: str  # how time_at_stake_ns was estimated
    iterations: str = ""
    ops: str = ""
    kernels: str = ""
    severity: str = ""  # empty: derived from the time at stake (see severity_of)


# fn(facts: expert.facts.Facts) -> findings; typed loosely here because facts.py builds on this module
Detector = Callable[[Any], "list[Finding]"]
DETECTORS: dict[str, Detector] = {}


def detector(name: str) -> Callable[[Detector], Detector]:
    """Register a detector; registration order breaks ties between equal times at stake."""

    def register(fn: Detector) -> Detector:
        if name in DETECTORS:
            raise RuntimeError(f"duplicate detector {name!r}")
        DETECTORS[name] = fn
        return fn

    return register


def require(condition: bool, what: str) -> None:
    """Stop the calling detector (silently) when the export lacks `what`."""
    if not condition:
        raise MissingData(what)


def severity_of(finding: Finding, typical_iteration_ns: float) -> str:
    if finding.severity:
        return finding.severity
    if finding.time_at_stake_ns is None or typical_iteration_ns <= 0:
        return LOW
    share = finding.time_at_stake_ns / typical_iteration_ns
    return HIGH if share >= HIGH_SHARE else MEDIUM if share >= MEDIUM_SHARE else LOW


@dataclass(frozen=True)
class Outcome:
    detector: str
    status: str  # "fired", "silent" or "not run"
    reason: str = ""


# ---- wording helpers (small inputs only) ----

def ms(ns: float) -> str:
    """A duration for people: 1.23 ms, 45.6 us, 789 ns."""
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns:,.0f} ns"


def size(n_bytes: float) -> str:
    """A byte count for people: 16.0 MiB, 4.0 KiB, 8 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


def rate(count: int, n_iterations: int) -> str:
    """How often something happens: 'x3/iteration', or '2 in 23 iterations' when uneven."""
    if n_iterations and count % n_iterations == 0:
        return f"x{count // n_iterations}/iteration"
    return f"{count} in {plural(n_iterations, 'iteration')}"


def plural(count: int, noun: str) -> str:
    """'1 iteration', '3 iterations'."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def pct(part: float, whole: float) -> str:
    """'12.3%' (`model.share` as text), 'n/a' when `whole` is 0."""
    return f"{share(part, whole):.1f}%" if whole else "n/a"


def iteration_list(iterations: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    values = np.unique(np.fromiter(iterations, dtype=np.int64))
    if len(values) == 0:
        return ""
    breaks = np.flatnonzero(np.diff(values) != 1)
    firsts = np.r_[values[0], values[breaks + 1]]
    lasts = np.r_[values[breaks], values[-1]]
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in zip(firsts, lasts, strict=True))


def quoted(names: Iterable[str], limit: int = 5) -> str:
    names = list(names)
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
