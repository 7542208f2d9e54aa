"""Command line, compatible with DLProf's (``--nsys_database=``, ``--reports=``, ``--key_node=`` ...).

``main(argv) -> int`` is the only place that turns a `DlaggError` into one stderr line and an
exit code; everything else raises.

Every DLProf v1.8 option is accepted (docs/cli.md). Those dlagg shares with DLProf are its own
options; the others are data (`DLPROF_ONLY`): the ones about running the program under nsys are
honoured when dlagg runs it (``dlagg [options] python train.py``: `dlagg.record`) and change
nothing for an existing export, and the rest say in one warning why dlagg cannot honour them.
Long options are never abbreviated, and an unknown option is an error naming the closest real
one. Everything from the first word that is neither an option nor an option's value (or after
``--``) is the program to run.

Exit codes: 0 done; 1 bad input or output, or nsys failed; 2 bad options; 3 an unexpected failure;
4 a warning under --strict=true; the program's own status when it failed (its reports are still
written); 130 interrupted (SIGINT, Ctrl-C), 143 stopped (SIGTERM): at any moment, one line and no partial output.

The parser and its help need no pandas, pyarrow or numpy, so --help, --version and a bad option answer at
once: the report and format names it lists are plain data in dlagg/options.py, and the pipeline is imported
once a run starts (`run`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from . import __version__
from .errors import DlaggError, OptionsError, interrupted, received
from .limits import (
    address_space_limit,
    end_run_when_a_thread_runs_out,
    is_out_of_memory,
    libraries_fit,
    out_of_memory,
    out_of_memory_loading,
    thread_ran_out,
)
from .log import DIAGNOSTIC, MINIMAL, NORMAL, Log
from .options import FILE_FORMATS, REPORT_DESCRIPTIONS, VERBOSITIES, Baseline, Options
from .ranks.tuning import tune_process
from .record import (
    DEFAULT_BASE_NAME,
    DEFAULT_NSYS_OPTS,
    Recorded,
    Recording,
    nsys_options,
    ready,
    record,
    trace_warnings,
)

if TYPE_CHECKING:
    from .pipeline import Result

INTERNAL = 3  # exit code of an unexpected failure (1: bad input or output, 2: bad options)
OUT_OF_MEMORY = 1  # not a bug: the run needs more memory than it was given
SLOWER = 3  # exit code of --fail_if_slower when the run is significantly slower
STRICT = 4  # exit code of a run that gave a warning under --strict=true
# An unknown option is offered the real ones at least this alike (difflib's ratio; '--output' ->
# '--output_path' 0.76), the runner-up only when about as alike as the best ('--iter' -> both).
CLOSE_OPTION = 0.5
TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


def boolean(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _bounded(parse: Callable[[str], float], least: float, expected: str, too_small: str) -> Callable[[str], Any]:
    """An argparse type: `parse` the text, at least `least`; the messages name what was expected."""
    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got '{text}'") from None
        if not value >= least:  # (a NaN percentage is not >= 0 either)
            raise argparse.ArgumentTypeError(f"{too_small}, got {value if parse is int else text}")
        return value
    return convert


workers = _bounded(int, 1, "a number of processes", "expected at least 1 process")
percent = _bounded(float, 0, "a percentage", "expected a percentage of at least 0")
rank = _bounded(int, 0, "a rank number", "ranks are numbered from 0")
iteration = _bounded(int, 0, "an iteration number", "iterations are numbered from 0")
seconds = _bounded(int, 0, "whole seconds", "expected 0 or more seconds")


def base_name(text: str) -> str:
    """A file name without folder (--output_path gives it) or nsys's %-patterns (dlagg must find the file)."""
    if not text or "/" in text or os.sep in text or "%" in text:
        raise argparse.ArgumentTypeError(f"expected a plain file name (no folder, no %), got '{text}'; the folder "
                                         "is --output_path")
    return text


# ---- DLProf's options beyond the ones dlagg shares with it ----------------------------------------------

