"""Initial schema: the timeline tables, the rollback archive and the audit views.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 13:11:33.339117
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

AUDIT_VIEWS = {
    "effective_blocks": """
        SELECT b.conversation_id, b.message_idx, b.block_idx, b.type, b.tool_use_id,
               b.tool_name, b.text AS original_text,
               COALESCE(u.text, b.text) AS effective_text,
               u.kind AS update_kind, u.source AS update_source, u.ts AS update_ts
        FROM blocks b
        LEFT JOIN context_updates u ON u.id = (
            SELECT u2.id FROM context_updates u2
            WHERE u2.conversation_id = b.conversation_id
              AND u2.message_idx = b.message_idx AND u2.block_idx = b.block_idx
            ORDER BY u2.ts DESC, u2.id DESC LIMIT 1)
    """,
    "visible_messages": """
        SELECT m.conversation_id, m.idx, m.ts, m.role, m.token_count
        FROM messages m
        WHERE m.idx < 2 OR m.idx > COALESCE((
            SELECT r.end_idx FROM deleted_ranges r
            WHERE r.conversation_id = m.conversation_id
            ORDER BY r.ts DESC LIMIT 1), 1)
    """,
    "request_usage": """
        SELECT conversation_id, id AS request_id, ts, model_id, format, tokens_in, tokens_out,
               cache_writes, cache_reads,
               COALESCE(tokens_in, 0) + COALESCE(tokens_out, 0) + COALESCE(cache_writes, 0)
                 + COALESCE(cache_reads, 0) AS total_tokens,
               cost, message_count
        FROM api_requests
    """,
    "truncation_events": """
        SELECT r.conversation_id, r.id, r.ts, r.start_idx, r.end_idx, r.keep, r.reason,
               r.tokens_total, r.summary,
               (SELECT COUNT(*) FROM messages m
                 WHERE m.conversation_id = r.conversation_id
                   AND m.idx BETWEEN r.start_idx AND r.end_idx) AS messages_hidden
        FROM deleted_ranges r
    """,
}


def _create_views() -> None:
    for name, query in AUDIT_VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {query}")


def _drop_views() -> None:
    for name in AUDIT_VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("created_ts", sa.BigInteger(), nullable=False),
        sa.Column("last_ts", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("model_id", sa.String(length=200), nullable=True),
        sa.Column("context_window", sa.Integer(), nullable=True),
        sa.Column("parent_id", sa.String(length=64), nullable=True),
        sa.Column("forked_at_ts", sa.BigInteger(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.CheckConstraint(
            "context_window IS NULL OR context_window > 0",
            name=op.f("ck_conversations_window_positive"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["conversations.id"],
            name=op.f("fk_conversations_parent_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_table(
        "request_options",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_request_options")),
    )
    op.create_table(
        "api_requests",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("tokens_in", sa.Integer(), nullable=True),
        sa.Column("tokens_out", sa.Integer(), nullable=True),
        sa.Column("cache_writes", sa.Integer(), nullable=True),
        sa.Column("cache_reads", sa.Integer(), nullable=True),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("model_id", sa.String(length=200), nullable=True),
        sa.Column("format", sa.String(length=16), nullable=True),
        sa.Column("options_sha256", sa.String(length=64), nullable=True),
        sa.Column("payload_sha256", sa.String(length=64), nullable=True),
        sa.Column("message_count", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_api_requests_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["options_sha256"],
            ["request_options.sha256"],
            name=op.f("fk_api_requests_options_sha256_request_options"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_requests")),
        sa.UniqueConstraint(
            "conversation_id", "ts", name=op.f("uq_api_requests_conversation_id_ts")
        ),
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("git_hash", sa.String(length=64), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_checkpoints_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.UniqueConstraint(
            "conversation_id", "ts", name=op.f("uq_checkpoints_conversation_id_ts")
        ),
    )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.create_index("ix_checkpoints_label", ["conversation_id", "label"], unique=False)

    op.create_table(
        "context_updates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("message_idx", sa.Integer(), nullable=False),
        sa.Column("block_idx", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("base_hash", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_context_updates_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_context_updates")),
        sa.UniqueConstraint(
            "conversation_id",
            "ts",
            "message_idx",
            "block_idx",
            name=op.f("uq_context_updates_conversation_id_ts_message_idx_block_idx"),
        ),
    )
    with op.batch_alter_table("context_updates", schema=None) as batch_op:
        batch_op.create_index(
            "ix_context_updates_block",
            ["conversation_id", "message_idx", "block_idx", "ts"],
            unique=False,
        )

    op.create_table(
        "deleted_ranges",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("start_idx", sa.Integer(), nullable=False),
        sa.Column("end_idx", sa.Integer(), nullable=False),
        sa.Column("keep", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("tokens_total", sa.Integer(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.CheckConstraint("end_idx >= 1", name=op.f("ck_deleted_ranges_end_at_least_one")),
        sa.CheckConstraint("start_idx = 2", name=op.f("ck_deleted_ranges_start_is_two")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_deleted_ranges_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deleted_ranges")),
        sa.UniqueConstraint(
            "conversation_id", "ts", name=op.f("uq_deleted_ranges_conversation_id_ts")
        ),
    )
    op.create_table(
        "messages",
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("was_string", sa.Boolean(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.CheckConstraint("role IN ('user', 'assistant')", name=op.f("ck_messages_role")),
        sa.CheckConstraint("idx >= 0", name=op.f("ck_messages_idx_nonnegative")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_messages_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "idx", name=op.f("pk_messages")),
        sa.UniqueConstraint("conversation_id", "ts", name=op.f("uq_messages_conversation_id_ts")),
    )
    op.create_table(
        "rollbacks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("cutoff_ts", sa.BigInteger(), nullable=False),
        sa.Column("ran_at", sa.BigInteger(), nullable=False),
        sa.Column("target", sa.String(length=200), nullable=True),
        sa.Column("purged", sa.Boolean(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_rollbacks_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollbacks")),
    )
    op.create_table(
        "archived_rows",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rollback_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("table_name", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["rollback_id"],
            ["rollbacks.id"],
            name=op.f("fk_archived_rows_rollback_id_rollbacks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_archived_rows")),
    )
    with op.batch_alter_table("archived_rows", schema=None) as batch_op:
        batch_op.create_index(
            "ix_archived_rows_conversation", ["conversation_id", "ts"], unique=False
        )

    op.create_table(
        "blocks",
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("message_idx", sa.Integer(), nullable=False),
        sa.Column("block_idx", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("tool_use_id", sa.String(length=200), nullable=True),
        sa.Column("tool_name", sa.String(length=200), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id", "message_idx"],
            ["messages.conversation_id", "messages.idx"],
            name=op.f("fk_blocks_conversation_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "conversation_id", "message_idx", "block_idx", name=op.f("pk_blocks")
        ),
    )
    with op.batch_alter_table("blocks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_blocks_tool_use_id", ["conversation_id", "tool_use_id"], unique=False
        )

    _create_views()


def downgrade() -> None:
    _drop_views()
    with op.batch_alter_table("blocks", schema=None) as batch_op:
        batch_op.drop_index("ix_blocks_tool_use_id")

    op.drop_table("blocks")
    with op.batch_alter_table("archived_rows", schema=None) as batch_op:
        batch_op.drop_index("ix_archived_rows_conversation")

    op.drop_table("archived_rows")
    op.drop_table("rollbacks")
    op.drop_table("messages")
    op.drop_table("deleted_ranges")
    with op.batch_alter_table("context_updates", schema=None) as batch_op:
        batch_op.drop_index("ix_context_updates_block")

    op.drop_table("context_updates")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_checkpoints_label")

    op.drop_table("checkpoints")
    op.drop_table("api_requests")
    op.drop_table("request_options")
    op.drop_table("conversations")
