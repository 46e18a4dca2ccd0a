"""Reading and writing rows. No policy lives here: only SQL and row <-> value mapping.

Every statement is built with SQLAlchemy expressions and bound parameters; caller data is
never interpolated into SQL text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Text, and_, func, insert, or_, select, type_coerce

from contextstore.core.content import NormalizedMessage
from contextstore.core.errors import CorruptRowError, IntegrityViolationError
from contextstore.core.overlays import BlockAddress, BlockUpdate, Message
from contextstore.storage.tables import (
    api_requests,
    archived_rows,
    blocks,
    checkpoints,
    context_updates,
    conversations,
    deleted_ranges,
    messages,
    rollbacks,
    source_records,
)

NO_LIMIT = 2**62
"""An ``as_of`` later than any timestamp."""


@dataclass
class ConversationState:
    """Everything the view needs, as of one moment, read in one snapshot."""

    messages: list[Message]
    deleted_range: tuple[int, int] | None
    overlays: dict[BlockAddress, BlockUpdate] = field(default_factory=dict)
    message_ts: list[int] = field(default_factory=list)


_PLAIN_TEXT_BLOCK = '{"type": "text"}'


def _json(value: Any, what: str) -> Any:
    """Decode a JSON column read as text; a damaged value is a :class:`CorruptRowError`.

    JSON columns are read as text (``type_coerce(..., Text)``) so that decoding happens
    here, where a bad value becomes a clear error, and so that the commonest values skip
    the decoder. PostgreSQL's driver may already hand back decoded values.
    """
    if value == "{}":
        return {}
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise CorruptRowError(
                f"{what} holds a value that is not valid JSON; the row is damaged. Run "
                "'contextstore check' and restore the database from a backup."
            ) from exc
    return value


NUL = "\x00"
EXACT_TEXT_KEY = "_exact_text"
"""Metadata key holding an update's exact text when it contains NUL characters."""


def column_text(text: str | None) -> str | None:
    """``text`` as a text column can hold it: NUL characters become U+FFFD.

    PostgreSQL text cannot contain NUL. Wherever the exact text matters (a block's text,
    an update's text), it is also kept in the row's JSON, which can.
    """
    if text is None or NUL not in text:
        return text
    return text.replace(NUL, "\ufffd")


def block_row(
    conversation_id: str, message_idx: int, block_idx: int, block: dict[str, Any]
) -> dict[str, Any]:
    """The ``blocks`` row for one content block (text lives in ``text``, the rest in ``data``)."""
    kind = block["type"]
    data = dict(block)
    text: str | None = None
    if kind == "text":
        text = data.pop("text")
        if NUL in text:
            data["text"] = text
    elif kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "\n".join(
                str(inner.get("text", ""))
                for inner in content
                if isinstance(inner, dict) and inner.get("type") == "text"
            )
    elif kind == "thinking":
        text = block.get("thinking")
    return {
        "conversation_id": conversation_id,
        "message_idx": message_idx,
        "block_idx": block_idx,
        "type": kind,
        "text": column_text(text),
        "tool_use_id": block.get("id") if kind == "tool_use" else block.get("tool_use_id"),
        "tool_name": block.get("name") if kind == "tool_use" else None,
        "data": data,
    }


def _block_from_row(kind: str, text: str | None, data: Any, where: str) -> dict[str, Any]:
    if kind == "text" and data == _PLAIN_TEXT_BLOCK:
        return {"type": "text", "text": text or ""}
    stored = _json(data, where)
    if not isinstance(stored, dict):
        raise CorruptRowError(f"{where} does not hold a content block object.")
    if kind == "text":
        return {
            "type": "text",
            "text": text or "",
            **{k: v for k, v in stored.items() if k != "type"},
        }
    return stored


def insert_message(
    connection: Connection,
    conversation_id: str,
    idx: int,
    ts: int,
    normalized: NormalizedMessage,
    token_count: int,
) -> None:
    """Insert one message and its blocks."""
    connection.execute(
        insert(messages).values(
            conversation_id=conversation_id,
            idx=idx,
            ts=ts,
            role=normalized.role,
            token_count=token_count,
            was_string=normalized.was_string,
            meta=normalized.meta,
        )
    )
    connection.execute(
        insert(blocks),
        [block_row(conversation_id, idx, i, b) for i, b in enumerate(normalized.blocks)],
    )


def next_message_idx(connection: Connection, conversation_id: str) -> int:
    """The index the next appended message gets."""
    value = connection.execute(
        select(func.max(messages.c.idx)).where(messages.c.conversation_id == conversation_id)
    ).scalar_one_or_none()
    return 0 if value is None else int(value) + 1