# --mode: what DLProf did differently in each mode, and why dlagg does not ("": nothing to say). dlagg
# reads the markers every framework leaves in the export, whatever the mode.
MODES = {
    "simple": "DLProf's simple mode gave all GPU work to one pseudo op; dlagg still reports the ops the export's "
              "NVTX ranges define (--reports=summary,kernel leave ops aside)",
    "pytorch": "",  # DLProf's PyTorch build default: dlagg reads PyTorch's markers (emit_nvtx, DLProf/PyProf's)
    "tensorflow1": "DLProf read TensorFlow's graph (op types, Tensor Core eligibility) through its own TensorFlow "
                   "integration; dlagg reads the export alone: ops are its NVTX ranges, named as they are",
    "tensorflow2": "DLProf read TensorFlow's graph (op types, Tensor Core eligibility) through its own TensorFlow "
                   "integration; dlagg reads the export alone: ops are its NVTX ranges, named as they are",
    "tensorrt": "DLProf read TensorRT's engine layers through its own integration; dlagg reads the export alone: "
                "ops are TensorRT's NVTX layer ranges, named as they are",
}
RUNS_PROGRAM = "dlagg [options] python train.py"


@dataclass(frozen=True)
class DLProfOption:
    """A DLProf v1.8 option that dlagg does not share as one of its own (reference.md §1.2).

    `recording`: honoured when dlagg runs the program under nsys; it changes nothing for an existing
    export. `unsupported`: why dlagg cannot honour it (said in one warning when it is given).
    Default None everywhere: whether it was given is what decides the warning.
    """

    flags: tuple[str, ...]
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    boolean: bool = False
    recording: bool = False
    unsupported: str = ""

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-")


DLPROF_ONLY = (
    DLProfOption(("-m", "--mode"), choices=tuple(MODES), metavar="MODE",
                 help=f"DLProf's target framework ({', '.join(MODES)}): checked, and changes nothing for an nsys "
                      "export, since dlagg reads the markers each framework leaves in it (all but pytorch say in a "
                      "warning what DLProf did that dlagg does not)"),
    DLProfOption(("--nsys_opts",), metavar="OPTS", recording=True,
                 help=f"options for 'nsys profile' when dlagg runs the program (default '{DEFAULT_NSYS_OPTS}'; "
                      "keep cuda and nvtx traced; -o is --output_path/--nsys_base_name)"),
    DLProfOption(("--nsys_base_name",), metavar="NAME", type=base_name, recording=True,
                 help=f"name of the nsys report and its SQLite export in --output_path when dlagg runs the program "
                      f"(default {DEFAULT_BASE_NAME}: {DEFAULT_BASE_NAME}.nsys-rep, {DEFAULT_BASE_NAME}.sqlite)"),
    DLProfOption(("--nsys_profile_range",), boolean=True, recording=True,
                 help="record only between the program's cudaProfilerStart and cudaProfilerStop (nsys -c "
                      "cudaProfilerApi; default false)"),
    DLProfOption(("-y", "--delay"), metavar="SECONDS", type=seconds, recording=True,
                 help="seconds after the program starts before nsys collects (default 0)"),
    DLProfOption(("-d", "--duration"), metavar="SECONDS", type=seconds, recording=True,
                 help="seconds nsys collects for (default 0: until the program ends)"),
    DLProfOption(("--dump_model_data",), boolean=True,
                 unsupported="dlagg writes no raw dump of DLProf's correlated model data; --formats=json writes "
                             "every report's exact figures",
                 help="DLProf's JSON dump of its raw model data: accepted, not written (use --formats=json)"),
    DLProfOption(("--graphdef",), metavar="PATH",
                 unsupported="dlagg reads no TensorFlow GraphDef: ops come from the export's NVTX ranges",
                 help="DLProf's TensorFlow GraphDef (or auto): accepted, not read"),
)


def add_dlprof_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(f"running the program under nsys ({RUNS_PROGRAM}), and DLProf's other "
                                      "options (docs/cli.md)")
    for option in DLPROF_ONLY:
        kind: dict[str, Any] = ({"type": boolean, "nargs": "?", "const": True, "metavar": "BOOL"} if option.boolean
                                else {"type": option.type, "metavar": option.metavar, "choices": option.choices})
        group.add_argument(*option.flags, dest=option.dest, default=None, help=option.help, **kind)


