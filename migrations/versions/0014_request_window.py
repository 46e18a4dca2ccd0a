# ruff: noqa: S608
# (the view SQL is assembled from constants; no caller data reaches it)
"""``audit_requests`` judges each prepared request against the window it was decided with.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03

A conversation's model and window can change after it was created
(``set_conversation_model``, when a user switches models mid-task). Revision 0004's view
measured every request against the conversation's current window, so a request sent to a
200,000-token model read as 150 % of the window once the conversation moved to a
128,000-token one. A prepared request now records the window its decision used
(``context_window`` in its options, the effective value: 128,000 for an unknown window);
the view reads it there, and falls back to the conversation's window for requests that
have no options (recorded without a prepare, imported, or prepared before this revision).

No table changes: the view is dropped and created again. The downgrade restores revision
0004's definition.
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

CONVERSATION_WINDOW = "COALESCE(c.context_window, 128000)"
"""Revision 0004's window: the conversation's, whatever the request was sent with."""
RECORDED = {
    "sqlite": "CAST(json_extract(o.data, '$.context_window') AS INTEGER)",
    "postgresql": "CAST(o.data #>> '{context_window}' AS INTEGER)",
}
"""The window a prepared request recorded in its options, per dialect."""
JOIN_OPTIONS = "LEFT JOIN request_options o ON o.sha256 = r.options_sha256"


def _audit_requests(window: str, greatest: str, join: str) -> str:
    """The ``audit_requests`` query, measured against ``window`` (a SQL expression)."""
    total = (
        "(COALESCE(r.tokens_in, 0) + COALESCE(r.tokens_out, 0) + COALESCE(r.cache_writes, 0)"
        " + COALESCE(r.cache_reads, 0))"
    )
    max_allowed = (
        f"CAST(CASE {window} WHEN 64000 THEN 37000 WHEN 128000 THEN 98000 "
        f"WHEN 200000 THEN 160000 "
        f"ELSE {greatest}({window} - 40000.0, {window} * 0.8) END AS DOUBLE PRECISION)"
    )
    running = "OVER (PARTITION BY r.conversation_id ORDER BY r.ts ROWS UNBOUNDED PRECEDING)"
    return f"""
            SELECT r.conversation_id, r.id AS request_id, r.ts, r.model_id, r.format,
                   r.tokens_in, r.tokens_out, r.cache_writes, r.cache_reads,
                   {total} AS total_tokens, r.cost,
                   SUM({total}) {running} AS cumulative_tokens,
                   SUM(COALESCE(r.cost, 0)) {running} AS cumulative_cost,
                   {window} AS context_window,
                   {max_allowed} AS max_allowed_size,
                   CAST(100.0 * {total} / {window} AS DOUBLE PRECISION) AS percent_of_window,
                   CASE WHEN {total} >= {max_allowed} THEN 1 ELSE 0 END AS over_max_allowed,
                   r.message_count, r.failure,
                   CASE WHEN r.payload_sha256 IS NULL THEN 0 ELSE 1 END AS prepared
            FROM api_requests r JOIN conversations c ON c.id = r.conversation_id{join}
        """


def _replace(recorded: bool) -> None:
    dialect = op.get_bind().dialect.name
    greatest = "MAX" if dialect == "sqlite" else "GREATEST"
    if recorded:
        window = f"COALESCE({RECORDED[dialect]}, c.context_window, 128000)"
        query = _audit_requests(window, greatest, f"\n            {JOIN_OPTIONS}")
    else:
        query = _audit_requests(CONVERSATION_WINDOW, greatest, "")
    op.execute("DROP VIEW audit_requests")
    op.execute(f"CREATE VIEW audit_requests AS {query}")


def upgrade() -> None:
    _replace(recorded=True)


def downgrade() -> None:
    _replace(recorded=False)
