"""The one rule of dlagg's registries (reports, writers and the HTML page's sections, expert-systems detectors).

A package whose modules register things (``@report``, ``@writer``, ``@html_section``, ``@detector``) lists those
modules in a ``MODULES`` tuple in its ``__init__.py``, in the order their entries appear in its registries (--help,
--formats, the files listed, a report's rows); ``load`` imports them, which registers what they hold, and puts each
registry in that order. The order is the list's, not the imports': a module imported by another (the summary report
reads the detail report's helpers) would otherwise register first. A module that registers something without being
listed is an error, said when the package is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

# A registry, and how to tell which module registered an entry of it.
Registry = tuple[MutableMapping[str, Any], Callable[[Any], str]]


def load(package: str, modules: Sequence[str], *registries: Registry) -> None:
    """Import `package`'s `modules` (registering their entries), then order each registry by them: each entry at its
    module's place, a module's entries in the order registered."""
    for module in modules:
        importlib.import_module(f"{package}.{module}")
    place = {f"{package}.{module}": k for k, module in enumerate(modules)}
    for registry, module_of in registries:
        unlisted = sorted({module_of(entry) for entry in registry.values()} - set(place))
        if unlisted:
            raise RuntimeError(f"{', '.join(unlisted)} register(s) entries but is not in {package}.MODULES: add it")
        entries = sorted(registry.items(), key=lambda item: place[module_of(item[1])])
        registry.clear()
        registry.update(entries)
