"""Report builders. Importing this package registers every report, in DLProf's order."""

from __future__ import annotations

import importlib

from .base import REPORTS, Report, ReportSpec, build_order, build_reports, report
from .figures import Field, Table

MODULES = ("summary", "detail", "kernel", "iteration", "tensor_core", "op_type", "group_node", "expert_systems",
           "ranks", "roofline")
# DLProf's report order (its --reports help): the order of --help, of the files listed and of the
# TensorBoard dashboards. Reports DLProf did not have follow.
ORDER = ("summary", "detail", "kernel", "iteration", "tensor", "op_type", "group_node", "expert_systems", "ranks",
         "collectives", "roofline")

for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
_registered = dict(REPORTS)
REPORTS.clear()
REPORTS.update({name: _registered.pop(name) for name in ORDER if name in _registered})
REPORTS.update(_registered)

__all__ = ["REPORTS", "Field", "Report", "ReportSpec", "Table", "build_order", "build_reports", "report"]
