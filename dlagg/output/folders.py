"""Where a run's outputs go and whether they can: the writers a run uses and their folders (--output_path,
--tb_dir, --per_rank's rank folders), those folders checked writable before any input is read, and the run's
staging folder (staging.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import OutputError
from ..log import Log
from ..options import Options
from ..reports import REPORTS
from ..writers import WRITERS
from .staging import Staging, missing_folders

# Event files are written whenever this writer is registered, unless --suppress_tb_files.
TENSORBOARD = "tensorboard"
# The pictures reports draw (PNG) are written with their reports, whatever --formats.
IMAGES = "png"


def check_output_folder(out: Path) -> None:
    """That --output_path is a writable folder or can be made one; it is not made here but by the run's first write
    (output/staging.py), so that a run that fails before then leaves no folder behind. Writable is tried, not
    looked up: a folder made and removed at once, where the outputs' folder is or would be made (permission bits
    say nothing for root, a read-only mount, an immutable folder, /sys or /proc)."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: --output_path is a file, not a folder; pass a folder")
    if out.is_dir():
        cause = not_writable(out)
        if cause:
            raise OutputError(f"{out}: the output folder is not writable ({cause}); choose another --output_path")
        return
    above = missing_folders(out)[-1].parent  # the nearest folder that exists, where it would be made
    cause = "Not a directory" if not above.is_dir() else not_writable(above)
    if cause:
        raise OutputError(f"{out}: cannot create the output folder ({cause}: {above}); choose another --output_path")


def not_writable(folder: Path) -> str:
    """Why nothing can be made in `folder` ("" when something can): a probe folder made and removed."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dlagg-probe.", dir=folder))
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return ""


def check_output_folders(options: Options) -> None:
    """--output_path and the writers' folders in it (--tb_dir): each a folder, or one that can be made, and writable.
    Checked before any input is read (docs/cli.md), and again by the pipeline once the ranks are known."""
    check_output_folder(options.output_path)
    for fmt in writer_formats(options):
        folder = out_dir(options, fmt)
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"{folder}: is a file, not a folder; remove it or choose another --tb_dir")


def writer_formats(options: Options) -> list[str]:
    formats = list(options.formats)
    if IMAGES in WRITERS:
        formats.append(IMAGES)
    if not options.suppress_tb_files and TENSORBOARD in WRITERS:
        formats.append(TENSORBOARD)
    return formats


def out_dir(options: Options, fmt: str) -> Path:
    """Event files get their own folder (--tb_dir) so `tensorboard --logdir` sees only them."""
    return options.output_path / options.tb_dir if fmt == TENSORBOARD else options.output_path


def rank_dir(options: Options, rank: int) -> Path:
    """Where --per_rank writes one rank's reports (staging.RANK_FOLDER)."""
    return options.output_path / f"rank{rank}"


def run_staging(options: Options, log: Log) -> Staging:
    """Where the run's outputs wait until every one is written, to be moved into place together."""
    return Staging(options.output_path, out_dir(options, TENSORBOARD), options.profile_name, force=options.force,
                   events=TENSORBOARD in writer_formats(options),
                   suffixes=[spec.file_suffix for spec in REPORTS.values()], log=log)
