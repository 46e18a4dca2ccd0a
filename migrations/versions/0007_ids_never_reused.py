"""Ids are never reused: SQLite ``AUTOINCREMENT`` on every table with an ``id``, and the
archive names the id each archived row had.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Without ``AUTOINCREMENT`` SQLite gives a new row ``max(id) + 1``, so after a rollback (or a
deleted conversation) the next checkpoint, request, range, update or rollback took the id
of one that was archived: an auditor's archived request 1 and a live request 1 were
different requests. PostgreSQL's sequences never go back, and a rollback does not reset
them.

- SQLite: ``deleted_ranges``, ``context_updates``, ``api_requests``, ``checkpoints``,
  ``rollbacks``, ``source_records`` and ``archived_rows`` are rebuilt with ``id INTEGER
  PRIMARY KEY AUTOINCREMENT`` (every other column, constraint and index as it was, rows
  copied with their ids), and ``sqlite_sequence`` starts each table past the largest id it
  holds or its archive remembers. The views are dropped and recreated around the rebuild
  (their text unchanged); foreign keys are off during the rebuild (the migration runner
  turns them off on SQLite and checks them before committing).
- Both backends: ``archived_rows.row_id`` (new, integer, nullable): the id the archived
  row had in its table (null for messages and blocks, whose key is their conversation and
  index), filled from the archived data for rows archived before this revision.
- PostgreSQL: ``archived_rows.data`` is compressed with lz4 where the server has it (a
  rollback builds every archived value anew, and pglz compression was most of its time).

The downgrade rebuilds the tables without ``AUTOINCREMENT`` and drops ``row_id`` (each
archived row's data still holds its id). No data is lost either way.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

ID_TABLES = (
    "deleted_ranges",
    "context_updates",
    "api_requests",
    "checkpoints",
    "rollbacks",
    "source_records",
    "archived_rows",
)
"""Tables whose rows have an ``id`` of their own (a frozen list: revisions never import the
package's code)."""

TEMPORARY = "_0007_rebuild"


def _autoincrement_sql(sql: str, table: str) -> str:
    """``CREATE TABLE`` text of ``table`` with its ``id`` made ``AUTOINCREMENT``."""
    column = re.compile(r"\bid INTEGER NOT NULL,")
    key = re.compile(rf",\s*CONSTRAINT pk_{table} PRIMARY KEY \(id\)")
    if not column.search(sql) or not key.search(sql):
        raise RuntimeError(f"table {table} does not have the expected primary key: {sql}")
    sql = key.sub("", sql, count=1)
    return column.sub(
        f"id INTEGER NOT NULL CONSTRAINT pk_{table} PRIMARY KEY AUTOINCREMENT,", sql, count=1
    )


def _plain_sql(sql: str, table: str) -> str:
    """``CREATE TABLE`` text of ``table`` with its ``id`` a plain primary key again."""
    column = re.compile(
        rf"\bid INTEGER NOT NULL CONSTRAINT pk_{table} PRIMARY KEY AUTOINCREMENT,\s*"
    )
    if not column.search(sql):
        raise RuntimeError(f"table {table} does not have an AUTOINCREMENT id: {sql}")
    sql = column.sub("id INTEGER NOT NULL, \n\t", sql, count=1)
    head, _, tail = sql.rpartition(")")
    return f"{head.rstrip()}, \n\tCONSTRAINT pk_{table} PRIMARY KEY (id)\n){tail}"


def _rebuild_sqlite(transform: str) -> None:
    bind = op.get_bind()
    schema = bind.execute(sa.text("SELECT type, name, tbl_name, sql FROM sqlite_master")).all()
    views = [(name, sql) for kind, name, _, sql in schema if kind == "view"]
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    for table in ID_TABLES:
        (create,) = [sql for kind, name, _, sql in schema if kind == "table" and name == table]
        indexes = [
            sql for kind, _, owner, sql in schema if kind == "index" and owner == table and sql
        ]
        rebuilt = (
            _autoincrement_sql(create, table) if transform == "up" else _plain_sql(create, table)
        )
        rebuilt = re.sub(
            rf'^CREATE TABLE "?{table}"?', f"CREATE TABLE {TEMPORARY}", rebuilt, count=1
        )
        op.execute(rebuilt)
        op.execute(f"INSERT INTO {TEMPORARY} SELECT * FROM {table}")  # noqa: S608 (constants)
        op.execute(f"DROP TABLE {table}")
        op.execute(f"ALTER TABLE {TEMPORARY} RENAME TO {table}")
        for sql in indexes:
            op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def _seed_sqlite_sequence() -> None:
    """Start every table's ids past the largest it holds or its archive remembers."""
    for table in ID_TABLES:
        op.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT "  # noqa: S608 (constants)
            f"'{table}', max(coalesce((SELECT max(id) FROM {table}), 0), "
            "coalesce((SELECT max(row_id) FROM archived_rows "
            f"WHERE table_name = '{table}'), 0))"
        )


def _lz4_available() -> bool:
    """Whether this PostgreSQL server compresses with lz4 (version 14 and later, when built
    with it)."""
    found = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            )
        )
        .scalar()
    )
    return bool(found)


def upgrade() -> None:
    bind = op.get_bind()
    op.add_column("archived_rows", sa.Column("row_id", sa.Integer(), nullable=True))
    if bind.dialect.name == "postgresql":
        op.execute(
            "UPDATE archived_rows SET row_id = (data ->> 'id')::integer "
            "WHERE table_name NOT IN ('messages', 'blocks')"
        )
        if _lz4_available():
            op.execute("ALTER TABLE archived_rows ALTER COLUMN data SET COMPRESSION lz4")
        return
    op.execute(
        "UPDATE archived_rows SET row_id = json_extract(data, '$.id') "
        "WHERE table_name NOT IN ('messages', 'blocks')"
    )
    _rebuild_sqlite("up")
    op.execute("DELETE FROM sqlite_sequence")
    _seed_sqlite_sequence()


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        if _lz4_available():
            op.execute("ALTER TABLE archived_rows ALTER COLUMN data SET COMPRESSION default")
        op.drop_column("archived_rows", "row_id")
        return
    _rebuild_sqlite("down")
    op.execute(f"DELETE FROM sqlite_sequence WHERE name IN {ID_TABLES!r}")  # noqa: S608
    # SQLite drops a plain column in place (3.35+): no table rebuild under the views.
    op.execute("ALTER TABLE archived_rows DROP COLUMN row_id")
