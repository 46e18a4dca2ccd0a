"""Durability: what ``ContextStore.open(durability=...)`` promises, read back from the engine.

SQLite's ``synchronous`` levels: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA. FULL is the default
(a committed write survives power loss); NORMAL is the documented opt-in; nothing may
ever run with OFF, on which a crash can corrupt the file. With the default, a file store's
own connections commit at NORMAL and the store syncs the write-ahead log itself once the
writer's turn is over, before the write returns (contextstore/storage/wal_sync.py): the
tests below watch that sync happen, on the log's file, after the commit, outside the locks.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, ContextStoreError, InvalidInputError
from contextstore.core import store_files
from contextstore.core.errors import ConversationNotFoundError
from contextstore.storage import database, wal_sync
from tests.conftest import POSTGRES_URL, open_backend, user
from tests.store.internals import (
    connection_setting,
    connection_settings,
    held_connection_setting,
)

FULL, NORMAL, OFF = "2", "1", "0"


def _write_something(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("a"), user("b")])
    store.checkpoint(conv.id, "cp")


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_the_default_durability_is_full(backend: str, tmp_path: Path) -> None:
    store, cleanup = open_backend(backend, tmp_path)
    try:
        assert connection_setting(store, "synchronous") == FULL
        _write_something(store)
        assert connection_setting(store, "synchronous") == FULL
    finally:
        cleanup()


@pytest.mark.parametrize(("durability", "level"), [("full", FULL), ("normal", NORMAL)])
@pytest.mark.parametrize("backend", ["memory", "file"])
def test_each_durability_reads_back_as_its_synchronous_level(
    backend: str, durability: Any, level: str, tmp_path: Path
) -> None:
    store, cleanup = open_backend(backend, tmp_path, durability=durability)
    try:
        _write_something(store)
        assert connection_setting(store, "synchronous") == level != OFF
    finally:
        cleanup()


def test_every_connection_of_a_file_store_gets_the_level(tmp_path: Path) -> None:
    """The pool opens connections as threads need them: each one runs the settings."""
    with ContextStore.open(tmp_path / "a.db", durability="normal") as store:
        _write_something(store)
        assert connection_settings(store, "synchronous", 3) == [NORMAL] * 3


def test_a_file_store_runs_in_wal_mode_with_foreign_keys_and_a_busy_timeout(
    tmp_path: Path,
) -> None:
    with ContextStore.open(tmp_path / "a.db") as store:
        assert connection_setting(store, "journal_mode") == "wal"
        assert connection_setting(store, "foreign_keys") == "1"
        assert connection_setting(store, "busy_timeout") == "5000"


def test_a_read_only_store_keeps_the_default_level(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with ContextStore.open(path) as store:
        _write_something(store)
    with ContextStore.open(path, read_only=True) as reader:
        assert connection_setting(reader, "synchronous") == FULL
        assert connection_setting(reader, "query_only") == "1"


@pytest.mark.parametrize("bad", ["off", "OFF", "extra", "Full", "", None, 2, True])
def test_an_unknown_durability_is_refused_before_anything_is_opened(
    bad: Any, tmp_path: Path
) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(InvalidInputError, match="durability"):
        ContextStore.open(path, durability=bad)
    assert not path.exists()


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        ("max_message_bytes", "1000"),
        ("max_message_bytes", 0),
        ("max_message_bytes", 1.5),
        ("token_counter", 5),
        ("token_counter", "cl100k_base"),
        ("pipeline", []),
        ("pipeline", "default"),
        ("mask_secrets_on_write", "yes"),
        ("read_only", "no"),
        ("auto_migrate", 1),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_before_anything_is_opened(
    option: str, bad: Any, tmp_path: Path
) -> None:
    # Each was taken, and the first append or render failed with TypeError or AttributeError
    # (or, for the flags, "yes" and "no" both counted as True).
    path = tmp_path / "never.db"
    with pytest.raises(InvalidInputError, match=option):
        ContextStore.open(path, **{option: bad})
    assert not path.exists()


@pytest.mark.skipif(not POSTGRES_URL, reason="set CONTEXTSTORE_TEST_POSTGRES_URL")
def test_postgresql_commits_synchronously(tmp_path: Path) -> None:
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        _write_something(store)
        assert connection_setting(store, "synchronous_commit") == "on"
    finally:
        cleanup()


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_the_read_only_query_cannot_lower_the_level(backend: str, tmp_path: Path) -> None:
    store, cleanup = open_backend(backend, tmp_path)
    try:
        _write_something(store)
        for statement in ("PRAGMA synchronous = OFF", "PRAGMA synchronous = 0"):
            with pytest.raises(ContextStoreError):
                store.query(statement)
        held = 2 if backend == "file" else 1  # the in-memory store has one shared connection
        assert connection_settings(store, "synchronous", held) == [FULL] * held
    finally:
        cleanup()


class Sync:
    """What a durable write found when it synced: the file the descriptor names, whether the
    writer queue's lock was free, and how many messages another connection read then."""

    def __init__(self, path: Path, conversation: list[str]) -> None:
        self.path = path
        self.conversation = conversation
        self.calls: list[tuple[int, bool, int]] = []

    def __call__(self, fd: int) -> None:
        queue = os.open(f"{self.path}{store_files.WRITER_SUFFIX}", os.O_RDWR)
        try:
            fcntl.flock(queue, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
            fcntl.flock(queue, fcntl.LOCK_UN)
        except BlockingIOError:
            free = False
        finally:
            os.close(queue)
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as other:
            seen = other.execute(
                "SELECT count(*) FROM messages WHERE conversation_id = ?", self.conversation
            ).fetchone()[0]
        self.calls.append((os.fstat(fd).st_ino, free, seen))
        REAL_FDATASYNC(fd)


REAL_FDATASYNC = os.fdatasync


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[tuple[ContextStore, str]]:
    with ContextStore.open(tmp_path / "agent.db") as store:
        yield store, store.create_conversation().id


def watch(monkeypatch: pytest.MonkeyPatch, store: ContextStore, conversation: str) -> Sync:
    watcher = Sync(Path(store.location), [conversation])
    monkeypatch.setattr(wal_sync.os, "fdatasync", watcher)
    return watcher


def test_a_durable_write_syncs_the_log_after_its_commit_and_outside_the_locks(
    durable: tuple[ContextStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, conversation = durable
    watcher = watch(monkeypatch, store, conversation)
    store.append(conversation, "user", "one")
    store.append(conversation, [user("two"), user("three")])
    log = os.stat(f"{store.location}{store_files.WAL_SUFFIX}").st_ino
    # One sync per write, on the write-ahead log, with the queue free and the rows committed
    # (another connection reads them): the sync is the last thing before the call returns.
    assert watcher.calls == [(log, True, 1), (log, True, 3)]


def test_the_store_connection_commits_at_normal_while_the_pool_keeps_full(
    durable: tuple[ContextStore, str],
) -> None:
    store, conversation = durable
    store.append(conversation, "user", "one")
    assert held_connection_setting(store, "synchronous") == NORMAL
    assert connection_settings(store, "synchronous", 2) == [FULL] * 2


def test_a_transaction_syncs_once_when_it_commits(
    durable: tuple[ContextStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, conversation = durable
    watcher = watch(monkeypatch, store, conversation)
    with store.transaction():
        store.append(conversation, "user", "one")
        store.append(conversation, "assistant", "two")
        assert watcher.calls == []
    assert [(free, seen) for _, free, seen in watcher.calls] == [(True, 2)]


def test_a_refused_write_syncs_nothing(
    durable: tuple[ContextStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, conversation = durable
    watcher = watch(monkeypatch, store, conversation)
    with pytest.raises(ConversationNotFoundError):
        store.append("no-such-conversation", "user", "one")
    assert watcher.calls == []


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_without_full_durability_or_a_file_nothing_is_synced_by_the_store(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(wal_sync.os, "fdatasync", calls.append)
    durability = "normal" if backend == "file" else "full"
    store, cleanup = open_backend(backend, tmp_path, durability=durability)
    try:
        _write_something(store)
        assert calls == []
    finally:
        cleanup()


def test_without_fdatasync_sqlite_syncs_inside_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS and Windows have no ``os.fdatasync``: every write of a durable file store
    failed there with ``AttributeError``. There the store's connection stays at FULL."""
    monkeypatch.delattr(os, "fdatasync")
    with ContextStore.open(tmp_path / "agent.db") as store:
        conversation = store.create_conversation().id
        store.append(conversation, [user("a"), user("b")])
        assert held_connection_setting(store, "synchronous") == FULL
        assert store.message_count(conversation) == 2


def test_a_failed_sync_says_the_write_is_committed_but_not_known_on_disk(
    durable: tuple[ContextStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, conversation = durable

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(wal_sync.os, "fdatasync", failing)
    with pytest.raises(ContextStoreError) as err:
        store.append(conversation, "user", "one")
    assert str(err.value) == (
        f"the write was committed, but syncing {store.location}-wal to the disk failed "
        "(Input/output error); it is stored, and may be lost if the machine stops before the "
        "disk keeps it. Check the disk, and free space if it is full."
    )
    monkeypatch.undo()
    assert store.messages(conversation) == [{"role": "user", "content": "one"}]


def test_a_thread_connection_at_normal_is_discarded_with_its_thread(
    durable: tuple[ContextStore, str],
) -> None:
    store, conversation = durable
    writer = threading.Thread(target=store.append, args=(conversation, "user", "one"))
    writer.start()
    writer.join()
    gc.collect()
    # The pool never gets the thread's connection back: every connection it hands out is FULL.
    assert connection_settings(store, "synchronous", 3) == [FULL] * 3
    assert store.message_count(conversation) == 1


@pytest.mark.parametrize(("journal", "deferred"), [("wal", True), ("delete", False)])
def test_only_a_write_ahead_log_is_synced_after_the_turn(
    tmp_path: Path, journal: str, deferred: bool
) -> None:
    """A file whose journal is not a WAL (a rollback journal) keeps FULL: SQLite syncs it
    inside the commit, where the journal's order on disk matters."""
    path = tmp_path / "plain.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(f"PRAGMA journal_mode = {journal}")
        connection.execute("PRAGMA synchronous = FULL")
        found = wal_sync.defer_wal_sync(connection, path)
        level = str(connection.execute("PRAGMA synchronous").fetchone()[0])
        if deferred:
            assert found is not None and found.wal == tmp_path / "plain.db-wal"
            assert level == NORMAL
        else:
            assert found is None and level == FULL
    finally:
        connection.close()


def log_descriptors(path: Path) -> list[int]:
    """This process's descriptors open on the write-ahead log of ``path`` (or on a log of
    that name that was deleted since: SQLite deletes it when the last connection closes)."""
    wal = os.path.realpath(f"{path}{store_files.WAL_SUFFIX}")
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") in (wal, f"{wal} (deleted)"):
                found.append(int(name))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists descriptors in /proc")
def test_the_store_holds_the_log_open_only_while_it_is_open_and_not_across_exec(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.db"
    store = ContextStore.open(path)
    try:
        before = set(log_descriptors(path))  # SQLite's own, and none of the store's yet
        store.append(store.create_conversation().id, "user", "one")
        [mine] = set(log_descriptors(path)) - before
        assert fcntl.fcntl(mine, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        store.close()
    assert log_descriptors(path) == []


def test_closing_after_the_descriptor_went_away_raises_nothing(tmp_path: Path) -> None:
    (tmp_path / "x.db-wal").write_bytes(b"")
    syncer = wal_sync.WalSync(tmp_path / "x.db-wal")
    syncer.sync()
    assert syncer._fd is not None
    os.close(syncer._fd)
    syncer.close()
    syncer.close()


def test_a_held_connection_finalised_after_its_modules_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At interpreter shutdown a store left open may be collected after Python has set
    its modules' globals to None; its finaliser must not raise (Python prints what a
    ``__del__`` raises as "Exception ignored in ...")."""
    store = ContextStore.open(tmp_path / "agent.db")
    store.append(store.create_conversation().id, "user", "one")
    held = store.database._thread.held
    assert held is not None
    try:
        for name in ("contextlib", "os"):
            monkeypatch.setattr(database, name, None)
        held.__del__()
    finally:
        monkeypatch.undo()
        store.close()
