"""A full disk is StorageFullError; the store stays consistent and readable, and writes
resume when space returns (README "Guarantees")."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from contextstore import ContextStore
from contextstore.core.errors import StorageFullError
from contextstore.storage.driver_errors import classify_database_error, translated_errors

BIG = "tool output line\n" * 2_000


def _fill(store: ContextStore, cid: str, *, limit: int = 10_000) -> int:
    """Append until the disk is full; returns how many appends succeeded."""
    for written in range(limit):
        try:
            store.append(cid, "user" if written % 2 == 0 else "assistant", BIG)
        except StorageFullError as exc:
            assert "Free space and retry" in str(exc)
            return written
    raise AssertionError("the disk never filled")


def _assert_consistent(store: ContextStore, cid: str, appended: int) -> None:
    assert store.check().ok
    assert store.message_count(cid) == appended + 1
    assert len(store.render(cid)) == appended + 1


def test_a_size_limited_file_fills_stays_consistent_and_resumes(tmp_path: Path) -> None:
    """SQLite's ``max_page_count`` makes a file that cannot grow: a full disk, no root needed."""
    limit: dict[str, int | None] = {"pages": None}
    with ContextStore.open(tmp_path / "store.db") as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "first")

        def cap(dbapi_connection: Any, _record: Any) -> None:
            if limit["pages"] is not None:
                dbapi_connection.execute(f"PRAGMA max_page_count = {limit['pages']}")

        event.listen(store.database.engine, "connect", cap)
        with contextlib.closing(sqlite3.connect(tmp_path / "store.db")) as raw:
            pages = int(raw.execute("PRAGMA page_count").fetchone()[0])
        limit["pages"] = pages + 60
        store.database.close()  # new connections, with the cap
        appended = _fill(store, cid)
        assert appended > 0
        _assert_consistent(store, cid, appended)
        with pytest.raises(StorageFullError):  # still full: refused again, nothing written
            store.append(cid, "user", BIG * 10)
        _assert_consistent(store, cid, appended)
        limit["pages"] = None
        store.database.close()
        store.append(cid, "user", BIG)  # space is back
        _assert_consistent(store, cid, appended + 1)


@contextlib.contextmanager
def _small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"this machine does not allow a tmpfs mount: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_tmpfs_is_storage_full_and_writes_resume_when_space_is_freed(
    tmp_path: Path,
) -> None:
    with _small_tmpfs(tmp_path / "disk", "3m") as disk:
        with ContextStore.open(disk / "store.db") as store:
            cid = store.create_conversation().id
            store.append(cid, "user", "first")
            ballast = disk / "ballast"
            ballast.write_bytes(b"\0" * 512 * 1024)
            appended = _fill(store, cid)
            _assert_consistent(store, cid, appended)
            ballast.unlink()
            store.append(cid, "user", BIG)
            _assert_consistent(store, cid, appended + 1)
        with ContextStore.open(disk / "store.db", read_only=True) as again:
            assert again.check().ok and again.message_count(cid) == appended + 2


def test_a_full_disk_during_a_backup_leaves_nothing_at_the_destination(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "store.db") as store:
        cid = store.create_conversation().id
        for _ in range(40):
            store.append(cid, "user", BIG)
        with _small_tmpfs(tmp_path / "disk", "256k") as disk:
            with pytest.raises(StorageFullError, match="nothing was written"):
                store.backup(disk / "copy.db")
            assert list(disk.iterdir()) == []


def test_postgresql_disk_full_is_storage_full_error() -> None:
    """SQLSTATE 53100 (disk_full) maps to StorageFullError, in a write and on its own."""
    psycopg = pytest.importorskip("psycopg")
    failure = psycopg.errors.DiskFull("could not extend file: No space left on device")
    assert isinstance(classify_database_error(failure), StorageFullError)
    with pytest.raises(StorageFullError, match="rolled back"), translated_errors():
        raise failure  # as a write's statement would
    assert classify_database_error(psycopg.errors.DataCorrupted("bad page")).exit_code == 5
    read_only = classify_database_error(psycopg.errors.ReadOnlySqlTransaction("standby"))
    assert read_only is not None and read_only.exit_code == 9
    assert classify_database_error(psycopg.errors.UndefinedTable("x")) is None


