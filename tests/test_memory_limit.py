"""Near the memory limit: a clear line, never a crash or a hang (docs/memory.md).

Under an address-space limit (``prlimit --as``, ``ulimit -v``) anywhere from too small to load the libraries to
enough for the run, the ``dlagg`` command either succeeds or ends with exactly one error line that says memory ran
out, what the run needs (a figure above the limit it failed under, or "more than" that limit) and what to do, with
exit status 1 and nothing left in the output folder (no staging folder, no report). Never a hang (a thread that
could not be started, then a wait forever), a SIGSEGV (the SQLite driver's error path), a traceback, an internal
error (exit 3: an extension module that could not be mapped), or a library's own line on stderr.

Each run is a subprocess under its own limit (set between fork and exec), with an empty read cache of its own
(or one filled by a run without a limit: the cached path), into an output folder that does not exist yet. What
passes does not depend on where the run fails nor on how long it takes: a run that has not ended after `HANG_S`
seconds (a run here takes seconds) is a hang. The full scan (every 10 MiB from 260 to 450 MiB) is marked slow; the
default run tries the limits where a run used to hang, crash or end in an internal error.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlagg import limits
from dlagg.ranks import pool

from .conftest import ROOT, ncu_csv, recording

HANG_S = 120
MIB = 1 << 20
SCAN_MIB = (64, *range(260, 451, 10))
DDP = "ddp2_gpt_one_session"
RESNET = "resnet_amp"

# The figure the line gives for what the run needs, with whether it is a lower bound ("more than").
NEEDS = re.compile(r"needs (?:(?P<about>about|at least) (?P<figure>[\d,]+) MB|more than the (?P<limit>[\d,]+) MB "
                   r"it was allowed)")


def export_path(name: str, multi) -> Path:  # noqa: ANN001 - conftest's `multi` fixture
    return multi(DDP) / f"{DDP}.sqlite" if name == DDP else recording(name)


def _limited(mib: int):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mib * MIB, mib * MIB))
    return apply


def run_limited(export: Path, mib: int | None, out: Path, cache: Path,
                extra: tuple[str, ...]) -> subprocess.CompletedProcess[str] | None:
    """The command under a limit of `mib` MiB (None: no limit); None when it has not ended within `HANG_S`."""
    env = {**os.environ, "DLAGG_CACHE_DIR": str(cache)}
    try:
        return subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={export}", "--reports=all", *extra,
                               f"--output_path={out}", "--force"], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=HANG_S, preexec_fn=None if mib is None else _limited(mib))
    except subprocess.TimeoutExpired:
        return None


def check_outcome(done: subprocess.CompletedProcess[str] | None, mib: int, out: Path) -> None:
    """Success, or the one out-of-memory line (module docstring)."""
    assert done is not None, f"under {mib} MiB: no end within {HANG_S} s (a hang)"
    said = f"under {mib} MiB: exit status {done.returncode}, stderr:\n{done.stderr[-3000:]}"
    assert done.returncode in (0, 1), said  # not 3 (internal error), not -11 (SIGSEGV), not 124/137
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("dlagg: ") for line in lines), said  # no traceback, no library's line
    assert not [line for line in lines if "damaged" in line or " note: " in line], said  # memory is not damage
    errors = [line for line in lines if line.startswith("dlagg: error: ")]
    if done.returncode == 0:
        assert not errors and list(out.glob("dlagg_*")), said
        return
    assert len(errors) == 1 and lines[-1] == errors[0], said
    line = errors[0]
    assert "out of memory" in line and "raise the limit" in line, said
    needs = NEEDS.search(line)
    assert needs is not None, said
    if needs["limit"] is not None:
        assert int(needs["limit"].replace(",", "")) == mib, said
    else:
        assert int(needs["figure"].replace(",", "")) > mib, said
    assert not out.exists() or sorted(out.rglob("*")) == [], said  # no staging folder, no report left


@pytest.fixture(scope="module")
def warm_caches(tmp_path_factory, multi) -> dict[str, Path]:  # noqa: ANN001 - conftest's `multi` fixture
    """A read cache per export, filled by a run without a limit (the next runs read the cache, not the file)."""
    caches: dict[str, Path] = {}
    for name in (DDP, RESNET):
        root = tmp_path_factory.mktemp(f"warm-{name}")
        done = run_limited(export_path(name, multi), None, root / "out", root / "cache", ())
        assert done is not None and done.returncode == 0, done and done.stderr
        caches[name] = root / "cache"
    return caches


def scan_case(name: str, mib: int, extra: tuple[str, ...], tmp_path: Path, multi,  # noqa: ANN001
              cache: Path | None = None) -> None:
    if cache is not None:  # a copy: a run under the limit must not change the cache the other runs use
        shutil.copytree(cache, tmp_path / "cache")
    out = tmp_path / "out"
    check_outcome(run_limited(export_path(name, multi), mib, out, tmp_path / "cache", extra), mib, out)


@pytest.mark.parametrize(("name", "mib"), [(DDP, 300), (DDP, 320), (RESNET, 380)])
def test_near_the_limit_is_success_or_one_line(name: str, mib: int, tmp_path: Path, multi) -> None:  # noqa: ANN001
    """Where a run used to hang (a thread of the process pool that could not start), crash (SIGSEGV in the SQLite
    driver) or end in an internal error (the HTML writer's vl_convert could not be mapped), or said it needed less
    than the limit it failed under."""
    scan_case(name, mib, ("--formats=all",), tmp_path, multi)


@pytest.mark.slow
@pytest.mark.parametrize("mib", SCAN_MIB)
@pytest.mark.parametrize(("name", "extra", "cache"), [
    (DDP, ("--formats=all",), "cold"), (RESNET, ("--formats=all",), "cold"), (DDP, (), "cold"), (RESNET, (), "cold"),
    (DDP, ("--formats=all",), "warm"), (RESNET, ("--formats=all",), "warm")])
def test_memory_scan(name: str, extra: tuple[str, ...], cache: str, mib: int, tmp_path: Path, multi,  # noqa: ANN001
                     warm_caches) -> None:  # noqa: ANN001
    scan_case(name, mib, extra, tmp_path, multi, warm_caches[name] if cache == "warm" else None)


@pytest.mark.parametrize(("limit_mib", "size_mb"), [(300, 5), (400, 5), (400, 500), (None, 5)])
def test_the_line_never_asks_for_less_than_the_limit(limit_mib: int | None, size_mb: int, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    export = tmp_path / "run.sqlite"
    with export.open("wb") as handle:
        handle.truncate(size_mb * MIB)
    monkeypatch.setattr(limits, "address_space_limit", lambda: None if limit_mib is None else limit_mib * MIB)
    line = limits.out_of_memory(export)
    needs = NEEDS.search(line)
    assert needs is not None, line
    if needs["limit"] is not None:
        assert limit_mib is not None and int(needs["limit"].replace(",", "")) == limit_mib, line
    elif limit_mib is not None:
        assert int(needs["figure"].replace(",", "")) > limit_mib, line
    assert "raise the limit" in line


def test_the_loading_line_never_asks_for_less_than_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    for limit_mib in (64, 260, 400):  # a few limits, not events
        monkeypatch.setattr(limits, "address_space_limit", lambda mib=limit_mib: mib * MIB)
        line = limits.out_of_memory_loading()
        needs = NEEDS.search(line)
        assert needs is not None, line
        figure = int((needs["limit"] or needs["figure"]).replace(",", ""))
        assert figure == limit_mib if needs["limit"] else figure > limit_mib, line


def _raised_from(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise ValueError("while handling it") from exc
    except ValueError as outer:
        return outer


@pytest.mark.parametrize(("exc", "memory"), [
    (MemoryError(), True),
    (RuntimeError("can't start new thread"), True),
    (ImportError("/site-packages/vl_convert/vl_convert.abi3.so: failed to map segment from shared object"), True),
    (OSError(12, "Cannot allocate memory"), True),
    (Exception("Unknown error: Failed to launch worker thread: Resource temporarily unavailable"), True),
    (_raised_from(MemoryError()), True),
    (RuntimeError("dictionary changed size during iteration"), False),
    (ImportError("No module named 'vl_convert'"), False),
    (OSError(2, "No such file or directory"), False),
    (ValueError("bad value"), False),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_what_counts_as_out_of_memory(exc: BaseException, memory: bool) -> None:
    assert limits.is_out_of_memory(exc) is memory


@pytest.mark.parametrize("inputs", ["one export", "two rank files"])
def test_a_limit_too_small_for_the_libraries_is_the_one_line(inputs: str, tmp_path: Path, multi) -> None:  # noqa: ANN001
    """Under 64 MiB numpy's OpenBLAS cannot even start, and ends the process at import with a line of its own: dlagg
    says its line before it imports the libraries, and starts no fork server (which would import them too)."""
    export = recording(RESNET) if inputs == "one export" else multi("ddp2_gpt_per_rank")
    out = tmp_path / "out"
    done = run_limited(export, 64, out, tmp_path / "cache", ())
    check_outcome(done, 64, out)
    assert done is not None and done.returncode == 1 and "loading dlagg's libraries" in done.stderr, done


def test_a_fork_server_with_no_room_for_dlagg_is_the_one_line(tmp_path: Path, multi) -> None:  # noqa: ANN001
    """The fork server of the rank pool imports dlagg's pipeline before it forks a worker; under an address-space
    limit that import may be what runs out (one run in a scan of limits). Made certain here: a `sitecustomize` makes
    that import fail with MemoryError in the server alone (the process that starts with the server's variable set),
    under a limit far above what the run needs. The run says the out-of-memory line, with no traceback of the
    server's."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import builtins, os\n"
        f"if os.environ.get({pool.SERVER_PARENT!r}):\n"
        "    real = builtins.__import__\n"
        "    def refuse(name, globals=None, locals=None, fromlist=(), level=0):\n"
        "        if 'pipeline' in (fromlist or ()) and (globals or {}).get('__name__') == 'dlagg._forkserver':\n"
        "            raise MemoryError\n"
        "        return real(name, globals, locals, fromlist, level)\n"
        "    builtins.__import__ = refuse\n")
    out, mib = tmp_path / "out", 64 << 10
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={export_path(DDP, multi)}",
                           "--reports=summary", f"--output_path={out}", "--cache=false"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=HANG_S, preexec_fn=_limited(mib))
    check_outcome(done, mib, out)
    assert done.returncode == 1, done.stderr


