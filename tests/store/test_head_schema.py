"""A new SQLite database made from the schema this process read back from the first one it
migrated: the database the migrations make, without running them again."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic import command

from contextstore import ContextStore, MigrationError
from contextstore.storage import head_schema, migrate
from contextstore.storage.engine import make_engine, resolve_target
from tests.robustness.test_migrations import FAILING_REVISION


def _dump(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        pragmas = [
            f"{name}={connection.execute(f'PRAGMA {name}').fetchone()[0]}"
            for name in ("user_version", "application_id", "page_size", "auto_vacuum")
        ]
        return [*pragmas, *connection.iterdump()]
    finally:
        connection.close()


@pytest.fixture
def upgrades(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """Forget the remembered schemas for the test, and count Alembic's upgrades."""
    calls = []
    real = command.upgrade

    def counted(*args: object, **kwargs: object) -> None:
        calls.append(args)
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(command, "upgrade", counted)
    head_schema.forget_all()
    yield lambda: len(calls)
    head_schema.forget_all()


def test_a_second_new_database_is_the_one_the_migrations_make_without_running_them(
    tmp_path: Path, upgrades: Callable[[], int]
) -> None:
    ContextStore.open(tmp_path / "migrated.db").close()
    assert upgrades() == 1
    ContextStore.open(tmp_path / "replayed.db").close()
    with ContextStore.open(":memory:") as memory:
        conversation = memory.create_conversation()
        memory.append(conversation.id, "user", "hello")
        assert memory.messages(conversation.id) == [{"role": "user", "content": "hello"}]
    assert upgrades() == 1
    replayed = _dump(tmp_path / "replayed.db")
    assert replayed == _dump(tmp_path / "migrated.db")
    assert any("CREATE VIEW" in line for line in replayed)
    assert any("CREATE INDEX" in line for line in replayed)
    assert any('INSERT INTO "sqlite_sequence"' in line for line in replayed)


def test_a_replayed_database_is_at_head_with_no_drift_and_keeps_what_is_written(
    tmp_path: Path, upgrades: Callable[[], int]
) -> None:
    ContextStore.open(tmp_path / "first.db").close()
    path = tmp_path / "second.db"
    with ContextStore.open(path) as store:
        assert store.revision_found is None
        store.create_conversation(id="c")
        store.append("c", "user", "kept")
        store.checkpoint("c", "cp")
        store.record_request("c", tokens_in=3)
    assert upgrades() == 1
    engine = make_engine(resolve_target(str(path), path))
    try:
        with engine.connect() as connection:
            assert migrate.current_revision(connection) == migrate.head_revision()
            command.check(migrate.alembic_config(connection))  # raises on any drift
        migrate.downgrade(engine, is_sqlite=True, revision="0016")
        migrate.upgrade(engine, is_sqlite=True)
    finally:
        engine.dispose()
    with ContextStore.open(path, auto_migrate=False) as store:
        assert store.messages("c") == [{"role": "user", "content": "kept"}]
        assert store.check().ok


def test_a_database_at_an_older_revision_is_migrated_not_replayed(
    tmp_path: Path, upgrades: Callable[[], int]
) -> None:
    ContextStore.open(tmp_path / "first.db").close()
    path = tmp_path / "old.db"
    engine = make_engine(resolve_target(str(path), path))
    try:
        migrate.upgrade(engine, is_sqlite=True, revision="0016")
    finally:
        engine.dispose()
    assert upgrades() == 2
    with ContextStore.open(path) as store:
        assert store.revision_found == "0016"
    assert upgrades() == 3
    assert _dump(path) == _dump(tmp_path / "first.db")


def test_a_store_pointed_at_other_migrations_runs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upgrades: Callable[[], int]
) -> None:
    ContextStore.open(tmp_path / "first.db").close()
    migrations = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_location(), migrations)
    (migrations / "versions" / "9999_fails.py").write_text(
        FAILING_REVISION.format(head=migrate.head_revision())
    )
    monkeypatch.setattr(migrate, "migrations_location", lambda: migrations)
    with pytest.raises(MigrationError, match="rolled back"):
        ContextStore.open(tmp_path / "new.db")
    assert upgrades() == 2


def test_a_migrated_database_that_holds_rows_is_not_remembered(tmp_path: Path) -> None:
    path = tmp_path / "rows.db"
    with ContextStore.open(path) as store:
        store.create_conversation(id="c")
    engine = make_engine(resolve_target(str(path), path))
    try:
        with engine.connect() as connection:
            assert head_schema.read_head_schema(connection) is None
            connection.exec_driver_sql("DELETE FROM conversations")
            schema = head_schema.read_head_schema(connection)
            assert schema is not None
            assert schema.revision == migrate.HEAD_REVISION
            connection.rollback()
    finally:
        engine.dispose()