def test_a_new_store_on_a_full_tmpfs_leaves_nothing_and_a_retry_works(tmp_path: Path) -> None:
    """On a full tmpfs the new file's first page was refused unseen (the pragma's row was
    never read), so a file of no bytes was linked into place, and every later command
    refused it as a lost database (exit 5), the retry after freeing space included."""
    with _small_tmpfs(tmp_path / "disk", "1m") as disk:
        ballast = disk / "ballast"
        with contextlib.suppress(OSError), ballast.open("wb") as filling:
            while True:
                filling.write(b"\0" * 4096)
                filling.flush()
        os.truncate(ballast, ballast.stat().st_size - 8192)  # room for one page, no more
        refused = _contextstore("--db", str(disk / "new.db"), "conversations", "--json")
        assert refused.returncode == 3  # reading never creates; writing commands do:
        refused = _contextstore("--db", str(disk / "new.db"), "migrate")
        assert refused.returncode == 8, refused.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["ballast"]
        ballast.unlink()
        assert _contextstore("--db", str(disk / "new.db"), "migrate").returncode == 0
        assert _contextstore("--db", str(disk / "new.db"), "conversations").returncode == 0


resource = pytest.importorskip("resource")  # POSIX only

TIMEOUT_SECONDS = 120


def _limited(size: int) -> Callable[[], None]:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails, not the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def _contextstore(
    *args: str, file_size_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextstore", *args],
        preexec_fn=None if file_size_limit is None else _limited(file_size_limit),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def test_a_new_store_whose_first_page_does_not_fit_leaves_nothing(tmp_path: Path) -> None:
    """The first page of a new database did not fit: a file of no bytes was linked into
    place (on a full tmpfs), which every later command refused as a lost database, or the
    failure was an internal error (exit 70). Now nothing is created and a retry works."""
    folder = tmp_path / "stores"
    folder.mkdir()
    db = folder / "new.db"
    refused = _contextstore("--db", str(db), "demo", file_size_limit=4096)
    assert refused.returncode == 8, refused.stderr
    assert refused.stderr == (
        f"error: cannot create a database at {db}: SQLite could not write its first page "
        "(disk I/O error); nothing was created. Free space (or lift the file size limit, "
        "ulimit -f) and retry.\n"
    )
    assert list(folder.iterdir()) == []
    retried = _contextstore("--db", str(db), "demo", "--crash-kills", "0")
    assert retried.returncode == 0, retried.stderr


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="Python 3.10's sqlite3 errors carry no result code: SQLITE_IOERR_SHMSIZE reads "
    "as any disk I/O error there",
)
def test_a_store_whose_shared_memory_index_cannot_grow_is_full_not_an_io_error(
    tmp_path: Path,
) -> None:
    """SQLite grows the -shm file beside a WAL database to 32 KiB when it opens it; on a
    full disk that failed as "disk I/O error" (exit 1, "check --db"), reads included."""
    db = tmp_path / "store.db"
    with ContextStore.open(db) as store:
        store.append(store.create_conversation().id, "user", "kept")
    for leftover in (Path(f"{db}-shm"), Path(f"{db}-wal")):
        leftover.unlink(missing_ok=True)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    refused = _contextstore("--db", str(db), "conversations", file_size_limit=16 * 1024)
    assert refused.returncode == 8, refused.stderr
    assert refused.stderr.startswith(
        "error: the disk or quota is full: SQLite could not grow the shared-memory index it "
        "keeps beside the database (the -shm file; disk I/O error)"
    )
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    assert _contextstore("--db", str(copy), "conversations").returncode == 0
    assert os.path.getsize(db) == os.path.getsize(copy)