def test_charts_are_left_out_when_their_engine_cannot_start(tmp_path: Path) -> None:
    """vl-convert's JavaScript engine reserves 64 GiB of address space when it starts and aborts the process when a
    limit refuses it: under a limit the run fits but the engine does not, the run succeeds without the charts (no
    PNG, no roofline picture in TensorBoard or the page, a page without its charting libraries) and says so, once
    for the roofline and once for the page, on stderr and in the page's warnings."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={recording(RESNET)}",
                           f"--ncu_report={ncu_csv(RESNET)}", "--reports=all", "--formats=all", f"--output_path={out}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=HANG_S, preexec_fn=_limited(1500),
                          env={**os.environ, "DLAGG_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "reserves 64 GiB" in line]
    assert [line.split(":")[2].strip() for line in said] == ["html", "roofline"], done.stderr
    assert all(line.startswith("dlagg: warning: ") and "1,500 MB" in line for line in said), said
    assert list(out.glob("*.png")) == [] and (out / "dlagg_roofline.csv").is_file()
    page = (out / "dlagg_report.html").read_text(encoding="utf-8")
    assert "data-chart" in page and page.count("reserves 64 GiB") == 2
    after_notice = page.split("bundled by vl-convert", 1)[1].split("*/\n", 1)[1]
    assert after_notice.startswith("</script>")  # the libraries' notice, and no libraries after it
