"""What every command shares: --db anywhere, --json on reads, moments, errors in CLI terms,
one module writing to the terminal."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import select
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from io import StringIO
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore import ContextStore
from contextstore.cli import cli, wording
from contextstore.cli.times import format_ts, parse_moment
from contextstore.storage.engine import shown_url
from tests.cli.conftest import Seeded, run
from tests.conftest import POSTGRES_URL, new_postgres_schema

ROOT = Path(__file__).resolve().parents[2]
CLI_DIR = ROOT / "contextstore" / "cli"

READ_COMMANDS = {
    "conversations": [],
    "show": ["{cid}"],
    "checkpoints": ["{cid}"],
    "requests": ["{cid}"],
    "request": ["{cid}", "{request}"],
    "audit": ["{cid}"],
    "search": ["CSV"],
    "sql": ["SELECT 1 AS one"],
    "check": ["{cid}"],
}
"""Every read command, with arguments that make it succeed on the seeded database."""


def _commands(group: click.Group = cli, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        found[prefix + name] = command
        if isinstance(command, click.Group):
            found.update(_commands(command, prefix + name + " "))
    return found


def _args(seeded: Seeded, template: list[str]) -> list[str]:
    return [a.format(cid=seeded.cid, request=seeded.prepared_id) for a in template]


# -- --db and CONTEXTSTORE_DB ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(_commands()) - {"bench"}))
def test_every_command_that_opens_the_store_accepts_db_after_its_name(name: str) -> None:
    options = {opt for p in _commands()[name].params for opt in getattr(p, "opts", [])}
    assert "--db" in options


@pytest.mark.parametrize("name", ["bench", "crash-test"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_read_only_is_refused_where_a_command_makes_its_own_databases(
    tmp_path: Path, name: str, where: str
) -> None:
    args = [name, "--read-only"] if where == "after" else ["--read-only", name]
    small = ["--kills", "1"] if name == "crash-test" else ["--sizes", "4", "--no-peers"]
    got = run(*args, *small)
    assert got.code == 2
    assert "--read-only" in got.err and "Traceback" not in got.err
    assert "killing" not in got.err and got.out == ""


@pytest.mark.parametrize("name", ["bench", "crash-test"])
def test_the_stores_db_is_refused_where_a_command_makes_its_own_databases(
    tmp_path: Path, name: str
) -> None:
    """``contextstore --db x.db crash-test`` ran on a temporary file and said nothing of
    x.db; the variable that names the store for every command stays allowed."""
    small = ["--kills", "1"] if name == "crash-test" else ["--sizes", "4", "--no-peers"]
    store = tmp_path / "x.db"
    got = run("--db", str(store), name, *small)
    assert got.code == 2 and got.out == ""
    assert f"--db before the command does not apply to {name}: it writes new databases" in (got.err)
    assert not store.exists()
    if name == "crash-test":
        assert "(crash-test --db NEW_FILE names a file of its own)" in got.err
        assert run(name, *small, env={"CONTEXTSTORE_DB": str(store)}).code == 0
        assert not store.exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("postgresql+psycopg://postgres@127.0.0.1:1/none", "is a URL; crash-test kills writers"),
        ("sqlite:///x.db", "is a URL; crash-test kills writers"),
    ],
)
def test_crash_test_takes_a_file_not_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    """A URL was taken as a path: folders named after it were made in the current one."""
    monkeypatch.chdir(tmp_path)
    got = run("crash-test", "--kills", "1", "--db", value)
    assert got.code == 2 and said in got.err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_a_number_option_takes_only_finite_numbers(value: str) -> None:
    """``nan`` passed every bound of a number range (and ``inf`` an open one)."""
    got = run("crash-test", "--kills", "1", "--max-delay", value)
    assert got.code == 2
    assert f"Invalid value for '--max-delay': {value!r} is not a finite number." in got.err or (
        "is not in the range" in got.err
    )


@pytest.mark.parametrize("name", sorted(READ_COMMANDS))
def test_db_works_before_or_after_the_command_and_from_the_environment(
    seeded: Seeded, tmp_path: Path, name: str
) -> None:
    args = [name, *_args(seeded, READ_COMMANDS[name])]
    before = run("--db", seeded.db, *args)
    after = run(*args, "--db", seeded.db)
    from_env = run(*args, env={"CONTEXTSTORE_DB": seeded.db})
    assert before.code == after.code == from_env.code == 0, before.err + after.err
    if name not in ("show", "audit", "conversations", "requests", "checkpoints"):
        assert before.out == after.out == from_env.out


def test_db_after_the_name_wins_over_before_and_over_the_environment(
    seeded: Seeded, tmp_path: Path
) -> None:
    other = str(tmp_path / "other.db")
    ContextStore.open(other).close()
    got = run(
        "--db", other, "conversations", "--json", "--db", seeded.db, env={"CONTEXTSTORE_DB": other}
    )
    assert [c["id"] for c in got.json()] == [seeded.cid]
    got = run("--db", seeded.db, "conversations", "--json", env={"CONTEXTSTORE_DB": other})
    assert [c["id"] for c in got.json()] == [seeded.cid]


# -- --json --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(READ_COMMANDS))
def test_every_read_command_prints_json(seeded: Seeded, name: str) -> None:
    options = {opt for p in cli.commands[name].params for opt in getattr(p, "opts", [])}
    assert "--json" in options
    got = run("--db", seeded.db, name, *_args(seeded, READ_COMMANDS[name]), "--json")
    assert got.code == 0, got.err
    json.loads(got.out)


# -- moments -----------------------------------------------------------------------------

REALISTIC_TS = st.integers(min_value=0, max_value=221_845_392_000_000)  # up to year 9000


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"])
@given(ts=REALISTIC_TS)
def test_a_printed_time_parses_back_to_the_same_millisecond(zone: str, ts: int) -> None:
    os.environ["TZ"] = zone
    time.tzset()
    try:
        assert parse_moment(format_ts(ts)).ts == ts
    finally:
        os.environ.pop("TZ", None)
        time.tzset()


@pytest.mark.parametrize(
    ("zone", "skipped", "doubled"),
    [
        ("America/New_York", "2026-03-08T02:30", "2026-11-01T01:30"),
        ("Australia/Lord_Howe", "2026-10-04T02:15", "2026-04-05T01:45"),  # a half-hour shift
    ],
)
def test_a_local_time_the_clocks_skipped_is_refused(
    monkeypatch: pytest.MonkeyPatch, zone: str, skipped: str, doubled: str
) -> None:
    """It was read as the hour before (or after), silently: --as-of then showed the
    conversation an hour off. A time that happened twice is read as its first."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        with pytest.raises(ValueError, match="never happened in this machine's time zone"):
            parse_moment(skipped)
        first = parse_moment(doubled).ts
        assert first is not None and format_ts(first).startswith(doubled)
        hour = datetime.fromisoformat(skipped).replace(minute=0)
        assert parse_moment((hour - timedelta(hours=1)).isoformat()).ts is not None
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize(
    ("text", "ts"),
    [
        ("2026-12-01T10:00:00Z", 1796119200000),
        ("2026-12-01T10Z", 1796119200000),
        ("2026-12-01T15:30+0530", 1796119200000),
        ("2026-12-01T05:00:00.25-0500", 1796119200250),
        ("2026-12-01T10:00:00.1239999+00:00", 1796119200123),
    ],
)
def test_every_python_reads_the_same_iso_forms(text: str, ts: int) -> None:
    """Python 3.10's ``fromisoformat`` refused ``Z``, an offset without its colon and a
    fraction of other than 3 or 6 digits, which 3.11 and later read."""
    assert parse_moment(text).ts == ts


