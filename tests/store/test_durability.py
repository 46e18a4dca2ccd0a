"""Durability: what ``ContextStore.open(durability=...)`` promises, read back from the engine.

SQLite's ``synchronous`` levels: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA. FULL is the default
(a committed write survives power loss); NORMAL is the documented opt-in; nothing may
ever run with OFF, on which a crash can corrupt the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, ContextStoreError, InvalidInputError
from tests.conftest import POSTGRES_URL, open_backend, user
from tests.store.internals import connection_setting, connection_settings

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
