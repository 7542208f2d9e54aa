"""The package's layering, checked from its source: imports only go down, and nothing hides a cycle.

cli -> {pipeline, record} -> baseline -> {ranks, writers, output} -> reports -> expert -> comm -> context
-> {ops, roofline} -> {timeline, classify} -> reader -> model. Every import counts, wherever it is written (at the top
of a module, inside a function, under ``if TYPE_CHECKING``): a lazy import that would close a cycle
is a cycle. The few modules every layer uses (errors, options, log, registry, the version) sit at the bottom;
writers import nothing below reports. No module uses another's private (underscore) names: what another
module needs is public. No function is longer than MAX_FUNCTION_LINES lines unless its docstring says why
("Long because ...").
A package whose modules register things lists those modules in its ``MODULES`` (dlagg/registry.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dlagg"

# Layer of each top-level part of the package, bottom first; a module may import its own layer and below.
LAYERS = {
    "__init__": 0, "errors": 0, "options": 0, "log": 0, "limits": 0, "registry": 0,
    "model": 1, "nesting": 1,  # nesting: ranges as trees (the reader checks them, op discovery builds on them)
    "reader": 2,
    "timeline": 3, "classify": 3,
    "ops": 4, "roofline": 4,
    "context": 5,
    "comm": 6,
    "expert": 7,
    "reports": 8,
    "ranks": 9, "writers": 9,  # ranks: the reduction of a job's ranks, its process pool and the processes' tuning
    "output": 9,  # the staging folder and the writer tasks that fill it (the reduction of ranks uses its errors)
    "baseline": 10,  # the compare report's baseline: an export reduced like the ranks, or saved figures read back
    "pipeline": 11, "record": 11,  # record: runs the program under nsys (the CLI's, before the pipeline)
    "cli": 12, "__main__": 13,
    "api": 12,  # dlagg.analyze, the library face: runs the pipeline (the package re-exports it lazily, by name)
    "_forkserver": 12,  # what the pool's fork server imports for its workers: the pipeline
    "dask_preload": 12,  # what a Dask worker started for dlagg preloads (dask worker --preload)
}
# Parts a writer may import besides writers and reports: the bottom layer (limits: whether the HTML page's charting
# engine can start under the run's address-space limit; registry: the writers' own).
WRITER_MAY_IMPORT = {"__init__", "errors", "options", "log", "limits", "registry", "writers", "reports"}
# Longest function (def line to last line) that needs no reason in its docstring.
MAX_FUNCTION_LINES = 60
# Packages whose modules register things, and the decorators that register them (dlagg/registry.py).
REGISTERING = {"reports": ("report", "merges"), "writers": ("writer", "html_section"), "expert": ("detector",)}


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in sorted(PACKAGE.rglob("*.py"))}


def import_target(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` in `package` imports from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(name: str, path: Path) -> set[str]:
    """The dlagg modules `name` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "dlagg")
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, package)
            if target.split(".")[0] != "dlagg":
                continue
            found.add(target)
            for alias in node.names:  # `from . import nvtx` names a module
                if f"{target}.{alias.name}" in modules():
                    found.add(f"{target}.{alias.name}")
    found.discard(name)
    return found


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {part(m) for m in modules()} <= set(LAYERS), "a new part of the package needs a place in LAYERS"


@pytest.mark.parametrize("name", sorted(modules()))
def test_imports_go_down(name: str) -> None:
    mine = part(name)
    for target in imports_of(name, modules()[name]):
        theirs = part(target)
        assert LAYERS[theirs] <= LAYERS[mine], f"{name} imports {target}: {mine} is below {theirs}"
        if mine == "writers":
            assert theirs in WRITER_MAY_IMPORT, f"{name} imports {target}: writers render reports' figures only"


