"""Writers: CSV, JSON, the HTML page, TensorBoard event files and the PNGs reports draw. Importing this package
registers them."""

from __future__ import annotations

import importlib
import pkgutil

from .base import WRITERS, RunInfo, Writer, how_to_open, writer

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["WRITERS", "RunInfo", "Writer", "how_to_open", "writer"]
