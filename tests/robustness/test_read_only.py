"""A store where nothing can be written opens with read_only=True; opened for writing it is
ReadOnlyLocationError with what to do (README "Guarantees")."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.core.errors import ReadOnlyError, ReadOnlyLocationError
from tests.cli.conftest import run
from tests.robustness.damage import seed_store


@contextlib.contextmanager
def read_only_directory(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A directory holding a store (WAL mode, closed) that cannot be written: by permissions
    for an ordinary user, a read-only tmpfs for root (whom permissions do not stop)."""
    staging = tmp_path / "staging"
    staging.mkdir()
    with ContextStore.open(staging / "store.db") as store:
        ids = seed_store(store, conversations=2, messages=6)
    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0:
        shutil.copy(staging / "store.db", where / "store.db")
        (where / "store.db").chmod(0o444)
        where.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            yield where, ids
        finally:
            where.chmod(0o700)
        return
    if shutil.which("mount") is None:
        pytest.skip("root ignores permissions, and mount(8) is missing for a read-only tmpfs")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"root ignores permissions, and no tmpfs can be mounted: {mounted.stderr}")
    try:
        shutil.copy(staging / "store.db", where / "store.db")
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where, ids
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_read_only_directory_opens_read_only_and_reads(tmp_path: Path) -> None:
    with read_only_directory(tmp_path) as (where, ids):
        assert not os.access(where, os.W_OK)
        before = sorted(os.listdir(where))
        with ContextStore.open(where / "store.db", read_only=True) as store:
            assert {c.id for c in store.list_conversations()} == set(ids)
            assert store.check().ok
            assert len(store.render(ids[0])) >= 2
            with pytest.raises(ReadOnlyError):
                store.append(ids[0], "user", "no")
        assert sorted(os.listdir(where)) == before


def test_opening_for_writing_there_is_read_only_location_error(tmp_path: Path) -> None:
    with read_only_directory(tmp_path) as (where, _ids):
        before = sorted(os.listdir(where))
        with pytest.raises(ReadOnlyLocationError, match="read_only=True") as caught:
            ContextStore.open(where / "store.db")
        assert caught.value.exit_code == 9 and isinstance(caught.value, ReadOnlyError)
        with pytest.raises(ReadOnlyLocationError, match="cannot be written"):
            ContextStore.open(where / "new.db")
        assert sorted(os.listdir(where)) == before


def test_the_cli_says_to_pass_read_only_and_obeys_it(tmp_path: Path) -> None:
    with read_only_directory(tmp_path) as (where, ids):
        db = str(where / "store.db")
        got = run("--db", db, "conversations")
        assert got.code == 9 and "--read-only" in got.err and "read_only=True" not in got.err
        for args in (
            ("--read-only", "--db", db, "conversations", "--json"),
            ("--db", db, "conversations", "--json", "--read-only"),
        ):
            got = run(*args)
            assert got.code == 0, got.err
            assert {c["id"] for c in got.json()} == set(ids)
        assert run("--db", db, "check").code == 0  # check opens read-only by itself
        got = run("--read-only", "--db", db, "checkpoint", ids[0], "--label", "x")
        assert got.code == 9 and "drop --read-only" not in got.err
        assert "the checkpoint command writes to the database, so it cannot run" in got.err


def _cline_task(tmp_path: Path) -> Path:
    task = tmp_path / "tasks" / "1700000000000"
    task.mkdir(parents=True)
    (task / "api_conversation_history.json").write_text(
        '[{"role": "user", "content": "hi"}]', encoding="utf-8"
    )
    return task


