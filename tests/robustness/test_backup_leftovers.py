"""A backup killed before it ends leaves its temporary copy beside DEST (a hidden file as
large as the store), which no later backup removed: each interrupted run added one. The
next backup to the same DEST removes the files of its own naming that no running backup
holds, and says so; it never touches another file."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.storage import backup as backup_files
from contextstore.storage.backup import leftover_pattern
from tests.cli.conftest import run

# A backup whose process is killed (SIGKILL) once the copy is made, before it is put in
# place: the moment a kill leaves the largest leftover.
KILLED_BACKUP = """
import os, signal, sys
from contextstore import ContextStore
from contextstore.storage import backup

copy = backup._copy

def copy_then_die(engine, temporary):
    copy(engine, temporary)
    os.kill(os.getpid(), signal.SIGKILL)

backup._copy = copy_then_die
with ContextStore.open(sys.argv[1], read_only=True) as store:
    store.backup(sys.argv[2])
"""


def _store(path: Path) -> Path:
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "task " * 2_000)
    return path


def _killed_backup(store: Path, dest: Path) -> list[Path]:
    """Run a backup of ``store`` to ``dest`` in a child killed mid-way; what it left."""
    folder = dest if dest.is_dir() else dest.parent
    before = set(folder.iterdir())
    child = subprocess.run(
        [sys.executable, "-c", KILLED_BACKUP, str(store), str(dest)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    return sorted(set(folder.iterdir()) - before)


def test_the_next_backup_to_the_same_file_removes_what_a_killed_one_left(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path / "agent.db")
    dest = tmp_path / "out" / "agent-copy.db"
    dest.parent.mkdir()
    (left,) = _killed_backup(store, dest)
    assert left.name.startswith(".agent-copy.db.") and left.name.endswith(".partial")
    assert not dest.exists() and left.stat().st_size > 10_000

    got = run("--db", str(store), "backup", str(dest))

    assert got.code == 0
    assert f"removed 1 temporary file(s) that interrupted backups left: {left}" in got.err
    assert sorted(dest.parent.iterdir()) == [dest]
    with ContextStore.open(dest, read_only=True) as copy:
        assert len(copy.list_conversations()) == 1


def test_a_backup_to_a_directory_removes_what_a_killed_one_there_left(tmp_path: Path) -> None:
    store = _store(tmp_path / "agent.db")
    folder = tmp_path / "backups"
    folder.mkdir()
    (left,) = _killed_backup(store, folder)
    assert left.name.startswith(".agent-") and left.name.endswith(".partial")

    with ContextStore.open(store, read_only=True) as opened:
        result = opened.backup(folder)

    assert result.removed_leftovers == [str(left)]
    assert sorted(folder.iterdir()) == [Path(result.path)]


def test_only_unheld_files_of_its_exact_naming_are_removed(tmp_path: Path) -> None:
    """A running backup's file (its flock held), a symbolic link of the naming, side files
    of a copy still there and every file named otherwise stay."""
    store = _store(tmp_path / "agent.db")
    folder = tmp_path / "out"
    folder.mkdir()
    dest = folder / "copy.db"
    stale = folder / ".copy.db.0123abcd.partial"
    stale_journal = folder / ".copy.db.0123abcd.partial-journal"
    orphan_journal = folder / ".copy.db.99999999.partial-journal"  # its copy was removed
    running = folder / ".copy.db.89abcdef.partial"
    running_wal = folder / ".copy.db.89abcdef.partial-wal"
    users = [
        folder / ".copy.db.partial",
        folder / ".copy.db.0123ABCD.partial",  # upper case: not a name a backup makes
        folder / ".copy.db.0123abcd.partial.bak",
        folder / "copy.db.0123abcd.partial",
        folder / ".other.db.0123abcd.partial",
        folder / ".copy.db.0123abcd.partial-journal2",
        folder / "notes.txt",
    ]
    for path in (stale, stale_journal, orphan_journal, running, running_wal, *users):
        path.write_bytes(b"x")
    target = tmp_path / "keep-me.txt"
    target.write_text("the user's", encoding="utf-8")
    link = folder / ".copy.db.fedcba98.partial"
    link.symlink_to(target)
    holder = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with ContextStore.open(store, read_only=True) as opened:
            result = opened.backup(dest)
    finally:
        os.close(holder)

    assert result.removed_leftovers == [str(stale), str(orphan_journal)]
    assert not stale.exists() and not stale_journal.exists() and not orphan_journal.exists()
    assert running.exists() and running_wal.exists() and link.is_symlink()
    assert all(path.exists() for path in users)
    assert target.read_text(encoding="utf-8") == "the user's"
    assert dest.exists()


def test_a_refused_backup_removes_nothing(tmp_path: Path) -> None:
    """Bad input changes nothing: DEST exists (no --force), so no leftover is removed."""
    store = _store(tmp_path / "agent.db")
    dest = tmp_path / "copy.db"
    dest.write_bytes(b"the user's")
    stale = tmp_path / ".copy.db.0123abcd.partial"
    stale.write_bytes(b"x")
    got = run("--db", str(store), "backup", str(dest))
    assert got.code == 2 and stale.exists() and dest.read_bytes() == b"the user's"


@pytest.mark.parametrize(
    ("directory", "name", "matches"),
    [
        (False, ".copy.db.0123abcd.partial", True),
        (False, ".copy.db.0123abcd.partial-shm", True),
        (False, ".copyXdb.0123abcd.partial", False),
        (True, ".agent-20261205-101010.db.0123abcd.partial", True),
        (True, ".agent-20261205-101010-3.db.0123abcd.partial-journal", True),
        (True, ".agent-2026125-101010.db.0123abcd.partial", False),
        (True, ".other-20261205-101010.db.0123abcd.partial", False),
    ],
)
def test_the_naming_pattern(tmp_path: Path, directory: bool, name: str, matches: bool) -> None:
    dest = tmp_path if directory else tmp_path / "copy.db"
    pattern = leftover_pattern(dest, tmp_path / "agent.db")
    assert bool(pattern.fullmatch(name)) is matches


def test_a_running_backups_file_is_not_taken_for_a_leftover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second backup to the same DEST, starting while the first copies, leaves the
    first's temporary file alone: the first holds its flock while it runs."""
    store = _store(tmp_path / "agent.db")
    dest = tmp_path / "copy.db"
    copy = backup_files._copy
    seen: list[list[str]] = []

    def copy_while_another_starts(engine: Any, temporary: Path) -> tuple[int, int]:
        seen.append(
            [str(p) for p in backup_files.remove_leftovers(tmp_path, leftover_pattern(dest, None))]
        )
        assert temporary.exists()
        return copy(engine, temporary)

    monkeypatch.setattr(backup_files, "_copy", copy_while_another_starts)
    with ContextStore.open(store, read_only=True) as opened:
        result = opened.backup(dest)
    assert seen == [[]] and result.removed_leftovers == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
