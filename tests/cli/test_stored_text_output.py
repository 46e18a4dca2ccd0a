"""Stored text on standard output: on a terminal it cannot drive the terminal (control
characters and bidirectional overrides shown as symbols or escaped), whichever form the
command prints (table, CSV, JSON); off a terminal it is written as stored."""

from __future__ import annotations

import csv
import json
import os
import pty
import select
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.cli import terminal
from tests.cli.conftest import run

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "x\x1b]0;pwned\x07\x1b[2J\u202eabc\x9b\u2066end"
"""A window title, a screen clear, a right-to-left override, a C1 CSI and an isolate."""
RAW = ("\x1b", "\x07", "\u202e", "\x9b", "\u2066")
"""What must never reach a terminal from :data:`HOSTILE`."""


def _on_a_terminal(*args: str) -> str:
    """What ``contextstore ARGS`` writes on standard output when that is a terminal (a
    pseudo-terminal, as ``script`` gives); the command must succeed."""
    master, slave = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "contextstore", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
        cwd=ROOT,
    )
    os.close(slave)
    seen = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, f"the command said nothing more; saw {seen!r}"
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        assert child.wait(timeout=60) == 0, child.stderr.read() if child.stderr else ""
    finally:
        os.close(master)
        if child.poll() is None:
            child.kill()
    return seen.decode("utf-8").replace("\r\n", "\n")


