"""The ``serve`` and ``mcp`` commands themselves: their modes, and the one-line hint when an
extra is not installed."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("mode", [["--stdio"], ["--http", "127.0.0.1:1"]])
@pytest.mark.parametrize("size", ["1023", "1073741825", "99999999999999999999"])
def test_max_request_bytes_out_of_range_is_a_usage_error(
    tmp_path: Path, mode: list[str], size: str
) -> None:
    """Below 1 KiB or over 1 GiB the limit is refused before anything starts; a number
    past the machine's index size crashed the stdio reader ("internal error
    (OverflowError...)", exit 70)."""
    db = tmp_path / "store.db"
    result = CliRunner().invoke(
        cli, ["--db", str(db), "serve", *mode, "--max-request-bytes", size], obj={}, input=""
    )
    assert result.exit_code == 2, result.output
    assert (
        f"Invalid value for '--max-request-bytes': {size} is not in the range "
        "1024<=x<=1073741824." in result.stderr
    )
    assert not db.exists()


@pytest.mark.parametrize(
    "args", [["mcp", "--allow-writes", "--read-only"], ["--read-only", "mcp", "--allow-writes"]]
)
def test_mcp_refuses_allow_writes_with_read_only(tmp_path: Path, args: list[str]) -> None:
    """Taken together, the write tools were offered and every call of them failed with
    "open it without read_only=True to write"."""
    db = tmp_path / "store.db"
    result = CliRunner().invoke(cli, ["--db", str(db), *args], obj={}, input="")
    assert result.exit_code == 2
    assert "--allow-writes offers tools that write to the database, and --read-only" in (
        result.stderr
    )
    assert not db.exists()


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


def _append_line(cid: str, text: str, request_id: int = 1) -> bytes:
    params = {"conversation_id": cid, "role": "user", "content": text}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "append", "params": params}
    return json.dumps(message).encode()


def test_a_stdio_line_over_the_limit_is_refused_unread_and_serving_goes_on(
    tmp_path: Path,
) -> None:
    """The line limit is the HTTP body limit (--max-request-bytes): a line of that many
    bytes is a request, one byte more is an error with id null, and the next line is
    served; nothing of the long line was called."""
    process, client = start_stdio(
        tmp_path / "a.db", tmp_path / "data", "--max-request-bytes", "2048"
    )
    try:
        cid = client.result("create_conversation")["id"]
        overhead = len(_append_line(cid, ""))
        fits = _append_line(cid, "x" * (2048 - overhead))
        assert len(fits) == 2048
        assert client.send(fits)["result"]["index"] == 0
        crlf = _append_line(cid, "c" * (2048 - overhead), 2) + b"\r"
        assert client.send(crlf)["result"]["index"] == 1  # the line end is not the message
        for over in (_append_line(cid, "y" * (2049 - overhead)), _append_line(cid, "z" * 10**7)):
            client.write(over)
            refused = client.read()
            assert refused["id"] is None and refused["error"]["code"] == -32600
            assert refused["error"]["message"].startswith(
                f"invalid request: the line is {len(over):,} bytes, over the 2,048 the server "
                "reads as one message; it was skipped unread (nothing was called)."
            )
            assert len(client.result("messages", conversation_id=cid)) == 2
        texts = [m["content"] for m in client.result("messages", conversation_id=cid)]
        assert [t[0] for t in texts] == ["x", "c"]
        assert "Traceback" not in process.stderr()
    finally:
        process.stop()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_200_mb_stdio_line_is_never_held_whole(tmp_path: Path) -> None:
    """A line was read whole whatever its length (a 200 MB one took the server to 690 MB);
    now at most the limit (34 MiB) of it is held, and the rest is read and dropped."""
    process, client = start_stdio(tmp_path / "a.db", tmp_path / "data")
    try:
        stdin = process.process.stdin
        assert stdin is not None
        stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"search","params":{"text":"')
        chunk = b"x" * 2**20
        for _ in range(200):
            stdin.write(chunk)
        client.write(b'"}}')
        refused = client.read()
        assert refused["id"] is None
        assert "the line is 209,715,263 bytes, over the 35,651,584" in refused["error"]["message"]
        assert client.result("list_conversations") == []
        status = Path(f"/proc/{process.process.pid}/status").read_text()
        peak_kb = int(
            next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]
        )
        assert peak_kb < 100 * 1024 + 35 * 1024 + 60 * 1024  # start-up, the limit, slack
    finally:
        process.stop()


def test_a_notification_of_an_unknown_long_method_logs_its_name_clipped(tmp_path: Path) -> None:
    """The server's log repeated a 1 MB name whole, as the error message did."""
    process, client = start_stdio(tmp_path / "a.db", tmp_path / "data")
    try:
        client.write(json.dumps({"jsonrpc": "2.0", "method": "n" * 2**20}).encode())
        assert client.result("list_conversations") == []
        logged = process.wait_for("notification .* failed")
        assert len(logged.string) < 1000
        assert f"{'n' * 100!r}... (1,048,576 characters)" in logged.string
    finally:
        process.stop()


@pytest.mark.parametrize("flags", [[], ["--allow-writes"]], ids=["reading", "writing"])
def test_mcp_on_a_database_not_there_says_where_it_looked_and_creates_nothing(
    tmp_path: Path, flags: list[str]
) -> None:
    pytest.importorskip("mcp")
    missing = tmp_path / "not-yet" / "store.db"
    result = CliRunner().invoke(cli, ["--db", str(missing), "mcp", *flags])
    assert result.exit_code == 3, result.output
    assert f"there is no database at {missing}" in result.output
    assert f"'contextstore --db {missing} import ...'" in result.output
    assert "Traceback" not in result.output
    assert not missing.parent.exists()
