"""Real server processes for the server tests, and clients that talk to them.

Servers are started as a user would (``python -m contextstore ... serve``), on a port the
OS picks (``127.0.0.1:0``, read back from the readiness line on stderr), and always stopped.
Every wait is bounded and waits on an event (a line, a response), never on a clock.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WAIT_SECONDS = 60
READY_HTTP = re.compile(r"serving JSON-RPC at http://127\.0\.0\.1:(\d+)/rpc")
TOKEN_LINE = re.compile(r"bearer token in (.+)$")


def server_env(data_home: Path) -> dict[str, str]:
    """The environment of a server process: its own data directory, no default database."""
    env = {k: v for k, v in os.environ.items() if k != "CONTEXTSTORE_DB"}
    env["XDG_DATA_HOME"] = str(data_home)
    return env


class ServerProcess:
    """A ``contextstore`` child process whose stderr is collected line by line."""

    def __init__(self, args: list[str], data_home: Path, *, stdin: bool = False) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "contextstore", *args],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(data_home),
        )
        self.lines: list[str] = []
        self._closed = False
        self._changed = threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            with self._changed:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, pattern: re.Pattern[str] | str, start: int = 0) -> re.Match[str]:
        """The first stderr line (from line ``start`` on) matching ``pattern``."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for m in map(compiled.search, self.lines[start:]) if m][:1]
            return bool(found) or self._closed

        with self._changed:
            self._changed.wait_for(seen, timeout=WAIT_SECONDS)
        if not found:
            raise AssertionError(
                f"no stderr line matched {compiled.pattern!r}; stderr:\n" + self.stderr()
            )
        return found[0]

    def wait_closed(self) -> None:
        """Wait until the process closed its stderr (it is exiting)."""
        with self._changed:
            self._changed.wait_for(lambda: self._closed, timeout=WAIT_SECONDS)

    def stderr(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        return self.process.returncode


class RpcClient:
    """What every transport offers the tests: raw bytes in, decoded answers out."""

    _ids = itertools.count(1)

    def send(self, body: bytes) -> Any:
        """Send one raw message; the decoded answer, or None when none is due."""
        raise NotImplementedError

    def call(self, method: str, params: Any = None, **named: Any) -> dict[str, Any]:
        """One request; the whole response object."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None or named:
            message["params"] = params if params is not None else named
        response = self.send(json.dumps(message).encode())
        assert response["id"] == message["id"], response
        return dict(response)

    def result(self, method: str, **params: Any) -> Any:
        """The result of a call that must succeed."""
        response = self.call(method, **params)
        assert "error" not in response, response
        return response["result"]

    def error(self, method: str, params: Any = None, **named: Any) -> dict[str, Any]:
        """The error object of a call that must fail."""
        response = self.call(method, params, **named)
        assert "error" in response and "result" not in response, response
        return dict(response["error"])


class StdioClient(RpcClient):
    """Talks to ``serve --stdio`` over its stdin and stdout, one line each way."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.server.process.stdout is not None
        for line in self.server.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def write(self, body: bytes) -> None:
        stdin = self.server.process.stdin
        assert stdin is not None
        stdin.write(body + b"\n")
        stdin.flush()

    def read(self) -> Any:
        line = self._lines.get(timeout=WAIT_SECONDS)
        assert line.endswith(b"\n"), f"the server closed stdout; stderr:\n{self.server.stderr()}"
        return json.loads(line)

    def send(self, body: bytes) -> Any:
        self.write(body)
        if _expects_answer(body):
            return self.read()
        return None


def _is_notification(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and "id" not in message
        and message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and isinstance(message.get("params", {}), dict | list)
    )


def _expects_answer(body: bytes) -> bool:
    """Whether the specification requires an answer to ``body``."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # the server answers what it cannot read
        return True
    if isinstance(message, list):
        return not message or not all(_is_notification(m) for m in message)
    return not _is_notification(message)


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class HttpClient(RpcClient):
    """Talks to ``serve --http`` with ``http.client`` (one connection per request)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token

    def post(
        self, body: Any, *, headers: dict[str, str] | None = None, path: str = "/rpc"
    ) -> HttpResponse:
        sent = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        sent.update(headers or {})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_SECONDS)
        try:
            connection.request("POST", path, body=body, headers=sent)
            response = connection.getresponse()
            return HttpResponse(
                response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            )
        finally:
            connection.close()

    def send(self, body: bytes) -> Any:
        response = self.post(body)
        if response.status == 204:
            return None
        assert response.status == 200, response
        return response.json()


@dataclass
class HttpServer:
    process: ServerProcess
    port: int
    token: str
    token_path: Path
    db: Path | str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rpc"

    def client(self) -> HttpClient:
        return HttpClient(self.port, self.token)


def start_http(db: Path | str, data_home: Path, *extra: str) -> HttpServer:
    """``serve --http 127.0.0.1:0`` on ``db``, once it says it is serving."""
    process = ServerProcess(["--db", str(db), "serve", "--http", "127.0.0.1:0", *extra], data_home)
    try:
        port = int(process.wait_for(READY_HTTP).group(1))
        token_path = Path(process.wait_for(TOKEN_LINE).group(1))
    except BaseException:
        process.stop()
        raise
    token = token_path.read_text(encoding="utf-8").strip()
    return HttpServer(process, port, token, token_path, db)


def start_stdio(db: Path, data_home: Path, *extra: str) -> tuple[ServerProcess, StdioClient]:
    """``serve --stdio`` on ``db``, once it says it is serving."""
    process = ServerProcess(["--db", str(db), "serve", "--stdio", *extra], data_home, stdin=True)
    try:
        process.wait_for("serving JSON-RPC on stdin/stdout")
    except BaseException:
        process.stop()
        raise
    return process, StdioClient(process)


@contextlib.contextmanager
def postgres_location() -> Iterator[str]:
    """A PostgreSQL URL whose connections use a fresh schema (dropped afterwards), as a user
    would pass it to ``--db``; skips when no server is configured."""
    from tests.conftest import POSTGRES_URL, new_postgres_schema

    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the server on PostgreSQL")
    with new_postgres_schema() as schema:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database for a server: a SQLite file, and PostgreSQL when configured."""
    if request.param == "sqlite":
        yield str(tmp_path / "server.db")
        return
    with postgres_location() as url:
        yield url


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    """A fresh HTTP server on its own SQLite file."""
    server = start_http(tmp_path / "http.db", tmp_path / "data")
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture(scope="module")
def transports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One stdio and one HTTP server sharing a SQLite file, for a module's tests."""
    root = tmp_path_factory.mktemp("rpc")
    db = root / "shared.db"
    http = start_http(db, root / "data")
    stdio_process = None
    try:
        stdio_process, stdio = start_stdio(db, root / "data")
        yield {"db": db, "stdio": stdio, "http": http.client(), "http_server": http}
    finally:
        http.process.stop()
        if stdio_process is not None:
            stdio_process.stop()


@pytest.fixture(params=["stdio", "http"])
def rpc(request: pytest.FixtureRequest, transports: dict[str, Any]) -> RpcClient:
    """A client on each transport (the servers are shared by the module)."""
    client: RpcClient = transports[request.param]
    return client