def test_a_date_windows_cannot_place_locally_is_refused_as_before_1970(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows' localtime() takes no time before 1970: there ``datetime.astimezone()`` of
    such a naive date raises OSError (errno 22), which ended ``--as-of 1960-01-01`` as an
    internal error. It is the same refusal as on Linux."""
    from contextstore.cli import times

    def windows_to_ms(moment: datetime) -> int:
        if moment.tzinfo is None and moment.year < 1970:
            raise OSError(22, "Invalid argument")
        return real_to_ms(moment)

    real_to_ms = times.to_ms
    monkeypatch.setattr(times, "to_ms", windows_to_ms)
    with pytest.raises(ValueError, match="is before 1970 or too far in the future"):
        parse_moment("1960-01-01")
    assert parse_moment("2026-12-01T10:00:00Z").ts == 1796119200000


def test_moments_are_ms_iso_dates_or_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert parse_moment("1796118104075").ts == 1796118104075
        midnight_in_paris = datetime(2026, 11, 30, 23, tzinfo=timezone.utc)
        assert parse_moment("2026-12-01").ts == int(midnight_in_paris.timestamp()) * 1000
        assert parse_moment("2026-12-01T10:00:00Z").ts == 1796119200000
        assert parse_moment("2026-12-01 11:00:00.5+01:00").ts == 1796119200500
        assert parse_moment("before-refactor").label == "before-refactor"
        assert parse_moment("v2.0").label == "v2.0"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("bad", ["", "-1", "9007199254740993", "2026-02-30", "1969-12-31"])
def test_bad_moments_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_moment(bad)


def test_timestamps_beyond_a_calendar_still_print() -> None:
    assert format_ts(2**53) == f"{2**53} ms"
    assert parse_moment(format_ts(2**53)).ts == 2**53


# -- errors --------------------------------------------------------------------------------


def test_a_library_error_is_one_line_with_its_exit_code(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "show", "nope")
    assert got.code == 3 and got.out == ""
    assert got.err == (
        "error: no conversation has id 'nope'; list them with 'contextstore --db "
        f"{seeded.db} conversations'.\n"
    )


def test_a_usage_error_speaks_in_flags(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "rollback", seeded.cid)
    assert got.code == 2 and "Missing option '--to'" in got.err
    got = run("--db", seeded.db, "show", seeded.cid, "--format", "xml")
    assert got.code == 2 and "Invalid value for '--format'" in got.err


NOT_UTF8 = os.fsdecode(b"\xff")
"""A byte in another encoding, as Python reads it from the command line (a lone surrogate)."""

TEXT_PARAMS = [
    ("checkpoint", ["{cid}", "--label", NOT_UTF8], "--label"),
    ("checkpoint", ["{cid}", "--note", NOT_UTF8], "--note"),
    ("checkpoint", ["{cid}", "--git-hash", NOT_UTF8], "--git-hash"),
    ("set-model", ["{cid}", "--model-id", NOT_UTF8], "--model-id"),
    ("fork", ["{cid}", "--title", NOT_UTF8], "--title"),
    ("rollback", ["{cid}", "--to", NOT_UTF8], "--to"),
    ("show", ["{cid}", "--as-of", NOT_UTF8], "--as-of"),
    ("fork", ["{cid}", "--at", NOT_UTF8], "--at"),
    ("search", [NOT_UTF8], "TEXT"),
    ("delete", [NOT_UTF8], "CID"),
]


def _rows(db: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return list(connection.iterdump())


@pytest.mark.parametrize(("command", "args", "flag"), TEXT_PARAMS)
def test_text_that_is_not_utf8_is_refused_naming_the_flag(
    seeded: Seeded, command: str, args: list[str], flag: str
) -> None:
    """The store's refusal named its own parameter ("git_hash is not valid Unicode text" for
    --git-hash, "label is not valid Unicode text" for --to)."""
    before = _rows(seeded.db)
    got = run("--db", seeded.db, command, *_args(seeded, args))
    assert got.code == 2, got.err
    assert f"Invalid value for '{flag}': '\\xff' is not UTF-8 text" in got.err, got.err
    assert _rows(seeded.db) == before


def test_every_text_parameter_but_db_refuses_text_that_is_not_utf8() -> None:
    """A text parameter added later gets the check too (paths keep click.Path: a file may be
    named in another encoding)."""
    from contextstore.cli.common import Utf8Text
    from contextstore.cli.times import MomentType

    for name, command in _commands().items():
        for param in command.params:
            if isinstance(param.type, click.types.StringParamType) and param.name != "db":
                assert isinstance(param.type, Utf8Text), f"{name} {param.name}"
            assert not isinstance(param.type, click.types.FuncParamType), f"{name} {param.name}"
    assert any(isinstance(p.type, MomentType) for p in _commands()["rollback"].params)


def test_a_moment_too_long_for_a_label_is_refused_naming_the_flag(seeded: Seeded) -> None:
    """The store's refusal named its parameter: "label must be a non-empty string of at most
    200 characters"."""
    got = run("--db", seeded.db, "rollback", seeded.cid, "--to", "x" * 201)
    assert got.code == 2
    assert (
        "Invalid value for '--to': a checkpoint label has at most 200 characters (201 given), "
        "and this reads as no date or milliseconds"
    ) in got.err


