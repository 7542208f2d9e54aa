"""Report builders. Importing this package registers every report: the modules of `MODULES`, in the registry's
order (``dlagg/registry.py``)."""

from __future__ import annotations

from ..registry import load
from .base import REPORTS, Report, ReportSpec, build_order, build_reports, report
from .figures import Field, Table

# The modules that register reports, in the registry's order: DLProf's (its --reports help), then dlagg's own.
# It is the order of --help, of the files listed and of the TensorBoard dashboards; the saved figures come before
# the comparison, as a JSON run with a baseline lists its files. The modules they use (base, figures, side,
# spilled) register nothing and are not listed.
MODULES = ("summary", "detail", "kernel", "iteration", "tensor_core", "op_type", "group_node", "expert_systems",
           "ranks", "roofline", "saved", "compare")

load(__name__, MODULES, (REPORTS, lambda spec: spec.build.__module__))

__all__ = ["REPORTS", "Field", "Report", "ReportSpec", "Table", "build_order", "build_reports", "report"]
