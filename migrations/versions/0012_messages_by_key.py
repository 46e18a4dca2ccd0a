"""Messages keyed by ``(conversation_id, idx)`` alone: no unique ``(conversation_id, ts)``
index; on SQLite the table is ``WITHOUT ROWID``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02

Measured on the benchmark's durable append (README "Performance", "Fourth round"): a
SQLite append wrote 7.4 pages of 8 KiB to the write-ahead log, three of them for
``messages`` alone (its rows, its primary key, its unique ``ts`` index). A ``WITHOUT ROWID``
table keeps its rows in the primary key's b-tree, and no statement needs the ``ts`` index:
a conversation's ``ts`` strictly increase with ``idx`` (the clock's rule; ``contextstore
check`` verifies it as the ``message_ts`` invariant, and every read of a history raises when
it does not hold), so the messages after a rollback's cutoff are read back from the newest
one through the primary key. One b-tree instead of three: 5.3 pages per append, and 0.09x of
the content less on disk.

PostgreSQL keeps its heap (it has no ``WITHOUT ROWID``) and drops the unique constraint,
one index entry less per message appended and per message a rollback archives.

SQLite cannot drop a constraint or change a table's kind in place: ``messages`` is rebuilt
from its own ``CREATE TABLE`` text (read from the database, so this revision stays frozen),
its rows copied in key order, and the views dropped and recreated around it. The downgrade
rebuilds it as revision 0011 left it (a rowid table with the unique constraint) and puts the
PostgreSQL constraint back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UNIQUE_TS = ", \n\tCONSTRAINT uq_messages_conversation_id_ts UNIQUE (conversation_id, ts)"
"""The unique constraint's clause in SQLite's ``CREATE TABLE messages`` text at 0011."""
WITHOUT_ROWID = " WITHOUT ROWID"
TEMPORARY = "_0012_messages"


def _rebuild_sqlite_messages(by_key: bool) -> None:
    """Rebuild ``messages`` on SQLite keyed by its primary key alone (``by_key``) or as
    revision 0011 had it, keeping its rows and every view."""
    bind = op.get_bind()
    schema = bind.execute(sa.text("SELECT type, name, tbl_name, sql FROM sqlite_master")).all()
    views = [(name, sql) for kind, name, _, sql in schema if kind == "view"]
    (create,) = [sql for kind, name, _, sql in schema if kind == "table" and name == "messages"]
    indexes = [
        sql for kind, _, owner, sql in schema if kind == "index" and owner == "messages" and sql
    ]
    if by_key:
        if UNIQUE_TS not in create or not create.endswith("\n)"):
            raise RuntimeError(f"messages is not as revision 0011 made it: {create}")
        rebuilt = create.replace(UNIQUE_TS, "", 1) + WITHOUT_ROWID
    else:
        if not create.endswith("\n)" + WITHOUT_ROWID):
            raise RuntimeError(f"messages is not as revision 0012 made it: {create}")
        rebuilt = create[: -len("\n)" + WITHOUT_ROWID)] + UNIQUE_TS + "\n)"
    name = next(n for n in ("CREATE TABLE messages", 'CREATE TABLE "messages"') if n in rebuilt)
    rebuilt = rebuilt.replace(name, f"CREATE TABLE {TEMPORARY}", 1)
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    op.execute(rebuilt)
    copy = f"INSERT INTO {TEMPORARY} SELECT * FROM messages ORDER BY conversation_id, idx"  # noqa: S608
    op.execute(copy)
    op.execute("DROP TABLE messages")
    op.execute(f"ALTER TABLE {TEMPORARY} RENAME TO messages")
    for sql in indexes:
        op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite_messages(by_key=True)
    else:
        op.drop_constraint("uq_messages_conversation_id_ts", "messages", type_="unique")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite_messages(by_key=False)
    else:
        op.create_unique_constraint(
            "uq_messages_conversation_id_ts", "messages", ["conversation_id", "ts"]
        )
