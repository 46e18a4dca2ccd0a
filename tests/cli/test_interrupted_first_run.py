"""A first run stopped (SIGTERM, Ctrl-C) while it creates its store: its first migration or
its first import. Python's default for SIGTERM ended the process on the spot, and Ctrl-C
during the migration was outside the cleanup, so a half-made database file stayed behind;
the next read command said it was "at revision none (empty)". Now the store file the run
created is removed again, and the process still ends by its signal.

The signal is sent from inside a child process at a chosen moment (a hook wrapped around
the store's own step), so the tests do not depend on timing.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from contextstore import ContextStore
from tests.cli.conftest import run
from tests.interop.cline_factory import story

CHILD = """
import os, signal, sys
from contextstore.interop import sync
from contextstore.storage import migrate

moment, name, *args = sys.argv[1:]
sent = getattr(signal, name)
# Ctrl-C as a terminal delivers it: a job a shell starts in the background (CI's) inherits
# SIGINT ignored, and Python then leaves it so.
signal.signal(signal.SIGINT, signal.default_int_handler)


def stopped_after(step):
    def wrapper(*a, **k):
        result = step(*a, **k)
        os.kill(os.getpid(), sent)  # handled at once, before the step's caller goes on
        return result
    return wrapper


if moment == "migration":  # inside the migration's transaction, its write lock held
    migrate._lock_for_migration = stopped_after(migrate._lock_for_migration)
else:  # the task's rows written, the import's transaction not committed
    sync.apply_plan = stopped_after(sync.apply_plan)
from contextstore.cli.main import main

sys.argv = ["contextstore", *args]
main()
"""


def _stopped(moment: str, sent: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, moment, sent, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("moment", "sent", "returncode"),
    [
        ("migration", "SIGTERM", -signal.SIGTERM),
        ("import", "SIGTERM", -signal.SIGTERM),
        ("migration", "SIGINT", 1),
        ("import", "SIGINT", 1),
    ],
)
def test_a_first_import_stopped_leaves_no_store_and_the_next_run_works(
    tmp_path: Path, moment: str, sent: str, returncode: int
) -> None:
    task = story(2).write(tmp_path / "tasks" / "1760000000000")
    here = tmp_path / "db"
    here.mkdir()
    db = here / "a.db"
    got = _stopped(moment, sent, "--db", str(db), "import", "cline", str(task))
    assert got.returncode == returncode, got.stderr
    assert "Traceback" not in got.stderr and "internal error" not in got.stderr
    assert sorted(here.iterdir()) == []
    again = run("--db", str(db), "import", "cline", str(task))
    assert again.code == 0, again.err
    with ContextStore.open(db) as store:
        assert [c.id for c in store.list_conversations()] == ["1760000000000"]


def test_a_first_migrate_stopped_leaves_no_store(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    got = _stopped("migration", "SIGTERM", "--db", str(db), "migrate")
    assert got.returncode == -signal.SIGTERM, got.stderr
    assert sorted(tmp_path.iterdir()) == []
    assert run("--db", str(db), "migrate").code == 0


def test_an_empty_database_a_killed_first_run_leaves_says_what_to_do(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the file it leaves (SQLite's, with no table) is named for
    what it is, with the two ways out; the next import creates the schema in it."""
    db = tmp_path / "a.db"
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
    got = run("--db", str(db), "conversations")
    assert got.code != 0
    assert "holds no contextstore schema yet" in got.err, got.err
    assert f"'contextstore --db {db} migrate' to upgrade it." in got.err
    assert "a file to delete" in got.err
    assert "revision none" not in got.err
    task = story(2).write(tmp_path / "tasks" / "1760000000000")
    assert run("--db", str(db), "import", "cline", str(task)).code == 0
    assert os.path.getsize(db) > 0
