"""Progress and warnings on stderr, honouring --verbosity (quiet < minimal < normal < detailed)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

QUIET, MINIMAL, NORMAL, DETAILED, DIAGNOSTIC = range(5)


class Log:
    def __init__(self, level: int = NORMAL, stream: TextIO | None = None) -> None:
        self.level = level
        self.stream = stream if stream is not None else sys.stderr

    def _emit(self, text: str) -> None:
        print(f"dlagg: {text}", file=self.stream, flush=True)

    def warn(self, text: str) -> None:
        if self.level >= MINIMAL:
            self._emit(f"warning: {text}")

    def result(self, text: str) -> None:
        if self.level >= MINIMAL:
            self._emit(text)

    def info(self, text: str) -> None:
        if self.level >= NORMAL:
            self._emit(text)

    def detail(self, text: str) -> None:
        if self.level >= DETAILED:
            self._emit(text)

    @contextmanager
    def stage(self, what: str) -> Iterator[None]:
        """Log `what` with its wall time once it is done (normal verbosity)."""
        began = time.perf_counter()
        yield
        self.info(f"{what} ({time.perf_counter() - began:.2f} s)")