def test_a_command_that_writes_says_it_cannot_run_there_and_reads_can(tmp_path: Path) -> None:
    """--read-only is no way to run a command that writes: the refusal says the command
    writes, so it cannot run there, and which commands read there with --read-only (each of
    them does); exit 9, as the README's exit codes say."""
    task = _cline_task(tmp_path)
    with read_only_directory(tmp_path) as (where, ids):
        db = str(where / "store.db")
        before = sorted(os.listdir(where))
        writers = {
            "checkpoint": ("checkpoint", ids[0], "--label", "x"),
            "rollback": ("rollback", ids[0], "--to", "0", "--yes"),
            "restore": ("restore", ids[0], "1"),
            "fork": ("fork", ids[0]),
            "delete": ("delete", ids[0], "--yes"),
            "migrate": ("migrate",),
            "demo": ("demo", "--crash-kills", "0"),
            "import cline": ("import", "cline", str(task)),
        }
        for (name, args), flags in itertools.product(writers.items(), ([], ["--read-only"])):
            got = run(*flags, "--db", db, *args)  # --read-only leads to no other answer
            assert got.code == 9 and got.err.count("\n") == 1, (name, flags, got.err)
            assert got.err == (
                f"error: {db} is in a location that cannot be written (a read-only file, "
                f"directory or medium); the {name} command writes to the database, so it "
                "cannot run on a read-only location; to run it, point --db at a database that "
                "can be written (a copy of this one in a writable directory, for example). "
                "Commands that only read (conversations, show, audit, search, export) work "
                "there with --read-only.\n"
            )
        readers = [
            ("conversations",),
            ("show", ids[0]),
            ("audit", ids[0]),
            ("search", "a"),
            ("export", "gemini", ids[0], str(tmp_path / "out.jsonl")),
            ("rollback", ids[0], "--to", "0", "--dry-run"),
        ]
        for args in readers:
            told = run("--db", db, *args)
            assert told.code == 9 and "open it with --read-only to read it" in told.err
            got = run("--read-only", "--db", db, *args)
            assert got.code == 0, (args, got.err)
        new = str(where / "new.db")
        got = run("--db", new, "import", "cline", str(task))
        assert got.code == 9 and got.err == (
            f"error: {new} is in a location that cannot be written (a read-only file, "
            "directory or medium); the import cline command writes to the database, so it "
            "cannot run on a read-only location; to run it, point --db at a database that can "
            "be written.\n"
        )  # no store there: nothing to read either
        assert sorted(os.listdir(where)) == before


def test_the_situation_is_the_message_without_its_advice(tmp_path: Path) -> None:
    """What an adapter that knows its caller writes builds its own advice on."""
    import sqlite3

    from contextstore.storage.driver_errors import classify_database_error

    path = tmp_path / "ro.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError) as driver:
            connection.execute("INSERT INTO t VALUES (1)")
    finally:
        connection.close()
    classified = classify_database_error(driver.value)
    assert isinstance(classified, ReadOnlyLocationError)
    with (
        read_only_directory(tmp_path) as (where, _ids),
        pytest.raises(ReadOnlyLocationError) as opening,
    ):
        ContextStore.open(where / "store.db")
    for error in (classified, opening.value):
        assert str(error).startswith(error.situation + "; ")
        assert "read_only" not in error.situation and "--read-only" not in error.situation
    assert ReadOnlyLocationError("plain").situation == "plain"


def test_mcp_allow_writes_there_says_to_drop_the_flag(tmp_path: Path) -> None:
    """``mcp --allow-writes`` on a read-only location names the flag that asks for writes
    (not --read-only, which the MCP server does not take); without it the server reads."""
    with read_only_directory(tmp_path) as (where, _ids):
        db = str(where / "store.db")
        before = sorted(os.listdir(where))
        got = run("--db", db, "mcp", "--allow-writes")
        assert got.code == 9 and got.err.count("\n") == 1, got.err
        assert got.err.startswith(f"error: {db} is in a location that cannot be written")
        assert "drop --allow-writes to serve the reading tools there" in got.err
        assert "--read-only" not in got.err and "read_only=True" not in got.err
        assert run("--db", db, "mcp", input="").code == 0  # stdin at its end: served, stopped
        assert sorted(os.listdir(where)) == before
