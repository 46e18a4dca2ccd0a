# ruff: noqa: S608
# (the view SQL is assembled from constants; no caller data reaches it)
"""``masked_secrets`` counts every ``[REDACTED:kind]`` marker the model is shown, wherever the
block keeps it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02

Revision 0004's view scanned each block's effective text: the ``text`` column or the newest
rewrite. A store opened with ``mask_secrets_on_write`` keeps many markers elsewhere, in the
``data`` column, and the view missed them: a tool call's input, the items of a tool result
held as a list (documents and ``search_result`` items), a plain-text document's source, title
and context, a text block's citations. And a marker a processor's rewrite (a trimmer, say)
only carried over from the stored text counted as ``rewrite``.

The view now scans, per block, what the Anthropic request shows of it (the fields the API
takes for its type, as the renderer keeps them), with the newest rewrite applied as the store
applies it: a ``block`` rewrite replaces the whole block, a ``tool_input`` rewrite a tool
call's input, a ``text`` rewrite a text block's text, a tool result's string content or the
first text item of its list (the other items stay). A marker is ``stored`` unless a
processor's rewrite shows more markers of its kind than the stored block does; those extra
ones are ``rewrite``. An unclosed ``[REDACTED:`` is not a marker (0004 counted it on SQLite as
kind ``:`` and failed on PostgreSQL, where ``substr`` refuses a negative length).

Views only; no table changes. The downgrade puts 0004's view back.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# Revisions are frozen history: the view definitions live here, not in the package.

_OLD_SQLITE = {"instr": "instr({haystack}, {needle})"}
_OLD_POSTGRES = {"instr": "strpos({haystack}, {needle})"}


def _old_view(dialect: str) -> str:
    """``masked_secrets`` as revision 0004 wrote it."""
    spell = (_OLD_SQLITE if dialect == "sqlite" else _OLD_POSTGRES)["instr"]
    at = spell.format(haystack="rest", needle="'[REDACTED:'")
    close = spell.format(haystack=f"substr(rest, {at} + 10)", needle="']'")
    return f"""
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
        """


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


def _new_view(d: _Dialect) -> str:
    """The view: per block, its stored content as shown and what is shown now; the markers of
    the latter, each ``stored`` or ``rewrite``."""
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
                    FROM blocks b
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
    op.execute(f"CREATE VIEW masked_secrets AS {_new_view(_Dialect(dialect))}")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS masked_secrets")
    op.execute(f"CREATE VIEW masked_secrets AS {_old_view(dialect)}")
