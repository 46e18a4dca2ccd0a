"""Record why a request failed or was cancelled (``api_requests.failure``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Cline marks requests that failed or were cancelled (``cancelReason``: streaming_failed,
user_cancelled, retries_exhausted); agents retrying after a context-window error want the
same in their audit trail. The ``request_usage`` view gains the column, so the views are
dropped around the table change (SQLite rebuilds the table on downgrade, and a rename
fails while a view names a missing table).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Revisions are frozen history: the view definitions are copied here, not imported.
VIEWS_0001 = {
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

REQUEST_USAGE = """
    SELECT conversation_id, id AS request_id, ts, model_id, format, tokens_in, tokens_out,
           cache_writes, cache_reads,
           COALESCE(tokens_in, 0) + COALESCE(tokens_out, 0) + COALESCE(cache_writes, 0)
             + COALESCE(cache_reads, 0) AS total_tokens,
           cost, message_count, failure
    FROM api_requests
"""


VIEWS_0002 = {**VIEWS_0001, "request_usage": REQUEST_USAGE}


def _replace_views(views: dict[str, str]) -> None:
    for name in views:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, query in views.items():
        op.execute(f"CREATE VIEW {name} AS {query}")


def upgrade() -> None:
    for name in VIEWS_0001:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("api_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failure", sa.String(length=200), nullable=True))
    _replace_views(VIEWS_0002)


def downgrade() -> None:
    for name in VIEWS_0002:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("api_requests", schema=None) as batch_op:
        batch_op.drop_column("failure")
    _replace_views(VIEWS_0001)
