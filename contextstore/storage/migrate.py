"""Running the Alembic migrations from inside the installed package.

The revisions live in the top-level ``migrations/`` folder of the source tree and ship in
the wheel as ``contextstore.migrations``; :func:`migrations_location` finds them in an
installed package (wheel or editable) and, failing that, in a source checkout.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from contextstore.core.errors import MigrationError, SchemaOutdatedError
from contextstore.storage import head_schema
from contextstore.storage.driver_errors import classify_database_error, first_line
from contextstore.storage.engine import make_engine, resolve_target
from contextstore.storage.privileges import (
    INSUFFICIENT_PRIVILEGE,
    INVALID_SCHEMA_NAME,
    check_schema_usable,
    identity,
    migration_refused,
)

if TYPE_CHECKING:
    from alembic.config import Config

HEAD_REVISION: Final = "0017"
"""The newest revision of the packaged migrations (a test checks that it is Alembic's head):
a store opened on a database already there is checked against it with one ``SELECT``, and
Alembic, whose import and reading of the migration scripts took about a tenth of a short
CLI command, is loaded only when a database needs migrating or checking further."""

_ADVISORY_LOCK_KEY = 0x636F6E7478  # "contx": serialises concurrent migrations on PostgreSQL


def migrations_location() -> Path:
    """The directory holding ``env.py`` and ``versions/``."""
    try:
        resource = importlib.resources.files("contextstore.migrations")
        path = Path(str(resource))
        if (path / "env.py").is_file():
            return path
    except ModuleNotFoundError:
        pass
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if (checkout / "env.py").is_file():
        return checkout
    raise MigrationError(
        "contextstore's migrations are missing from this installation; reinstall the "
        "package (pip install --force-reinstall contextstore)."
    )


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations, optionally on ``connection``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_location()))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this version of contextstore knows, read from the migration
    scripts (:data:`HEAD_REVISION` says it without reading them)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _at_head(engine: Engine) -> bool:
    """Whether the database's revision is :data:`HEAD_REVISION`, read with one ``SELECT``;
    False when it cannot be read so (no such table, several rows, another error), which
    :func:`ensure_schema` then settles with Alembic."""
    with engine.connect() as probe:
        try:
            rows = probe.execute(text("SELECT version_num FROM alembic_version")).fetchall()
        except DBAPIError:
            return False
        finally:
            probe.rollback()
    return [tuple(row) for row in rows] == [(HEAD_REVISION,)]


def _lock_for_migration(connection: Connection) -> None:
    """Take PostgreSQL's migration lock, waiting for as long as another process migrates (the
    store's connections give up waiting for a lock after ``LOCK_TIMEOUT_MS`` otherwise)."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET LOCAL lock_timeout = 0"))
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})


def ensure_schema(engine: Engine, *, auto_migrate: bool, is_sqlite: bool) -> str | None:
    """Bring the database to head, or refuse a stale one when ``auto_migrate`` is off;
    returns the revision the database was at before (None: it had no schema yet), which is
    :data:`HEAD_REVISION` when nothing was upgraded.

    The whole upgrade runs in one transaction that holds the write lock, so two processes
    opening a new database at once migrate it once, and a failed migration leaves the
    database as it was. The revision returned is the one found under that lock: the second
    of two such processes returns the revision the first one made, not None.

    Raises:
        SchemaOutdatedError: the database is behind and ``auto_migrate`` is False.
        MigrationError: the database is newer than this version, or a migration failed.
    """
    if _at_head(engine):
        return HEAD_REVISION
    if is_sqlite and auto_migrate and _create_as_remembered(engine):
        return None
    head = head_revision()
    with engine.connect() as probe:
        current = current_revision(probe)
        probe.rollback()
    if current == head:
        return current
    if current is None and not is_sqlite:
        check_schema_usable(engine)
    refuse_unknown_revision(current)
    if not auto_migrate:
        if current is None:
            delete = ", or a file to delete" if is_sqlite else ""
            raise SchemaOutdatedError(
                "the database holds no contextstore schema yet (an empty database, as a "
                f"first run stopped while it created the schema leaves{delete}); run "
                "'contextstore migrate' (or open the store with auto_migrate=True) to "
                "upgrade it."
            )
        raise SchemaOutdatedError(
            f"the database is at revision {current} but this version of contextstore needs "
            f"{head}; run 'contextstore migrate' (or open the store with auto_migrate=True) "
            "to upgrade it."
        )
    return upgrade(engine, is_sqlite=is_sqlite)


