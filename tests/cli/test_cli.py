"""The command line: the demo end to end, and errors as one line with an exit code."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), obj={})
    return result.exit_code, result.stdout, result.stderr


def test_demo_writes_checkpoints_rolls_back_and_shows_the_rows(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    code, out, err = _run("--db", str(db), "demo", "--crash-kills", "0")
    assert code == 0, err
    assert "rows of this conversation per table" in out
    assert re.search(r"messages\s+7\s+2\s+5", out)
    assert "identical to the view at the checkpoint" in out
    with ContextStore.open(db) as store:
        conv = store.list_conversations()[0]
        assert conv.title == "demo 1: fix the CSV header"
        assert len(store.messages(conv.id)) == 5 + 4  # after the rollback, the secrets part
    assert "a writer killed" not in out


def test_demo_kills_at_most_a_demos_worth_of_writers(tmp_path: Path) -> None:
    # --crash-kills had no bound: 100000 ran for hours, a process started and killed each.
    db = tmp_path / "demo.db"
    code, _, err = _run("--db", str(db), "demo", "--crash-kills", "21")
    assert code == 2 and "0<=x<=20" in err and not db.exists()


def test_demo_uses_the_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTSTORE_DB", str(tmp_path / "env.db"))
    code, out, _ = _run("demo", "--crash-kills", "0")
    assert code == 0 and (tmp_path / "env.db").exists() and str(tmp_path / "env.db") in out


def test_render_checkpoints_rollback_and_check_commands(tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")
    _run("--db", db, "demo", "--crash-kills", "0")
    with ContextStore.open(db) as store:
        conv_id = store.list_conversations()[0].id
    code, out, _ = _run("--db", db, "checkpoints", conv_id)
    assert code == 0 and "after-reading" in out
    code, out, _ = _run("--db", db, "render", conv_id, "--format", "openai")
    assert code == 0 and '"tool_calls"' in out
    code, out, _ = _run("--db", db, "check", conv_id)
    assert code == 0 and out.strip().endswith("ok")
    code, out, _ = _run("--db", db, "conversations")
    assert conv_id in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["render", "nope"], 3, "no conversation has id 'nope'"),
        (["rollback", "nope", "--to", "x"], 3, "no conversation has id 'nope'"),
        (["render", "nope", "--as-of", "-5"], 2, "Invalid value for '--as-of'"),
    ],
)
def test_user_mistakes_are_one_line_errors_with_exit_codes(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    db = str(tmp_path / "e.db")
    _run("--db", db, "migrate")
    exit_code, _, err = _run("--db", db, *args)
    assert exit_code == code
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1 or err.startswith("Usage:")


def test_a_stale_database_tells_which_command_upgrades_it(tmp_path: Path) -> None:
    db = tmp_path / "stale.db"
    with contextlib.closing(sqlite3.connect(db)) as connection:  # a database, no schema yet
        connection.execute("PRAGMA user_version = 1")
    code, _, err = _run("--db", str(db), "conversations")
    # The command runs as printed: without --db it migrated the default store instead.
    assert code == 4 and f"run 'contextstore --db {db} migrate' to upgrade it." in err
    assert _run("--db", str(db), "migrate")[0] == 0


def test_demo_runs_are_numbered_and_show_every_part(tmp_path: Path) -> None:
    db = str(tmp_path / "twice.db")
    code, first, err = _run("--db", db, "demo", "--crash-kills", "1")
    assert code == 0, err
    code, second, _ = _run("--db", db, "demo", "--crash-kills", "0")
    assert "demo run 1:" in first and "demo run 2:" in second
    with ContextStore.open(db) as store:
        titles = [c.title for c in store.list_conversations()]
    assert titles == [
        "demo 1: fix the CSV header",
        "demo 1: overflow",
        "demo 2: fix the CSV header",
        "demo 2: overflow",
    ]
    assert f"database: {db}" in first
    assert re.search(r"github_token\s+rewrite\s+1", first)
    for fmt in ("anthropic:", "openai:", "gemini:"):
        assert fmt in first
    assert '"functionCall"' in first and '"tool_calls"' in first and '"tool_use"' in first
    assert re.search(r"1 writers killed with SIGKILL mid-operation; \d+ committed", first)
    assert "(0 lost)" in first and "(0 invariant violations)" in first
    for command in ("show", "audit", "report", "request"):
        assert re.search(rf"contextstore --db \S+ {command} [0-9a-f]{{32}}", first)
    assert f"sqlite3 {db} " in first


_INTERRUPTED_WHILE_LOADING = """
import builtins
import contextstore.cli

real_import = builtins.__import__


def interrupted(name, *args, **kwargs):
    if name == "contextstore.cli.main":
        raise KeyboardInterrupt  # Ctrl-C while the command line's modules load
    return real_import(name, *args, **kwargs)


builtins.__import__ = interrupted
contextstore.cli.main()
"""


def test_ctrl_c_while_the_command_line_loads_ends_as_ctrl_c_does_later() -> None:
    """Loading the command line takes about half a second, in which Ctrl-C printed a
    Python traceback; it now ends the command as click does once it runs."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_WHILE_LOADING],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "Aborted!\n")


def test_the_package_loads_the_command_line_only_when_asked() -> None:
    """``import contextstore.cli`` alone loads none of the commands (the console script
    imports it before it can handle Ctrl-C); ``cli`` is there on first use."""
    import subprocess
    import sys

    probe = (
        "import sys, contextstore.cli as c; loaded = 'contextstore.cli.main' in sys.modules; "
        "c.cli; print(loaded, 'contextstore.cli.main' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "True"]
