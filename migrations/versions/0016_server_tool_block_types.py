# ruff: noqa: S608
# (the SQL is assembled from constants and the database's own schema; no caller data)
"""``blocks.type`` and ``archived_blocks.type`` hold up to 64 characters (were 32).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05

Anthropic's server tool blocks are stored from now on, and one of their types,
``text_editor_code_execution_tool_result``, has 38 characters: PostgreSQL refused it in a
``VARCHAR(32)``. No row changes.

PostgreSQL cannot change the type of a column a view reads: the views that read one of the
two columns (and the views built on them) are dropped and recreated around the change, with
their definitions read from the server. SQLite does not enforce the length, but the schema
says it: each table is rebuilt from its own ``CREATE TABLE`` text (read from the database,
so this revision stays frozen) with the new length, its rows, indexes and every view kept.
The downgrade puts 32 back, and refuses while a stored type is longer (such a row would not
fit).
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TABLES = ("blocks", "archived_blocks")
OLD, NEW = 32, 64


def _dependent_views() -> list[tuple[str, str]]:
    """PostgreSQL views reading a ``type`` column of :data:`TABLES`, with their definitions,
    dependencies first (views built on them after them)."""
    bind = op.get_bind()
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    pending = [
        name
        for (name,) in bind.execute(
            sa.text(
                "SELECT DISTINCT v.relname FROM pg_depend d "
                "JOIN pg_rewrite r ON r.oid = d.objid "
                "JOIN pg_class v ON v.oid = r.ev_class "
                "JOIN pg_class t ON t.oid = d.refobjid "
                "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid "
                "WHERE v.relkind = 'v' AND v.relnamespace = current_schema()::regnamespace "
                "AND a.attname = 'type' AND t.relname IN ("
                + ", ".join(f"'{table}'" for table in TABLES)
                + ")"
            )
        )
    ]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        definition = bind.execute(
            sa.text("SELECT pg_get_viewdef(CAST(:v AS regclass), true)"), {"v": name}
        ).scalar()
        found.append((name, str(definition)))
        pending += [
            child
            for (child,) in bind.execute(
                sa.text(
                    "SELECT DISTINCT v.relname FROM pg_depend d "
                    "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
                    "WHERE d.refobjid = CAST(:v AS regclass) AND v.relname <> CAST(:n AS name)"
                ),
                {"v": name, "n": name},
            )
        ]
    return found


def _retype_postgres(length: int) -> None:
    views = _dependent_views()
    for name, _ in reversed(views):
        op.execute(f'DROP VIEW IF EXISTS "{name}"')
    for table in TABLES:
        op.execute(f'ALTER TABLE "{table}" ALTER COLUMN "type" TYPE VARCHAR({length})')
    for name, definition in views:
        op.execute(f'CREATE VIEW "{name}" AS {definition}')


def _rebuild_sqlite(old: int, new: int) -> None:
    """Rebuild each table of :data:`TABLES` with ``type VARCHAR(new)`` where it had
    ``VARCHAR(old)``, keeping its rows, its indexes and every view."""
    bind = op.get_bind()
    schema = bind.execute(sa.text("SELECT type, name, tbl_name, sql FROM sqlite_master")).all()
    views = [(name, sql) for kind, name, _, sql in schema if kind == "view"]
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    for table in TABLES:
        (create,) = [sql for kind, name, _, sql in schema if kind == "table" and name == table]
        column = re.compile(rf"(?<![\w\"])type VARCHAR\({old}\) NOT NULL")
        if len(column.findall(create)) != 1:
            raise RuntimeError(f"{table} has no single column 'type VARCHAR({old})': {create}")
        temporary = f"_0016_{table}"
        rebuilt = column.sub(f"type VARCHAR({new}) NOT NULL", create, count=1)
        head = next(h for h in (f"CREATE TABLE {table}", f'CREATE TABLE "{table}"') if h in rebuilt)
        rebuilt = rebuilt.replace(head, f"CREATE TABLE {temporary}", 1)
        indexes = [
            sql for kind, _, owner, sql in schema if kind == "index" and owner == table and sql
        ]
        op.execute(rebuilt)
        op.execute(f"INSERT INTO {temporary} SELECT * FROM {table}")
        op.execute(f"DROP TABLE {table}")
        op.execute(f"ALTER TABLE {temporary} RENAME TO {table}")
        for sql in indexes:
            op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(OLD, NEW)
    else:
        _retype_postgres(NEW)


def downgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        longest = bind.execute(sa.text(f"SELECT max(length(type)) FROM {table}")).scalar()
        if longest is not None and longest > OLD:
            raise RuntimeError(
                f"{table} holds a block type of {longest} characters (a server tool block); "
                f"revision 0015 keeps at most {OLD}. Delete those conversations first."
            )
    if bind.dialect.name == "sqlite":
        _rebuild_sqlite(NEW, OLD)
    else:
        _retype_postgres(OLD)