def load_deleted_range(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> tuple[int, int] | None:
    """The effective deleted range at ``as_of``: the newest range row with ``ts <= as_of``."""
    row = connection.execute(
        select(deleted_ranges.c.start_idx, deleted_ranges.c.end_idx)
        .where(deleted_ranges.c.conversation_id == conversation_id, deleted_ranges.c.ts <= as_of)
        .order_by(deleted_ranges.c.ts.desc())
        .limit(1)
    ).first()
    return None if row is None else (int(row.start_idx), int(row.end_idx))


def load_overlays(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> dict[BlockAddress, BlockUpdate]:
    """The effective update per block at ``as_of`` (the newest with ``ts <= as_of``)."""
    columns = [c for c in context_updates.c if c.name != "metadata"]
    rows = connection.execute(
        select(*columns, type_coerce(context_updates.c.metadata, Text).label("metadata"))
        .where(
            context_updates.c.conversation_id == conversation_id,
            context_updates.c.ts <= as_of,
        )
        .order_by(context_updates.c.ts, context_updates.c.id)
    )
    effective: dict[BlockAddress, BlockUpdate] = {}
    for row in rows:
        metadata = _json(row.metadata, f"context update {row.id}")
        if not isinstance(metadata, dict):
            raise CorruptRowError(f"context update {row.id} has metadata that is not an object.")
        exact = metadata.pop(EXACT_TEXT_KEY, None)
        effective[(row.message_idx, row.block_idx)] = BlockUpdate(
            message_idx=row.message_idx,
            block_idx=row.block_idx,
            kind=row.kind,
            text=exact if isinstance(exact, str) else row.text,
            source=row.source,
            metadata=metadata,
            base_hash=row.base_hash,
            mode=row.mode,
        )
    return effective


def load_messages(
    connection: Connection,
    conversation_id: str,
    as_of: int = NO_LIMIT,
    *,
    hidden_after: int | None = None,
    hidden_through: int | None = None,
) -> tuple[list[Message], list[int]]:
    """Messages with ``ts <= as_of`` in index order, and their timestamps.

    When ``hidden_after``/``hidden_through`` are given, messages in that index span are
    returned as ``{"role": ...}`` stubs without content (their blocks are not read), which
    is all the truncation arithmetic needs from hidden messages.

    Raises:
        IntegrityViolationError: indices are not 0..n-1 or timestamps do not increase.
    """
    message_rows = connection.execute(
        select(
            messages.c.idx,
            messages.c.ts,
            messages.c.role,
            messages.c.was_string,
            type_coerce(messages.c.meta, Text).label("meta"),
        )
        .where(messages.c.conversation_id == conversation_id, messages.c.ts <= as_of)
        .order_by(messages.c.idx)
    ).all()
    block_filter = [blocks.c.conversation_id == conversation_id, messages.c.ts <= as_of]
    if hidden_after is not None and hidden_through is not None and hidden_through >= hidden_after:
        block_filter.append(
            or_(blocks.c.message_idx < hidden_after, blocks.c.message_idx > hidden_through)
        )
    block_rows = connection.execute(
        select(
            blocks.c.message_idx,
            blocks.c.block_idx,
            blocks.c.type,
            blocks.c.text,
            type_coerce(blocks.c.data, Text).label("data"),
        )
        .join(
            messages,
            and_(
                messages.c.conversation_id == blocks.c.conversation_id,
                messages.c.idx == blocks.c.message_idx,
            ),
        )
        .where(*block_filter)
        .order_by(blocks.c.message_idx, blocks.c.block_idx)
    ).all()
    grouped: dict[int, list[dict[str, Any]]] = {}
    for row in block_rows:
        grouped.setdefault(row.message_idx, []).append(
            _block_from_row(
                row.type, row.text, row.data, f"block {row.message_idx}.{row.block_idx}"
            )
        )
    result: list[Message] = []
    stamps: list[int] = []
    for position, row in enumerate(message_rows):
        if row.idx != position or (stamps and row.ts <= stamps[-1]):
            raise IntegrityViolationError(
                f"conversation {conversation_id!r} has message {row.idx} at position {position} "
                f"(ts {row.ts}); indices must be 0..n-1 with increasing ts. Run "
                "'contextstore check'."
            )
        stamps.append(int(row.ts))
        content_blocks = grouped.get(row.idx)
        if content_blocks is None:
            result.append({"role": row.role})
            continue
        meta = _json(row.meta, f"message {row.idx} metadata") or {}
        content: Any = content_blocks[0]["text"] if row.was_string else content_blocks
        message: Message = {"role": row.role, "content": content}
        message.update(meta)
        result.append(message)
    return result, stamps


def load_state(
    connection: Connection,
    conversation_id: str,
    as_of: int = NO_LIMIT,
    *,
    skip_hidden: bool = True,
) -> ConversationState:
    """Read messages, the deleted range and the effective updates as of ``as_of``."""
    deleted_range = load_deleted_range(connection, conversation_id, as_of)
    hidden = (2, deleted_range[1]) if skip_hidden and deleted_range else (None, None)
    loaded, stamps = load_messages(
        connection, conversation_id, as_of, hidden_after=hidden[0], hidden_through=hidden[1]
    )
    overlays = load_overlays(connection, conversation_id, as_of)
    return ConversationState(loaded, deleted_range, overlays, stamps)


def refresh_decisions(
    connection: Connection, conversation_id: str, state: ConversationState
) -> ConversationState:
    """``state`` with its range and updates read again (the messages do not change)."""
    return ConversationState(
        state.messages,
        load_deleted_range(connection, conversation_id),
        load_overlays(connection, conversation_id),
        state.message_ts,
    )


def with_updates(state: ConversationState, updates: Sequence[BlockUpdate]) -> ConversationState:
    """``state`` with ``updates`` applied in memory, as if they had been written."""
    overlays = dict(state.overlays)
    overlays.update({update.address: update for update in updates})
    return ConversationState(state.messages, state.deleted_range, overlays, state.message_ts)


def insert_updates(
    connection: Connection, conversation_id: str, ts: int, updates: Sequence[BlockUpdate]
) -> None:
    """Insert context update rows, all stamped ``ts``."""
    if not updates:
        return
    connection.execute(
        insert(context_updates),
        [
            {
                "conversation_id": conversation_id,
                "ts": ts,
                "message_idx": u.message_idx,
                "block_idx": u.block_idx,
                "kind": u.kind,
                "mode": u.mode,
                "text": column_text(u.text),
                "metadata": _update_metadata(u),
                "source": u.source,
                "base_hash": u.base_hash,
            }
            for u in updates
        ],
    )


def insert_range(
    connection: Connection,
    conversation_id: str,
    ts: int,
    end: int,
    *,
    keep: str,
    reason: str,
    tokens_total: int | None,
    summary: str | None,
) -> None:
    """Insert a deleted range ``(2, end)`` with the decision that produced it."""
    connection.execute(
        insert(deleted_ranges).values(
            conversation_id=conversation_id,
            ts=ts,
            start_idx=2,
            end_idx=end,
            keep=keep,
            reason=column_text(reason),
            tokens_total=tokens_total,
            summary=column_text(summary),
        )
    )


def _update_metadata(update: BlockUpdate) -> dict[str, Any]:
    metadata = dict(update.metadata)
    if NUL in update.text:
        metadata[EXACT_TEXT_KEY] = update.text
    return metadata


def last_request_total(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> int | None:
    """Token total of the newest request, or None if it has no usage recorded (yet).

    As in Cline, only the previous request counts: a prepared request whose usage was
    never recorded (a failed call, a retry) decides nothing, rather than letting an older
    total trigger a second truncation.
    """
    row = connection.execute(
        select(
            api_requests.c.tokens_in,
            api_requests.c.tokens_out,
            api_requests.c.cache_writes,
            api_requests.c.cache_reads,
        )
        .where(
            api_requests.c.conversation_id == conversation_id,
            api_requests.c.ts <= as_of,
        )
        .order_by(api_requests.c.ts.desc())
        .limit(1)
    ).first()
    if row is None or all(value is None for value in row):
        return None
    return sum(int(v or 0) for v in row)


def rows_as_dicts(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Result rows as plain dicts."""
    return [dict(row._mapping) for row in rows]


def count_rows(connection: Connection, conversation_id: str | None = None) -> dict[str, int]:
    """Rows per table, for one conversation or the whole database."""
    tables = (
        conversations,
        messages,
        blocks,
        deleted_ranges,
        context_updates,
        api_requests,
        checkpoints,
        source_records,
        rollbacks,
        archived_rows,
    )
    counts: dict[str, int] = {}
    for table in tables:
        query = select(func.count()).select_from(table)
        if conversation_id is not None:
            column = table.c.id if table is conversations else table.c.conversation_id
            query = query.where(column == conversation_id)
        counts[table.name] = int(connection.execute(query).scalar_one())
    return counts
