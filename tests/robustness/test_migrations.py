"""Migrations: upgrade from empty, no drift, data kept across revisions, failures roll back."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from contextstore import ContextStore, MigrationError
from contextstore.storage import migrate
from contextstore.storage.engine import make_engine, resolve_target


def _engine(path: Path) -> Engine:
    return make_engine(resolve_target(str(path), path))


def _dump(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def _write_history(path: Path) -> None:
    with ContextStore.open(path) as store:
        store.create_conversation(id="c", title="kept")
        store.append("c", "user", "hello")
        store.checkpoint("c", "cp")
        store.record_request("c", tokens_in=10)


def test_upgrade_from_empty_then_write_and_no_drift(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    engine = _engine(path)
    try:
        migrate.upgrade(engine, is_sqlite=True)
        with engine.connect() as connection:
            assert migrate.current_revision(connection) == migrate.head_revision()
        _write_history(path)
        with engine.connect() as connection:
            command.check(migrate.alembic_config(connection))  # raises on any drift
    finally:
        engine.dispose()
    with ContextStore.open(path, auto_migrate=False) as store:
        assert store.messages("c") == [{"role": "user", "content": "hello"}]


def test_downgrade_to_base_and_upgrade_again_gives_the_same_schema(tmp_path: Path) -> None:
    path = tmp_path / "cycle.db"
    engine = _engine(path)
    try:
        migrate.upgrade(engine, is_sqlite=True)
        schema = [line for line in _dump(path) if line.startswith("CREATE")]
        migrate.downgrade(engine, is_sqlite=True, revision="base")
        assert [line for line in _dump(path) if line.startswith('CREATE TABLE "conv')] == []
        migrate.upgrade(engine, is_sqlite=True)
        assert [line for line in _dump(path) if line.startswith("CREATE")] == schema
    finally:
        engine.dispose()


def _revisions() -> list[str]:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def test_every_later_revision_downgrades_and_upgrades_keeping_data(tmp_path: Path) -> None:
    """For each revision after the first: data written at head survives r -> r-1 -> r."""
    revisions = _revisions()
    assert revisions[0] == "0001"
    if len(revisions) == 1:
        pytest.skip("only the initial revision exists; its downgrade drops every table")
    path = tmp_path / "steps.db"
    _write_history(path)
    with ContextStore.open(path) as store:
        rendered = {fmt: store.render("c", format=fmt) for fmt in (None, "openai", "gemini")}
    engine = _engine(path)
    try:
        for previous, revision in reversed(list(itertools.pairwise(revisions))):
            migrate.downgrade(engine, is_sqlite=True, revision=previous)
            migrate.upgrade(engine, is_sqlite=True, revision=revision)
    finally:
        engine.dispose()
    with ContextStore.open(path) as store:
        assert store.messages("c") == [{"role": "user", "content": "hello"}]
        assert [c.label for c in store.checkpoints("c")] == ["cp"]
        assert {fmt: store.render("c", format=fmt) for fmt in rendered} == rendered


FAILING_REVISION = '''"""A revision that fails halfway (test only)."""
import sqlalchemy as sa
from alembic import op

revision = "9999"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("half_done", sa.Column("id", sa.Integer, primary_key=True))
    op.execute("INSERT INTO half_done (id) VALUES (1)")
    op.execute("DELETE FROM messages")
    raise RuntimeError("migration failed midway")


def downgrade() -> None:
    op.drop_table("half_done")
'''


def test_a_failed_migration_leaves_the_database_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = tmp_path / "original.db"
    _write_history(original)
    copy = tmp_path / "copy.db"
    shutil.copyfile(original, copy)
    before = _dump(copy)
    assert any('INSERT INTO "messages"' in line for line in before)
    migrations = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_location(), migrations)
    (migrations / "versions" / "9999_fails.py").write_text(
        FAILING_REVISION.format(head=migrate.head_revision())
    )
    monkeypatch.setattr(migrate, "migrations_location", lambda: migrations)
    assert migrate.head_revision() == "9999"
    engine = _engine(copy)
    try:
        with pytest.raises(MigrationError, match="rolled back"):
            migrate.upgrade(engine, is_sqlite=True)
    finally:
        engine.dispose()
    assert _dump(copy) == before
    monkeypatch.undo()
    with ContextStore.open(copy, auto_migrate=False) as store:
        assert store.messages("c") == [{"role": "user", "content": "hello"}]
