"""Storage layout for speed and size: a message counter, each block value stored once,
an archive index, and ``jsonb`` on PostgreSQL.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

What changes, table by table:

- ``conversations.message_count`` (new, integer, not null, default 0; filled from
  ``messages``): the next message's index, reserved with the clock in one
  ``UPDATE ... RETURNING`` instead of a ``SELECT max(idx)`` per append.
- ``blocks.data`` (rewritten, same column): holds only what no other column holds. A text
  block's ``type``, a tool result's string content (kept in ``text``) and ``tool_use_id``,
  a tool call's ``id`` and ``name`` (kept in ``tool_use_id`` and ``tool_name``), a thinking
  block's text leave ``data``; a text with NUL characters is kept exactly in ``data`` as the
  list of its NUL-separated pieces under ``_exact`` (``jsonb`` cannot hold ``\\u0000``).
  ``text``, ``tool_use_id`` and ``tool_name`` do not change, and neither does what a
  block decodes to. Rows in ``archived_rows`` are left as they are (they decode the same).
- ``ix_blocks_tool_use_id`` (recreated, same columns) covers only blocks that have a
  ``tool_use_id`` (calls and results): text blocks no longer take an entry.
- ``ix_archived_rows_rollback`` (new index on ``archived_rows(rollback_id, table_name,
  id)``): a restore and the cascade from ``rollbacks`` read one rollback's rows.
- PostgreSQL only: every JSON column (``conversations.metadata``, ``messages.meta``,
  ``blocks.data``, ``context_updates.metadata``, ``request_options.data``,
  ``api_requests.details``, ``source_records.data``, ``rollbacks.counts``,
  ``archived_rows.data``) becomes ``jsonb``. Views that read one of
  these columns (whichever revisions created them) are dropped and recreated around the
  type change, with their definitions read from the server, since PostgreSQL refuses to
  alter a column a view depends on. On SQLite the columns stay JSON text.

The downgrade reverses each step: ``jsonb`` back to ``json``, the blocks' ``data`` back to
the whole block (the layout before this revision), the index and the column dropped. No data
is lost either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NUL = "\x00"
EXACT = "_exact"

JSON_COLUMNS = (
    ("conversations", "metadata"),
    ("messages", "meta"),
    ("blocks", "data"),
    ("context_updates", "metadata"),
    ("request_options", "data"),
    ("api_requests", "details"),
    ("source_records", "data"),
    ("rollbacks", "counts"),
    ("archived_rows", "data"),
)


# Frozen copies of the two block layouts (revisions never import the package's code).


def _whole_block(kind: str, text: str | None, tool_use_id: Any, tool_name: Any, data: Any) -> Any:
    """A block as appended, from a row in either layout."""
    stored = dict(data) if isinstance(data, dict) else {}
    stored.pop("type", None)
    pieces = stored.pop(EXACT, None)
    exact = NUL.join(pieces) if isinstance(pieces, list) else text
    block: dict[str, Any] = {"type": kind}
    if kind == "text":
        block["text"] = stored.pop("text", exact) or ""
    elif kind == "tool_use":
        if tool_use_id is not None and "id" not in stored:
            block["id"] = tool_use_id
        if tool_name is not None and "name" not in stored:
            block["name"] = tool_name
    elif kind == "tool_result":
        if tool_use_id is not None and "tool_use_id" not in stored:
            block["tool_use_id"] = tool_use_id
        if "content" not in stored and exact is not None:
            block["content"] = exact
        elif isinstance(stored.get("content"), list):
            items = []
            for position, item in enumerate(stored["content"]):
                if isinstance(item, dict) and item.get("type") == "text" and "text" not in item:
                    item = dict(item)
                    inner = item.pop(EXACT, None)
                    item["text"] = (
                        NUL.join(inner)
                        if isinstance(inner, list)
                        else (text if position == 0 else "")
                    ) or ""
                items.append(item)
            stored["content"] = items
    elif kind == "thinking" and "thinking" not in stored and exact is not None:
        block["thinking"] = exact
    block.update(stored)
    return block


def _new_data(block: dict[str, Any]) -> dict[str, Any]:
    """``data`` in the 0004 layout: what no column holds."""
    kind = block["type"]
    rest = {k: v for k, v in block.items() if k != "type"}
    text = None
    if kind == "text":
        text = rest.pop("text")
    elif kind == "thinking" and isinstance(rest.get("thinking"), str):
        text = rest.pop("thinking")
    elif kind == "tool_result":
        content = rest.get("content")
        if isinstance(content, str):
            text = rest.pop("content")
        elif (
            isinstance(content, list)
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0].get("type") == "text"
            and isinstance(content[0].get("text"), str)
            and NUL not in content[0]["text"]
        ):
            rest["content"] = [{k: v for k, v in content[0].items() if k != "text"}]
        if isinstance(rest.get("content"), list):
            rest["content"] = [
                {**{k: v for k, v in item.items() if k != "text"}, EXACT: item["text"].split(NUL)}
                if isinstance(item, dict)
                and isinstance(item.get("text"), str)
                and NUL in item["text"]
                else item
                for item in rest["content"]
            ]
    if kind == "tool_use":
        for key in ("id", "name"):
            if isinstance(rest.get(key), str):
                del rest[key]
    elif kind == "tool_result" and isinstance(rest.get("tool_use_id"), str):
        del rest["tool_use_id"]
    if isinstance(text, str) and NUL in text:
        rest[EXACT] = text.split(NUL)
    return rest


def _old_data(block: dict[str, Any]) -> dict[str, Any]:
    """``data`` in the 0003 layout: the whole block (a text block's text only with NUL)."""
    if block["type"] != "text":
        return dict(block)
    data = {k: v for k, v in block.items() if k != "text"}
    if NUL in block.get("text", ""):
        data["text"] = block["text"]
    return data


def _rewrite_blocks(layout: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT conversation_id, message_idx, block_idx, type, text, tool_use_id, "
            "tool_name, data FROM blocks"
        )
    ).all()
    changes = []
    for cid, message_idx, block_idx, kind, text, tool_use_id, tool_name, raw in rows:
        data = json.loads(raw) if isinstance(raw, str) else raw
        block = _whole_block(kind, text, tool_use_id, tool_name, data)
        encoded = json.dumps(layout(block), ensure_ascii=False, separators=(",", ":"))
        if encoded != raw:
            changes.append({"c": cid, "m": message_idx, "b": block_idx, "d": encoded})
    if changes:
        # On PostgreSQL the column is json here: upgrades rewrite before the change to
        # jsonb, downgrades after the change back.
        cast = "CAST(:d AS json)" if bind.dialect.name == "postgresql" else ":d"
        bind.execute(
            sa.text(
                f"UPDATE blocks SET data = {cast} "  # noqa: S608 (no caller data)
                "WHERE conversation_id = :c AND message_idx = :m AND block_idx = :b"
            ),
            changes,
        )


