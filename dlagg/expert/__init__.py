"""Expert systems: detectors that find what slows a training run, with evidence and a fix.

Importing this package registers every detector; ``run_detectors(ctx)`` runs them. Adding a
detector = one ``@detector``-decorated function in a module imported below.
"""

from __future__ import annotations

from . import iterations, launch, memory, precision, utilisation  # noqa: F401  (registers detectors)
from .base import DETECTORS, Finding, MissingData, Outcome, run_detectors

__all__ = ["DETECTORS", "Finding", "MissingData", "Outcome", "run_detectors"]
