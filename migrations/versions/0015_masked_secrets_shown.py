# ruff: noqa: S608
# (the view SQL is assembled from constants; no caller data reaches it)
"""``masked_secrets`` counts only the markers of blocks the model is shown now.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

Revision 0013's view scanned every block of a conversation, those of the messages a
truncation hides included: after a cut, the audit still counted the secrets of the hidden
messages as masked in what the model is shown, though no request sends them (a conversation
of six masked tool results cut back to one counted six, its request showed one). The view
now keeps the blocks the next request shows, by the view's own rules: messages 0 and 1,
then those after the effective deleted range (its newest row, as ``visible_messages``), less
the tool results the view drops: a result no call of the message shown before it made (the
first message after a cut answering calls the cut hid, a result after no call at all), and
all but the last result of a call answered twice in one message. What an earlier request
showed is rebuilt by ``request_payload``; the view does not keep it.

Views only; no table changes. The downgrade puts 0013's view back.
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Revisions are frozen history: the view definitions live here (0013's copied), not in the
# package.

SHOWN = """
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
"""The blocks the model is shown, by the view's rules: messages 0 and 1, then those after
the newest deleted range's end; of their tool results, those answering a call of the
message the view shows before theirs (message 1 for the first message after a cut), the
last one where a call is answered twice. Tool results are only in user messages, calls only
in assistant ones."""


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


def _view(d: _Dialect, *, shown_only: bool) -> str:
    """The view: per block, its stored content as shown and what is shown now; the markers of
    the latter, each ``stored`` or ``rewrite``. With ``shown_only``, only blocks the model
    is shown (:data:`SHOWN`); without, every block, as revision 0013 wrote it."""
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
                    FROM blocks b{SHOWN if shown_only else ""}
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


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS masked_secrets")
    op.execute(f"CREATE VIEW masked_secrets AS {_view(_Dialect(dialect), shown_only=True)}")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS masked_secrets")
    op.execute(f"CREATE VIEW masked_secrets AS {_view(_Dialect(dialect), shown_only=False)}")
