"""Take the README's TensorBoard screenshots from real recordings, with headless Chromium.

    python docs/screenshots/take_screenshots.py [--chromium /usr/bin/chromium]

Runs dlagg on the bundled ``resnet_fp32`` and ``resnet_amp`` recordings (--reports=all,
--iter_start=2 so the warm-up iterations show apart) into one temporary output folder, serves its
event files with the real TensorBoard on 127.0.0.1 and a free port, shoots the custom-scalars page
and the text dashboards, and always stops TensorBoard and removes the temporary folders.
Needs Chromium (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PROFILES = ("resnet_fp32", "resnet_amp")  # before / after: FP32 without Tensor Cores, then AMP
ITER_START = 2  # the first two iterations are warm-up (cuDNN autotuning, allocator growth)
STARTUP_TIMEOUT_S = 60
# The page renders its charts after its data requests; virtual time lets Chromium wait for them.
RENDER_BUDGET_MS = 10_000
WINDOW = "1400,1000"
MAX_PNG_BYTES = 400_000  # keeps the README light
PAGES = {
    # Smoothing off: TensorBoard's default (0.6) would blur iteration-to-iteration differences.
    "tensorboard_scalars.png": "#custom_scalars&_smoothingWeight=0",
    "tensorboard_text.png": "#text&tagFilter=summary/Summary%20Report",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def tensorboard(logdir: Path, runs: set[str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"{base}/data/plugin/scalars/tags", timeout=5) as response:
                    if runs <= set(json.load(response)):
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"tensorboard did not serve {sorted(runs)} within {STARTUP_TIMEOUT_S} s")
            time.sleep(0.3)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def shoot(chromium: str, url: str, png: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="dlagg-chromium-") as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--window-size={WINDOW}",
                        f"--virtual-time-budget={RENDER_BUDGET_MS}", f"--screenshot={png}", url],
                       check=True, capture_output=True, timeout=120)
    size = png.stat().st_size
    if size > MAX_PNG_BYTES:
        raise RuntimeError(f"{png}: {size:,} bytes, over {MAX_PNG_BYTES:,}")
    print(f"{png.relative_to(ROOT)}: {size:,} bytes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--out", type=Path, default=HERE, help="folder for the PNGs (default: this folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlagg-screenshots-") as tmp:
        out = Path(tmp)
        for name in PROFILES:
            database = ROOT / "fixtures" / "nsys-2022.4" / name / f"{name}.sqlite"
            subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={database}", "--reports=all",
                            f"--output_path={out}", f"--profile_name={name}", f"--iter_start={ITER_START}",
                            "--verbosity=quiet"], check=True)
        with tensorboard(out / "event_files", set(PROFILES)) as base:
            for png, fragment in PAGES.items():
                shoot(args.chromium, f"{base}/{fragment}", args.out / png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