def option_warnings(args: argparse.Namespace, program: Sequence[str], recording: bool) -> list[str]:
    """One warning per DLProf option given that does nothing here, and for a program not run."""
    warnings = []
    if program and not recording:
        warnings.append(f"the program ({' '.join(program)}) is not run: --nsys_database reads an existing export "
                        "(DLProf ignored the program then too); leave one of them out")
    for option in DLPROF_ONLY:
        value = getattr(args, option.dest)
        if value is None or value is False:
            continue
        given = f"{option.flags[-1]}={value}"
        if option.unsupported:
            warnings.append(f"{given} is accepted but does nothing: {option.unsupported}")
        elif option.recording and not recording:
            warnings.append(f"{given} changes nothing for an existing export: it applies when dlagg runs the program "
                            f"under nsys ({RUNS_PROGRAM})")
    if args.mode is not None and MODES[args.mode]:
        warnings.append(f"--mode={args.mode} changes nothing for an nsys export: {MODES[args.mode]}")
    return warnings


def recording_from(args: argparse.Namespace) -> Recording:
    return Recording(output_path=args.output_path,
                     base_name=args.nsys_base_name if args.nsys_base_name is not None else DEFAULT_BASE_NAME,
                     nsys_opts=args.nsys_opts if args.nsys_opts is not None else DEFAULT_NSYS_OPTS,
                     delay=args.delay, duration=args.duration, profile_range=bool(args.nsys_profile_range),
                     force=args.force)


def _reports_help() -> str:
    lines = ["reports (--reports=all or a comma list):"]
    for name, description in REPORT_DESCRIPTIONS.items():
        lines.append(f"  {name:<15} {description}")
    lines += [
        "",
        "examples:",
        "  dlagg --nsys_database=run.sqlite --reports=all",
        "  dlagg --trace=traces/ --reports=all --formats=all      # torch.profiler traces, one per rank",
        "  dlagg --reports=all --key_node=train_step python train.py --epochs=1    # runs it under nsys, as dlprof",
        "  dlagg --nsys_database=run.sqlite --reports=summary,kernel --formats=csv,json --key_node=train_step",
        "  dlagg --nsys_database=run.sqlite --reports=all --iter_start=5 --iter_stop=20 --force=true",
        "  dlagg --nsys_database=after.sqlite --baseline=before.sqlite --reports=all --fail_if_slower=5",
        "  dlagg --nsys_database=run.sqlite --ncu_report=step.csv --reports=all      # with the roofline",
        "  dlagg --ncu_report=step.csv --peaks=peaks.json --reports=roofline      # ncu alone, measured ceilings",
    ]
    return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), not a usage dump; no abbreviated long options, and an
    unknown option named with the closest real ones."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"dlagg: error: {message} (see dlagg --help)\n")

    def option_strings(self) -> list[str]:
        return list(self._option_string_actions)  # argparse's own table of every option string

    def parse_options(self, words: Sequence[str]) -> argparse.Namespace:
        args, unknown = self.parse_known_args(list(words))
        if unknown:
            self.error(self.unknown(unknown[0]))
        return args

    def unknown(self, word: str) -> str:
        """'unknown option --output=x; did you mean --output_path?'"""
        name = word.split("=", 1)[0]
        known_ones = self.option_strings()
        scores = sorted(((difflib.SequenceMatcher(None, name, known).ratio(), known) for known in known_ones),
                        reverse=True)  # a few dozen options
        close = [known for score, known in scores[:2] if score >= max(CLOSE_OPTION, scores[0][0] - 0.05)]
        meant = f"; did you mean {' or '.join(close)}?" if close else ""
        if any(known.startswith(name) for known in known_ones):
            meant += " (options are never abbreviated)"
        return f"unknown option {name}{meant}"

    def split_program(self, words: Sequence[str]) -> tuple[list[str], list[str]]:
        """(dlagg's words, the program's): the program starts at the first word that is neither an option nor an
        option's value, or after '--'. An optional boolean (-f, -b) takes the next word only when it is one
        (`dlagg -b python train.py` runs python)."""
        words = list(words)
        actions = self._option_string_actions
        i = 0
        while i < len(words):  # the command line's words
            word = words[i]
            if word == "--":
                return words[:i], words[i + 1:]
            if not word.startswith("-") or word == "-":
                return words[:i], words[i:]
            action = actions.get(word)  # None: '--name=value', '-y10', or unknown (parse_options says so)
            if action is not None and i + 1 < len(words):
                follows = words[i + 1]
                if action.nargs is None or (action.nargs == "?" and follows.strip().lower() in (*TRUE, *FALSE)):
                    i += 1
            i += 1
        return words, []


