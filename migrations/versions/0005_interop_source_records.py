"""Keep what other agents write beside the model history: ``source_records`` and
``api_requests.details``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

A Cline task's UI messages (``ui_messages.json``: checkpoints, tool and command output,
reasoning, retries) and a Gemini CLI session's records are timeline rows of their own, so
that an export writes them back unchanged and a rollback removes and archives them like
every other row. A request row gains ``details``: what Cline or Gemini CLI recorded about it
beyond the token counts (Cline's ``streamingFailedMessage`` and retries, Gemini's thought
and tool token counts).

No view reads the new column, but SQLite rebuilds ``api_requests`` to drop it, which fails
while a view names the table; the downgrade therefore drops the views around that step and
recreates them from the definitions the database holds at that moment.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "source_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("origin", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("source_ts", sa.BigInteger(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_source_records_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_source_records")),
        sa.UniqueConstraint(
            "conversation_id", "ts", name=op.f("uq_source_records_conversation_id_ts")
        ),
    )
    with op.batch_alter_table("api_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("details", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_table("source_records")
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_column("api_requests", "details")
        return
    views = bind.execute(
        sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name")
    ).all()
    for name, _ in views:
        op.execute(f'DROP VIEW IF EXISTS "{name}"')
    with op.batch_alter_table("api_requests", schema=None) as batch_op:
        batch_op.drop_column("details")
    for _, sql in views:
        op.execute(sql)
