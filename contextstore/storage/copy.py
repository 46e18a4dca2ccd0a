"""Copying a conversation's history into another one (forks), entirely in SQL."""

from __future__ import annotations

from sqlalchemy import Connection, Table, insert, literal, select

from contextstore.storage.tables import (
    api_requests,
    blocks,
    checkpoints,
    context_updates,
    deleted_ranges,
    messages,
    source_records,
)


def _copy(
    connection: Connection, table: Table, source: str, target: str, where: list[object]
) -> None:
    columns = [
        c
        for c in table.c
        if c.name != "conversation_id"
        and not (c.primary_key and c.autoincrement is True and c.name == "id")
    ]
    names = [c.name for c in columns]
    query = select(literal(target).label("conversation_id"), *columns).where(
        table.c.conversation_id == source,
        *where,  # type: ignore[arg-type]
    )
    connection.execute(insert(table).from_select(["conversation_id", *names], query))


def copy_history(connection: Connection, source: str, target: str, cutoff: int) -> None:
    """Copy every timeline row of ``source`` with ``ts <= cutoff`` into ``target``."""
    last_idx = select(messages.c.idx).where(
        messages.c.conversation_id == source, messages.c.ts <= cutoff
    )
    _copy(connection, messages, source, target, [messages.c.ts <= cutoff])
    _copy(connection, blocks, source, target, [blocks.c.message_idx.in_(last_idx)])
    for table in (deleted_ranges, context_updates, api_requests, checkpoints, source_records):
        _copy(connection, table, source, target, [table.c.ts <= cutoff])