def build_parser() -> Parser:
    parser = Parser(
        prog="dlagg",
        usage="dlagg [options] --nsys_database=FILES\n       dlagg [options] program [args ...]    (runs it under "
              "nsys profile, as dlprof did)",
        description="Where each training iteration's time goes, from an Nsight Systems SQLite export "
                    "(nsys export --type sqlite), a PyTorch profiler trace (torch.profiler), or a program dlagg runs "
                    "under nsys. Command line compatible "
                    "with NVIDIA DLProf (docs/cli.md).",
        epilog=_reports_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("-V", "--version", action="version", version=f"dlagg {__version__}")
    add("--nsys_database", "--database", "--nvprof_database", "--trace", dest="nsys_database", metavar="FILES",
        help="the profiles to read, read-only: nsys SQLite exports, nvprof databases (nvprof -o / .nvvp) or PyTorch "
             "profiler traces (--trace: *.pt.trace.json or .json.gz, one per rank); a file, a comma list, a glob "
             "('rank*.sqlite') or a folder; the format is told from each file's content; an nsys file may hold "
             "several processes (ranks). Needed by every report but the roofline")
    add("--reports", type=comma_list, default=(), metavar="LIST",
        help="reports to write: all or a comma list (see below); default summary,expert_systems (DLProf: none)")
    add("--formats", type=comma_list, default=("csv",), metavar="LIST",
        help=f"report file formats: all, or a comma list of {', '.join(FILE_FORMATS)} (default csv; html: one "
             "self-contained page with plots; the reports that draw pictures write them as PNG with any format)")
    add("--output_path", type=Path, default=Path("."), metavar="DIR", help="folder for all outputs (default .)")
    add("--profile_name", default="dlagg", metavar="NAME",
        help="prefix of every output file name, not a path (default dlagg)")
    add("--key_node", "--key_op", dest="key_node", default=None, metavar="NAME",
        help="NVTX range that marks one training step; '*' globs (ProfilerStep#*). Default: detected")
    add("--iter_start", type=iteration, default=None, metavar="N", help="first iteration to aggregate (default 0)")
    add("--iter_stop", type=iteration, default=None, metavar="N", help="last iteration to aggregate (default: last)")
    add("--domains", type=comma_list, default=(), metavar="LIST", help="NVTX domains that define ops (default all)")
    add_output_arguments(parser)
    add("--workers", type=workers, default=None, metavar="N",
        help="processes reading ranks and writing their outputs at once (default: one per core this process may "
             "use, no more than the memory available holds; 1: in this process); with --scheduler, the processes "
             "here that write the outputs")
    add("--scheduler", default=os.environ.get("DASK_SCHEDULER_ADDRESS") or None, metavar="ADDRESS",
        help="read the ranks on this Dask distributed scheduler (tcp://host:8786; default $DASK_SCHEDULER_ADDRESS); "
             "needs pip install 'dlagg[dask]'")
    add_roofline_arguments(parser)
    add("--check", type=boolean, nargs="?", const=True, default=True, metavar="BOOL",
        help="check every SQLite export's pages (SQLite's quick_check, beside the read) and refuse a damaged one "
             "(default true; false reads what can still be read)")
    add("--cache", type=boolean, nargs="?", const=True, default=True, metavar="BOOL",
        help="keep what the read of each file gave, so that the next run on the unchanged file skips the read "
             "(another iteration range, key node or report); default true (docs/cache.md)")
    add("--cache_dir", default=None, metavar="DIR",
        help="the cache's folder (default $DLAGG_CACHE_DIR, else $XDG_CACHE_HOME/dlagg or ~/.cache/dlagg)")
    add("--strict", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help=f"every warning is an error: written as 'dlagg: error: ...', and exit status {STRICT} once the outputs "
             "are written (warnings about the options stop dlagg before it reads or runs anything; default false)")
    add_baseline_arguments(parser)
    add_dlprof_arguments(parser)
    return parser


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """--force to --per_rank: how outputs are written, and what stderr says."""
    add = parser.add_argument
    add("-f", "--force", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="overwrite existing outputs (default false)")
    add("-v", "--verbosity", choices=VERBOSITIES, default="normal", help="stderr detail (default normal)")
    add("--tb_dir", default="event_files", metavar="DIR",
        help="TensorBoard event-file folder inside --output_path (default event_files); an absolute path puts the "
             "event files there")
    add("-b", "--suppress_tb_files", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="do not write TensorBoard event files (default false)")
    add("--raw_csv", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="CSV text cells exactly as the profile has them; by default a name that starts with =, +, -, @, tab or "
             "carriage return gets a ' in front so that a spreadsheet does not run it as a formula (default false)")
    add("--per_rank", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="with several ranks, also write every report per rank under <output_path>/rank<N>/ (default false)")


def add_roofline_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--ncu_report", default=None, metavar="CSV",
        help="Nsight Compute metrics of one training step ('ncu -i step.ncu-rep --csv --page raw > step.csv', plain "
             "or .gz), read-only: adds the roofline report, roofline figures to the kernel, op_type and summary "
             "reports, and measured Tensor Core use; alone (no --nsys_database) it gives the roofline report only")
    add("--peaks", default=None, metavar="JSON",
        help="measured ceilings replacing ncu's own where the file names them (format: docs/roofline.md)")
    add("--ncu_rank", type=rank, default=None, metavar="N",
        help="the rank whose process ncu profiled, when the nsys export(s) hold several (default: the first rank)")