def _piped_run(*args: str) -> str:
    """What ``contextstore ARGS | cat`` prints, byte for byte; the command must succeed."""
    child = subprocess.run(
        [sys.executable, "-m", "contextstore", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=ROOT,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    return child.stdout.decode("utf-8")


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[str, str]:
    """A store whose checkpoint label, model id and message text hold :data:`HOSTILE`;
    returns the database and the conversation's id."""
    db = str(tmp_path / "hostile.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(model_id=f"m{HOSTILE}").id
        store.append(cid, "user", f"said {HOSTILE}")
        store.checkpoint(cid, f"cp {HOSTILE}")
    return db, cid


class _Stream(StringIO):
    """A UTF-8 text stream that keeps what it was given."""

    encoding = "utf-8"


def _a_terminal(monkeypatch: pytest.MonkeyPatch) -> StringIO:
    """Standard output as a colourless UTF-8 terminal; returns what it shows."""
    screen = _Stream()
    monkeypatch.setattr(
        terminal,
        "stdout",
        lambda: terminal._Console(file=screen, force_terminal=True, width=200, color_system=None),
    )
    return screen


def _piped(monkeypatch: pytest.MonkeyPatch) -> StringIO:
    """Standard output as a UTF-8 pipe; returns what it was given."""
    written = _Stream()
    monkeypatch.setattr(terminal, "stdout", lambda: terminal._console(written))
    return written


def test_sql_csv_on_a_terminal_shows_stored_escapes_as_symbols(hostile: tuple[str, str]) -> None:
    """``sql --csv`` wrote a stored label's escape sequences raw to the terminal: the screen
    cleared, the window was retitled, the rest of the line reversed."""
    db, _ = hostile
    query = "SELECT label AS 'l\x1b[2J' FROM checkpoints UNION ALL SELECT text FROM blocks"
    shown = _on_a_terminal("--db", db, "sql", query, "--csv")
    assert not any(raw in shown for raw in RAW)
    assert "l␛[2J\n" in shown
    assert "cp x␛]0;pwned␇␛[2J\\u202eabc\\x9b\\u2066end" in shown
    assert "said x␛]0;pwned␇" in shown


def test_sql_csv_off_a_terminal_is_every_byte_stored(hostile: tuple[str, str]) -> None:
    db, _ = hostile
    query = "SELECT label, 'a' || char(13, 10) || 'b' AS crlf FROM checkpoints"
    piped = _piped_run("--db", db, "sql", query, "--csv")
    assert list(csv.reader(StringIO(piped, newline=""))) == [
        ["label", "crlf"],
        [f"cp {HOSTILE}", "a\r\nb"],
    ]


def test_print_csv_shows_text_cells_as_a_table_does_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows: list[list[Any]] = [[HOSTILE, 7, None, 1.5]]
    screen = _a_terminal(monkeypatch)
    terminal.print_csv(["\u202ename", "n", "none", "f"], rows)
    assert screen.getvalue() == ("\\u202ename,n,none,f\n" + terminal.visible(HOSTILE) + ",7,,1.5\n")
    written = _piped(monkeypatch)
    terminal.print_csv(["\u202ename", "n", "none", "f"], rows)
    assert written.getvalue() == f"\u202ename,n,none,f\n{HOSTILE},7,,1.5\n"


@pytest.mark.parametrize(
    "command",
    [["audit", "{cid}", "--json"], ["checkpoints", "{cid}", "--json"], ["show", "{cid}", "--json"]],
    ids=["audit", "checkpoints", "show"],
)
def test_json_on_a_terminal_escapes_bidirectional_overrides(
    hostile: tuple[str, str], command: list[str]
) -> None:
    """``audit --json`` (a model id), ``checkpoints --json`` (a label) wrote U+202E raw to
    the terminal, which reversed the rest of the line; it is escaped now, the same JSON."""
    db, cid = hostile
    args = [a.format(cid=cid) for a in command]
    shown = _on_a_terminal("--db", db, *args)
    assert not any(raw in shown for raw in RAW)
    assert "\\u202e" in shown and "\\u2066" in shown
    assert json.loads(shown) == json.loads(run("--db", db, *args).out)


def test_print_json_escapes_overrides_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    value = {"failure": f"boom {HOSTILE}", "mark": "\u200f\u061c"}
    screen = _a_terminal(monkeypatch)
    terminal.print_json(value)
    on_terminal = screen.getvalue()
    for character in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
        screen.seek(0)
        screen.truncate()
        terminal.print_json(character)
        assert screen.getvalue() == f'"\\u{ord(character):04x}"\n'
    assert not any(raw in on_terminal for raw in RAW)
    assert "\u200f\u061c" in on_terminal  # the marks right-to-left text needs stay
    assert json.loads(on_terminal) == value
    written = _piped(monkeypatch)
    terminal.print_json(value)
    assert "\u202e" in written.getvalue() and "\x9b" not in written.getvalue()
    assert json.loads(written.getvalue()) == value


EVERY_CONTROL = "a\rb\x07c\x08d\x0be\x0cf\x1bg\x00h\ti\x9bj\u202ek"
"""Text holding a carriage return, bell, backspace, vertical tab, form feed, escape, NUL,
tab, a C1 control and an override."""


def test_piped_tables_print_stored_text_as_stored(tmp_path: Path) -> None:
    """Off a terminal rich's layout deleted carriage returns, bells, backspaces, vertical
    tabs and form feeds from stored text (a title ``pwned\\x07 title`` printed as ``pwned
    title``, CRLF tool output lost its CRs) and expanded tabs, while it kept ESC and NUL."""
    db = str(tmp_path / "raw.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="pwned\x07 title").id
        store.append(cid, "user", "line one\r\nline two\tcolumn")
    query = "SELECT " + " || ".join(f"char({ord(c)})" for c in EVERY_CONTROL) + " AS v, 2 AS n"
    assert f"\n{EVERY_CONTROL}   2\n" in _piped_run("--db", db, "sql", query)
    assert "   pwned\x07 title   " in _piped_run("--db", db, "conversations")
    assert "text: line one\r line two\tcolumn\n" in _piped_run("--db", db, "show", cid)


def test_a_piped_table_and_line_keep_every_character(monkeypatch: pytest.MonkeyPatch) -> None:
    written = _piped(monkeypatch)
    terminal.table(["v", "n"], [[EVERY_CONTROL, 1], ["two\r\nlines", 22]], title="t\x07")
    terminal.out(f"line {EVERY_CONTROL}")
    assert written.getvalue().split("\n") == [
        "t\x07",
        "v" + " " * (terminal._cells(EVERY_CONTROL) - 1) + "    n",
        "─" * (terminal._cells(EVERY_CONTROL) + 5),
        f"{EVERY_CONTROL}    1",
        "two\r" + " " * (terminal._cells(EVERY_CONTROL) - 3) + "   22",
        "lines",
        f"line {EVERY_CONTROL}",
        "",
    ]
    screen = _a_terminal(monkeypatch)
    terminal.table(["v"], [[EVERY_CONTROL]])
    terminal.out(EVERY_CONTROL)
    assert not any(c in screen.getvalue() for c in "\r\x07\x08\x0b\x0c\x1b\x00\x9b\u202e")


def test_piped_sql_pads_no_line_of_a_tall_row(tmp_path: Path) -> None:
    """A row of 2,000 lines beside a 5,000-character value printed 10,036,030 bytes piped,
    every line padded to the table's width (CSV: 15,007)."""
    db = str(tmp_path / "tall.db")
    ContextStore.open(db).close()
    query = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 2000) "
        "SELECT group_concat('line', char(10)) a, (SELECT printf('%.5000c','x')) b FROM c"
    )
    piped = run("--db", db, "sql", query)
    assert piped.code == 0
    assert len(piped.out) < 40_000
    assert piped.out.split("\n")[2:] == ["line   " + "x" * 5_000, *["line"] * 1_999, ""]
