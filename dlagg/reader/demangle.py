"""Kernel names of nvprof databases: demangled for display, and the short name nsys would give.

nvprof stores the mangled name (``_ZN2at6native18elementwise_kernelILi512E...``); nsys exports
carry ``demangledName`` and ``shortName`` beside it, and every report works on those. Contract:

- ``demangle(names) -> list[str]``: the Itanium C++ ABI demangling of each name, through the C++
  runtime's own ``__cxa_demangle`` (libstdc++ or libc++abi, loaded with ``ctypes``: no new
  dependency, and it is the demangler ``c++filt`` uses), else the ``c++filt`` program when it is on
  PATH, else the names unchanged. Names that are not mangled (``volta_sgemm_128x64_tn``) stay as
  they are. Called once per distinct kernel name.
- ``short_name(name) -> str``: the function's own name without scope, template arguments or
  parameters, like nsys's ``shortName`` (``elementwise_kernel``, ``max_pool_forward_nhwc``). It is
  read from the *mangled* name by a small parser of the ABI's ``<nested-name>``, so it does not
  depend on which demangler is present or how it prints templates; ``tests/test_nvprof.py``
  checks it against nsys's own ``shortName`` for every kernel of the bundled nsys exports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
from collections.abc import Sequence
from functools import lru_cache


@lru_cache(maxsize=1)
def _cxa_demangle() -> tuple[object, object] | None:
    """(``__cxa_demangle``, ``free``) of the process's C++ runtime, or None when there is none."""
    candidates = ["libstdc++.so.6", ctypes.util.find_library("stdc++"), ctypes.util.find_library("c++abi"),
                  ctypes.util.find_library("c++")]
    for name in candidates:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            function = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        function.restype = ctypes.c_void_p  # freed by us, so not c_char_p (which would copy and leak)
        function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        libc.free.argtypes = [ctypes.c_void_p]
        return function, libc.free
    return None


def _with_runtime(names: Sequence[str], runtime: tuple[object, object]) -> list[str]:
    function, free = runtime
    out = []
    for name in names:  # distinct kernel names: a few hundred at most
        status = ctypes.c_int(0)
        pointer = function(name.encode(), None, None, ctypes.byref(status))  # type: ignore[operator]
        if status.value != 0 or not pointer:
            out.append(name)
            continue
        try:
            out.append(ctypes.string_at(pointer).decode("utf-8", "replace"))
        finally:
            free(pointer)  # type: ignore[operator]
    return out


def _with_cxxfilt(names: Sequence[str]) -> list[str] | None:
    program = shutil.which("c++filt")
    if program is None:
        return None
    try:
        done = subprocess.run([program], input="\n".join(names), capture_output=True, text=True, timeout=60,
                              check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split("\n")
    return lines[:len(names)] if len(lines) >= len(names) else None


def demangle(names: Sequence[str]) -> list[str]:
    """Demangled form of each of `names` (unchanged when not mangled or no demangler is available)."""
    mangled = [i for i, n in enumerate(names) if n.startswith("_Z")]
    out = list(names)
    if not mangled:
        return out
    todo = [names[i] for i in mangled]
    runtime = _cxa_demangle()
    done = _with_runtime(todo, runtime) if runtime is not None else _with_cxxfilt(todo)
    for i, text in zip(mangled, done or todo, strict=True):
        out[i] = text
    return out


def _source_name(text: str, at: int) -> tuple[str, int] | None:
    """``<length><identifier>`` at `at`: (identifier, position after it), or None."""
    end = at
    while end < len(text) and text[end].isdigit():
        end += 1
    if end == at:
        return None
    length = int(text[at:end])
    if end + length > len(text):
        return None
    return text[end:end + length], end + length


def _substitution_end(text: str, at: int) -> int | None:
    """Position after the substitution (``St``, ``Sa``, ``S_``, ``S0_``) starting at `at`, or None."""
    if at + 1 < len(text) and text[at + 1] in "tabsiod":
        return at + 2
    close = text.find("_", at + 1)
    if close < 0 or not all(c.isdigit() or c.isupper() for c in text[at + 1:close]):
        return None
    return close + 1


def short_name(name: str) -> str:
    """nsys-style short name of a kernel: ``_ZN2at6native18elementwise_kernelILi128E...`` ->
    ``elementwise_kernel``; a name that is not mangled is its own short name.

    A kernel is a free function, so its mangled name is ``_Z`` + an unscoped ``<source-name>`` or
    a ``N ... E`` nested name of namespaces and the function, each optionally followed by template
    arguments (``I ... E``); the short name is the last source name before the first template
    argument list or the end of the nesting.
    """
    if not name.startswith("_Z"):
        return name
    at = 2
    if name.startswith("L", at):  # internal linkage (a static function)
        at += 1
    if not name.startswith("N", at):
        found = _source_name(name, at)
        return found[0] if found else name
    at += 1
    while at < len(name) and name[at] in "rVKRO":  # qualifiers: not on free functions, but harmless
        at += 1
    last = None
    while at < len(name) and name[at] not in "IE":
        if name[at] == "S":
            after = _substitution_end(name, at)
            if after is None:
                return last or name
            at = after
            continue
        if name[at] == "L":
            at += 1
            continue
        found = _source_name(name, at)
        if found is None:  # operator names, constructors, lambdas: not kernels; give up cleanly
            return last or name
        last, at = found
    return last or name