BASELINE_OVERRIDES = ("key_node", "iter_start", "iter_stop", "domains", "profile_name")


def add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    """Comparison with a baseline profile (dlagg/reports/compare.py, dlagg/baseline.py)."""
    group = parser.add_argument_group("comparing with a baseline (did my change help?)")
    add = group.add_argument
    add("--baseline", default=None, metavar="FILES",
        help="the profile before the change, read like --nsys_database (file, comma list, glob, folder): writes "
             "report compare, prints a verdict and adds the baseline's TensorBoard run; or a saved baseline: the "
             "output folder of a --formats=json run, or its <profile_name>_figures.json (docs/compare.md)")
    add("--baseline_key_node", default=None, metavar="NAME", help="the baseline's key node (default: --key_node)")
    add("--baseline_iter_start", type=iteration, default=None, metavar="N",
        help="the baseline's first aggregated iteration (default: --iter_start)")
    add("--baseline_iter_stop", type=iteration, default=None, metavar="N",
        help="the baseline's last aggregated iteration (default: --iter_stop)")
    add("--baseline_domains", type=comma_list, default=None, metavar="LIST",
        help="the baseline's NVTX op domains (default: --domains)")
    add("--baseline_profile_name", default=None, metavar="NAME",
        help="the baseline's TensorBoard run (default: <profile_name>_baseline)")
    add("--fail_if_slower", type=percent, default=None, metavar="PCT",
        help=f"exit with code {SLOWER} when the run is significantly slower than the baseline by more than PCT "
             "percent (for CI)")


def baseline_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Baseline | None:
    if args.baseline is None:
        given = [f"--{n}" for n in ("fail_if_slower", *(f"baseline_{o}" for o in BASELINE_OVERRIDES))
                 if getattr(args, n) is not None]
        if given:
            parser.error(f"{', '.join(given)} need(s) --baseline=FILES (the profile to compare with)")
        return None
    return Baseline(args.baseline, **{o: getattr(args, f"baseline_{o}") for o in BASELINE_OVERRIDES})


def options_from(args: argparse.Namespace, baseline: Baseline | None = None) -> Options:
    return Options(
        nsys_database=args.nsys_database,
        reports=args.reports,
        formats=args.formats,
        output_path=args.output_path,
        profile_name=args.profile_name,
        key_node=args.key_node,
        iter_start=args.iter_start,
        iter_stop=args.iter_stop,
        domains=args.domains,
        force=args.force,
        verbosity=args.verbosity,
        tb_dir=args.tb_dir,
        suppress_tb_files=args.suppress_tb_files,
        per_rank=args.per_rank,
        workers=args.workers,
        scheduler=args.scheduler,
        ncu_report=args.ncu_report,
        peaks=args.peaks,
        ncu_rank=args.ncu_rank,
        baseline=baseline,
        raw_csv=args.raw_csv,
        check=args.check,
        cache=args.cache,
        cache_dir=args.cache_dir,
    )


