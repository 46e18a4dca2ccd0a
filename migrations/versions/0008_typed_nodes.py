# ruff: noqa: S608
# (the SQL is assembled from constants; no caller data reaches it)
"""Typed nodes: every block gets a node type, its file and line range, and its token count;
system prompts and tool definitions become nodes stored once by content hash.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01

What changes:

- ``blocks`` gains ``node_type`` (not null), ``path``, ``line_start``, ``line_end`` and
  ``token_count`` (not null), and a partial index ``ix_blocks_path`` on
  ``(conversation_id, path)``. Existing rows are typed in batches by the package's own
  typing (:func:`contextstore.core.nodes.type_message`, the function appends use, so old and
  new rows agree) and counted with the store's token counter; blocks a rollback archived
  get the same fields in their archived JSON, so a restore puts typed rows back.
- ``context_nodes(sha256, node_type, content, token_count)`` (new): system prompts and tool
  definitions, filled from the options of requests already prepared;
  ``api_requests.system_sha256`` and ``tools_sha256`` (new) reference them.
- Views ``pristine_nodes`` and ``active_nodes`` (new, documented in the README).

SQLite rebuilds ``blocks`` and ``api_requests`` to add the NOT NULL and foreign-key columns;
the views that read them are saved, dropped and recreated around the rebuild. The downgrade
drops the new views, index, columns and table; messages, blocks, requests and their options
are untouched (the node fields are derived from them, and the upgrade derives them again).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BATCH = 500

NODE_VIEWS = {
    "pristine_nodes": """
        SELECT b.conversation_id, b.message_idx, b.block_idx,
               'm' || b.message_idx || '.b' || b.block_idx AS node_id,
               m.ts, m.role, b.type AS block_type, b.node_type, b.path, b.line_start,
               b.line_end, b.token_count, b.tool_use_id, b.tool_name, b.text
        FROM blocks b
        JOIN messages m ON m.conversation_id = b.conversation_id AND m.idx = b.message_idx
    """,
    "active_nodes": """
        SELECT b.conversation_id, b.message_idx, b.block_idx,
               'm' || b.message_idx || '.b' || b.block_idx AS node_id,
               m.ts, m.role, b.type AS block_type,
               CASE WHEN u.kind = 'truncation_notice' THEN 'memory_summary'
                    ELSE b.node_type END AS node_type,
               b.path, b.line_start, b.line_end,
               CASE WHEN u.id IS NULL THEN b.token_count END AS token_count,
               b.token_count AS pristine_token_count,
               b.tool_use_id, b.tool_name,
               COALESCE(u.text, b.text) AS text,
               u.kind AS update_kind, u.source AS update_source, u.ts AS update_ts
        FROM blocks b
        JOIN messages m ON m.conversation_id = b.conversation_id AND m.idx = b.message_idx
        LEFT JOIN context_updates u ON u.id = (
            SELECT u2.id FROM context_updates u2
            WHERE u2.conversation_id = b.conversation_id
              AND u2.message_idx = b.message_idx AND u2.block_idx = b.block_idx
            ORDER BY u2.ts DESC, u2.id DESC LIMIT 1)
        WHERE m.idx < 2 OR m.idx > COALESCE((
            SELECT r.end_idx FROM deleted_ranges r
            WHERE r.conversation_id = m.conversation_id
            ORDER BY r.ts DESC LIMIT 1), 1)
    """,
}


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")


@contextmanager
def _views_set_aside() -> Iterator[None]:
    """On SQLite, drop every view for the duration (a table rebuild breaks them) and
    recreate each from its stored definition afterwards."""
    if not _sqlite():
        yield
        return
    bind = op.get_bind()
    saved = bind.execute(
        sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name")
    ).all()
    for name, _ in saved:
        op.execute(f'DROP VIEW "{name}"')
    yield
    for _, definition in saved:
        op.execute(definition)


def _counter() -> Any:
    from contextstore.core.tokens import TiktokenCounter

    return TiktokenCounter()


def _decode(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _typed(
    rows: list[tuple[int, int, str, dict[str, Any]]], calls: dict[str, Any], counter: Any
) -> list[tuple[int, int, Any, int]]:
    """``(message_idx, block_idx, NodeKind, tokens)`` of ``(message_idx, block_idx, role,
    block)`` rows in order; ``calls`` collects the tool calls seen so far."""
    from contextstore.core.nodes import calls_in, type_message
    from contextstore.core.tokens import block_tokens

    typed = []
    by_message: dict[int, list[tuple[int, str, dict[str, Any]]]] = {}
    for message_idx, block_idx, role, block in rows:
        by_message.setdefault(message_idx, []).append((block_idx, role, block))
    for message_idx, blocks in by_message.items():
        role = blocks[0][1]
        content = [block for _, _, block in blocks]
        calls.update(calls_in([(role, content)]))
        for (block_idx, _, block), kind in zip(
            blocks, type_message(role, content, calls), strict=True
        ):
            typed.append((message_idx, block_idx, kind, block_tokens(block, counter.count)))
    return typed


def _type_blocks(counter: Any) -> None:
    from contextstore.storage.codec import decode_block

    bind = op.get_bind()
    conversations = [row[0] for row in bind.execute(sa.text("SELECT id FROM conversations"))]
    update = sa.text(
        "UPDATE blocks SET node_type = :node_type, path = :path, line_start = :line_start, "
        "line_end = :line_end, token_count = :token_count WHERE conversation_id = :cid "
        "AND message_idx = :message_idx AND block_idx = :block_idx"
    )
    select = sa.text(
        "SELECT b.message_idx, b.block_idx, m.role, b.type, b.text, b.tool_use_id, "
        "b.tool_name, b.data FROM blocks b JOIN messages m ON m.conversation_id = "
        "b.conversation_id AND m.idx = b.message_idx WHERE b.conversation_id = :cid "
        "AND b.message_idx >= :first AND b.message_idx < :last "
        "ORDER BY b.message_idx, b.block_idx"
    )
    for cid in conversations:
        calls: dict[str, Any] = {}
        total = bind.execute(
            sa.text("SELECT COALESCE(MAX(idx) + 1, 0) FROM messages WHERE conversation_id = :c"),
            {"c": cid},
        ).scalar_one()
        for first in range(0, int(total), BATCH):
            rows = [
                (
                    idx,
                    position,
                    role,
                    decode_block(kind, text, use_id, name, _decode(data), idx, position),
                )
                for idx, position, role, kind, text, use_id, name, data in bind.execute(
                    select, {"cid": cid, "first": first, "last": first + BATCH}
                )
            ]
            values = [
                {
                    "cid": cid,
                    "message_idx": idx,
                    "block_idx": position,
                    "node_type": kind.node_type,
                    "path": kind.path,
                    "line_start": kind.line_start,
                    "line_end": kind.line_end,
                    "token_count": tokens,
                }
                for idx, position, kind, tokens in _typed(rows, calls, counter)
            ]
            if values:
                bind.execute(update, values)


def _type_archived_blocks(counter: Any) -> None:
    """Add the node fields to blocks kept in ``archived_rows`` by a rollback."""
    from contextstore.storage.codec import decode_block

    bind = op.get_bind()
    cast = "CAST(:data AS jsonb)" if bind.dialect.name == "postgresql" else ":data"
    update = sa.text(f"UPDATE archived_rows SET data = {cast} WHERE id = :id")
    rollbacks = [
        row[0]
        for row in bind.execute(
            sa.text("SELECT DISTINCT rollback_id FROM archived_rows WHERE table_name = 'blocks'")
        )
    ]
    for rollback_id in rollbacks:
        roles: dict[int, str] = {}
        for (data,) in bind.execute(
            sa.text(
                "SELECT data FROM archived_rows WHERE rollback_id = :r AND table_name = 'messages'"
            ),
            {"r": rollback_id},
        ):
            message = _decode(data)
            roles[int(message["idx"])] = str(message["role"])
        archived = [
            (row_id, _decode(data))
            for row_id, data in bind.execute(
                sa.text(
                    "SELECT id, data FROM archived_rows WHERE rollback_id = :r "
                    "AND table_name = 'blocks' ORDER BY id"
                ),
                {"r": rollback_id},
            )
        ]
        archived.sort(key=lambda item: (item[1]["message_idx"], item[1]["block_idx"]))
        rows = []
        for _, row in archived:
            block = decode_block(
                row["type"],
                row.get("text"),
                row.get("tool_use_id"),
                row.get("tool_name"),
                _decode(row.get("data")) or {},
                row["message_idx"],
                row["block_idx"],
            )
            role = roles.get(row["message_idx"], "user")
            rows.append((row["message_idx"], row["block_idx"], role, block))
        values = []
        for (row_id, row), (_, _, kind, tokens) in zip(
            archived, _typed(rows, {}, counter), strict=True
        ):
            row.update(
                node_type=kind.node_type,
                path=kind.path,
                line_start=kind.line_start,
                line_end=kind.line_end,
                token_count=tokens,
            )
            values.append({"id": row_id, "data": json.dumps(row, ensure_ascii=False)})
        if values:
            bind.execute(update, values)


def _fill_context_nodes(counter: Any) -> None:
    """Nodes for the system prompts and tools of requests already prepared."""
    from contextstore.core.nodes import prompt_nodes

    bind = op.get_bind()
    insert = sa.text(
        "INSERT INTO context_nodes (sha256, node_type, content, token_count) "
        "VALUES (:sha256, :node_type, :content, :token_count)"
    )
    link = sa.text(
        "UPDATE api_requests SET system_sha256 = :system, tools_sha256 = :tools "
        "WHERE options_sha256 = :options"
    )
    known: set[str] = set()
    for options_sha256, data in bind.execute(
        sa.text("SELECT sha256, data FROM request_options ORDER BY sha256")
    ):
        options = _decode(data)
        if not isinstance(options, dict):
            continue
        nodes = prompt_nodes(options.get("system"), options.get("tools"))
        for node in nodes:
            if node is not None and node.sha256 not in known:
                known.add(node.sha256)
                bind.execute(
                    insert,
                    {
                        "sha256": node.sha256,
                        "node_type": node.node_type,
                        "content": node.content,
                        "token_count": counter.count(node.content),
                    },
                )
        system, tools = (None if node is None else node.sha256 for node in nodes)
        bind.execute(link, {"system": system, "tools": tools, "options": options_sha256})


def _add_prompt_references() -> None:
    """``api_requests.system_sha256`` / ``tools_sha256`` referencing ``context_nodes``.

    SQLite adds a column with its reference in place (a rebuild would reorder the table's
    constraints from one run to the next).
    """
    for column in ("system_sha256", "tools_sha256"):
        name = f"fk_api_requests_{column}_context_nodes"
        if _sqlite():
            op.execute(
                f"ALTER TABLE api_requests ADD COLUMN {column} VARCHAR(64) "
                f"CONSTRAINT {name} REFERENCES context_nodes (sha256)"
            )
        else:
            op.add_column("api_requests", sa.Column(column, sa.String(length=64), nullable=True))
            op.create_foreign_key(name, "api_requests", "context_nodes", [column], ["sha256"])


def upgrade() -> None:
    counter = _counter()
    op.create_table(
        "context_nodes",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("node_type", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "node_type IN ('system_prompt', 'tool_definitions')",
            name=op.f("ck_context_nodes_node_type"),
        ),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_context_nodes")),
    )
    with _views_set_aside():
        with op.batch_alter_table("blocks", schema=None) as batch_op:
            batch_op.add_column(sa.Column("node_type", sa.String(length=32), nullable=True))
            batch_op.add_column(sa.Column("path", sa.Text(), nullable=True))
            batch_op.add_column(sa.Column("line_start", sa.Integer(), nullable=True))
            batch_op.add_column(sa.Column("line_end", sa.Integer(), nullable=True))
            batch_op.add_column(sa.Column("token_count", sa.Integer(), nullable=True))
        _type_blocks(counter)
        _type_archived_blocks(counter)
        with op.batch_alter_table("blocks", schema=None) as batch_op:
            batch_op.alter_column("node_type", existing_type=sa.String(length=32), nullable=False)
            batch_op.alter_column("token_count", existing_type=sa.Integer(), nullable=False)
            batch_op.create_index(
                "ix_blocks_path",
                ["conversation_id", "path"],
                unique=False,
                sqlite_where=sa.text("path IS NOT NULL"),
                postgresql_where=sa.text("path IS NOT NULL"),
            )
        _add_prompt_references()
        _fill_context_nodes(counter)
    for name, query in NODE_VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {query}")


PROMPT_REFERENCES = re.compile(
    r", system_sha256 VARCHAR\(64\) CONSTRAINT fk_api_requests_system_sha256_context_nodes "
    r"REFERENCES context_nodes \(sha256\), tools_sha256 VARCHAR\(64\) CONSTRAINT "
    r"fk_api_requests_tools_sha256_context_nodes REFERENCES context_nodes \(sha256\)"
)
"""The two columns :func:`_add_prompt_references` appended to SQLite's table text."""