NUMBER_PARAMS = [
    (name, param.name)
    for name, command in _commands().items()
    for param in command.params
    if isinstance(param.type, (click.IntRange, click.FloatRange))
]


@pytest.mark.parametrize(("command", "param"), NUMBER_PARAMS)
def test_a_number_parameter_is_called_a_number_in_its_help_and_errors(
    command: str, param: str
) -> None:
    """click's ``IntRange`` refused ``abc`` as "not a valid integer range" and showed
    ``INTEGER RANGE`` in the help, as if a range were to be typed (``FloatRange`` alike)."""
    found = next(p for p in _commands()[command].params if p.name == param)
    assert found.type.name in ("integer", "float")


def test_a_word_where_a_number_goes_is_said_to_be_no_integer(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "search", "header", "--limit", "abc")
    assert got.code == 2
    assert "Invalid value for '--limit': 'abc' is not a valid integer." in got.err
    assert "range" not in got.err.splitlines()[-1]


def test_an_internal_error_prints_one_line_and_writes_the_traceback(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: ContextStore, conversation_id: str) -> None:
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(ContextStore, "audit", broken)
    got = run("--db", seeded.db, "audit", seeded.cid)
    assert got.code == 70 and got.err.count("\n") == 1
    match = re.search(r"the full traceback is in (\S+); please report it", got.err)
    assert match and "RuntimeError: something unexpected" in got.err
    trace = Path(match.group(1))
    try:
        text = trace.read_text(encoding="utf-8")
        assert "Traceback" in text and "def broken" not in got.err and "broken" in text
        assert trace.stat().st_mode & 0o077 == 0
    finally:
        trace.unlink()


def _python_terms(text: str) -> list[str]:
    return re.findall(r"\w+\(\)|\w+=(?:True|False)|\bpass [a-z]+_[a-z_]+\b|\bpass overwrite", text)


def test_every_wording_rule_still_matches_a_library_message() -> None:
    sources = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (ROOT / "contextstore").rglob("*.py")
        if "cli" not in p.relative_to(ROOT).parts
    )
    flattened = re.sub(r'"\s*\n\s*f?"', "", sources)
    for pattern, _ in wording.RULES:
        assert re.search(pattern, flattened), f"no library message matches {pattern!r}"


@pytest.mark.parametrize(
    "mistake",
    [
        "conversation",
        "stale",
        "request",
        "unprepared",
        "export",
        "read-only",
        "read-only migrate",
        "restore over newer rows",
    ],
)
def test_library_messages_reach_the_user_in_cli_terms(
    seeded: Seeded, tmp_path: Path, mistake: str
) -> None:
    if mistake == "conversation":
        got = run("--db", seeded.db, "checkpoints", "nope")
    elif mistake == "stale":
        with contextlib.closing(sqlite3.connect(tmp_path / "stale.db")) as connection:
            connection.execute("PRAGMA user_version = 1")  # a database without the schema
        got = run("--db", str(tmp_path / "stale.db"), "conversations")
        assert f"'contextstore --db {tmp_path / 'stale.db'} migrate'" in got.err
    elif mistake == "request":
        got = run("--db", seeded.db, "request", seeded.cid, "999", "--payload")
    elif mistake == "unprepared":
        got = run("--db", seeded.db, "request", seeded.cid, str(seeded.recorded_id), "--payload")
    elif mistake == "read-only":
        got = run("--db", seeded.db, "--read-only", "checkpoint", seeded.cid, "--label", "a")
        assert got.code == 6 and "drop --read-only to write" in got.err
    elif mistake == "read-only migrate":
        got = run("--db", seeded.db, "--read-only", "migrate")
        assert got.code == 6 and "drop --read-only" in got.err
    elif mistake == "restore over newer rows":
        rolled = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "--yes")
        assert rolled.code == 0
        assert run("--db", seeded.db, "checkpoint", seeded.cid).code == 0
        got = run("--db", seeded.db, "restore", seeded.cid, "1")
        to = ["--to", str(seeded.checkpoint_ts), "--yes"]
        command = shlex.join(["contextstore", "--db", seeded.db, "rollback", seeded.cid, *to])
        assert f"('{command}'), then run this restore again." in got.err
    else:
        out = tmp_path / "task"
        out.mkdir()
        (out / "api_conversation_history.json").write_text("[]")
        got = run("--db", seeded.db, "export-cline", seeded.cid, str(out))
        assert "--force" in got.err
    assert got.code != 0 and got.err.startswith("error: ") and got.err.count("\n") == 1
    assert _python_terms(got.err) == [], got.err