def test_no_cycle_between_modules() -> None:
    graph = {name: imports_of(name, path) & set(modules()) for name, path in modules().items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_package_init_modules_import_their_own_part_only() -> None:
    """A package's __init__ re-exports its own modules; importing a package never drags in a layer above."""
    for name, path in modules().items():
        if path.name == "__init__.py" and name != "dlagg":
            for target in imports_of(name, path):
                assert LAYERS[part(target)] <= LAYERS[part(name)], f"{name} imports {target}"


def is_private(name: str) -> bool:
    """A name no other module may use: one with a leading underscore (a dunder, ``__version__``, is public)."""
    return name.startswith("_") and not name.endswith("__")


def dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """``a.b.c`` as the dotted name it stands for, its first part resolved through `bound`; None for anything else."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = dotted(node.value, bound)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def private_uses(name: str, source: str, package: bool, known: set[str]) -> list[str]:
    """The private names of other dlagg modules that module `name` (a package's __init__ when `package`) uses in
    `source`: ``from x import _y``, and ``x._y`` where ``x`` is a dlagg module it imported (``from . import x``,
    ``import dlagg.x as x``, ``import dlagg.x``). `known`: the package's modules, a package as ``x.__init__``."""
    def is_module(dotted_name: str) -> bool:
        return dotted_name in known or f"{dotted_name}.__init__" in known

    here = name if package else name.rpartition(".")[0]
    tree = ast.parse(source)
    found: list[str] = []
    bound: dict[str, str] = {}  # a name in `source` -> the dlagg module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dlagg":  # `import dlagg.x` binds dlagg; `import dlagg.x as y`, y
                    bound[alias.asname or "dlagg"] = alias.name if alias.asname else "dlagg"
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, here)
            if target.split(".")[0] != "dlagg":
                continue
            for alias in node.names:
                if is_private(alias.name):
                    found.append(f"{name} line {node.lineno}: from {target} import {alias.name}")
                elif is_module(f"{target}.{alias.name}"):
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = dotted(node.value, bound)
            if owner is not None and owner != name and is_module(owner):
                found.append(f"{name} line {node.lineno}: {owner}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    """What a module uses of another is public: no ``from x import _y`` and no ``x._y`` on an imported module."""
    known = set(modules())
    found = [use for name, path in modules().items()
             for use in private_uses(name, path.read_text(), path.name == "__init__.py", known)]
    assert not found, "private names used by another module (make them public): " + "; ".join(found)


@pytest.mark.parametrize(("source", "expected"), [
    ("from .database import Database, _uri\n", ["line 1: from dlagg.reader.database import _uri"]),
    ("from . import database as db\ndb._uri(path)\n", ["line 2: dlagg.reader.database._uri"]),
    ("import dlagg.reader.kineto\ndlagg.reader.kineto._Head\n", ["line 2: dlagg.reader.kineto._Head"]),
    ("import dlagg.reader.database as d\nfrom .. import model\nd._head(p), model._x\n",
     ["line 3: dlagg.reader.database._head", "line 3: dlagg.model._x"]),
    ("from .. import __version__\nfrom . import nvtx as nv\nnv.NvtxDetails._x, self._lock, np._core\n", []),
])
def test_the_private_name_check_sees_both_forms(source: str, expected: list[str]) -> None:
    """The check above finds what it looks for (and nothing else): a private name imported, or read off a module."""
    found = private_uses("dlagg.reader.nvprof", source, False, set(modules()))
    assert sorted(found) == sorted(f"dlagg.reader.nvprof {use}" for use in expected)


def test_long_functions_say_why() -> None:
    """No function over MAX_FUNCTION_LINES lines without a reason in its docstring ("Long because ...")."""
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES and "Long because" not in (ast.get_docstring(node) or ""):
                    long.append(f"{name}.{node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines without a reason: " + ", ".join(long)


@pytest.mark.parametrize("package", sorted(REGISTERING))
def test_registering_modules_are_listed_in_their_package_modules(package: str) -> None:
    """Every module of the package that registers something (a decorator of `REGISTERING` on a definition) is in
    the package's ``MODULES``, and every module listed registers something: one rule for every registry."""
    import importlib

    listed = set(importlib.import_module(f"dlagg.{package}").MODULES)
    registering = set()
    for path in sorted((PACKAGE / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", None) in REGISTERING[package]
                    for d in node.decorator_list):
                registering.add(path.stem)
    assert registering == listed, f"dlagg/{package}/__init__.py MODULES: list {sorted(registering - listed)}, " \
        f"drop {sorted(listed - registering)}"