DEFAULT_REPORTS = ("summary", "expert_systems")


def with_default_reports(options: Options) -> tuple[Options, str]:
    """No --reports: the summary and expert-systems reports (the roofline report of an ncu report alone)
    and TensorBoard event files, and the line that says so after the run. DLProf wrote none, which surprised every
    new user."""
    if options.reports:
        return options, ""
    names = DEFAULT_REPORTS if options.nsys_database is not None else ("roofline",)
    event_files = "" if options.suppress_tb_files else " and TensorBoard event files"
    return replace(options, reports=names), (f"no --reports given, so dlagg wrote the {' and '.join(names)} "
                                             f"report{'s' if len(names) > 1 else ''}{event_files}; --reports=all "
                                             "writes every report")


def ignore_file_size_signal() -> None:
    """Past a file-size limit (ulimit -f) a write fails with EFBIG instead of SIGXFSZ killing the process (with
    a core dump and no message): the output error says which folder and what to do, and the previous outputs
    stay (output/staging.py). Set after the program run under nsys has ended: an ignored signal is inherited
    across exec, and the program's own behaviour is not dlagg's to change."""
    if hasattr(signal, "SIGXFSZ"):
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        except ValueError:  # main() called from another thread than the main one: the default stays
            pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    own, program = parser.split_program(sys.argv[1:] if argv is None else argv)
    args = parser.parse_options(own)
    options = options_from(args, baseline_from(args, parser))
    log = Log(options.level, strict=args.strict)
    try:
        return _run(options, log, args, program)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGINT or SIGTERM given to the command (dlagg/__main__.py)
        return _interrupted(exc, options)
    except Exception as exc:
        signalled = received()
        if signalled is not None:  # the error is the interruption's, turned into another by a library
            return _interrupted(signalled, options)
        if isinstance(exc, DlaggError):
            print(f"dlagg: error: {exc}", file=sys.stderr)
            return exc.exit_code
        if is_out_of_memory(exc):  # MemoryError, and a thread, a module or a mapping the system had no room for
            print(f"dlagg: error: {out_of_memory(_input_path(options))}", file=sys.stderr)
            return OUT_OF_MEMORY
        return _internal(options, exc)  # a bug: one line, the traceback only when asked for


def _interrupted(exc: KeyboardInterrupt, options: Options) -> int:
    """The one line of an interrupted run, and its exit status."""
    line, code = interrupted(exc)
    if thread_ran_out():  # the interruption came from a thread the system refused memory (`entry`)
        line, code = f"dlagg: error: {out_of_memory(_input_path(options))}", OUT_OF_MEMORY
    print(line, file=sys.stderr)
    return code


def run(options: Options, log: Log, **kwargs: Any) -> Result:
    """`pipeline.run`, imported only now (`_pipeline`)."""
    return _pipeline().run(options, log, **kwargs)


def _pipeline() -> ModuleType:
    """dlagg.pipeline, imported when a run starts: it loads pandas, pyarrow and numpy (0.4 s), which --help, --version
    and a bad option never need (tests/test_startup.py). An address-space limit too small for those libraries is one
    line, not a traceback or an 'internal error' (an extension module that cannot be mapped: 'failed to map segment',
    or numpy's own ImportError saying so in other words)."""
    if not libraries_fit():  # numpy would end the process with OpenBLAS's own line, not ours
        raise DlaggError(out_of_memory_loading())
    try:
        from . import pipeline
    except (MemoryError, ImportError) as exc:
        if isinstance(exc, ImportError) and "failed to map segment" not in str(exc) and address_space_limit() is None:
            raise
        raise DlaggError(out_of_memory_loading()) from None
    return pipeline


def _input_path(options: Options) -> Path:
    """The input file a message names: the nsys export, else the ncu report."""
    return Path(str(options.nsys_database if options.nsys_database is not None else options.ncu_report))


