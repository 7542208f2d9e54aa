"""Command line, compatible with DLProf's (``--nsys_database=``, ``--reports=``, ``--key_node=`` ...).

``main(argv) -> int`` is the only place that turns a `DlaggError` into one stderr line and an
exit code; everything else raises.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from . import __version__
from .errors import DlaggError
from .log import DIAGNOSTIC, MINIMAL, NORMAL, Log, glibc
from .options import VERBOSITIES, Baseline, Options
from .pipeline import run
from .reports import REPORTS
from .reports.expert_systems import feedback_text
from .writers import WRITERS, how_to_open

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
INTERNAL = 3  # exit code of an unexpected failure (1: bad input or output, 2: bad options)
SLOWER = 3  # exit code of --fail_if_slower when the run is significantly slower (issue 12 asks for 3)
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


def workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 process, got {value}")
    return value


def percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got '{text}'") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a percentage of at least 0, got {text}")
    return value


def rank(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rank number, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"ranks are numbered from 0, got {value}")
    return value


def iteration(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an iteration number, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"iterations are numbered from 0, got {value}")
    return value


def _reports_help() -> str:
    lines = ["reports (--reports=all or a comma list):"]
    for name, spec in REPORTS.items():
        lines.append(f"  {name:<15} {spec.description}")
    compare = "With --baseline: every figure before and after, its change, and whether it is more than noise"
    lines.append(f"  {'compare':<15} {compare}")
    lines += [
        "",
        "examples:",
        "  dlagg --nsys_database=run.sqlite --reports=all",
        "  dlagg --nsys_database=run.sqlite --reports=summary,kernel --formats=csv,json --key_node=train_step",
        "  dlagg --nsys_database=run.sqlite --reports=all --iter_start=5 --iter_stop=20 --force=true",
        "  dlagg --nsys_database=after.sqlite --baseline=before.sqlite --reports=all --fail_if_slower=5",
        "  dlagg --nsys_database=run.sqlite --ncu_report=step.csv --reports=all      # with the roofline",
        "  dlagg --ncu_report=step.csv --peaks=peaks.json --reports=roofline      # ncu alone, measured ceilings",
    ]
    return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"dlagg: error: {message} (see dlagg --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dlagg",
        description="Where each training iteration's time goes, from an Nsight Systems SQLite export "
                    "(nsys export --type sqlite). Command line compatible with NVIDIA DLProf.",
        epilog=_reports_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("-V", "--version", action="version", version=f"dlagg {__version__}")
    add("--nsys_database", "--database", "--nvprof_database", dest="nsys_database", metavar="FILES", default=None,
        help="the nsys SQLite export(s) or nvprof databases (nvprof -o / .nvvp) to read, read-only: a file, a comma "
             "list, a glob ('rank*.sqlite') or a folder; each file may hold several processes (ranks). Needed by "
             "every report but the roofline")
    add("--reports", type=comma_list, default=(), metavar="LIST",
        help="reports to write: all or a comma list (see below); none by default, like DLProf")
    add("--formats", type=comma_list, default=("csv",), metavar="LIST",
        help=f"report file formats: all, or a comma list of {', '.join(w for w in WRITERS if w != 'tensorboard')} "
             "(default csv; html: one self-contained page with plots)")
    add("--output_path", type=Path, default=Path("."), metavar="DIR", help="folder for all outputs (default .)")
    add("--profile_name", default="dlagg", metavar="NAME", help="prefix of every output file name (default dlagg)")
    add("--key_node", "--key_op", dest="key_node", default=None, metavar="NAME",
        help="NVTX range that marks one training step; '*' globs (ProfilerStep#*). Default: detected")
    add("--iter_start", type=iteration, default=None, metavar="N", help="first iteration to aggregate (default 0)")
    add("--iter_stop", type=iteration, default=None, metavar="N", help="last iteration to aggregate (default: last)")
    add("--domains", type=comma_list, default=(), metavar="LIST", help="NVTX domains that define ops (default all)")
    add("-f", "--force", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="overwrite existing outputs (default false)")
    add("-v", "--verbosity", choices=VERBOSITIES, default="normal", help="stderr detail (default normal)")
    add("--tb_dir", default="event_files", metavar="DIR",
        help="TensorBoard event-file folder inside --output_path (default event_files)")
    add("-b", "--suppress_tb_files", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="do not write TensorBoard event files (default false)")
    add("--per_rank", type=boolean, nargs="?", const=True, default=False, metavar="BOOL",
        help="with several ranks, also write every report per rank under <output_path>/rank<N>/ (default false)")
    add("--workers", type=workers, default=None, metavar="N",
        help="processes reading ranks at once (default: one per core; 1: in this process)")
    add("--scheduler", default=os.environ.get("DASK_SCHEDULER_ADDRESS") or None, metavar="ADDRESS",
        help="read the ranks on this Dask distributed scheduler (tcp://host:8786; default $DASK_SCHEDULER_ADDRESS); "
             "needs pip install 'dlagg[dask]'")
    add("--ncu_report", default=None, metavar="CSV",
        help="Nsight Compute metrics of one training step ('ncu -i step.ncu-rep --csv --page raw > step.csv', plain "
             "or .gz), read-only: adds the roofline report, roofline figures to the kernel, op_type and summary "
             "reports, and measured Tensor Core use; alone (no --nsys_database) it gives the roofline report only")
    add("--peaks", default=None, metavar="JSON",
        help="measured ceilings replacing ncu's own where the file names them (format: docs/roofline.md)")
    add("--ncu_rank", type=rank, default=None, metavar="N",
        help="the rank whose process ncu profiled, when the nsys export(s) hold several (default: the first rank)")
    add_baseline_arguments(parser)
    return parser


BASELINE_OVERRIDES = ("key_node", "iter_start", "iter_stop", "domains", "profile_name")


def add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    """Comparison with a baseline profile (dlagg/compare.py)."""
    group = parser.add_argument_group("comparing with a baseline (did my change help?)")
    add = group.add_argument
    add("--baseline", default=None, metavar="FILES",
        help="the profile before the change, read like --nsys_database (file, comma list, glob, folder): writes "
             "report compare, prints a verdict and adds the baseline's TensorBoard run")
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
    )


def tune_process() -> None:
    """Process-wide allocator choices, made by the command-line tool (a library must leave them alone).

    pyarrow's default pool (mimalloc) keeps the pages it frees for itself: the system allocator
    gave a peak 60-150 MB lower on transformer_amp_large and a faster read. glibc gives each thread
    that allocates its own arena, and what one thread frees the others cannot reuse: one arena for
    the reader and writer threads too lowered the peak by another 10 MB at no measurable cost
    (docs/design.md).
    """
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    mallopt = glibc("mallopt")
    if mallopt is not None:
        mallopt(M_ARENA_MAX, 1)


def _input_name(options: Options) -> str:
    """The input file a message names: the nsys export, else the ncu report."""
    return Path(str(options.nsys_database if options.nsys_database is not None else options.ncu_report)).name


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options = options_from(args, baseline_from(args, parser))
    tune_process()
    log = Log(options.level)
    try:
        result = run(options, log, worker_init=tune_process)
    except DlaggError as exc:
        print(f"dlagg: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dlagg: interrupted; no partial output was left behind", file=sys.stderr)
        return 130
    except MemoryError:
        source = _input_name(options)
        print(f"dlagg: error: out of memory on {source}; dlagg needs up to about twice the "
              "export's size in memory: run it on a machine with more", file=sys.stderr)
        return INTERNAL
    except Exception as exc:  # a bug: one line, the traceback only when asked for
        if options.level >= DIAGNOSTIC:
            traceback.print_exc()
        print(f"dlagg: internal error on {_input_name(options)}: {type(exc).__name__}: {exc}; "
              "rerun with -v diagnostic for the traceback and report it with the nsys version", file=sys.stderr)
        return INTERNAL
    for built in result.reports:
        if built.name == "expert_systems" and options.level >= NORMAL:  # like DLProf: findings on stdout
            print(feedback_text(built))
    if result.comparison is not None and options.level >= MINIMAL:
        print(f"Compared with the baseline: {result.comparison.verdict.text}")
    if not options.reports and result.comparison is None:
        log.result("no report requested: pass --reports=all (or a comma list) to write reports")
        return 0
    if not result.written:
        log.result("error: no report could be written for this export (see the warnings above)")
        return 1
    folders = sorted({str(p.parent) for p in result.written})
    log.result(f"wrote {len(result.written)} file(s) to {', '.join(folders)}: "
               + ", ".join(p.name for p in result.written))
    for line in how_to_open(result.written):
        log.result(line)
    if result.comparison is not None and args.fail_if_slower is not None:
        verdict = result.comparison.verdict
        if verdict.slower_than(args.fail_if_slower):
            log.result(f"error: {100.0 * (verdict.ratio - 1.0):.1f}% slower than the baseline (significantly), more "
                       f"than --fail_if_slower={args.fail_if_slower:g}")
            return SLOWER
    return 0


def entry() -> NoReturn:
    """The ``dlagg`` command and ``python -m dlagg``: `main`, then the process ends at once.

    Every output is written, closed and renamed into place when `main` returns; what is left is
    the interpreter tearing down millions of objects one by one (0.18 s of a 3 s run measured on
    transformer_amp_large), which nobody waits for.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
