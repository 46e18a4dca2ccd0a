"""Ids of requests, checkpoints, ranges, updates and rollbacks are never reused (issue 12):
not after a rollback, not after a deleted conversation, on every backend; archived rows
name the id they had, and a restore gives it back."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import func, select

from contextstore import ContextStore
from contextstore.storage import migrate
from contextstore.storage.engine import make_engine, resolve_target
from contextstore.storage.tables import ARCHIVES, ID_TABLES
from tests.conftest import open_backend, session

WRITTEN = ("api_requests", "checkpoints", "deleted_ranges", "context_updates")


def _live_ids(store: ContextStore) -> dict[str, set[int]]:
    with store.database.read() as connection:
        return {
            table.name: {row[0] for row in connection.execute(select(table.c.id))}
            for table in ID_TABLES
        }


def _archived_ids(store: ContextStore) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    with store.database.read() as connection:
        for name, table in ARCHIVES.items():
            if "id" not in table.c:
                continue
            ids = {row[0] for row in connection.execute(select(table.c.id))}
            if ids:
                found[name] = ids
    return found


def _every_id(store: ContextStore) -> dict[str, set[int]]:
    found = _live_ids(store)
    for name, ids in _archived_ids(store).items():
        found[name] |= ids
    return found


def _write_one_of_each(store: ContextStore, conv_id: str) -> None:
    count = len(store.messages(conv_id))
    store.append(conv_id, session(2))
    store.record_request(conv_id, tokens_in=10)
    store.add_context_update(conv_id, count + 1, 0, "rewritten")
    store.set_deleted_range(conv_id, count + 1 if (count + 1) % 2 else count + 2)
    store.checkpoint(conv_id, "later")


def test_ids_after_a_rollback_are_greater_than_every_archived_id(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(1))
    store.checkpoint(conv.id, "start")
    _write_one_of_each(store, conv.id)
    first = store.rollback(conv.id, "start")
    archived = _archived_ids(store)
    assert set(WRITTEN) <= set(archived)
    _write_one_of_each(store, conv.id)
    second = store.rollback(conv.id, "start", purge=True)
    assert second.rollback_id is not None and first.rollback_id is not None
    assert second.rollback_id > first.rollback_id
    kept = _live_ids(store)
    _write_one_of_each(store, conv.id)
    live = _live_ids(store)
    for name in WRITTEN:
        assert min(live[name] - kept[name]) > max(archived[name]), name


def test_ids_after_a_deleted_conversation_are_new(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(1))
    store.checkpoint(conv.id, "start")
    _write_one_of_each(store, conv.id)
    store.rollback(conv.id, "start")
    before = _every_id(store)
    store.delete_conversation(conv.id)
    other = store.create_conversation()
    store.append(other.id, session(1))
    store.checkpoint(other.id, "start")
    _write_one_of_each(store, other.id)
    store.rollback(other.id, "start")
    after = _every_id(store)
    for name in (*WRITTEN, "rollbacks"):
        assert min(after[name]) > max(before[name]), name


def test_a_restore_gives_every_row_back_its_id(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(1))
    store.checkpoint(conv.id, "start")
    _write_one_of_each(store, conv.id)
    before = _live_ids(store)
    report = store.rollback(conv.id, "start")
    archived = _archived_ids(store)
    assert report.rollback_id is not None
    store.restore(conv.id, report.rollback_id)
    after = _live_ids(store)
    for name in WRITTEN:
        assert after[name] == before[name] and archived[name] <= after[name], name


def test_the_migration_starts_ids_past_the_archived_ones_in_an_existing_store(
    tmp_path: Path,
) -> None:
    """A store written before 0007 (plain ``INTEGER PRIMARY KEY``) whose newest checkpoint
    and request were archived: after the upgrade their ids are not given out again."""
    path = tmp_path / "old.db"
    with ContextStore.open(path) as store:
        conv = store.create_conversation(id="c")
        store.append("c", session(1))
        store.checkpoint("c", "start")
        _write_one_of_each(store, conv.id)
        store.rollback("c", "start")
        archived = _archived_ids(store)
    engine = make_engine(resolve_target(str(path), path))
    try:
        migrate.downgrade(engine, is_sqlite=True, revision="0006")
        raw = sqlite3.connect(path)
        try:
            ddl = raw.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'checkpoints'"
            ).fetchone()[0]
            assert "AUTOINCREMENT" not in ddl
            views = raw.execute("SELECT count(*) FROM sqlite_master WHERE type = 'view'")
            assert views.fetchone()[0] > 0
        finally:
            raw.close()
        migrate.upgrade(engine, is_sqlite=True)
    finally:
        engine.dispose()
    with ContextStore.open(path) as store:
        assert _archived_ids(store) == archived
        _write_one_of_each(store, "c")
        live = _live_ids(store)
        for name in WRITTEN:
            assert max(live[name]) > max(archived[name]), name
        assert store.render("c")
        with store.database.read() as connection:
            kept = ARCHIVES["checkpoints"]
            assert connection.execute(select(func.count()).select_from(kept)).scalar()


def test_the_migration_names_the_archived_ids_on_postgresql(tmp_path: Path) -> None:
    """Rows archived before 0007 get their ``row_id`` from their data, and a rollback does
    not move PostgreSQL's sequences back."""
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        conv = store.create_conversation()
        store.append(conv.id, session(1))
        store.checkpoint(conv.id, "start")
        _write_one_of_each(store, conv.id)
        store.rollback(conv.id, "start")
        archived = _archived_ids(store)
        engine = store.database.engine
        store.database.close()
        migrate.downgrade(engine, is_sqlite=False, revision="0006")
        migrate.upgrade(engine, is_sqlite=False)
        assert _archived_ids(store) == archived
        _write_one_of_each(store, conv.id)
        live = _live_ids(store)
        for name in WRITTEN:
            assert max(live[name]) > max(archived[name]), name
    finally:
        cleanup()
