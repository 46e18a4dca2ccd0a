# ruff: noqa: S608
# (the view SQL is assembled from constants; no caller data reaches it)
"""The views show what the model is sent: orphan results out of ``active_nodes``, a rewritten
list result's other texts kept, ``audit_rollbacks.purged`` an integer on every backend.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

- ``active_nodes`` listed every block of the visible messages, the tool results the view
  drops included (a result in the first message after a cut whose call the cut hid, which
  the model never receives: the pairing repair sends a ``result missing`` placeholder in its
  place). It now keeps the blocks ``masked_secrets`` counts, and both follow view rules 11:
  a result in the first message after the cut is dropped when message 1 issued no call with
  its id, and also when the hidden message just before it issued one (an agent that reuses
  ids answered message 1's call with the hidden call's result); revision 0015's
  ``masked_secrets`` kept those.
- ``effective_blocks.effective_text`` and ``active_nodes.text`` of a tool result held as a
  list, after a ``text`` rewrite, were the rewrite alone; the rewrite replaces the first text
  item only and the model is still sent the others: the text is now the rewrite followed by
  them, joined as ``original_text`` joins them (a line break between items).
- ``audit_rollbacks.purged`` was PostgreSQL's ``boolean`` (``true``/``false``; ``purged = 1``
  failed there) and SQLite's 0/1: it is 0 or 1 on both. No other documented view column is
  a boolean on PostgreSQL.

Views only; no table changes. The downgrade puts revision 0015's ``masked_secrets``,
0008's ``active_nodes``, 0002's ``effective_blocks`` and 0011's ``audit_rollbacks`` back.
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# Revisions are frozen history: the view definitions live here (the earlier ones copied), not
# in the package.

SHOWN_0017 = """
                    JOIN (
                        SELECT s.conversation_id, s.message_idx, s.block_idx
                        FROM (
                            SELECT c.conversation_id, c.message_idx, c.block_idx, c.type,
                                   c.tool_use_id,
                                   COALESCE((SELECT r.end_idx FROM deleted_ranges r
                                             WHERE r.conversation_id = c.conversation_id
                                             ORDER BY r.ts DESC, r.id DESC LIMIT 1), 1)
                                       AS end_idx
                            FROM blocks c
                        ) s
                        WHERE (s.message_idx < 2 OR s.message_idx > s.end_idx)
                          AND (s.type <> 'tool_result' OR (
                              EXISTS (
                                  SELECT 1 FROM blocks t
                                  WHERE t.conversation_id = s.conversation_id
                                    AND t.message_idx = CASE
                                        WHEN s.message_idx = CASE WHEN s.end_idx > 1
                                                                  THEN s.end_idx ELSE 1 END + 1
                                        THEN 1 ELSE s.message_idx - 1 END
                                    AND t.type = 'tool_use' AND t.tool_use_id = s.tool_use_id)
                              AND NOT (
                                  s.end_idx > 1 AND s.message_idx = s.end_idx + 1
                                  AND EXISTS (
                                      SELECT 1 FROM blocks h
                                      WHERE h.conversation_id = s.conversation_id
                                        AND h.message_idx = s.end_idx
                                        AND h.type = 'tool_use'
                                        AND h.tool_use_id = s.tool_use_id))
                              AND NOT EXISTS (
                                  SELECT 1 FROM blocks d
                                  WHERE d.conversation_id = s.conversation_id
                                    AND d.message_idx = s.message_idx
                                    AND d.type = 'tool_result'
                                    AND d.tool_use_id = s.tool_use_id
                                    AND d.block_idx > s.block_idx)))
                    ) shown ON shown.conversation_id = b.conversation_id
                           AND shown.message_idx = b.message_idx
                           AND shown.block_idx = b.block_idx"""
"""The blocks the model is shown, by view rules 11: messages 0 and 1, then those after the
newest deleted range's end; of their tool results, those answering a call of the message
the view shows before theirs (message 1 for the first message after a cut) that, in the
first message after a cut, the hidden message just before it did not issue too; the last
one where a call is answered twice. Tool results are only in user messages, calls only in
assistant ones. The stored calls are read: a call a ``block`` rewrite replaced by text
still counts."""

SHOWN_0015 = """
                    JOIN (
                        SELECT s.conversation_id, s.message_idx, s.block_idx
                        FROM (
                            SELECT c.conversation_id, c.message_idx, c.block_idx, c.type,
                                   c.tool_use_id,
                                   COALESCE((SELECT r.end_idx FROM deleted_ranges r
                                             WHERE r.conversation_id = c.conversation_id
                                             ORDER BY r.ts DESC, r.id DESC LIMIT 1), 1)
                                       AS end_idx
                            FROM blocks c
                        ) s
                        WHERE (s.message_idx < 2 OR s.message_idx > s.end_idx)
                          AND (s.type <> 'tool_result' OR (
                              EXISTS (
                                  SELECT 1 FROM blocks t
                                  WHERE t.conversation_id = s.conversation_id
                                    AND t.message_idx = CASE
                                        WHEN s.message_idx = CASE WHEN s.end_idx > 1
                                                                  THEN s.end_idx ELSE 1 END + 1
                                        THEN 1 ELSE s.message_idx - 1 END
                                    AND t.type = 'tool_use' AND t.tool_use_id = s.tool_use_id)
                              AND NOT EXISTS (
                                  SELECT 1 FROM blocks d
                                  WHERE d.conversation_id = s.conversation_id
                                    AND d.message_idx = s.message_idx
                                    AND d.type = 'tool_result'
                                    AND d.tool_use_id = s.tool_use_id
                                    AND d.block_idx > s.block_idx)))
                    ) shown ON shown.conversation_id = b.conversation_id
                           AND shown.message_idx = b.message_idx
                           AND shown.block_idx = b.block_idx"""
"""Revision 0015's blocks the model is shown (copied): messages 0 and 1, then those after
the newest deleted range's end; of their tool results, those answering a call of the
message the view shows before theirs (message 1 for the first message after a cut), the
last one where a call is answered twice."""


class _Dialect:
    """The few spellings that differ between SQLite and PostgreSQL (``jsonb`` columns)."""

    def __init__(self, name: str) -> None:
        self.sqlite = name == "sqlite"

    def value(self, col: str, *path: str | int) -> str:
        """The value at ``path``: a string as itself, an object or array as JSON text."""
        if self.sqlite:
            spelled = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            return f"json_extract({col}, '${spelled}')"
        return f"({col} #>> '{{{','.join(str(p) for p in path)}}}')"

    def is_array(self, col: str, key: str) -> str:
        """True when ``col``'s ``key`` holds an array."""
        if self.sqlite:
            return f"json_type({col}, '$.{key}') = 'array'"
        return f"jsonb_typeof({col} -> '{key}') = 'array'"

    def rest_of_array(self, col: str, key: str) -> str:
        """The array at ``key`` without its first item, as JSON text (an array only)."""
        if self.sqlite:
            return f"json_extract(json_remove({col}, '$.{key}[0]'), '$.{key}')"
        return f"CAST(({col} -> '{key}') - 0 AS TEXT)"

    def instr(self, haystack: str, needle: str) -> str:
        return f"instr({haystack}, {needle})" if self.sqlite else f"strpos({haystack}, {needle})"


