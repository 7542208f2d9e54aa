"""The baseline a run compares with (``--baseline``): the input of the compare report (reports/compare.py) that is no
export of the current profile.

Contract:

- ``baseline_input(options)`` checks the baseline before anything is read or written: for an export (a file, a
  comma list, a glob, a folder of exports), its options (the current ones with its overrides) and its `Job`, its
  files checked and its ranks found; for saved figures (``saved_file``), its options and its `Side`, loaded. None
  without --baseline.
- ``reduce_side(options, job, names)`` reduces a baseline export to a `Side` exactly as ``pipeline.run``
  reduces the current profile (``ranks.reduce.map_ranks`` then ``ranks.reduce.combine``), to the reports
  `names` (at least ``side.NEEDS``).
- ``saved_file(spec)`` is the figures file that a ``--baseline`` spec names (the file, or the folder a JSON run
  wrote it in: report ``figures``, reports/saved.py), None when the spec names exports; ``load(path)`` reads it
  back to a `Side`, or raises `InputError` (one line: what, which file, what to do) for a damaged file or one of
  another dlagg version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from . import __version__
from .errors import DlaggError, InputError, OptionsError
from .log import Log
from .options import Options
from .ranks.reduce import combine, communication_needed, local_processes, map_ranks, rank_task
from .reader import check_input
from .reader.discover import Job, discover, input_paths
from .reports.base import BASELINE, REPORTS
from .reports.figures import Field, Table
from .reports.saved import FIGURES, side_of
from .reports.side import NEEDS, Side

FORMAT = "dlagg-report"  # the JSON writer's documents (writers/json_writer.py)
FORMAT_VERSION = 2  # of those documents: what `load` reads
# The overrides of how a baseline export is read: a saved baseline was read with its own run's options.
OVERRIDES = ("key_node", "iter_start", "iter_stop", "domains")
HEAD_BYTES = 256  # read of a .json file to tell saved figures from a profiler trace


def no_baseline(names: tuple[str, ...]) -> str:
    """What a run asking for reports that compare (`names`), without --baseline, is told."""
    return (f"--reports={','.join(names)} compares with a baseline: pass --baseline=BEFORE (the profile to compare "
            "with)")


# --- the baseline given -------------------------------------------------------------------------------

def baseline_input(options: Options) -> tuple[Options, Job | Side] | None:
    """The baseline's options and its job (an export) or its side (saved figures: `saved_file`), checked, or for
    saved figures loaded, before anything else is read. None without --baseline."""
    path = saved_file(options.baseline.nsys_database) if options.baseline is not None else None
    if path is None or options.baseline is None:
        return baseline_job(options)
    given = [f"--baseline_{o}" for o in OVERRIDES if getattr(options.baseline, o) is not None]
    if given:
        raise OptionsError(f"{', '.join(given)}: the saved baseline {path} was reduced with the options of the run "
                           "that saved it; save it again with these, or pass the baseline's export")
    if options.nsys_database is None:
        raise OptionsError("--baseline compares two profiles: pass --nsys_database (the profile after the change)")
    return _options(options), load(path)


def baseline_job(options: Options) -> tuple[Options, Job] | None:
    """A baseline export's options (the current ones with its overrides) and job, its files checked and its
    ranks found before anything is read or written; None without --baseline."""
    if options.baseline is None:
        asked = tuple(n for n in options.reports if n in REPORTS and BASELINE in REPORTS[n].inputs)
        if asked:
            raise OptionsError(no_baseline(asked))
        return None
    if options.nsys_database is None:
        raise OptionsError("--baseline compares two nsys exports: pass --nsys_database (the profile after the change)")
    reads = _options(options)
    try:
        paths = input_paths(options.baseline.nsys_database)  # = reads.nsys_database
        for path in paths:
            check_input(path)
        return reads, discover(paths)
    except DlaggError as exc:
        raise type(exc)(f"--baseline: {exc}") from None


def _options(options: Options) -> Options:
    """The options the baseline is read with: the current ones with its overrides, under a profile name of its
    own."""
    assert options.baseline is not None
    reads = options.baseline.options(options, NEEDS)
    if reads.profile_name == options.profile_name:
        raise OptionsError(f"--baseline_profile_name={reads.profile_name} is the current profile's name too: "
                           "choose another, so that their TensorBoard runs do not overwrite each other")
    return reads


def reduce_side(options: Options, job: Job, names: tuple[str, ...], *, log: Log | None = None,
                worker_init: Callable[[], None] | None = None) -> Side:
    """A job reduced to a `Side` as the pipeline reduces one: ranks mapped (in process when one), combined."""
    log = log or Log(0)
    many_ranks = len(job.sources) > 1
    task = rank_task(options, names, communication_needed(job, names), many_ranks,
                     processes=local_processes(options.workers, [s.export_bytes for s in job.sources]))
    try:
        ranks = map_ranks(job, task, workers=options.workers, scheduler=options.scheduler, initializer=worker_init,
                          log=log)
    except DlaggError as exc:
        raise type(exc)(f"--baseline: {exc}") from None
    figures, built = combine(ranks, job, names, release=True)  # a side is its job's reports
    return Side(figures, built)


# --- saved figures ------------------------------------------------------------------------------------

def saved_file(spec: object) -> Path | None:
    """The saved figures a --baseline spec names: a ``dlagg-report`` JSON file of report `FIGURES` (any other
    dlagg report is a mistake, said), or a folder holding one ``*_figures.json`` (several: a mistake, said).
    None: the spec names exports or traces (a list, a glob, a folder without saved figures)."""
    if not isinstance(spec, (str, Path)):
        return None
    path = Path(spec)
    if path.is_dir():
        found = sorted(path.glob(f"*_{FIGURES}.json"))
        if len(found) > 1:
            raise InputError(f"--baseline: {path}: holds {len(found)} saved baselines ("
                             f"{', '.join(p.name for p in found)}); pass one of them: --baseline={found[0]}")
        return found[0] if found else None
    if not path.is_file() or not path.name.endswith(".json"):
        return None
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError:
        return None  # said by the reader, as for any export
    if not head.lstrip().startswith(b'{"format": "' + FORMAT.encode()):
        return path if path.name.endswith(f"_{FIGURES}.json") else None  # a damaged one is said by `load`
    if f'"report": "{FIGURES}"'.encode() not in head and b'"report": ' in head:
        raise InputError(f"--baseline: {path}: is a dlagg report, not saved figures; pass the folder of a "
                         f"--formats=json run or its <profile_name>_{FIGURES}.json")
    return path


def load(path: Path) -> Side:
    """The saved baseline `path` as a comparison's side (see the module docstring)."""
    def damaged(why: str) -> InputError:
        return InputError(f"--baseline: {path}: not a readable saved baseline ({why}); save it again with "
                          "dlagg --formats=json, or pass the baseline's export")

    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise InputError(f"--baseline: {path}: cannot be read ({exc.strerror or type(exc).__name__}); check "
                         "the path and its permissions") from None
    except ValueError as exc:
        raise damaged(f"not JSON: {str(exc).split(':')[0]}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("report") != FIGURES:
        raise damaged(f"not a {FIGURES} document")
    version = doc.get("dlagg_version")
    if version != __version__ or doc.get("format_version") != FORMAT_VERSION:
        raise InputError(f"--baseline: {path}: saved by dlagg {version}, this is dlagg {__version__}, whose figures "
                         "may differ; save the baseline again with this version (dlagg --nsys_database=BEFORE "
                         "--formats=json), or pass the baseline's export")
    try:
        side = side_of({t["key"]: _table(t) for t in doc["tables"]})
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise damaged(f"{type(exc).__name__}: {exc}") from None
    return side


def _table(doc: dict) -> Table:
    """A table of the JSON writer's document, each column of the type written (writers/json_writer.py)."""
    fields = tuple(Field(f["key"], f["title"], f["unit"] or "", f["digits"], csv=f["csv"]) for f in doc["fields"])
    rows = doc["rows"]
    columns = {}
    for k, (field, spec) in enumerate(zip(fields, doc["fields"], strict=True)):  # a few columns
        values = [row[k] for row in rows]
        columns[field.key] = pd.Series(values, dtype=_dtype(spec["type"], None in values))
    frame = pd.DataFrame(columns, columns=[f.key for f in fields])
    return Table(doc["key"], doc["title"], fields, frame, bool(doc["key_value"]), bool(doc["csv"]))


def _dtype(written: str, missing: bool) -> str:
    """The pandas type of a column the JSON writer called `written` (integers and booleans with missing values
    nullable, as nothing else holds them)."""
    if written == "integer":
        return "Int64" if missing else "int64"
    if written == "boolean":
        return "boolean" if missing else "bool"
    return "float64" if written == "number" else "object"
