"""A store where nothing can be written opens with read_only=True; opened for writing it is
ReadOnlyLocationError with what to do (README "Guarantees")."""

from __future__ import annotations

import contextlib
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
        assert got.code == 6 and "read-only" in got.err
