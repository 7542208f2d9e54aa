"""Headless Chromium driven over the Chrome DevTools Protocol, with the standard library only.

``chromium_path()`` finds the browser (``$DLAGG_CHROMIUM``, else ``chromium``, ``chromium-browser``,
``google-chrome`` on PATH) or returns None; ``Browser(path)`` starts it with a fresh profile on a
free DevTools port and ``browser.page()`` gives a `Page`: navigate, evaluate JavaScript, take
screenshots, and read what happened (script exceptions, console errors, every network request).

A small WebSocket client (RFC 6455: client frames masked, text frames, fragments, ping/pong) is
enough for DevTools; selenium or playwright would bring a driver binary or a browser download for
the same four commands.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")
START_TIMEOUT_S = 30
CALL_TIMEOUT_S = 60
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium_path() -> str | None:
    explicit = os.environ.get("DLAGG_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class WebSocket:
    """A client WebSocket over a plain TCP connection (ws:// on localhost)."""

    def __init__(self, url: str, timeout: float = CALL_TIMEOUT_S) -> None:
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        head, self.buffer = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = bytes([0x80 | opcode, 0x80 | n])
        elif n < 1 << 16:
            head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = int.from_bytes(self._read(2), "big")
            elif length == 127:
                length = int.from_bytes(self._read(8), "big")
            payload = self._read(length)  # server frames are not masked
            if opcode == 0x9:  # ping
                self._frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if first & 0x80:  # FIN
                    return message.decode()

    def close(self) -> None:
        try:
            self._frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Page:
    """One browser tab: DevTools commands, and the events seen so far."""

    def __init__(self, url: str) -> None:
        self.ws = WebSocket(url)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"{method}: no answer within {CALL_TIMEOUT_S} s")

    def wait_event(self, method: str, timeout: float = CALL_TIMEOUT_S) -> dict:
        seen = len(self.events)
        deadline = time.monotonic() + timeout
        self.ws.sock.settimeout(timeout)
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self.events)
            message = json.loads(self.ws.recv())
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"no {method} within {timeout} s")

    def navigate(self, url: str, width: int = 1400, height: int = 1000) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.events.clear()
        if self.evaluate("location.href").split("#")[0] == url.split("#")[0]:  # a new fragment would not reload
            self.call("Page.navigate", url="about:blank")
            self.wait_event("Page.loadEventFired")
            self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str, *, await_promise: bool = False) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = CALL_TIMEOUT_S, poll: float = 0.2) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(poll)
        raise TimeoutError(f"{expression!r} still false after {timeout} s")

    def settle(self, quiet: float = 1.5, timeout: float = CALL_TIMEOUT_S) -> None:
        """Wait until no request has been started or finished for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = len(self.events)
            time.sleep(quiet)
            self.evaluate("1")  # collects the events that arrived meanwhile
            if not any(e["method"].startswith("Network.") for e in self.events[before:]):
                return
        raise TimeoutError(f"the page kept loading for {timeout} s")

    def screenshot(self, path: Path, clip: dict | None = None) -> int:
        params: dict[str, object] = {"format": "png", "captureBeyondViewport": clip is not None}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return len(data)

    def errors(self) -> list[str]:
        """Script exceptions and console/log errors seen so far."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                    for a in params.get("args", [])))
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        self.ws.close()


class Browser:
    """Headless Chromium with a fresh profile; always stopped (its whole process group) on exit."""

    def __init__(self, path: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="dlagg-chromium-")
        self.log = Path(self.profile) / "chromium.log"  # a file, not a pipe: a full pipe would block chromium
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [path, *FLAGS, f"--user-data-dir={self.profile}/profile", "--remote-debugging-port=0",
                 "--remote-debugging-address=127.0.0.1", "--window-size=1400,1000", "about:blank"],
                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        try:
            self.endpoint = self._endpoint()
        except BaseException:
            self.close()
            raise

    def _endpoint(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            found = LISTENING.search(text)
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited ({self.proc.returncode}): {text[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"chromium did not open DevTools within {START_TIMEOUT_S} s")

    def page(self) -> Page:
        host = urlparse(self.endpoint).netloc
        with urllib.request.urlopen(f"http://{host}/json/list", timeout=10) as response:
            targets = json.load(response)
        (target,) = [t for t in targets if t["type"] == "page"][:1]
        return Page(target["webSocketDebuggerUrl"])

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