def test_the_restore_hint_is_a_command_that_runs_for_the_conversation_named(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "hint.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(id="task 7; rm -rf x").id
        store.append(cid, "user", "first")
        mark = store.checkpoint(cid, "mark")
        store.append(cid, "assistant", "second")
        store.rollback(cid, to=mark.ts)
        store.append(cid, "user", "written after the rollback")
    got = run("--db", db, "restore", cid, "1")
    assert got.code == 2
    hint = re.search(r"\('(contextstore .*)'\), then run this restore again\.", got.err)
    assert hint is not None, got.err
    argv = shlex.split(hint[1])
    assert argv[:5] == ["contextstore", "--db", db, "rollback", cid]
    assert run(*argv[1:]).code == 0
    assert run("--db", db, "restore", cid, "1").code == 0
    with ContextStore.open(db) as store:
        assert [m["content"] for m in store.messages(cid)] == ["first", "second"]


# -- the terminal --------------------------------------------------------------------------

WRITERS = {"echo", "secho", "print", "write", "Console"}


def test_only_the_terminal_module_writes_to_the_terminal() -> None:
    for path in CLI_DIR.rglob("*.py"):
        if path.name in ("terminal.py", "serve.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr"):
                assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), path
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                owner = (
                    func.value.id
                    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    else ""
                )
                assert not (name in ("echo", "secho") and owner == "click"), f"{path} {name}"
                assert name not in ("print", "Console"), f"{path} calls {name}"


def _read_until(fd: int, needle: bytes, silence: float = 60.0) -> bytes:
    """Read until ``needle`` shows; fail when the child says nothing for ``silence`` s."""
    seen = b""
    while needle not in seen:
        ready, _, _ = select.select([fd], [], [], silence)
        assert ready, f"nothing more while waiting for {needle!r}; saw {seen!r}"
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return seen


@pytest.mark.parametrize("width", [60, 80])
def test_a_table_on_a_narrow_terminal_never_cuts_an_id_a_time_or_a_number(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """rich squeezed every column to fit: on an 80-column terminal ``requests`` dropped the
    id column and showed tokens as ``…``, ``checkpoints`` cut ts to ``176…``."""
    from io import StringIO

    from contextstore.cli import terminal

    screen = StringIO()
    monkeypatch.setattr(
        terminal,
        "stdout",
        lambda: terminal._Console(file=screen, force_terminal=True, width=width, color_system=None),
    )
    row = (170, "2026-01-05T20:28:32.731+00:00", "x-ai/grok-code-fast-1", 11495, 16, 0, 512)
    long_text = "a long note " * 20
    headers = ("id", "time", "model", "in", "out", "cache w", "cache r", "note")
    terminal.table(headers, [(*row, long_text)], wrap=("note",))
    shown = screen.getvalue()
    assert "…" not in shown
    cells = shown.splitlines()[2].split()
    assert cells[: len(row)] == [str(value) for value in row]
    assert set(headers) <= set(re.split(r"\s{2,}", shown.splitlines()[0].strip()))

    fits = StringIO()
    monkeypatch.setattr(
        terminal,
        "stdout",
        lambda: terminal._Console(file=fits, force_terminal=True, width=width, color_system=None),
    )
    terminal.table(("id", "note"), [(1, long_text)], wrap=("note",))
    assert max(len(line) for line in fits.getvalue().splitlines()) <= width


def _a_terminal(monkeypatch: pytest.MonkeyPatch, width: int = 200) -> StringIO:
    """Standard output as a colourless terminal of ``width`` columns; returns what it shows."""
    from contextstore.cli import terminal

    screen = StringIO()
    monkeypatch.setattr(
        terminal,
        "stdout",
        lambda: terminal._Console(file=screen, force_terminal=True, width=width, color_system=None),
    )
    return screen


def test_stored_control_characters_cannot_drive_the_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tool's output stored with escape sequences (colours, a screen clear, a window
    title) reached the auditor's terminal raw through ``show``, ``audit`` and the tables;
    on a terminal they are shown as symbols now, off one still verbatim."""
    from contextstore.cli import terminal

    db = str(tmp_path / "esc.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="t\x1b]0;owned\x07").id
        store.append(cid, "user", "before \x1b[2J\x1b[31mred\x9b after\rover")
    screen = _a_terminal(monkeypatch)
    assert run("--db", db, "show", cid).code == 0
    assert run("--db", db, "audit", cid).code == 0
    on_terminal = screen.getvalue()
    assert "\x1b" not in on_terminal and "\x9b" not in on_terminal and "\x07" not in on_terminal
    assert "before ␛[2J␛[31mred\\x9b after␍over" in on_terminal
    assert "t␛]0;owned␇" in on_terminal
    monkeypatch.undo()
    piped = run("--db", db, "show", cid)
    assert "before \x1b[2J\x1b[31mred\x9b after" in piped.out
    assert terminal.visible("tab\tand\nline") == "tab\tand\nline"
    assert terminal.visible("\u202a\u202e\u2066\u2069") == "\\u202a\\u202e\\u2066\\u2069"
    assert terminal.visible("\u0645\u200f\u200e\u061c") == "\u0645\u200f\u200e\u061c"
    as_json = run("--db", db, "show", cid, "--json")
    assert "\x9b" not in as_json.out and "\\u009b" in as_json.out  # json wrote C1 raw
    assert as_json.json()["messages"][0]["content"].startswith("before \x1b[2J\x1b[31mred\x9b")


def test_rollback_asks_a_real_terminal_and_obeys_the_answer(seeded: Seeded) -> None:
    """The prompt through a pseudo-terminal, as a person at a shell sees it."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120"}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "contextstore",
            "--db",
            seeded.db,
            "rollback",
            seeded.cid,
            "--to",
            seeded.label,
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
    )
    os.close(slave)
    try:
        prompt = _read_until(master, b"[y/n]")
        assert b"Remove 9 rows" in prompt
        os.write(master, b"y\n")
        rest = _read_until(master, b"undo with: contextstore restore")
        assert b"rows removed" in prompt + rest
        assert child.wait(timeout=60) == 0
    finally:
        os.close(master)
        if child.poll() is None:
            child.kill()
    with seeded.store() as store:
        assert len(store.messages(seeded.cid)) == 5


