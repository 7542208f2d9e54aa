"""Writers: CSV, JSON, the HTML page, TensorBoard event files and the PNGs reports draw. Importing this package
registers them, and the HTML page's sections: the modules of `MODULES`, in the registries' order
(``dlagg/registry.py``)."""

from __future__ import annotations

from ..registry import load
from .base import WRITERS, RunInfo, Writer, how_to_open, writer
from .html_page import SECTIONS

# The modules that register writers or the HTML page's sections, in the registries' order: --formats lists csv,
# html, json, and the end of a run says how to open the HTML page before the TensorBoard run; the page's sections
# come after its writer. The modules they use (cells, html_page, ...) register nothing and are not listed.
MODULES = ("csv_writer", "html_writer", "html_sections", "html_compare", "html_roofline", "image_writer",
           "json_writer", "tensorboard_writer")

load(__name__, MODULES, (WRITERS, lambda registered: type(registered).__module__), (SECTIONS, lambda fn: fn.__module__))

__all__ = ["WRITERS", "RunInfo", "Writer", "how_to_open", "writer"]