def _drop_prompt_references_sqlite() -> None:
    """SQLite: ``api_requests`` rebuilt from its own text without the two columns.

    Built from the stored text rather than by a batch rebuild, so the table keeps its
    ``AUTOINCREMENT`` id (revision 0007), its constraints in their order and its sequence
    value (which may be past the live ids when archived requests hold higher ones).
    """
    bind = op.get_bind()
    (create,) = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'api_requests'")
    ).one()
    indexes = [
        sql
        for (sql,) in bind.execute(
            sa.text(
                "SELECT sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'api_requests' AND sql IS NOT NULL"
            )
        )
    ]
    sequence = bind.execute(
        sa.text("SELECT seq FROM sqlite_sequence WHERE name = 'api_requests'")
    ).scalar()
    stripped, found = PROMPT_REFERENCES.subn("", create, count=1)
    if found != 1:
        raise RuntimeError(f"api_requests does not have the columns 0008 added: {create}")
    columns = [
        row[1]
        for row in bind.execute(sa.text("PRAGMA table_info(api_requests)"))
        if row[1] not in ("system_sha256", "tools_sha256")
    ]
    listed = ", ".join(columns)
    op.execute(stripped.replace('CREATE TABLE "api_requests"', "CREATE TABLE _0008_requests", 1))
    op.execute(f"INSERT INTO _0008_requests ({listed}) SELECT {listed} FROM api_requests")
    op.execute("DROP TABLE api_requests")
    op.execute("ALTER TABLE _0008_requests RENAME TO api_requests")
    for sql in indexes:
        op.execute(sql)
    if sequence is not None:
        op.execute(
            sa.text(
                "UPDATE sqlite_sequence SET seq = MAX(seq, :seq) WHERE name = 'api_requests'"
            ).bindparams(seq=int(sequence))
        )


def downgrade() -> None:
    for name in NODE_VIEWS:
        op.execute(f"DROP VIEW {name}")
    with _views_set_aside():
        if _sqlite():
            _drop_prompt_references_sqlite()
        else:
            with op.batch_alter_table("api_requests", schema=None) as batch_op:
                for column in ("tools_sha256", "system_sha256"):
                    name = f"fk_api_requests_{column}_context_nodes"
                    batch_op.drop_constraint(name, type_="foreignkey")
                batch_op.drop_column("tools_sha256")
                batch_op.drop_column("system_sha256")
        with op.batch_alter_table("blocks", schema=None) as batch_op:
            batch_op.drop_index(
                "ix_blocks_path",
                sqlite_where=sa.text("path IS NOT NULL"),
                postgresql_where=sa.text("path IS NOT NULL"),
            )
            batch_op.drop_column("token_count")
            batch_op.drop_column("line_end")
            batch_op.drop_column("line_start")
            batch_op.drop_column("path")
            batch_op.drop_column("node_type")
    op.drop_table("context_nodes")