def _dependent_views() -> list[tuple[str, str]]:
    """PostgreSQL views reading a JSON column, with their definitions, dependencies first."""
    bind = op.get_bind()
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    pending = [
        name
        for (name,) in bind.execute(
            sa.text(
                "SELECT DISTINCT v.relname FROM pg_depend d "  # noqa: S608 (constants)
                "JOIN pg_rewrite r ON r.oid = d.objid "
                "JOIN pg_class v ON v.oid = r.ev_class "
                "JOIN pg_class t ON t.oid = d.refobjid "
                "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid "
                "WHERE v.relkind = 'v' AND v.relnamespace = current_schema()::regnamespace "
                "AND (t.relname, a.attname) IN ("
                + ", ".join(f"('{t}', '{c}')" for t, c in JSON_COLUMNS)
                + ")"
            )
        )
    ]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        definition = bind.execute(
            sa.text("SELECT pg_get_viewdef(CAST(:v AS regclass), true)"), {"v": name}
        ).scalar()
        found.append((name, str(definition)))
        pending += [
            child
            for (child,) in bind.execute(
                sa.text(
                    "SELECT DISTINCT v.relname FROM pg_depend d "
                    "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
                    "WHERE d.refobjid = CAST(:v AS regclass) AND v.relname <> CAST(:n AS name)"
                ),
                {"v": name, "n": name},
            )
        ]
    return found


def _retype_json(target: str) -> None:
    views = _dependent_views()
    for name, _ in reversed(views):
        op.execute(f'DROP VIEW IF EXISTS "{name}"')
    for table, column in JSON_COLUMNS:
        op.execute(
            f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE {target} '
            f'USING "{column}"::text::{target}'
        )
    for name, definition in views:
        op.execute(f'CREATE VIEW "{name}" AS {definition}')


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column(
        "conversations",
        sa.Column("message_count", sa.Integer(), nullable=False, server_default="0"),
    )
    op.execute(
        "UPDATE conversations SET message_count = "
        "(SELECT count(*) FROM messages WHERE messages.conversation_id = conversations.id)"
    )
    op.create_index(
        "ix_archived_rows_rollback", "archived_rows", ["rollback_id", "table_name", "id"]
    )
    op.drop_index("ix_blocks_tool_use_id", table_name="blocks")
    op.create_index(
        "ix_blocks_tool_use_id",
        "blocks",
        ["conversation_id", "tool_use_id"],
        sqlite_where=sa.text("tool_use_id IS NOT NULL"),
        postgresql_where=sa.text("tool_use_id IS NOT NULL"),
    )
    _rewrite_blocks(_new_data)
    if postgres:
        _retype_json("jsonb")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        _retype_json("json")
    _rewrite_blocks(_old_data)
    op.drop_index("ix_blocks_tool_use_id", table_name="blocks")
    op.create_index("ix_blocks_tool_use_id", "blocks", ["conversation_id", "tool_use_id"])
    op.drop_index("ix_archived_rows_rollback", table_name="archived_rows")
    if postgres:
        op.drop_column("conversations", "message_count")
    else:
        # SQLite drops a plain column in place (3.35+): no table rebuild under the views.
        op.execute("ALTER TABLE conversations DROP COLUMN message_count")