def test_a_database_that_cannot_be_opened_is_one_line() -> None:
    db = "postgresql+psycopg://postgres@127.0.0.1:1/x"
    got = run("--db", db, "conversations")
    assert got.code == 1 and got.err.startswith(f"error: cannot open {db}: ")
    assert "check --db" in got.err and got.err.count("\n") == 1 and "traceback" not in got.err


@pytest.mark.parametrize("command", ["conversations", "migrate"])
def test_a_directory_is_not_a_database(tmp_path: Path, command: str) -> None:
    got = run("--db", str(tmp_path), command)
    assert got.code == 2
    assert got.err == (
        f"error: {tmp_path} is a directory; name a database file, for example "
        f"{tmp_path / 'contextstore.db'}.\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["conversations", "migrate", "demo", "sql"])
def test_a_name_too_long_for_the_file_system_is_a_clear_error(tmp_path: Path, command: str) -> None:
    """A user mistake, not an internal error: exit 2, the path and the system's reason."""
    args = [command, "SELECT 1"] if command == "sql" else [command]
    for path in (tmp_path / ("a" * 300), tmp_path / ("b" * 300) / "store.db"):
        got = run("--db", str(path), *args)
        assert got.code == 2, got.err
        assert got.err == (
            f"error: cannot use {path} as a database file: File name too long; name another path.\n"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_password_in_the_url_is_masked_when_it_cannot_be_opened() -> None:
    got = run("--db", "postgresql://someone:hunter2@127.0.0.1:1/x", "conversations")
    assert got.code == 1 and "hunter2" not in got.err
    assert got.err.startswith("error: cannot open postgresql://someone:***@127.0.0.1:1/x: ")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://someone@localhost:abc/db", "'postgresql://someone@localhost:abc/db'"),
        ("postgresql://someone:hunter2@[::1", "'postgresql://someone:***@[::1'"),
        ("postgres://someone:hunter2@host:port/db", "'postgres://someone:***@host:port/db'"),
    ],
)
def test_a_url_that_does_not_parse_is_a_bad_value_with_its_password_masked(
    url: str, shown: str
) -> None:
    got = run("--db", url, "conversations")
    assert got.code == 2, got.err
    assert got.err.startswith(f"error: {shown} is not a valid database URL: ")
    assert "hunter2" not in got.err and got.err.count("\n") == 1


@pytest.mark.parametrize(
    "query",
    [
        "password=hunter2",
        "sslmode=prefer&sslpassword=hunter2",
        "PassWord=hunter2",
        "pass%77ord=hunter2",
    ],
)
def test_a_password_given_as_a_query_parameter_is_masked(query: str) -> None:
    """libpq reads ``?password=`` and ``?sslpassword=``: both were printed in clear."""
    got = run("--db", f"postgresql://someone@127.0.0.1:1/x?{query}", "conversations")
    assert got.code == 1 and "hunter2" not in got.err and "=***" in got.err, got.err
    unparsed = run("--db", f"postgresql://someone@127.0.0.1:port/x?{query}", "conversations")
    assert unparsed.code == 2 and "hunter2" not in unparsed.err and "=***" in unparsed.err


