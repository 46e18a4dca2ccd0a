"""Migrated PostgreSQL schemas that the tests of one process hand on to each other.

Migrating a new schema costs a second or more per test (eleven Alembic revisions, each
reflecting and altering tables); emptying a migrated one with ``TRUNCATE`` costs under a
tenth of a second. So a test that only needs an empty store at the newest schema takes a schema
from this pool, and its cleanup empties it and puts it back: but only when the schema's
shape is what migration made it (same tables, columns, indexes, constraints, triggers,
functions, views and revision). A test that altered or damaged its schema, or left a
connection holding a lock, gets its schema dropped instead, and the next test a new one.

Tests about migration itself, or about a schema before its first open, use
``conftest.postgres_schema_store``, which always migrates a new schema.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from contextstore import ContextStore

SCHEMA_PREFIX = "cs_test_"

_SHAPE = sa.text(
    """
    SELECT md5(coalesce(string_agg(item, '|' ORDER BY item), '')) FROM (
        SELECT concat_ws(':', 'rel', c.relname, c.relkind, c.reloptions::text, a.attname,
                         format_type(a.atttypid, a.atttypmod), a.attnotnull) AS item
        FROM pg_class c
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relnamespace = to_regnamespace(:schema)
        UNION ALL
        SELECT concat_ws(':', 'index', indexrelid::regclass::text, pg_get_indexdef(indexrelid))
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relnamespace = to_regnamespace(:schema)
        UNION ALL
        SELECT concat_ws(':', 'constraint', conname, pg_get_constraintdef(oid))
        FROM pg_constraint WHERE connamespace = to_regnamespace(:schema)
        UNION ALL
        SELECT concat_ws(':', 'trigger', t.tgname, t.tgenabled, pg_get_triggerdef(t.oid))
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = to_regnamespace(:schema) AND NOT t.tgisinternal
        UNION ALL
        SELECT concat_ws(':', 'function', proname, md5(prosrc))
        FROM pg_proc WHERE pronamespace = to_regnamespace(:schema)
        UNION ALL
        SELECT concat_ws(':', 'view', viewname, md5(definition))
        FROM pg_views WHERE schemaname = :schema
    ) shape
    """
)


def connect_args(schema: str) -> dict[str, Any]:
    """The engine arguments that make a store's connections use ``schema``."""
    return {"connect_args": {"options": f"-csearch_path={schema}"}}


_TABLES = sa.text(
    "SELECT tablename FROM pg_tables WHERE schemaname = :schema "
    "AND tablename <> 'alembic_version' ORDER BY tablename"
)


class SchemaPool:
    """Empty schemas at the newest revision, kept between the tests of one process."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._admin: sa.Engine | None = None
        self._free: list[str] = []
        self._shapes: dict[str, tuple[str, str]] = {}
        self._made: set[str] = set()

    def take(self) -> str:
        """An empty, migrated schema: one a finished test gave back, or a new one."""
        if self._free:
            return self._free.pop()
        schema = self.create()
        ContextStore.open(self._url, engine_kwargs=connect_args(schema)).close()
        with self._engine().connect() as connection:
            self._shapes[schema] = (
                self._shape(connection, schema),
                self._truncate_statement(connection, schema),
            )
        return schema

    def create(self) -> str:
        """A new, empty schema (no tables), dropped with the others at the end."""
        schema = f"{SCHEMA_PREFIX}{uuid.uuid4().hex[:12]}"
        with self._engine().begin() as connection:
            connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        self._made.add(schema)
        return schema

    def give_back(self, schema: str) -> None:
        """Empty ``schema`` for the next test, or drop it when its shape changed or it
        cannot be emptied now."""
        shape, truncate = self._shapes.get(schema, ("", ""))
        emptied = False
        try:
            with self._engine().begin() as connection:
                connection.execute(sa.text("SET LOCAL lock_timeout = '30s'"))
                if shape and self._shape(connection, schema) == shape:
                    connection.execute(sa.text(truncate))
                    emptied = True
        except sa.exc.DBAPIError:
            emptied = False
        if emptied:
            self._free.append(schema)
        else:
            self.drop(schema)

    def drop(self, schema: str) -> None:
        """Drop ``schema`` and everything in it (a schema still locked is left for the end)."""
        self._shapes.pop(schema, None)
        try:
            with self._engine().begin() as connection:
                connection.execute(sa.text("SET LOCAL lock_timeout = '30s'"))
                connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        except sa.exc.OperationalError:
            return
        self._made.discard(schema)

    def close(self) -> None:
        """Drop every schema this pool made."""
        for schema in sorted(self._made):
            self.drop(schema)
        self._free.clear()
        if self._admin is not None:
            self._admin.dispose()
            self._admin = None

    def _engine(self) -> sa.Engine:
        if self._admin is None:
            self._admin = sa.create_engine(self._url, pool_size=1)
        return self._admin

    @staticmethod
    def _shape(connection: sa.Connection, schema: str) -> str:
        version = connection.execute(
            sa.text(f"SELECT string_agg(version_num, ',') FROM \"{schema}\".alembic_version")
        ).scalar_one()
        return f"{version}/{connection.execute(_SHAPE, {'schema': schema}).scalar_one()}"

    @staticmethod
    def _truncate_statement(connection: sa.Connection, schema: str) -> str:
        tables = connection.execute(_TABLES, {"schema": schema}).scalars().all()
        listed = ", ".join(f'"{schema}"."{table}"' for table in tables)
        return f"TRUNCATE TABLE {listed} RESTART IDENTITY CASCADE"
