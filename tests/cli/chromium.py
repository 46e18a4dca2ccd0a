"""Drive Debian's headless Chromium through the DevTools protocol over a pipe.

``--remote-debugging-pipe`` makes Chromium read commands on fd 3 and write replies and events
on fd 4, each a JSON object ended by a NUL byte: no port, no websocket library. The page is
opened in a new target with the Runtime, Log and Network domains enabled before navigation,
so every console message, uncaught exception and request of the page load is seen.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]


def chromium_path() -> str | None:
    """Debian's chromium, if installed."""
    return shutil.which("chromium")


@dataclass
class PageLoad:
    """What loading a page produced."""

    value: Any
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium process, spoken to over its DevTools pipe; a call fails when
    Chromium says nothing for ``silence`` seconds (a hang: no test times Chromium)."""

    def __init__(self, silence: float = 90.0) -> None:
        binary = chromium_path()
        assert binary is not None
        self._profile = tempfile.TemporaryDirectory(prefix="contextstore-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        command = " ".join([binary, *FLAGS, f"--user-data-dir={self._profile.name}"])
        self._process = subprocess.Popen(
            ["bash", "-c", f'exec {command} 3<&"$CMD_FD" 4>&"$EVENT_FD"'],
            pass_fds=(to_chrome_r, from_chrome_w),
            env={**os.environ, "CMD_FD": str(to_chrome_r), "EVENT_FD": str(from_chrome_w)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._silence = silence
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def _send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_chrome], [], [], self._silence)
            assert ready, f"Chromium said nothing for {self._silence} s"
            chunk = os.read(self._from_chrome, 65536)
            assert chunk, "Chromium closed its DevTools pipe"
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> Any:
        """Send a command and wait for its reply; events meanwhile are kept."""
        wanted = self._send(method, params, session)
        while True:
            message = self._receive()
            if message.get("id") == wanted:
                assert "error" not in message, message
                return message.get("result", {})
            self._events.append(message)

    def _wait_for(self, method: str) -> None:
        if any(e.get("method") == method for e in self._events):
            return
        while True:
            message = self._receive()
            self._events.append(message)
            if message.get("method") == method:
                return

    def load(self, url: str, expression: str) -> PageLoad:
        """Open ``url`` in a new page, wait for its load event, evaluate ``expression``."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self._events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        self._wait_for("Page.loadEventFired")
        evaluated = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=session,
        )
        result = PageLoad(evaluated["result"].get("value"))
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                result.errors.append(json.dumps(params.get("exceptionDetails"))[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
                "warning",
            ):
                result.errors.append(json.dumps(params.get("args"))[:300])
            elif method == "Log.entryAdded" and params["entry"].get("level") in (
                "error",
                "warning",
            ):
                result.errors.append(str(params["entry"].get("text"))[:300])
            elif method == "Network.requestWillBeSent":
                result.requests.append(str(params["request"]["url"])[:120])
        return result

    def screenshot(self, url: str, path: Path, width: int = 1200, height: int = 2400) -> None:
        """Save a PNG of ``url`` (for a person to look at)."""
        import base64

        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.call("Page.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self._events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        self._wait_for("Page.loadEventFired")
        shot = self.call("Page.captureScreenshot", {"format": "png"}, session=session)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        """Ask Chromium to quit; kill it if it does not."""
        try:
            self._send("Browser.close")
            self._process.wait(timeout=20)
        except Exception:
            self._process.kill()
            self._process.wait()
        finally:
            os.close(self._to_chrome)
            os.close(self._from_chrome)
            self._profile.cleanup()