def test_a_suggested_command_masks_a_password_given_as_a_query_parameter() -> None:
    with new_postgres_schema() as schema:
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}&password=hunter2"
        assert run("--db", url, "migrate").code == 0
        got = run("--db", url, "show", "nope")
    assert got.code == 3 and "hunter2" not in got.err
    assert "&password=***' conversations'" in got.err, got.err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://u:pw@h/db?password=a&sslpassword=b",
            "postgresql://u:***@h/db?password=***&sslpassword=***",
        ),
        (
            "postgresql://u@h/db?sslmode=require&SSLPASSWORD=b&x=1",
            "postgresql://u@h/db?SSLPASSWORD=***&sslmode=require&x=1",
        ),
        ("postgresql://u@h:port/db?password=a#x", "postgresql://u@h:port/db?password=***#x"),
        ("postgresql://u@h/db?passwords=a", "postgresql://u@h/db?passwords=a"),
    ],
)
def test_shown_url_masks_every_password_a_url_may_hold(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def _run_without_root_file_access(args: list[str]) -> tuple[int, str]:
    """The CLI in a process of its own, as root without the capabilities that let root
    read and search any file: a file's permission bits then hold for it too."""
    dropped = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    got = subprocess.run(
        [*dropped, sys.executable, "-m", "contextstore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return got.returncode, got.stderr


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_database_this_user_may_not_read_is_exit_1_saying_why(
    tmp_path: Path, read_only: bool
) -> None:
    """Not damage (exit 5) and not a read-only location (exit 9, whose advice, --read-only,
    would lead nowhere): the user lacks read permission."""
    flags = ["--read-only"] if read_only else []
    db = tmp_path / "secret.db"
    with ContextStore.open(db) as store:
        store.create_conversation(title="private")
    files = sorted(tmp_path.iterdir())
    db.chmod(0)
    try:
        if os.geteuid() == 0:
            if not shutil.which("setpriv"):
                pytest.skip("root reads any file, and setpriv is missing to drop that power")
            code, err = _run_without_root_file_access(["--db", str(db), *flags, "conversations"])
        else:
            got = run("--db", str(db), *flags, "conversations")
            code, err = got.code, got.err
    finally:
        db.chmod(0o600)
    assert code == 1, err
    assert err == (
        f"error: cannot read {db}: permission denied (the file belongs to another user or "
        "its mode lets nobody read it); run as a user who may read it, or give this user "
        "read permission (chmod, chown).\n"
    )
    assert sorted(tmp_path.iterdir()) == files  # nothing made beside it


READ_COMMANDS_ON_AN_ABSENT_FILE = [
    ["conversations"],
    ["show", "c1"],
    ["checkpoints", "c1"],
    ["rollback", "c1", "--to", "5", "--yes"],
    ["checkpoint", "c1", "--label", "x"],
    ["sql", "SELECT 1"],
    ["check"],
    ["audit", "c1"],
    ["export", "cline", "c1", "out"],
]


@pytest.mark.parametrize("command", READ_COMMANDS_ON_AN_ABSENT_FILE, ids=lambda c: c[0])
def test_a_command_on_a_database_that_is_not_there_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "not-yet" / "store.db"
    got = run("--db", str(db), *command)
    assert got.code == 3, got.err
    assert got.err == (
        f"error: there is no database at {db} (--db or $CONTEXTSTORE_DB); check the path, or "
        f"create one by writing to it ('contextstore --db {db} import ...', 'contextstore --db "
        f"{db} demo').\n"
    )
    assert not db.parent.exists()


@pytest.mark.parametrize(
    "command", [["demo", "--crash-kills", "0"], ["serve", "--stdio"]], ids=lambda c: c[0]
)
def test_read_only_on_a_database_that_is_not_there_is_not_found_like_without_it(
    tmp_path: Path, command: list[str]
) -> None:
    """Exit 3, as every command that needs the file says (a command that creates its store
    said exit 2, "a read-only store needs an existing database", with --read-only)."""
    db = tmp_path / "not-yet" / "store.db"
    got = run("--db", str(db), "--read-only", *command, input="")
    assert got.code == 3, got.err
    assert got.err == (
        f"error: there is no database at {db}; check the path (a store opened read-only is "
        "never created).\n"
    )
    assert not db.parent.exists()


def test_a_sqlite_uri_to_a_file_that_is_not_there_is_refused_like_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "store.db"
    got = run("--db", f"sqlite:///file:{db}?mode=rwc&uri=true", "conversations")
    assert got.code == 3, got.err
    assert got.err.startswith(f"error: there is no database at {db} (--db or $CONTEXTSTORE_DB)")
    assert list(tmp_path.iterdir()) == []


def test_the_default_location_is_named_when_no_database_is_there(tmp_path: Path) -> None:
    got = run("conversations", env={"CONTEXTSTORE_DB": "", "XDG_DATA_HOME": str(tmp_path)})
    assert got.code == 3
    expected = tmp_path / "contextstore" / "contextstore.db"
    assert f"no database at {expected} (the default location)" in got.err
    assert not (tmp_path / "contextstore").exists()


def test_a_command_that_writes_creates_the_database(tmp_path: Path) -> None:
    db = tmp_path / "new" / "store.db"
    assert run("--db", str(db), "migrate").code == 0
    got = run("--db", str(db), "conversations", "--json")
    assert got.code == 0 and got.json() == []


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://someone@host/db", "is a 'mysql' one; contextstore keeps its rows in SQLite"),
        ("http://example.com/x", "is a 'http' one"),
        ("postgresql+asyncpg://someone@host/db", "'postgresql+asyncpg' is a PostgreSQL driver"),
        ("postgresql+psycopg2://someone@host/db", "through psycopg 3"),
    ],
)
def test_a_url_of_another_database_or_driver_is_refused_as_input(url: str, said: str) -> None:
    got = run("--db", url, "conversations")
    assert got.code == 2 and said in got.err and got.err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["search", "x", "--limit", "99999999999999999999"], "'--limit'"),
        (["restore", "{cid}", "99999999999999999999"], "'ROLLBACK_ID'"),
        (["request", "{cid}", "99999999999999999999"], "'ID'"),
    ],
)
def test_a_number_past_the_stores_range_is_refused_in_the_flags_name(
    seeded: Seeded, args: list[str], named: str
) -> None:
    got = run("--db", seeded.db, *[a.format(cid=seeded.cid) for a in args])
    assert got.code == 2 and f"Invalid value for {named}" in got.err
    assert "2147483647" in got.err


