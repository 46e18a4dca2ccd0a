"""psycopg's own log records stay off the command line's stderr: one error, one line."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from contextstore import ContextStore, DatabaseUnavailableError
from contextstore.cli.driver_logs import keep_driver_logs_off_stderr
from tests.cli.conftest import Seeded, run

PIPELINE_LOST = (
    "error ignored terminating <psycopg.Pipeline [BAD] at 0x7f0>: the connection is lost"
)
"""What psycopg logs (WARNING, logger ``psycopg``) when the server drops the connection in
the middle of a pipelined append, as ``contextstore import cline`` makes."""

DROPPED = (
    "the database server closed the connection (sending query and params failed: server "
    "closed the connection unexpectedly); the next call opens a new one, so retry once the "
    "server is back"
)

_PROGRAM = textwrap.dedent(
    f"""
    import logging, sys
    from contextstore import ContextStore, DatabaseUnavailableError
    from contextstore.cli.main import main

    def dropped(self, *args, **kwargs):
        logging.getLogger("psycopg").warning({PIPELINE_LOST!r})
        raise DatabaseUnavailableError({DROPPED!r})

    ContextStore.list_conversations = dropped
    sys.argv = ["contextstore", "--db", sys.argv[1], "conversations"]
    main()
    """
)


def test_a_dropped_connection_is_one_line_on_stderr(seeded: Seeded) -> None:
    """psycopg's warning reached stderr through Python's last-resort handler, a second line
    before the command's own (the program configures no logging, as a shell's run does)."""
    got = subprocess.run(
        [sys.executable, "-c", _PROGRAM, seeded.db], capture_output=True, text=True, check=False
    )
    assert got.returncode == 1
    assert got.stderr.startswith("error: the database server closed the connection")
    assert got.stderr.count("\n") == 1 and "Pipeline" not in got.stderr, got.stderr


def test_the_records_still_reach_a_configured_handler(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the last resort is stopped: a handler the program (or `serve --log-level`)
    configured still gets psycopg's records, and so does a library user's."""

    def dropped(self: ContextStore, *args: object, **kwargs: object) -> None:
        logging.getLogger("psycopg").warning(PIPELINE_LOST)
        raise DatabaseUnavailableError(DROPPED)

    monkeypatch.setattr(ContextStore, "list_conversations", dropped)
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        got = run("--db", seeded.db, "conversations")
    assert got.code == 1 and got.err.count("\n") == 1
    assert [r.getMessage() for r in caplog.records if r.name == "psycopg"] == [PIPELINE_LOST]


def test_the_null_handler_is_added_once() -> None:
    keep_driver_logs_off_stderr()
    keep_driver_logs_off_stderr()
    handlers = logging.getLogger("psycopg").handlers
    assert sum(isinstance(h, logging.NullHandler) for h in handlers) == 1
