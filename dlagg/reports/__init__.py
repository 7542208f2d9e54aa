"""Report builders. Importing this package registers every report module in it."""

from __future__ import annotations

import importlib
import pkgutil

from .base import REPORTS, Report, ReportContext, ReportSpec, Section, report

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REPORTS", "Report", "ReportContext", "ReportSpec", "Section", "report"]