def _masked_secrets(d: _Dialect, shown_join: str) -> str:
    """Revision 0015's ``masked_secrets`` (copied), over the blocks ``shown_join`` keeps:
    per block, its stored content as shown and what is shown now; the markers of the
    latter, each ``stored`` or ``rewrite``."""
    v = d.value
    newline = "char(10)" if d.sqlite else "chr(10)"

    def joined(*parts: str) -> str:
        """``parts`` (each may be NULL) as one text, a newline between them: a marker never
        spans two of them."""
        return f" || {newline} || ".join(f"COALESCE({p}, '')" for p in parts)

    first_is_text = f"{v('b.data', 'content', 0, 'type')} = 'text'"
    # The first text item of a list result whose text the ``text`` column holds alone
    # (revision 0006's layout); otherwise the list in ``data`` has every text.
    text_moved = (
        f"{first_is_text} AND {v('b.data', 'content', 0, 'text')} IS NULL "
        f"AND {v('b.data', 'content', 0, '_exact')} IS NULL"
    )
    result_list = d.is_array("b.data", "content")
    stored = f"""CASE b.type
            WHEN 'text' THEN {joined("b.text", v("b.data", "citations"))}
            WHEN 'thinking' THEN CASE WHEN COALESCE({v("b.data", "signature")}, '') <> ''
                                      THEN b.text END
            WHEN 'tool_use' THEN {v("b.data", "input")}
            WHEN 'tool_result' THEN CASE
                WHEN {result_list} THEN {
        joined(f"CASE WHEN {text_moved} THEN b.text END", v("b.data", "content"))
    }
                ELSE b.text END
            WHEN 'document' THEN {
        joined(*(v("b.data", k) for k in ("source", "title", "context", "citations")))
    }
        END"""
    # Over the row of ``stored_text`` below: what is shown with the newest rewrite applied.
    shown = f"""CASE
            WHEN mode IS NULL THEN stored_text
            WHEN mode = 'block' THEN update_text
            WHEN mode = 'tool_input' AND type = 'tool_use' THEN update_text
            WHEN mode = 'text' AND type = 'text'
                 THEN {joined("update_text", v("data", "citations"))}
            WHEN mode = 'text' AND type = 'tool_result' AND {d.is_array("data", "content")} THEN
                CASE WHEN {v("data", "content", 0, "type")} = 'text'
                     THEN {joined("update_text", d.rest_of_array("data", "content"))}
                     ELSE stored_text END
            WHEN mode = 'text' AND type = 'tool_result' AND text IS NOT NULL
                 AND {v("data", "content")} IS NULL THEN update_text
            ELSE stored_text
        END"""
    at = d.instr("rest", "'[REDACTED:'")
    close = d.instr(f"substr(rest, {at} + 10)", "']'")
    kind = f"substr(rest, {at} + 10, {close} - 1)"
    # A kind is a name: an unclosed marker, or one whose "kind" would run over a space, a
    # line or another marker, is not counted.
    is_kind = " AND ".join(
        [f"{close} > 1", *(f"{d.instr(kind, c)} = 0" for c in ("' '", newline, "'['"))]
    )
    return f"""
            WITH RECURSIVE blocks_shown(conversation_id, message_idx, block_idx, update_kind,
                                        stored_text, shown_text) AS (
                SELECT conversation_id, message_idx, block_idx, update_kind, stored_text,
                       CAST({shown} AS TEXT)
                FROM (
                    SELECT b.conversation_id, b.message_idx, b.block_idx, b.type, b.text,
                           b.data, u.kind AS update_kind, u.mode, u.text AS update_text,
                           CAST({stored} AS TEXT) AS stored_text
                    FROM blocks b{shown_join}
                    LEFT JOIN context_updates u ON u.id = (
                        SELECT u2.id FROM context_updates u2
                        WHERE u2.conversation_id = b.conversation_id
                          AND u2.message_idx = b.message_idx AND u2.block_idx = b.block_idx
                        ORDER BY u2.ts DESC, u2.id DESC LIMIT 1)
                ) k
            ),
            scan(conversation_id, message_idx, block_idx, position, rest, kind) AS (
                SELECT conversation_id, message_idx, block_idx, 0, shown_text,
                       CAST(NULL AS TEXT)
                FROM blocks_shown WHERE shown_text LIKE '%[REDACTED:%'
                UNION ALL
                SELECT conversation_id, message_idx, block_idx, position + 1,
                       substr(rest, {at} + 10),
                       CASE WHEN {is_kind} THEN {kind} END
                FROM scan WHERE {at} > 0
            ),
            markers AS (
                SELECT s.conversation_id, s.message_idx, s.block_idx, s.kind, k.update_kind,
                       k.stored_text,
                       ROW_NUMBER() OVER (
                           PARTITION BY s.conversation_id, s.message_idx, s.block_idx, s.kind
                           ORDER BY s.position) AS nth
                FROM scan s
                JOIN blocks_shown k ON k.conversation_id = s.conversation_id
                     AND k.message_idx = s.message_idx AND k.block_idx = s.block_idx
                WHERE s.kind IS NOT NULL
            )
            SELECT conversation_id, message_idx, block_idx, kind,
                   CASE WHEN update_kind = 'processor'
                             AND nth > (LENGTH(COALESCE(stored_text, ''))
                                        - LENGTH(REPLACE(COALESCE(stored_text, ''),
                                                         '[REDACTED:' || kind || ']', '')))
                                       / LENGTH('[REDACTED:' || kind || ']')
                        THEN 'rewrite' ELSE 'stored' END AS masked_by
            FROM markers
        """


