"""Statements for rollbacks: what a cutoff would remove, and putting archived rows back."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, delete, exists, func, insert, select, update

from contextstore.core.errors import CorruptRowError
from contextstore.storage.tables import (
    TIMELINE_TABLES,
    api_requests,
    archived_rows,
    blocks,
    checkpoints,
    context_updates,
    deleted_ranges,
    messages,
    rollbacks,
    source_records,
)

RESTORE_ORDER: tuple[Table, ...] = (
    messages,
    blocks,
    deleted_ranges,
    context_updates,
    api_requests,
    checkpoints,
    source_records,
)
"""Tables in the order archived rows go back (blocks need their messages first)."""


def count_after(connection: Connection, conversation_id: str, cutoff: int) -> dict[str, int]:
    """Rows per table that a rollback to ``cutoff`` would remove (blocks included)."""
    counts: dict[str, int] = {}
    for table in TIMELINE_TABLES:
        counts[table.name] = int(
            connection.execute(
                select(func.count())
                .select_from(table)
                .where(table.c.conversation_id == conversation_id, table.c.ts > cutoff)
            ).scalar_one()
        )
    counts["blocks"] = int(
        connection.execute(
            select(func.count())
            .select_from(blocks.join(messages))
            .where(blocks.c.conversation_id == conversation_id, messages.c.ts > cutoff)
        ).scalar_one()
    )
    return counts


def any_row_after(connection: Connection, conversation_id: str, cutoff: int) -> bool:
    """True when some timeline row of the conversation has ``ts > cutoff``."""
    return any(
        connection.execute(
            select(exists().where(table.c.conversation_id == conversation_id, table.c.ts > cutoff))
        ).scalar_one()
        for table in TIMELINE_TABLES
    )


def load_rollback(connection: Connection, conversation_id: str, rollback_id: int) -> Any | None:
    """The ``rollbacks`` row ``rollback_id`` of the conversation, or None."""
    return connection.execute(
        select(rollbacks).where(
            rollbacks.c.id == rollback_id, rollbacks.c.conversation_id == conversation_id
        )
    ).first()


def restore_archived(connection: Connection, rollback_id: int) -> dict[str, int]:
    """Insert the rows rollback ``rollback_id`` archived back into their tables, with their
    original values (ids and ``ts`` included), then drop them from the archive.

    Raises:
        CorruptRowError: an archived row does not hold a row of its table.
    """
    counts: dict[str, int] = {}
    for table in RESTORE_ORDER:
        rows = connection.execute(
            select(archived_rows.c.id, archived_rows.c.data)
            .where(
                archived_rows.c.rollback_id == rollback_id,
                archived_rows.c.table_name == table.name,
            )
            .order_by(archived_rows.c.id)
        ).all()
        values = [_row_values(table, row.data, row.id) for row in rows]
        if values:
            connection.execute(insert(table), values)
        counts[table.name] = len(values)
    connection.execute(delete(archived_rows).where(archived_rows.c.rollback_id == rollback_id))
    return counts


def mark_restored(connection: Connection, rollback_id: int, ts: int) -> None:
    """Record on the rollback's row that its rows were put back at ``ts``."""
    connection.execute(
        update(rollbacks).where(rollbacks.c.id == rollback_id).values(restored_ts=ts)
    )


def _row_values(table: Table, data: Any, archive_id: int) -> dict[str, Any]:
    if not isinstance(data, dict) or not set(data) <= set(table.c.keys()):
        raise CorruptRowError(
            f"archived row {archive_id} does not hold a row of {table.name}; the archive is "
            "damaged. Run 'contextstore check'."
        )
    return data
