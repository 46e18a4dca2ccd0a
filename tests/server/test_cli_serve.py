"""The ``serve`` and ``mcp`` commands themselves: their modes, and the one-line hint when an
extra is not installed."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextstore.cli import cli
from tests.server.conftest import WAIT_SECONDS, start_stdio


@pytest.mark.parametrize("args", [[], ["--stdio", "--describe"], ["--stdio", "--http", "h:1"]])
def test_serve_takes_exactly_one_mode(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["serve", *args], obj={})
    assert result.exit_code == 2
    assert "exactly one of --stdio, --http HOST:PORT or --describe" in result.stderr


@pytest.mark.parametrize(
    ("args", "hidden", "extra"),
    [
        (["serve", "--http", "127.0.0.1:0"], "starlette", "server"),
        (["serve", "--http", "127.0.0.1:0"], "uvicorn", "server"),
        (["mcp"], "mcp", "mcp"),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], hidden: str, extra: str
) -> None:
    for name in list(sys.modules):
        if (
            name == hidden
            or name.startswith(f"{hidden}.")
            or name.startswith("contextstore.server")
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, hidden, None)  # importing it now fails as if absent
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "a.db"), *args], obj={})
    assert result.exit_code == 1
    assert (
        result.stderr
        == f'error: this command needs {hidden}; pip install "contextstore[{extra}]"\n'
    )


def test_the_stdio_server_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    for name in ("starlette", "uvicorn", "mcp"):
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("contextstore.server.jsonrpc", "contextstore.server.stdio"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        importlib.import_module(name)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_stdio_server_stops_on_sigterm_or_sigint_when_idle(
    tmp_path: Path, signum: signal.Signals
) -> None:
    process, client = start_stdio(tmp_path / "a.db", tmp_path / "data")
    try:
        assert client.result("list_conversations") == []
        process.process.send_signal(signum)
        assert process.process.wait(WAIT_SECONDS) == 0
        process.wait_closed()
        assert "Aborted" not in process.stderr() and "Traceback" not in process.stderr()
    finally:
        process.stop()


def test_the_stdio_server_stops_at_the_end_of_its_input(tmp_path: Path) -> None:
    process, client = start_stdio(tmp_path / "a.db", tmp_path / "data")
    try:
        client.write(b'{"jsonrpc":"2.0","id":1,"method":"create_conversation"}')
        assert process.process.stdin is not None
        process.process.stdin.close()
        assert client.read()["id"] == 1  # answered before it stopped
        assert process.process.wait(WAIT_SECONDS) == 0
    finally:
        process.process.stdin = None
        process.stop()
