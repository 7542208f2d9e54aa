"""Expert systems: detectors that find what slows a training run, with evidence and a fix.

Importing this package registers every detector: the modules of `MODULES`, in the registry's order
(``dlagg/registry.py``). ``run_detectors(ctx)`` runs them. Adding a detector = one ``@detector``-decorated
function in a module listed there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..registry import load
from .base import DETECTORS, MIN_STAKE_NS, Finding, MissingData, Outcome, finding_rank, severity_of
from .facts import Facts

# The modules that register detectors, in the registry's order (the order of the expert-systems report's
# Detectors table; it breaks ties between findings). The modules they use (base, facts) are not listed.
MODULES = ("iterations", "launch", "memory", "precision", "utilisation")

load(__name__, MODULES, (DETECTORS, lambda fn: fn.__module__))

if TYPE_CHECKING:
    from ..context import RankContext


def run_detectors(ctx: RankContext) -> tuple[list[Finding], list[Outcome]]:
    """Every detector on `ctx`; findings sorted by `base.finding_rank` (leading ones, then time at stake)."""
    facts = Facts(ctx)
    findings: list[Finding] = []
    outcomes: list[Outcome] = []
    for name, fn in DETECTORS.items():  # a dozen detectors, not events
        try:
            found = fn(facts)
        except MissingData as missing:
            outcomes.append(Outcome(name, "not run", str(missing)))
            continue
        # nothing measurable at stake ("0.000 ms") is no finding
        found = [f for f in found if f.time_at_stake_ns is None or f.time_at_stake_ns >= MIN_STAKE_NS]
        outcomes.append(Outcome(name, "fired" if found else "silent"))
        findings.extend(found)
    order = {name: i for i, name in enumerate(DETECTORS)}
    typical = facts.typical_iteration_ns
    findings = [f if f.severity else _with_severity(f, severity_of(f, typical)) for f in findings]
    findings.sort(key=lambda f: (*finding_rank(f.detector, f.time_at_stake_ns), order[f.detector]))
    return findings, outcomes


def _with_severity(finding: Finding, severity: str) -> Finding:
    return replace(finding, severity=severity)



__all__ = ["DETECTORS", "Finding", "MissingData", "Outcome", "run_detectors"]
