"""Statements for importers: many timeline rows written at once, and the records other agents
wrote beside the model history (``source_records``) read back.

Every statement is built with SQLAlchemy expressions and bound parameters. Inserts of many
rows go through one ``executemany`` per table, which is what makes an import of thousands of
messages one short transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    and_,
    insert,
    or_,
    select,
    type_coerce,
    update,
)

from contextstore.core.content import NormalizedMessage
from contextstore.core.nodes import NodeRow
from contextstore.storage import lineage
from contextstore.storage.appends import insert_message_rows
from contextstore.storage.clock import NO_LIMIT
from contextstore.storage.codec import column_text, decode_block, decode_json
from contextstore.storage.tables import (
    ARCHIVES,
    api_requests,
    blocks,
    checkpoints,
    context_updates,
    conversations,
    deleted_ranges,
    messages,
    rollbacks,
    source_records,
)


@dataclass(frozen=True)
class MessageInsert:
    """One message ready to insert: its index, ``ts``, validated content and token count."""

    idx: int
    ts: int
    normalized: NormalizedMessage
    token_count: int
    nodes: Sequence[NodeRow]


def insert_messages(
    connection: Connection, conversation_id: str, rows: Sequence[MessageInsert]
) -> None:
    """Insert messages and their blocks, one statement per table, and move the
    conversation's message count past them."""
    if not rows:
        return
    insert_message_rows(
        connection,
        conversation_id,
        [(row.idx, row.ts, row.normalized, row.token_count, row.nodes) for row in rows],
    )
    connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(message_count=max(row.idx for row in rows) + 1)
    )