def _run(options: Options, log: Log, args: argparse.Namespace, program: list[str]) -> int:
    """Record the program when one is given, run the job, and say what was written; the exit status."""
    recording = recording_from(args) if program and options.nsys_database is None else None
    warnings = option_warnings(args, program, recording is not None)
    if recording is not None:
        options = replace(options, nsys_database=recording.sqlite)
        warnings += trace_warnings(nsys_options(recording))
    for warning in warnings:
        log.warn(warning)
    if log.strict and log.warnings:  # before a long training run, not after it
        return _strict(log, "nothing was read or run")
    if options.nsys_database is None and options.ncu_report is None:
        raise OptionsError(f"nothing to read: pass --nsys_database=run.sqlite (an nsys SQLite export), a program "
                           f"to run under nsys ({RUNS_PROGRAM}), or --ncu_report=step.csv")
    options, defaults = with_default_reports(options)
    pipeline = _pipeline()  # (before tune_process, which sets pandas up)
    tune_process()
    recorded: Recorded | None = None
    if recording is not None:
        nsys = ready(program)
        pipeline.check_outputs(options)  # a report in the way is found before the program runs, not after
        recorded = record(nsys, program, recording, log)
    ignore_file_size_signal()
    result = run(options, log, worker_init=tune_process, keep_rows=False)  # prints findings only
    return _finish(result, options, log, args, recorded, defaults)


def _finish(result: Result, options: Options, log: Log, args: argparse.Namespace, recorded: Recorded | None,
            defaults: str) -> int:
    """What a finished run prints (findings and verdict on stdout, the files on stderr) and its exit status."""
    from .reports.expert_systems import feedback_text  # (loaded by the run already)
    from .writers import how_to_open
    from .writers.base import written_line

    for built in result.reports:
        if built.name == "expert_systems" and options.level >= NORMAL:  # like DLProf: findings on stdout
            print(feedback_text(built))
    comparison = result.comparison
    if comparison is not None and options.level >= MINIMAL:
        print(f"Compared with the baseline: {comparison.verdict.text}")
    failed = recorded.status if recorded is not None else 0  # the program's own failure is passed on
    if defaults:  # said once the run succeeded: a bad input stays one error line
        log.info(defaults)
    if not result.written:
        log.result("error: no report could be written for this export (see the warnings above)")
        return failed or 1
    log.result(written_line(result.written))
    for line in how_to_open(result.written):
        log.result(line)
    if failed:
        log.result(f"the program exited with status {failed}, and so does dlagg (the files above cover what nsys "
                   "recorded)")
        return failed
    if comparison is not None and args.fail_if_slower is not None:
        verdict = comparison.verdict
        if verdict.slower_than(args.fail_if_slower):
            log.result(f"error: {100.0 * (verdict.ratio - 1.0):.1f}% slower than the baseline (significantly), more "
                       f"than --fail_if_slower={args.fail_if_slower:g}")
            return SLOWER
    if log.strict and log.warnings:
        return _strict(log, "the outputs were written")
    return 0


def _strict(log: Log, outputs: str) -> int:
    """--strict=true with warnings (each already written as an error line): one closing line, exit STRICT."""
    count = len(log.warnings)
    print(f"dlagg: error: --strict=true: {count} warning{'s' if count != 1 else ''} above, exit status {STRICT}; "
          f"{outputs}", file=sys.stderr)
    return STRICT


def _internal(options: Options, exc: Exception) -> int:
    """A bug: one line, the traceback only when asked for."""
    if options.level >= DIAGNOSTIC:
        traceback.print_exception(exc)
    print(f"dlagg: internal error on {_input_path(options).name}: {type(exc).__name__}: {exc}; "
          "rerun with -v diagnostic for the traceback and report it with the nsys version", file=sys.stderr)
    return INTERNAL


def entry() -> NoReturn:
    """The ``dlagg`` command and ``python -m dlagg``: `main`, then the process ends at once.

    Every output is written, closed and renamed into place when `main` returns; what is left is
    the interpreter tearing down millions of objects one by one (a visible share of a large run),
    which nobody waits for. A thread that runs out of memory ends the run with the out-of-memory line (a pool's
    manager thread that dies so would leave the run waiting forever).
    """
    end_run_when_a_thread_runs_out()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
