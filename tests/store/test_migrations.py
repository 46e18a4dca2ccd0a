"""Migrations: from an empty file, refusal of a stale database, no drift, the wheel's copy."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, inspect, text

from contextstore import ContextStore, SchemaOutdatedError
from contextstore.storage.migrate import (
    HEAD_REVISION,
    alembic_config,
    downgrade,
    head_revision,
    upgrade,
)
from tests.conftest import POSTGRES_URL, new_postgres_schema
from tests.pg_schemas import connect_args

ROOT = Path(__file__).resolve().parents[2]


def test_open_creates_every_table_and_view_in_an_empty_file(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "new.db"):
        pass
    engine = create_engine(f"sqlite:///{tmp_path / 'new.db'}")
    names = set(inspect(engine).get_table_names())
    views = set(inspect(engine).get_view_names())
    engine.dispose()
    assert {
        "conversations",
        "messages",
        "blocks",
        "deleted_ranges",
        "context_updates",
        "api_requests",
        "checkpoints",
        "rollbacks",
        "archived_messages",
        "archived_blocks",
    } <= names
    assert "archived_rows" not in names
    assert views == {
        "effective_blocks",
        "visible_messages",
        "request_usage",
        "truncation_events",
        "audit_requests",
        "audit_file_reads",
        "audit_dedup_savings",
        "masked_secrets",
        "audit_failed_tool_calls",
        "audit_rollbacks",
        "audit_timeline",
        "pristine_nodes",
        "active_nodes",
    }


def test_a_stale_database_is_refused_without_auto_migrate(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as connection:  # a database, no schema yet
        connection.execute("PRAGMA user_version = 1")
    with pytest.raises(SchemaOutdatedError, match="contextstore migrate"):
        ContextStore.open(path, auto_migrate=False)
    with ContextStore.open(path, auto_migrate=True) as store:
        assert store.list_conversations() == []


def test_the_head_the_store_checks_without_alembic_is_the_migrations_head() -> None:
    assert head_revision() == HEAD_REVISION


def test_opening_a_current_database_does_not_load_alembic(tmp_path: Path) -> None:
    """Loading Alembic and reading the migration scripts took about a tenth of a short CLI
    command; a database at the head needs neither. One a revision behind still migrates."""
    path = tmp_path / "current.db"
    with ContextStore.open(path) as store:
        store.create_conversation(id="kept")
    probe = (
        "import sys; from contextstore import ContextStore\n"
        f"store = ContextStore.open({str(path)!r})\n"
        "print([c.id for c in store.list_conversations()], 'alembic' in sys.modules)"
    )
    opened = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert opened.stdout.split() == ["['kept']", "False"]
    engine = create_engine(f"sqlite:///{path}")
    downgrade(engine, is_sqlite=True, revision="-1")
    engine.dispose()
    with pytest.raises(SchemaOutdatedError, match="contextstore migrate"):
        ContextStore.open(path, auto_migrate=False)
    opened = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert opened.stdout.split() == ["['kept']", "True"]
    with contextlib.closing(sqlite3.connect(path)) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    assert revision == HEAD_REVISION


def test_models_and_migrations_do_not_drift(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'drift.db'}")
    upgrade(engine, is_sqlite=True)
    with engine.connect() as connection:
        command.check(alembic_config(connection))
    engine.dispose()


def test_downgrade_and_upgrade_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "round.db"
    with ContextStore.open(path) as store:
        store.create_conversation()
    engine = create_engine(f"sqlite:///{path}")
    downgrade(engine, is_sqlite=True, revision="base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    upgrade(engine, is_sqlite=True)
    with engine.connect() as connection:
        assert (
            connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            == head_revision()
        )
    engine.dispose()


def test_the_alembic_command_line_works_from_a_checkout(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with ContextStore.open(url, auto_migrate=False) as store:
        assert store.list_conversations() == []


@pytest.mark.slow
def test_a_wheel_install_finds_its_migrations(tmp_path: Path) -> None:
    """Build the wheel, install it without dependencies into a target dir, and open a store
    from outside the source tree: the migrations must come from the installed package."""
    dist = tmp_path / "dist"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0 and "No module named" in built.stderr:
        pytest.skip(f"cannot build a wheel here: {built.stderr[-200:]}")
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(dist.glob("contextstore-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "contextstore/migrations/env.py" in names
    assert "contextstore/migrations/versions/0001_initial_schema.py" in names
    assert "contextstore/migrations/script.py.mako" in names
    for init in (ROOT / "contextstore").rglob("__init__.py"):
        assert init.relative_to(ROOT).as_posix() in names, f"{init} is missing from the wheel"
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        check=True,
    )
    code = (
        "import contextstore, contextstore.storage.migrate as m;"
        "from contextstore import ContextStore;"
        "s = ContextStore.open('w.db'); c = s.create_conversation();"
        "print(contextstore.__file__); print(m.migrations_location())"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    module_file, location = ran.stdout.split()
    assert module_file.startswith(str(target)) and location.startswith(str(target))


@pytest.fixture
def postgres_schema() -> Iterator[str]:
    """The name of a new, empty PostgreSQL schema (dropped afterwards)."""
    with new_postgres_schema() as schema:
        yield schema


@pytest.fixture
def postgres_engine(postgres_schema: str) -> Iterator[Engine]:
    assert POSTGRES_URL
    engine = create_engine(POSTGRES_URL, **connect_args(postgres_schema))
    try:
        yield engine
    finally:
        engine.dispose()


def test_an_empty_postgresql_schema_is_refused_without_auto_migrate(postgres_schema: str) -> None:
    assert POSTGRES_URL
    with pytest.raises(SchemaOutdatedError, match="contextstore migrate"):
        ContextStore.open(
            POSTGRES_URL, auto_migrate=False, engine_kwargs=connect_args(postgres_schema)
        )
    with ContextStore.open(POSTGRES_URL, engine_kwargs=connect_args(postgres_schema)) as store:
        assert store.list_conversations() == []


def test_postgresql_gets_every_table_and_view_without_drift(
    postgres_engine: Engine, tmp_path: Path
) -> None:
    """The same tables and views as a SQLite file migrated by the same revisions."""
    upgrade(postgres_engine, is_sqlite=False)
    sqlite = create_engine(f"sqlite:///{tmp_path / 'same.db'}")
    upgrade(sqlite, is_sqlite=True)
    expected_tables = set(inspect(sqlite).get_table_names())
    expected_views = set(inspect(sqlite).get_view_names())
    sqlite.dispose()
    assert {"conversations", "messages", "blocks", "archived_blocks"} <= expected_tables
    assert {"effective_blocks", "visible_messages", "request_usage"} <= expected_views
    assert set(inspect(postgres_engine).get_table_names()) == expected_tables
    assert set(inspect(postgres_engine).get_view_names()) == expected_views
    with postgres_engine.connect() as connection:
        command.check(alembic_config(connection))


def test_postgresql_downgrades_to_base_and_upgrades_again(postgres_engine: Engine) -> None:
    upgrade(postgres_engine, is_sqlite=False)
    downgrade(postgres_engine, is_sqlite=False, revision="base")
    assert set(inspect(postgres_engine).get_table_names()) == {"alembic_version"}
    upgrade(postgres_engine, is_sqlite=False)
    with postgres_engine.connect() as connection:
        version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert version == head_revision()