def refuse_unknown_revision(current: str | None, where: str = "the database") -> None:
    """Refuse a schema revision this version of contextstore has no migration for.

    Raises:
        MigrationError: ``current`` (the revision of ``where``) is unknown: a newer version
            of contextstore wrote it.
    """
    if current is None:
        return
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    try:
        script.get_revision(current)
    except Exception as exc:
        raise MigrationError(
            f"{where} is at revision {current}, which this version of contextstore does "
            "not know (it was written by a newer version); upgrade contextstore."
        ) from exc


def upgrade(engine: Engine, *, is_sqlite: bool, revision: str = "head") -> str | None:
    """Upgrade the database to ``revision`` in one transaction; returns the revision it was
    at once the migration lock was held (None: no schema), which another process migrating
    the same database may have changed since the caller last looked."""
    return _migrate(engine, is_sqlite=is_sqlite, action="upgrade", revision=revision)


def downgrade(engine: Engine, *, is_sqlite: bool, revision: str) -> None:
    """Downgrade the database to ``revision`` in one transaction."""
    _migrate(engine, is_sqlite=is_sqlite, action="downgrade", revision=revision)


def _create_as_remembered(engine: Engine) -> bool:
    """Make the head schema in an empty SQLite database from the statements this process
    read back from the first one it migrated (:mod:`.head_schema`); False when there are none
    yet, or the database is not empty (another process made it meanwhile)."""
    schema = head_schema.remembered(str(migrations_location()))
    if schema is None:
        return False
    with engine.connect() as connection:
        connection = connection.execution_options(contextstore_begin="IMMEDIATE")
        try:
            with connection.begin():
                if not head_schema.is_empty(connection):
                    return False
                head_schema.create_head_schema(connection, schema)
        except Exception as exc:
            classified = classify_database_error(exc)
            if classified is not None:
                raise classified from exc
            raise MigrationError(
                f"creating the schema failed and was rolled back, so the database is "
                f"unchanged: {exc}"
            ) from exc
    return True


def _migrate(engine: Engine, *, is_sqlite: bool, action: str, revision: str) -> str | None:
    with engine.connect() as connection:
        enforced = False
        made: head_schema.HeadSchema | None = None
        if is_sqlite:
            connection = connection.execution_options(contextstore_begin="IMMEDIATE")
            enforced = _foreign_keys(connection, None)
        try:
            with connection.begin():
                from alembic import command

                _lock_for_migration(connection)
                found = current_revision(connection)
                from_empty = is_sqlite and action == "upgrade" and revision == "head"
                from_empty = from_empty and head_schema.is_empty(connection)
                config = alembic_config(connection)
                {"upgrade": command.upgrade, "downgrade": command.downgrade}[action](
                    config, revision
                )
                if is_sqlite:
                    _check_foreign_keys(connection)
                if from_empty:
                    made = head_schema.read_head_schema(connection)
        except (MigrationError, SchemaOutdatedError):
            raise
        except Exception as exc:
            driver = getattr(exc, "orig", None) or exc
            if getattr(driver, "sqlstate", None) in (INSUFFICIENT_PRIVILEGE, INVALID_SCHEMA_NAME):
                raise migration_refused(first_line(driver), identity(engine)) from exc
            classified = classify_database_error(exc)
            if classified is not None:
                raise classified from exc
            raise MigrationError(
                f"the {action} to {revision} failed and was rolled back, so the database is "
                f"unchanged: {exc}"
            ) from exc
        finally:
            if enforced:
                _foreign_keys(connection, True)
        if made is not None:
            head_schema.remember(str(migrations_location()), made)
    return found


def _foreign_keys(connection: Connection, on: bool | None) -> bool:
    """Whether SQLite enforced foreign keys on ``connection``; turns them off (``on`` None)
    or back on, outside any transaction.

    A migration that rebuilds a table (SQLite's create, copy, drop, rename) must run with
    foreign keys off, or dropping the old table would cascade into the tables referring to
    it; :func:`_check_foreign_keys` then checks every reference before the commit.
    """
    raw = connection.connection.driver_connection
    assert raw is not None
    was = bool(raw.execute("PRAGMA foreign_keys").fetchone()[0])
    raw.execute(f"PRAGMA foreign_keys = {'ON' if on else 'OFF'}")
    return was


def _check_foreign_keys(connection: Connection) -> None:
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise MigrationError(
            f"the migration left {len(broken)} rows referring to missing rows (first: "
            f"{tuple(broken[0])}); it was rolled back, so the database is unchanged."
        )


def engine_for_cli(url: str | None) -> Engine:
    """The engine ``alembic`` uses when run from the command line."""
    from contextstore.storage.paths import default_database_path

    location = url or os.environ.get("CONTEXTSTORE_DB") or None
    target = resolve_target(location, default_database_path())
    return make_engine(target)
