# ruff: noqa: S608
# (the view SQL is assembled from constants; no caller data reaches it)
"""Views that answer the audit questions: requests against the window, files read,
de-duplication savings, masked secrets, failed tool calls, rollbacks, one timeline.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

No table changes. A later revision that alters a table these views read must drop and
recreate them around the change (SQLite rebuilds tables; PostgreSQL refuses to alter a
column a view depends on). JSON access and a few scalar functions differ between SQLite and
PostgreSQL, so each view is written once with the dialect's spelling filled in. The views
are documented column by column in the README ("Audit views") and in the Datasette
metadata shipped with the CLI.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Revisions are frozen history: the view definitions live here, not in the package.
_SQLITE = {
    "text": "json_extract({col}, '$.{path}')",
    "json": "json_extract({col}, '$.{path}')",
    "true": "json_extract({col}, '$.{path}') = 1",
    "greatest": "MAX",
    "instr": "instr({haystack}, {needle})",
}
_POSTGRES = {
    "text": "({col} #>> '{{{pgpath}}}')",
    "json": "CAST({col} #> '{{{pgpath}}}' AS TEXT)",
    "true": "({col} #>> '{{{pgpath}}}') = 'true'",
    "greatest": "GREATEST",
    "instr": "strpos({haystack}, {needle})",
}


class _Dialect:
    def __init__(self, name: str) -> None:
        self.spelling = _SQLITE if name == "sqlite" else _POSTGRES

    def _json(self, kind: str, col: str, path: str) -> str:
        return self.spelling[kind].format(col=col, path=path, pgpath=path.replace(".", ","))

    def text(self, col: str, path: str) -> str:
        return self._json("text", col, path)

    def json(self, col: str, path: str) -> str:
        return self._json("json", col, path)

    def true(self, col: str, path: str) -> str:
        return self._json("true", col, path)

    def instr(self, haystack: str, needle: str) -> str:
        return self.spelling["instr"].format(haystack=haystack, needle=needle)

    @property
    def greatest(self) -> str:
        return self.spelling["greatest"]


def _views(d: _Dialect) -> dict[str, str]:
    window = "COALESCE(c.context_window, 128000)"
    total = (
        "(COALESCE(r.tokens_in, 0) + COALESCE(r.tokens_out, 0) + COALESCE(r.cache_writes, 0)"
        " + COALESCE(r.cache_reads, 0))"
    )
    max_allowed = (
        f"CAST(CASE {window} WHEN 64000 THEN 37000 WHEN 128000 THEN 98000 "
        f"WHEN 200000 THEN 160000 "
        f"ELSE {d.greatest}({window} - 40000.0, {window} * 0.8) END AS DOUBLE PRECISION)"
    )
    running = "OVER (PARTITION BY r.conversation_id ORDER BY r.ts ROWS UNBOUNDED PRECEDING)"
    path = (
        f"COALESCE({d.text('b.data', 'input.path')}, {d.text('b.data', 'input.file_path')}, "
        f"{d.text('b.data', 'input.absolute_path')})"
    )
    marker = "'[REDACTED:'"
    at = d.instr("rest", marker)
    close = d.instr(f"substr(rest, {at} + 10)", "']'")
    return {
        "audit_requests": f"""
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
            FROM api_requests r JOIN conversations c ON c.id = r.conversation_id
        """,
        "audit_file_reads": f"""
            SELECT b.conversation_id, {path} AS path, b.tool_name, COUNT(*) AS reads,
                   MIN(b.message_idx) AS first_message_idx,
                   MAX(b.message_idx) AS last_message_idx
            FROM blocks b
            WHERE b.type = 'tool_use' AND b.tool_name IN ('read_file', 'Read')
              AND {path} IS NOT NULL
            GROUP BY b.conversation_id, {path}, b.tool_name
        """,
        "audit_dedup_savings": """
            SELECT u.conversation_id, u.id AS update_id, u.ts, u.message_idx, u.block_idx,
                   u.kind, u.source,
                   LENGTH(COALESCE(b.text, '')) AS original_chars,
                   LENGTH(u.text) AS rewritten_chars,
                   LENGTH(COALESCE(b.text, '')) - LENGTH(u.text) AS chars_saved
            FROM context_updates u
            JOIN blocks b ON b.conversation_id = u.conversation_id
                 AND b.message_idx = u.message_idx AND b.block_idx = u.block_idx
            WHERE u.kind IN ('read_file', 'alter_file', 'file_mention')
        """,
        "masked_secrets": f"""
            WITH RECURSIVE scan(conversation_id, message_idx, block_idx, masked_by, rest,
                                kind) AS (
                SELECT conversation_id, message_idx, block_idx,
                       CASE WHEN update_kind IS NULL THEN 'stored' ELSE 'rewrite' END,
                       CAST(effective_text AS TEXT), CAST(NULL AS TEXT)
                FROM effective_blocks WHERE effective_text LIKE '%[REDACTED:%'
                UNION ALL
                SELECT conversation_id, message_idx, block_idx, masked_by,
                       substr(rest, {at} + 10 + {close}),
                       substr(rest, {at} + 10, {close} - 1)
                FROM scan WHERE {at} > 0
            )
            SELECT conversation_id, message_idx, block_idx, kind, masked_by
            FROM scan WHERE kind IS NOT NULL AND kind <> ''
        """,
        "audit_failed_tool_calls": f"""
            SELECT r.conversation_id, r.message_idx AS result_message_idx,
                   c.message_idx AS call_message_idx, r.tool_use_id, c.tool_name,
                   {d.json("c.data", "input")} AS input,
                   substr(COALESCE(r.text, ''), 1, 300) AS error
            FROM blocks r
            LEFT JOIN blocks c ON c.conversation_id = r.conversation_id
                 AND c.tool_use_id = r.tool_use_id AND c.type = 'tool_use'
            WHERE r.type = 'tool_result' AND {d.true("r.data", "is_error")}
        """,
        "audit_rollbacks": f"""
            SELECT k.id AS rollback_id, k.conversation_id, k.cutoff_ts, k.ran_at, k.target,
                   k.purged, k.restored_ts,
                   COALESCE(CAST({d.text("k.counts", "messages")} AS INTEGER), 0)
                     AS messages_removed,
                   COALESCE(CAST({d.text("k.counts", "blocks")} AS INTEGER), 0)
                     AS blocks_removed,
                   COALESCE(CAST({d.text("k.counts", "deleted_ranges")} AS INTEGER), 0)
                     AS ranges_removed,
                   COALESCE(CAST({d.text("k.counts", "context_updates")} AS INTEGER), 0)
                     AS updates_removed,
                   COALESCE(CAST({d.text("k.counts", "api_requests")} AS INTEGER), 0)
                     AS requests_removed,
                   COALESCE(CAST({d.text("k.counts", "checkpoints")} AS INTEGER), 0)
                     AS checkpoints_removed,
                   (SELECT COUNT(*) FROM archived_rows a WHERE a.rollback_id = k.id)
                     AS rows_archived
            FROM rollbacks k
        """,
        "audit_timeline": """
            SELECT conversation_id, ts, 'message' AS event, idx AS ref_id, idx AS message_idx,
                   role || ' message, ' || CAST(token_count AS TEXT) || ' tokens' AS detail
            FROM messages
            UNION ALL
            SELECT conversation_id, ts, 'truncation', id, end_idx,
                   'messages 2-' || CAST(end_idx AS TEXT) || ' hidden (keep ' || keep || ')'
            FROM deleted_ranges
            UNION ALL
            SELECT conversation_id, ts, 'rewrite', id, message_idx,
                   kind || ' of block ' || CAST(message_idx AS TEXT) || '.'
                     || CAST(block_idx AS TEXT) || ' by ' || source
            FROM context_updates
            UNION ALL
            SELECT conversation_id, ts, 'request', id, CAST(NULL AS INTEGER),
                   CASE WHEN COALESCE(tokens_in, tokens_out, cache_writes, cache_reads) IS NULL
                        THEN 'no usage recorded'
                        ELSE CAST(COALESCE(tokens_in, 0) + COALESCE(tokens_out, 0)
                                  + COALESCE(cache_writes, 0) + COALESCE(cache_reads, 0) AS TEXT)
                             || ' tokens' END
                     || COALESCE(', failed: ' || failure, '')
            FROM api_requests
            UNION ALL
            SELECT conversation_id, ts, 'checkpoint', id, CAST(NULL AS INTEGER),
                   COALESCE(label, '(no label)') || COALESCE(': ' || note, '')
            FROM checkpoints
            UNION ALL
            SELECT conversation_id, ran_at, 'rollback', id, CAST(NULL AS INTEGER),
                   'to ts ' || CAST(cutoff_ts AS TEXT) || COALESCE(' (' || target || ')', '')
            FROM rollbacks
            UNION ALL
            SELECT conversation_id, restored_ts, 'restore', id, CAST(NULL AS INTEGER),
                   'rows of rollback ' || CAST(id AS TEXT) || ' put back'
            FROM rollbacks WHERE restored_ts IS NOT NULL
        """,
    }


def upgrade() -> None:
    for name, query in _views(_Dialect(op.get_bind().dialect.name)).items():
        op.execute(f"CREATE VIEW {name} AS {query}")


def downgrade() -> None:
    for name in reversed(list(_views(_Dialect(op.get_bind().dialect.name)))):
        op.execute(f"DROP VIEW IF EXISTS {name}")
