"""Typed archives: a rollback's removed rows go to ``archived_<table>``, not JSON rows;
blocks lose their foreign key to messages.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

Measured with ``EXPLAIN (ANALYZE, BUFFERS)`` on PostgreSQL (README "Performance", "Archive
tables"): of a rollback's one statement at 10,000 messages, building each removed row's JSON
(``to_jsonb``), inserting it into ``archived_rows`` with a sequence value, three index entries
and TOAST compression, and the foreign-key check of ``archived_rows.rollback_id`` (one trigger
call per row) took three quarters. Now each archived table has an archive of the same columns
after a ``rollback_id`` (``archived_messages``, ``archived_blocks``, ... one per table a
rollback removes rows from), indexed by ``rollback_id`` only, without a foreign key: the rows
move with ``INSERT ... SELECT`` of the same columns, and are deleted with their rollback
explicitly (a conversation's deletion deletes them by statement).

The same profile showed the ``blocks -> messages`` cascade (``ON DELETE CASCADE``) running one
trigger call per deleted message although the statement had deleted the blocks first: half of
a purge. The foreign key is dropped (PostgreSQL: ``DROP CONSTRAINT``; SQLite: ``blocks`` rebuilt
without it, its rows, index and the views kept); every statement that deletes messages deletes
their blocks, and ``contextstore check`` finds a block without its message. The downgrade
deletes such blocks, if any, and puts the constraint back.

Both backends. The upgrade creates the archives from the columns the tables have at 0010
(read from the database, so this revision stays frozen), moves every ``archived_rows`` row
into its table's archive (``jsonb_populate_record`` on PostgreSQL, ``json_extract`` per
column on SQLite, as a restore read them), drops ``archived_rows`` and redefines the
``audit_rollbacks`` view's ``rows_archived`` as the sum over the archives. The downgrade
rebuilds ``archived_rows`` as 0010 had it and moves the rows back as JSON objects (a block's
``ts`` is its rollback's cutoff, as the old archive recorded it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

ARCHIVED = (
    "messages",
    "blocks",
    "deleted_ranges",
    "context_updates",
    "api_requests",
    "checkpoints",
    "source_records",
    "lineage",
    "processor_runs",
)
"""Tables a rollback archives rows of, in restore order (a frozen list)."""

WITH_ID = {name for name in ARCHIVED if name not in ("messages", "blocks")}
"""Tables whose rows have an ``id`` (``archived_rows.row_id`` held it)."""

_ARCHIVED_ROWS_SQLITE = (
    'CREATE TABLE "archived_rows" (\n\tid INTEGER NOT NULL CONSTRAINT pk_archived_rows PRIMARY '
    "KEY AUTOINCREMENT, \n\trollback_id INTEGER NOT NULL, \n\tconversation_id VARCHAR(64) NOT "
    "NULL, \n\ttable_name VARCHAR(32) NOT NULL, \n\tts BIGINT NOT NULL, \n\tdata JSON NOT NULL, "
    "row_id INTEGER, \n\tCONSTRAINT fk_archived_rows_rollback_id_rollbacks FOREIGN "
    "KEY(rollback_id) REFERENCES rollbacks (id) ON DELETE CASCADE\n)"
)
"""``archived_rows`` as SQLite held it at 0010 (revision 0007's rebuild, then its column)."""

_COUNTS_TEXT = {
    "sqlite": "json_extract(k.counts, '$.{key}')",
    "postgresql": "(k.counts #>> '{{{key}}}')",
}


def _audit_rollbacks(dialect: str, archived: str) -> str:
    """The ``audit_rollbacks`` query as revision 0004 wrote it, with ``archived`` as its
    ``rows_archived`` expression."""
    spell = _COUNTS_TEXT[dialect]
    return f"""
            SELECT k.id AS rollback_id, k.conversation_id, k.cutoff_ts, k.ran_at, k.target,
                   k.purged, k.restored_ts,
                   COALESCE(CAST({spell.format(key="messages")} AS INTEGER), 0)
                     AS messages_removed,
                   COALESCE(CAST({spell.format(key="blocks")} AS INTEGER), 0)
                     AS blocks_removed,
                   COALESCE(CAST({spell.format(key="deleted_ranges")} AS INTEGER), 0)
                     AS ranges_removed,
                   COALESCE(CAST({spell.format(key="context_updates")} AS INTEGER), 0)
                     AS updates_removed,
                   COALESCE(CAST({spell.format(key="api_requests")} AS INTEGER), 0)
                     AS requests_removed,
                   COALESCE(CAST({spell.format(key="checkpoints")} AS INTEGER), 0)
                     AS checkpoints_removed,
                   {archived}
                     AS rows_archived
            FROM rollbacks k
        """  # noqa: S608 (constants)


_OLD_ARCHIVED = "(SELECT COUNT(*) FROM archived_rows a WHERE a.rollback_id = k.id)"
_NEW_ARCHIVED = "({})".format(
    " + ".join(
        f"(SELECT COUNT(*) FROM archived_{name} a WHERE a.rollback_id = k.id)"  # noqa: S608
        for name in ARCHIVED
    )
)


BLOCKS_FK = (
    ", \n\tCONSTRAINT fk_blocks_conversation_id_messages FOREIGN KEY(conversation_id, "
    "message_idx) REFERENCES messages (conversation_id, idx) ON DELETE CASCADE"
)
"""The foreign key's clause in SQLite's ``CREATE TABLE blocks`` text at 0010."""
TEMPORARY = "_0011_blocks"


def _rebuild_sqlite_blocks(drop_key: bool) -> None:
    """Rebuild ``blocks`` on SQLite with (``drop_key`` False) or without its foreign key,
    keeping its rows, its index and every view (SQLite cannot drop a constraint in place)."""
    bind = op.get_bind()
    schema = bind.execute(sa.text("SELECT type, name, tbl_name, sql FROM sqlite_master")).all()
    views = [(name, sql) for kind, name, _, sql in schema if kind == "view"]
    (create,) = [sql for kind, name, _, sql in schema if kind == "table" and name == "blocks"]
    indexes = [
        sql for kind, _, owner, sql in schema if kind == "index" and owner == "blocks" and sql
    ]
    if drop_key:
        if BLOCKS_FK not in create:
            raise RuntimeError(f"blocks does not have the expected foreign key: {create}")
        rebuilt = create.replace(BLOCKS_FK, "", 1)
    else:
        if BLOCKS_FK in create or not create.endswith("\n)"):
            raise RuntimeError(f"blocks is not as revision 0011 made it: {create}")
        rebuilt = create[: -len("\n)")] + BLOCKS_FK + "\n)"
    rebuilt = rebuilt.replace('CREATE TABLE "blocks"', f"CREATE TABLE {TEMPORARY}", 1)
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    op.execute(rebuilt)
    op.execute(f"INSERT INTO {TEMPORARY} SELECT * FROM blocks")  # noqa: S608 (constants)
    op.execute("DROP TABLE blocks")
    op.execute(f'ALTER TABLE {TEMPORARY} RENAME TO "blocks"')
    for sql in indexes:
        op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def _drop_blocks_key(dialect: str) -> None:
    if dialect == "sqlite":
        _rebuild_sqlite_blocks(drop_key=True)
    else:
        op.drop_constraint("fk_blocks_conversation_id_messages", "blocks", type_="foreignkey")


def _restore_blocks_key(dialect: str) -> None:
    op.execute(
        "DELETE FROM blocks WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE "
        "m.conversation_id = blocks.conversation_id AND m.idx = blocks.message_idx)"
    )
    if dialect == "sqlite":
        _rebuild_sqlite_blocks(drop_key=False)
    else:
        op.create_foreign_key(
            "fk_blocks_conversation_id_messages",
            "blocks",
            "messages",
            ["conversation_id", "message_idx"],
            ["conversation_id", "idx"],
            ondelete="CASCADE",
        )


def _columns(name: str) -> list[sa.Column[object]]:
    """The columns ``name`` has in the database (names, types, nullability)."""
    reflected = sa.Table(name, sa.MetaData(), autoload_with=op.get_bind())
    return [sa.Column(c.name, c.type, nullable=c.nullable) for c in reflected.columns]


def _is_json(column: sa.Column[object]) -> bool:
    return isinstance(column.type, sa.JSON)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS audit_rollbacks")
    for name in ARCHIVED:
        columns = _columns(name)
        op.create_table(
            f"archived_{name}",
            sa.Column("rollback_id", sa.Integer(), nullable=False),
            *columns,
        )
        op.create_index(f"ix_archived_{name}_rollback", f"archived_{name}", ["rollback_id"])
        listed = ", ".join(c.name for c in columns)
        if dialect == "postgresql":
            picked = ", ".join(f"r.{c.name}" for c in columns)
            source = f"archived_rows a, jsonb_populate_record(NULL::{name}, a.data) AS r"
        else:
            picked = ", ".join(f"json_extract(a.data, '$.{c.name}')" for c in columns)
            source = "archived_rows a"
        op.execute(
            f"INSERT INTO archived_{name} (rollback_id, {listed}) "  # noqa: S608 (constants)
            f"SELECT a.rollback_id, {picked} FROM {source} "
            f"WHERE a.table_name = '{name}' ORDER BY a.id"
        )
    op.drop_table("archived_rows")
    op.execute(f"CREATE VIEW audit_rollbacks AS {_audit_rollbacks(dialect, _NEW_ARCHIVED)}")
    _drop_blocks_key(dialect)


def _create_archived_rows(dialect: str) -> None:
    if dialect == "sqlite":
        op.execute(_ARCHIVED_ROWS_SQLITE)
    else:
        op.create_table(
            "archived_rows",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("rollback_id", sa.Integer(), nullable=False),
            sa.Column("conversation_id", sa.String(64), nullable=False),
            sa.Column("table_name", sa.String(32), nullable=False),
            sa.Column("ts", sa.BigInteger(), nullable=False),
            sa.Column("data", sa.dialects.postgresql.JSONB(), nullable=False),
            sa.Column("row_id", sa.Integer(), nullable=True),
            sa.ForeignKeyConstraint(
                ["rollback_id"],
                ["rollbacks.id"],
                name="fk_archived_rows_rollback_id_rollbacks",
                ondelete="CASCADE",
            ),
            sa.PrimaryKeyConstraint("id", name="pk_archived_rows"),
        )
        lz4 = op.get_bind().execute(
            sa.text(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            )
        )
        if lz4.scalar():
            op.execute("ALTER TABLE archived_rows ALTER COLUMN data SET COMPRESSION lz4")
    op.create_index("ix_archived_rows_conversation", "archived_rows", ["conversation_id", "ts"])
    op.create_index(
        "ix_archived_rows_rollback", "archived_rows", ["rollback_id", "table_name", "id"]
    )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _restore_blocks_key(dialect)
    op.execute("DROP VIEW IF EXISTS audit_rollbacks")
    _create_archived_rows(dialect)
    for name in ARCHIVED:
        columns = [c for c in _columns(f"archived_{name}") if c.name != "rollback_id"]
        if dialect == "postgresql":
            data = "to_jsonb(a) - 'rollback_id'"
        else:
            pairs = ", ".join(
                f"'{c.name}', " + (f"json(a.{c.name})" if _is_json(c) else f"a.{c.name}")
                for c in columns
            )
            data = f"json_object({pairs})"
        ts = (
            "a.ts"
            if name != "blocks"
            else ("(SELECT k.cutoff_ts FROM rollbacks k WHERE k.id = a.rollback_id)")
        )
        row_id = "a.id" if name in WITH_ID else "NULL"
        op.execute(
            "INSERT INTO archived_rows (rollback_id, conversation_id, table_name, ts, data, "  # noqa: S608
            f"row_id) SELECT a.rollback_id, a.conversation_id, '{name}', {ts}, {data}, {row_id} "
            f"FROM archived_{name} a WHERE EXISTS (SELECT 1 FROM rollbacks k "
            "WHERE k.id = a.rollback_id)"
        )
        op.drop_index(f"ix_archived_{name}_rollback", table_name=f"archived_{name}")
        op.drop_table(f"archived_{name}")
    op.execute(f"CREATE VIEW audit_rollbacks AS {_audit_rollbacks(dialect, _OLD_ARCHIVED)}")