LATEST_UPDATE = """
        LEFT JOIN context_updates u ON u.id = (
            SELECT u2.id FROM context_updates u2
            WHERE u2.conversation_id = b.conversation_id
              AND u2.message_idx = b.message_idx AND u2.block_idx = b.block_idx
            ORDER BY u2.ts DESC, u2.id DESC LIMIT 1)"""

OLD_SHOWN_TEXT = "COALESCE(u.text, b.text)"
"""Revisions 0001 and 0008's text shown now: the newest rewrite's text, else the stored."""


def _shown_text(d: _Dialect) -> str:
    """The text shown now of block ``b`` with its newest rewrite ``u``: the rewrite's text;
    for a ``text`` rewrite of a tool result held as a list whose first item is a text, the
    rewrite followed by the other items' texts. The stored text (``b.text``) is those texts
    joined by line breaks, first item first, so the others are what follows the first."""
    first = d.value("b.data", "content", 0, "text")
    return f"""CASE
            WHEN u.id IS NULL THEN b.text
            WHEN u.mode = 'text' AND b.type = 'tool_result' AND {d.is_array("b.data", "content")}
                 AND {d.value("b.data", "content", 0, "type")} = 'text' AND {first} IS NOT NULL
                 THEN u.text || substr(COALESCE(b.text, ''), length({first}) + 1)
            ELSE COALESCE(u.text, b.text)
        END"""


