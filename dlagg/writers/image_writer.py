"""PNG files of the pictures reports draw (the roofline's): ``<profile_name>_<file_suffix>.png``.

The report draws (``Report.images``); this writer only saves the bytes, atomically. The pictures are
not a table format, so the pipeline runs this writer whatever ``--formats`` says; a report without
images writes nothing. ``targets`` lists the files a report's registry entry says it may draw
(``ReportSpec.images``), for the --force check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..reports import REPORTS
from ..reports.base import Report
from .base import RunInfo, Writer, atomic_write, report_path, writer


@writer("png")
class ImageWriter(Writer):
    """One PNG file per image of a report."""

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        return [report_path(out_dir, profile_name, image, "png") for spec in REPORTS.values()
                if spec.file_suffix in file_suffixes for image in spec.images]

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo,
              rows: Mapping[str, Sequence[Path]] | None = None,
              pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
        written = []
        for report in reports:
            for image in report.images:
                path = report_path(out_dir, info.profile_name, image.file_suffix, "png")
                atomic_write(path, image.png)
                written.append(path)
        return written