def insert_source_records(
    connection: Connection, conversation_id: str, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``source_records`` rows (dicts with ts, origin, kind, source_ts, data)."""
    if rows:
        connection.execute(
            insert(source_records), [{"conversation_id": conversation_id, **r} for r in rows]
        )


def insert_requests(
    connection: Connection, conversation_id: str, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``api_requests`` rows (dicts with ts, the usage columns, failure, details)."""
    if rows:
        connection.execute(
            insert(api_requests), [{"conversation_id": conversation_id, **r} for r in rows]
        )


def insert_checkpoints(
    connection: Connection, conversation_id: str, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``checkpoints`` rows (dicts with ts, label, git_hash, note)."""
    if rows:
        connection.execute(
            insert(checkpoints), [{"conversation_id": conversation_id, **r} for r in rows]
        )


def insert_ranges(
    connection: Connection, conversation_id: str, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``deleted_ranges`` rows (dicts with ts, end_idx, keep, reason, tokens_total,
    summary); every range starts at 2."""
    if rows:
        connection.execute(
            insert(deleted_ranges),
            [
                {
                    "conversation_id": conversation_id,
                    "start_idx": 2,
                    **r,
                    "reason": column_text(r["reason"]),
                    "summary": column_text(r.get("summary")),
                }
                for r in rows
            ],
        )


def insert_updates_at(
    connection: Connection, conversation_id: str, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``context_updates`` rows, each with its own ``ts`` (dicts with ts, message_idx,
    block_idx, kind, mode, text, metadata, source)."""
    if rows:
        connection.execute(
            insert(context_updates),
            [
                {"conversation_id": conversation_id, **r, "text": column_text(r["text"])}
                for r in rows
            ],
        )


def record_imported_lineage(
    connection: Connection,
    conversation_id: str,
    ranges: Sequence[Mapping[str, Any]],
    updates: Sequence[Mapping[str, Any]],
) -> None:
    """Lineage rows for imported context updates and summarised ranges, once all of them are
    written: the edges each would have recorded had it been written on its own."""
    for ts in sorted({u["ts"] for u in updates}):
        lineage.record_update_lineage(connection, conversation_id, ts)
    for ts in sorted(r["ts"] for r in ranges if r.get("summary") is not None):
        lineage.record_range_lineage(connection, conversation_id, ts)


def advance_clock(connection: Connection, conversation_id: str, ts: int) -> None:
    """Move the conversation's clock to ``ts`` (the newest row just written)."""
    connection.execute(
        update(conversations).where(conversations.c.id == conversation_id).values(last_ts=ts)
    )


IMPORT_TARGET = None
"""The ``target`` of the rollback an importer's :func:`discard_imported_rows
<contextstore.facade.interop.InteropMixin.discard_imported_rows>` writes: none (a caller's
rollback always has one, the label or ts it asked for)."""


def rollback_after(connection: Connection, conversation_id: str, ts: int) -> bool:
    """True when a rollback a caller asked for ran after ``ts``, or any restore did (an
    importer's own replacement of rows, target None, does not count)."""
    return (
        connection.execute(
            select(rollbacks.c.id)
            .where(
                rollbacks.c.conversation_id == conversation_id,
                or_(
                    and_(rollbacks.c.target.is_not(None), rollbacks.c.ran_at > ts),
                    and_(rollbacks.c.restored_ts.is_not(None), rollbacks.c.restored_ts > ts),
                ),
            )
            .limit(1)
        ).first()
        is not None
    )


def load_message_ts(connection: Connection, conversation_id: str) -> list[int]:
    """Every message's ``ts``, in index order."""
    return [
        int(ts)
        for ts in connection.execute(
            select(messages.c.ts)
            .where(messages.c.conversation_id == conversation_id)
            .order_by(messages.c.idx)
        ).scalars()
    ]


def load_blocks(
    connection: Connection, conversation_id: str, message_indices: Sequence[int]
) -> dict[tuple[int, int], dict[str, Any]]:
    """Every block of the given messages, as appended, by (message, block)."""
    if not message_indices:
        return {}
    rows = connection.execute(
        select(
            blocks.c.message_idx,
            blocks.c.block_idx,
            blocks.c.type,
            blocks.c.text,
            blocks.c.tool_use_id,
            blocks.c.tool_name,
            type_coerce(blocks.c.data, Text).label("data"),
        ).where(
            blocks.c.conversation_id == conversation_id,
            blocks.c.message_idx.in_(sorted(set(message_indices))),
        )
    ).all()
    return {
        (r.message_idx, r.block_idx): decode_block(
            r.type, r.text, r.tool_use_id, r.tool_name, r.data, r.message_idx, r.block_idx
        )
        for r in rows
    }


def _record(row: Mapping[str, Any], data: Any) -> dict[str, Any]:
    decoded = decode_json(data, f"source record {row.get('id')}")
    return {
        "id": int(row.get("id") or 0),
        "conversation_id": row.get("conversation_id", ""),
        "ts": int(row["ts"]),
        "origin": row.get("origin", ""),
        "kind": row.get("kind", ""),
        "data": decoded if isinstance(decoded, dict) else {"value": decoded},
        "source_ts": None if row.get("source_ts") is None else int(row["source_ts"]),
    }


def load_source_records(
    connection: Connection,
    conversation_id: str,
    as_of: int = NO_LIMIT,
    origin: str | None = None,
) -> list[dict[str, Any]]:
    """The conversation's source records with ``ts <= as_of`` (of one origin), in ts order,
    as dicts of their columns (``data`` decoded)."""
    conditions = [source_records.c.conversation_id == conversation_id, source_records.c.ts <= as_of]
    if origin is not None:
        conditions.append(source_records.c.origin == origin)
    columns = [c for c in source_records.c if c.name != "data"]
    rows = connection.execute(
        select(*columns, type_coerce(source_records.c.data, Text).label("data"))
        .where(and_(*conditions))
        .order_by(source_records.c.ts)
    ).all()
    return [_record(dict(row._mapping), row.data) for row in rows]


@dataclass(frozen=True)
class RemovedRecords:
    """The source records one rollback archived (as :func:`load_source_records` dicts)."""

    rollback_id: int
    cutoff_ts: int
    ran_at: int
    records: list[dict[str, Any]]


def load_removed_source_records(
    connection: Connection, conversation_id: str
) -> list[RemovedRecords]:
    """For each rollback a caller asked for (not an importer's replacement of rows) and not
    restored since, the source records it archived (oldest rollback first); rollbacks
    that archived none are left out."""
    found: list[RemovedRecords] = []
    kept = ARCHIVES[source_records.name]
    columns = [c for c in kept.c if c.name not in ("data", "rollback_id")]
    runs = connection.execute(
        select(rollbacks.c.id, rollbacks.c.cutoff_ts, rollbacks.c.ran_at)
        .where(
            rollbacks.c.conversation_id == conversation_id,
            rollbacks.c.restored_ts.is_(None),
            rollbacks.c.target.is_not(None),
        )
        .order_by(rollbacks.c.ran_at)
    ).all()
    for run in runs:
        archived = connection.execute(
            select(*columns, type_coerce(kept.c.data, Text).label("data"))
            .where(kept.c.rollback_id == run.id)
            .order_by(kept.c.ts)
        ).all()
        records = [_record(dict(entry._mapping), entry.data) for entry in archived]
        if records:
            found.append(RemovedRecords(int(run.id), int(run.cutoff_ts), int(run.ran_at), records))
    return found