def _effective_blocks(text: str) -> str:
    return f"""
        SELECT b.conversation_id, b.message_idx, b.block_idx, b.type, b.tool_use_id,
               b.tool_name, b.text AS original_text,
               {text} AS effective_text,
               u.kind AS update_kind, u.source AS update_source, u.ts AS update_ts
        FROM blocks b{LATEST_UPDATE}
    """


def _active_nodes(text: str, shown_join: str | None) -> str:
    """``active_nodes`` with ``text`` as its text; its blocks those ``shown_join`` keeps, or
    (None) every block of the visible messages, as revision 0008 wrote it."""
    visible = (
        """
        WHERE m.idx < 2 OR m.idx > COALESCE((
            SELECT r.end_idx FROM deleted_ranges r
            WHERE r.conversation_id = m.conversation_id
            ORDER BY r.ts DESC LIMIT 1), 1)"""
        if shown_join is None
        else ""
    )
    return f"""
        SELECT b.conversation_id, b.message_idx, b.block_idx,
               'm' || b.message_idx || '.b' || b.block_idx AS node_id,
               m.ts, m.role, b.type AS block_type,
               CASE WHEN u.kind = 'truncation_notice' THEN 'memory_summary'
                    ELSE b.node_type END AS node_type,
               b.path, b.line_start, b.line_end,
               CASE WHEN u.id IS NULL THEN b.token_count END AS token_count,
               b.token_count AS pristine_token_count,
               b.tool_use_id, b.tool_name,
               {text} AS text,
               u.kind AS update_kind, u.source AS update_source, u.ts AS update_ts
        FROM blocks b{shown_join or ""}
        JOIN messages m ON m.conversation_id = b.conversation_id AND m.idx = b.message_idx{
        LATEST_UPDATE
    }{visible}
    """


ARCHIVES = (
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
"""The archive tables revision 0011 made (``archived_<table>``)."""


def _audit_rollbacks(d: _Dialect, purged: str) -> str:
    """Revision 0011's ``audit_rollbacks`` with ``purged`` as its ``purged`` column."""

    def removed(key: str) -> str:
        return f"COALESCE(CAST({d.value('k.counts', key)} AS INTEGER), 0)"

    archived = " + ".join(
        f"(SELECT COUNT(*) FROM archived_{name} a WHERE a.rollback_id = k.id)" for name in ARCHIVES
    )
    return f"""
            SELECT k.id AS rollback_id, k.conversation_id, k.cutoff_ts, k.ran_at, k.target,
                   {purged} AS purged, k.restored_ts,
                   {removed("messages")}
                     AS messages_removed,
                   {removed("blocks")}
                     AS blocks_removed,
                   {removed("deleted_ranges")}
                     AS ranges_removed,
                   {removed("context_updates")}
                     AS updates_removed,
                   {removed("api_requests")}
                     AS requests_removed,
                   {removed("checkpoints")}
                     AS checkpoints_removed,
                   ({archived})
                     AS rows_archived
            FROM rollbacks k
        """


PURGED_AS_STORED = "k.purged"
PURGED_AS_INTEGER = "CASE WHEN k.purged THEN 1 ELSE 0 END"


def _replace(views: dict[str, str]) -> None:
    for name in views:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, query in views.items():
        op.execute(f"CREATE VIEW {name} AS {query}")


def upgrade() -> None:
    d = _Dialect(op.get_bind().dialect.name)
    text = _shown_text(d)
    _replace(
        {
            "effective_blocks": _effective_blocks(text),
            "active_nodes": _active_nodes(text, SHOWN_0017),
            "masked_secrets": _masked_secrets(d, SHOWN_0017),
            "audit_rollbacks": _audit_rollbacks(d, PURGED_AS_INTEGER),
        }
    )


def downgrade() -> None:
    d = _Dialect(op.get_bind().dialect.name)
    _replace(
        {
            "effective_blocks": _effective_blocks(OLD_SHOWN_TEXT),
            "active_nodes": _active_nodes(OLD_SHOWN_TEXT, None),
            "masked_secrets": _masked_secrets(d, SHOWN_0015),
            "audit_rollbacks": _audit_rollbacks(d, PURGED_AS_STORED),
        }
    )