@pytest.mark.parametrize("output", ["--json", "--csv"])
def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path, output: str) -> None:
    """``contextstore sql ... | head``: no internal error, no traceback file, SIGPIPE's code."""
    db = tmp_path / "big.db"
    with ContextStore.open(db) as store:
        conv = store.create_conversation()
        store.append_many(
            conv.id, [{"role": "user", "content": f"{i} " + "x" * 2_000} for i in range(200)]
        )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = ["sql", "SELECT * FROM blocks", output]
    child = subprocess.Popen(
        [sys.executable, "-m", "contextstore", "--db", str(db), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.read(10)
    child.stdout.close()  # as head does once it has its lines
    err = child.stderr.read()
    assert child.wait(timeout=120) == 128 + 13
    assert err == b""
    assert not list(tmp_path.glob("contextstore-error-*"))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("command", [["audit", "{cid}"], ["audit", "{cid}", "--json"]])
def test_output_to_a_full_disk_is_exit_8_not_an_internal_error(
    seeded: Seeded, tmp_path: Path, command: list[str]
) -> None:
    """``contextstore audit CID > out.json`` on a full disk ended with an internal error
    (exit 70, a traceback file) instead of the storage-full exit code and what to do."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    with open("/dev/full", "w") as full:
        child = subprocess.run(
            [sys.executable, "-m", "contextstore", "--db", seeded.db]
            + [a.format(cid=seeded.cid) for a in command],
            stdout=full,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            check=False,
        )
    assert child.returncode == 8, child.stderr
    assert child.stderr.decode() == (
        "error: could not write the output: No space left on device; free space and retry.\n"
    )
    assert not list(tmp_path.glob("contextstore-error-*"))


def _run_encoded(tmp_path: Path, encoding: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI in a process of its own whose standard streams use ``encoding``
    (``PYTHONIOENCODING``, which is strict); it must succeed and leave no error report."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONIOENCODING": encoding}
    child = subprocess.run(
        [sys.executable, "-m", "contextstore", *args],
        capture_output=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert not list(tmp_path.glob("contextstore-error-*"))
    return child


def _json(as_json: bool) -> list[str]:
    return ["--json"] if as_json else []


@pytest.mark.parametrize("as_json", [False, True])
def test_an_output_encoding_without_room_for_a_title_escapes_it(
    tmp_path: Path, as_json: bool
) -> None:
    """Under a legacy locale (here ``PYTHONIOENCODING=ascii``) a stored title in Chinese
    ended ``conversations`` with an internal error; JSON stays the same JSON."""
    db = str(tmp_path / "cjk.db")
    with ContextStore.open(db) as store:
        store.create_conversation(title="我要做一个mcp server")
    child = _run_encoded(tmp_path, "ascii", "--db", db, "conversations", *_json(as_json))
    if as_json:
        assert json.loads(child.stdout)[0]["title"] == "我要做一个mcp server"
    else:
        assert "\\u6211\\u8981" in child.stdout.decode("ascii")


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_path_whose_name_is_not_utf8_prints_on_a_strict_utf8_stream(
    tmp_path: Path, as_json: bool
) -> None:
    """``export cline`` into a folder whose name is not UTF-8 wrote its files, then ended in
    an internal error printing their paths where stdout refuses lone surrogates (an
    ``en_US.UTF-8`` desktop; here ``PYTHONIOENCODING=utf-8``)."""
    db = str(tmp_path / "s.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hello")
    folder = os.fsdecode(os.fsencode(tmp_path) + b"/out\xe9")
    try:
        os.mkdir(folder)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    command = ["--db", db, "export", "cline", cid, os.path.join(folder, "task")]
    child = _run_encoded(tmp_path, "utf-8", *command, *_json(as_json))
    written = os.path.join(folder, "task", "api_conversation_history.json")
    if as_json:  # the name's own bytes come back from the escapes, as Python reads them
        assert written in json.loads(child.stdout.decode("utf-8"))["files"]
    else:
        assert "out\\udce9" in child.stdout.decode("utf-8")


@pytest.mark.parametrize(("closed", "code"), [(">&-", 0), ("2>&-", 3)])
def test_a_closed_standard_stream_is_no_internal_error(
    seeded: Seeded, tmp_path: Path, closed: str, code: int
) -> None:
    """``contextstore conversations >&-`` was an internal error (sys.stdout is None), and
    ``contextstore show nope 2>&-`` exited 1 instead of the not-found code 3."""
    args = "conversations" if code == 0 else "show nope"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    line = f"{shlex.quote(sys.executable)} -m contextstore --db {shlex.quote(seeded.db)} {args}"
    child = subprocess.run(
        ["sh", "-c", f"{line} {closed}"], capture_output=True, env=env, cwd=ROOT, check=False
    )
    assert child.returncode == code, child.stderr
    assert not list(tmp_path.glob("contextstore-error-*"))


@pytest.mark.parametrize(
    ("args", "code"),
    [(["show", "nope"], 3), (["show"], 2), (["--no-such-flag"], 2), (["export", "nope"], 2)],
)
def test_an_error_whose_reader_went_away_keeps_its_exit_code(
    seeded: Seeded, tmp_path: Path, args: list[str], code: int
) -> None:
    """``contextstore show nosuch 2>&1 | true`` exited 1: the broken pipe met while printing
    the error escaped, and click ended the command with 1. Like a stderr closed with
    ``2>&-``, a stderr nobody reads keeps the error's own exit code."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    reader, writer = os.pipe()
    os.close(reader)  # the reader went away before the first line
    try:
        child = subprocess.run(
            [sys.executable, "-m", "contextstore", "--db", seeded.db, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=writer,
            env=env,
            cwd=ROOT,
            check=False,
        )
    finally:
        os.close(writer)
    assert child.returncode == code
    assert not list(tmp_path.glob("contextstore-error-*"))


def test_errors_and_notes_to_a_stderr_nobody_reads_go_nowhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextstore.cli import terminal

    class Gone(StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    monkeypatch.setattr(terminal, "stderr", lambda: terminal._console(Gone()))
    terminal.error("not found")
    terminal.note("a note")


@pytest.mark.parametrize("command", ["audit", "requests", "checkpoints", "show", "--help"])
def test_a_table_cut_short_by_its_reader_ends_with_sigpipes_code(
    seeded: Seeded, tmp_path: Path, command: str
) -> None:
    """``contextstore audit CID | head``: the tables rich draws ended with status 1 (rich's
    own handling of a closed pipe), not the 141 the README documents; so did the root's
    ``--help`` (click's handling)."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-m", "contextstore", "--db", seeded.db, command]
        + ([seeded.cid] if command != "--help" else []),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader went away before the first line
    err = child.stderr.read()
    assert child.wait(timeout=120) == 128 + 13
    assert err == b""
    assert not list(tmp_path.glob("contextstore-error-*"))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["timeline"], "No such command 'timeline'.\n"),  # click offered 'import-cline'
        (["imprt"], "No such command 'imprt'. Did you mean 'import'?\n"),
        (["export", "clin"], "No such command 'clin'. Did you mean 'cline'?\n"),
        (["exprot-cline"], "No such command 'exprot-cline'.\n"),  # not 'export-cline'
    ],
)
def test_a_mistyped_command_is_matched_against_the_listed_ones_only(
    args: list[str], said: str
) -> None:
    got = run(*args)
    assert got.code == 2 and got.err.endswith(f"Error: {said}")
    hidden = [name for name, command in cli.commands.items() if command.hidden]
    assert "import-cline" in hidden and not any(name in got.err for name in hidden)


def test_a_hidden_alias_still_runs() -> None:
    got = run("import-cline", "--help")
    assert got.code == 0 and "import-cline [OPTIONS] PATHS..." in got.out


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--db", ":memory:"], {}, ":memory: (--db or $CONTEXTSTORE_DB) is a new, empty store"),
        ([], {"CONTEXTSTORE_DB": "sqlite://"}, "sqlite:// (--db or $CONTEXTSTORE_DB) is a new"),
    ],
)
def test_a_command_that_reads_refuses_an_in_memory_store_instead_of_asking_to_migrate(
    args: list[str], env: dict[str, str], said: str
) -> None:
    got = run(*args, "conversations", env=env)
    assert got.code == 2 and got.err.startswith(f"error: {said}")
    assert "migrate" not in got.err


def test_a_command_that_writes_still_runs_in_memory() -> None:
    assert run("--db", ":memory:", "migrate").code == 0


@pytest.mark.parametrize(
    ("location", "said"),
    [
        ("sqlite://host/x.db", "names a host (host), but a SQLite database is a file"),
        ("sqlite:///x.db?foo=bar", "has 'foo' in its query, which SQLite's driver does not take"),
        ("sqlite:///x.db?b=1&a=2", "has 'a', 'b' in its query"),
    ],
)
def test_a_sqlite_url_part_the_driver_would_ignore_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str, said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    got = run("--db", location, "migrate")
    assert got.code == 2 and said in got.err and got.err.count("\n") == 1
    assert "Warning" not in got.err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "location", ["sqlite:///x.db?timeout=5", "sqlite:///file:x.db?mode=rwc&cache=private&uri=true"]
)
def test_the_sqlite_url_parameters_the_driver_takes_still_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("--db", location, "migrate").code == 0
    assert (tmp_path / "x.db").is_file()


def test_a_stored_bidi_override_cannot_reverse_the_rest_of_a_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A checkpoint label holding a right-to-left override (U+202E), shown raw, reversed
    everything after it on its line in a terminal that reorders text (the auditor read
    the next columns backwards); on a terminal it is shown as ``\\u202e`` now, off one it
    is kept verbatim, and the marks right-to-left text needs are left alone."""

    db = str(tmp_path / "bidi.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="\u0645\u0631\u062d\u0628\u0627\u200f").id
        store.append(cid, "user", "hi")
        store.checkpoint(cid, "ok \u202egnp.exe")
        store.append(cid, "user", "isolated \u2067text")
    screen = _a_terminal(monkeypatch)
    assert run("--db", db, "checkpoints", cid).code == 0
    assert run("--db", db, "show", cid).code == 0
    assert run("--db", db, "conversations").code == 0
    shown = screen.getvalue()
    assert "\u202e" not in shown and "\u2067" not in shown
    assert "ok \\u202egnp.exe" in shown and "isolated \\u2067text" in shown
    assert "\u0645\u0631\u062d\u0628\u0627\u200f" in shown
    monkeypatch.undo()
    assert "ok \u202egnp.exe" in run("--db", db, "checkpoints", cid).out
