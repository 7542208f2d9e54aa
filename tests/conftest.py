"""Shared test helpers: where the real fixtures are, and the command line run in-process."""

from __future__ import annotations

import gzip
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests are timed by how many examples they try, not by a per-example deadline: a deadline
# fails at random on a loaded 2-core machine (CI) without saying anything about the code.
settings.register_profile("dlagg", deadline=None)
settings.load_profile("dlagg")

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "fixtures"
SHARED = Path(os.environ.get("DLAGG_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))

RECORDINGS = ("cuda_basic", "resnet_fp32", "resnet_amp", "dataloader_bound", "no_emit_nvtx", "h2d_heavy",
              "cuda_graph", "cpu_nvtx_numpy")


def fixture_path(relative: str, what: str) -> Path:
    """`relative` under the bundled fixtures/ or else ../shared's; skips, naming `what`, when neither has it."""
    for base in (BUNDLED, SHARED):
        if (base / relative).exists():
            return base / relative
    pytest.skip(f"{what} not available (neither in fixtures/ nor in {SHARED})")


def recording_dir(name: str) -> Path:
    """Folder of an nsys-2022.4 recording (bundled first, then ../shared); skips when absent."""
    return fixture_path(f"nsys-2022.4/{name}/{name}.sqlite", f"fixture {name}").parent


def recording(name: str) -> Path:
    return recording_dir(name) / f"{name}.sqlite"


def public_fixtures() -> list[Path]:
    """Every public export: bundled ones, plus ../shared/fixtures/public when it exists."""
    found = {p.name: p for p in sorted((SHARED / "public").glob("*.sqlite"))}
    found.update({p.name: p for p in sorted((BUNDLED / "public").glob("*.sqlite"))})
    return [found[k] for k in sorted(found)]


def nvprof_fixture(name: str) -> Path:
    """A file of the nvprof fixture (bundled first, then ../shared); skips when absent."""
    return fixture_path(f"nvprof/{name}", f"nvprof fixture {name}")


def ncu_dir(name: str) -> Path:
    """Folder of an Nsight Compute fixture (bundled first, then ../shared); skips when absent."""
    return fixture_path(f"ncu/{name}/{name}_raw.csv.gz", f"ncu fixture {name}").parent


def ncu_csv(name: str) -> Path:
    return ncu_dir(name) / f"{name}_raw.csv.gz"


MULTI = ("ddp2_gpt_one_session", "ddp2_gpt_per_rank")


def multi_dir(name: str, tmp_root: Path) -> Path:
    """Folder of a multi-GPU recording with its databases as plain .sqlite files: ../shared's as they are,
    else the bundled gzipped ones unpacked once under `tmp_root` (skips when neither exists)."""
    shared = SHARED / "nsys-2022.4-multi" / name
    if list(shared.glob("*.sqlite")):
        return shared
    bundled = BUNDLED / "nsys-2022.4-multi" / name
    packed = sorted(bundled.glob("*.sqlite.gz"))
    if not packed:
        pytest.skip(f"multi-GPU fixture {name} not available (neither in fixtures/ nor in {SHARED})")
    folder = tmp_root / name
    if not folder.exists():
        folder.mkdir(parents=True)
        for path in bundled.iterdir():
            if path.suffix == ".gz":
                with gzip.open(path, "rb") as src, (folder / path.name[:-3]).open("wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="session")
def multi(tmp_path_factory) -> Callable[[str], Path]:
    """multi("ddp2_gpt_per_rank") -> the folder of that multi-GPU recording (see multi_dir)."""
    root = tmp_path_factory.mktemp("multi")
    return lambda name: multi_dir(name, root)


def dlagg(capture: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The command line run in-process with `args`: (exit code, stdout, stderr), read with `capture`
    (capsys, or capfd where output comes from below Python)."""
    from dlagg.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capture.readouterr()
    return code, out, err


@pytest.fixture(autouse=True, scope="session")
def _cache_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every run of the session, in-process or in a subprocess, keeps its read cache (reader/cache.py) in a folder of
    the session's own, which goes with pytest's other temporary folders: never the user's cache."""
    folder = tmp_path_factory.mktemp("dlagg-cache")
    before = os.environ.get("DLAGG_CACHE_DIR")
    os.environ["DLAGG_CACHE_DIR"] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop("DLAGG_CACHE_DIR", None)
        else:
            os.environ["DLAGG_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def _text_inference_as_the_session_began() -> Iterator[None]:
    """Each test starts with pandas' text inference and string storage as the session began: the command line, which
    many tests run in-process, sets the storage for its process (tuning.keep_text_in_python)."""
    with text_inference_kept(), text_storage_kept():
        yield


def text_inference() -> bool | None:
    """pandas' ``future.infer_string`` (None where pandas has no such option)."""
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3 deprecates the option
        try:
            return bool(pd.get_option("future.infer_string"))
        except (pd.errors.OptionError, KeyError):
            return None


@contextmanager
def text_inference_kept(during: bool | None = None) -> Iterator[None]:
    """pandas' text inference set to `during` (when given) in the block, and as it was after it."""
    import pandas as pd

    before = text_inference()

    def put(value: bool | None) -> None:
        if value is not None and before is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pd.set_option("future.infer_string", value)

    put(during)
    try:
        yield
    finally:
        put(before)


def text_kept_as() -> str:
    """How pandas keeps the text it infers: the storage of its str dtype ("pyarrow", "python"), else "object"."""
    import pandas as pd

    dtype = pd.Series(["text"]).dtype
    return str(dtype.storage) if isinstance(dtype, pd.StringDtype) else "object"


@contextmanager
def text_storage_kept(during: str | None = None) -> Iterator[None]:
    """pandas' ``mode.string_storage`` set to `during` (when given) in the block, and as it was after it."""
    import pandas as pd

    before = pd.get_option("mode.string_storage")
    if during is not None:
        pd.set_option("mode.string_storage", during)
    try:
        yield
    finally:
        pd.set_option("mode.string_storage", before)
