"""The timeline clock: ``ts`` strictly increasing per conversation across every row kind."""

from __future__ import annotations

import time

from sqlalchemy import Connection, select, update

from contextstore.core.errors import ConversationNotFoundError, TimelineError
from contextstore.core.validate import MAX_TS
from contextstore.storage.tables import conversations


def now_ms() -> int:
    """Wall-clock time in integer milliseconds."""
    return time.time_ns() // 1_000_000


def last_ts(connection: Connection, conversation_id: str, *, lock: bool = False) -> int:
    """The conversation's newest ``ts``; with ``lock``, its row is locked until commit.

    Raises:
        ConversationNotFoundError: no conversation has this id.
    """
    query = select(conversations.c.last_ts).where(conversations.c.id == conversation_id)
    if lock:
        query = query.with_for_update()
    value = connection.execute(query).scalar_one_or_none()
    if value is None:
        raise ConversationNotFoundError(
            f"no conversation has id {conversation_id!r}; list them with "
            "ContextStore.list_conversations() or 'contextstore conversations'."
        )
    return int(value)


def tick(
    connection: Connection, conversation_id: str, count: int = 1, *, at: int | None = None
) -> list[int]:
    """Reserve ``count`` consecutive timestamps after the conversation's last one.

    The first is ``max(now, last + 1)``, or ``at`` when the caller supplies a timestamp
    (which must then be later than the last one). Must run inside a write transaction.

    Raises:
        TimelineError: ``at`` is not later than the conversation's last ``ts``.
    """
    last = last_ts(connection, conversation_id, lock=True)
    if at is not None:
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= MAX_TS:
            raise TimelineError(
                f"ts must be an integer of milliseconds from 0 to 2**53, got {at!r:.80}."
            )
        if at <= last:
            raise TimelineError(
                f"ts {at} is not later than the conversation's last ts {last}; timestamps "
                "strictly increase within a conversation (omit ts to let the store choose)."
            )
        first = at
    else:
        first = max(now_ms(), last + 1)
    stamps = [first + offset for offset in range(count)]
    connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(last_ts=stamps[-1])
    )
    return stamps
