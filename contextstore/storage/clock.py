"""The timeline clock: ``ts`` strictly increasing per conversation across every row kind.

A write reserves its timestamps (and, for messages, its indices) in one statement on the
conversation's row, ``UPDATE ... RETURNING``: the row's ``last_ts`` moves to the last
reserved ``ts`` and ``message_count`` past the last reserved index. On PostgreSQL the
update also locks the row until commit, which is what serialises a conversation's writers.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, Update, bindparam, case, select, update

from contextstore.core.errors import (
    ConcurrentChangeError,
    ConversationNotFoundError,
    TimelineError,
)
from contextstore.core.validate import MAX_TS, shown
from contextstore.storage.sql import Statement
from contextstore.storage.tables import conversations

_c = conversations.c

NO_LIMIT = 2**62
"""An ``as_of`` later than any timestamp."""


def now_ms() -> int:
    """Wall-clock time in integer milliseconds."""
    return time.time_ns() // 1_000_000


def not_found(conversation_id: str) -> ConversationNotFoundError:
    """The error for a conversation id that names no conversation."""
    return ConversationNotFoundError(
        f"no conversation has id {conversation_id!r}; list them with "
        "ContextStore.list_conversations() or 'contextstore conversations'."
    )


_LAST_TS = Statement(lambda: select(_c.last_ts).where(_c.id == bindparam("cid")))
_LAST_TS_LOCKED = Statement(
    lambda: select(_c.last_ts).where(_c.id == bindparam("cid")).with_for_update()
)


def last_ts(connection: Connection, conversation_id: str, *, lock: bool = False) -> int:
    """The conversation's newest ``ts``; with ``lock``, its row is locked until commit
    (PostgreSQL; a SQLite write transaction holds the whole database already).

    Raises:
        ConversationNotFoundError: no conversation has this id.
    """
    value = (_LAST_TS_LOCKED if lock else _LAST_TS).scalar(connection, {"cid": conversation_id})
    if value is None:
        raise not_found(conversation_id)
    return int(value)


def _advanced(count_messages: bool, *, if_unchanged: bool = False) -> Update:
    """``UPDATE conversations`` moving the clock ``extra + 1`` ticks on from
    ``max(now, last + 1)`` (or from the caller's ``at``), and ``message_count`` by
    ``messages``; with ``if_unchanged``, only while ``last_ts`` is still ``seen``."""
    first = case(
        (bindparam("at", type_=_c.last_ts.type).is_not(None), bindparam("at")),
        (bindparam("now", type_=_c.last_ts.type) > _c.last_ts, bindparam("now")),
        else_=_c.last_ts + 1,
    )
    values: dict[str, Any] = {"last_ts": first + bindparam("extra", type_=_c.last_ts.type)}
    returning: list[Any] = [_c.last_ts]
    if count_messages:
        values["message_count"] = _c.message_count + bindparam(
            "messages", type_=_c.message_count.type
        )
        returning.append(_c.message_count)
    query = update(conversations).where(
        _c.id == bindparam("cid"),
        (bindparam("at", type_=_c.last_ts.type).is_(None))
        | (_c.last_ts < bindparam("at", type_=_c.last_ts.type)),
    )
    if if_unchanged:
        query = query.where(_c.last_ts == bindparam("seen", type_=_c.last_ts.type))
    return query.values(**values).returning(*returning)


def ticking() -> Update:
    """The :func:`tick` statement (``UPDATE conversations ... RETURNING last_ts``, values
    ``cid``, ``at``, ``now`` and ``extra``) for a statement of another module that ticks
    inside itself, as a PostgreSQL CTE."""
    return _advanced(False)


_TICK = Statement(lambda: _advanced(False))
_TICK_MESSAGES = Statement(lambda: _advanced(True))
_TICK_IF_UNCHANGED = Statement(lambda: _advanced(False, if_unchanged=True))


def _check_at(at: object) -> None:
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= MAX_TS:
        raise TimelineError(
            f"ts must be an integer of milliseconds from 0 to 2**53, got {shown(at)}."
        )


def _refused(connection: Connection, conversation_id: str, at: int | None) -> Exception:
    last = last_ts(connection, conversation_id)
    return TimelineError(
        f"ts {at} is not later than the conversation's last ts {last}; timestamps "
        "strictly increase within a conversation (omit ts to let the store choose)."
    )


def tick(
    connection: Connection, conversation_id: str, count: int = 1, *, at: int | None = None
) -> list[int]:
    """Reserve ``count`` consecutive timestamps after the conversation's last one.

    The first is ``max(now, last + 1)``, or ``at`` when the caller supplies a timestamp
    (which must then be later than the last one). Must run inside a write transaction.

    Raises:
        TimelineError: ``at`` is not later than the conversation's last ``ts``.
        ConversationNotFoundError: no conversation has this id.
    """
    if at is not None:
        _check_at(at)
    row = _TICK.first(
        connection, {"cid": conversation_id, "at": at, "now": now_ms(), "extra": count - 1}
    )
    if row is None:
        raise _refused(connection, conversation_id, at)
    last = int(row[0])
    return list(range(last - count + 1, last + 1))


def tick_if_unchanged(
    connection: Connection, conversation_id: str, seen: int, count: int = 1
) -> list[int]:
    """:func:`tick`, provided the conversation's last ``ts`` is still ``seen`` (nothing was
    written since a plan was made from it).

    Raises:
        ConcurrentChangeError: something was written since ``seen``.
        ConversationNotFoundError: no conversation has this id.
    """
    row = _TICK_IF_UNCHANGED.first(
        connection,
        {"cid": conversation_id, "at": None, "now": now_ms(), "extra": count - 1, "seen": seen},
    )
    if row is None:
        now = last_ts(connection, conversation_id)
        raise ConcurrentChangeError(
            f"conversation {conversation_id!r} changed while its context was being planned "
            f"(last ts {seen}, now {now}); retry the call."
        )
    last = int(row[0])
    return list(range(last - count + 1, last + 1))


def message_reservation() -> Update:
    """The ``UPDATE ... RETURNING last_ts, message_count`` :func:`reserve_messages` runs,
    for a statement that writes the messages with what it returns (see
    :func:`contextstore.storage.appends.append_messages`); it takes the parameters of
    :func:`reservation_params`."""
    return _advanced(True)


def reservation_params(conversation_id: str, count: int, at: int | None) -> dict[str, Any]:
    """The parameters reserving ``count`` timestamps and message indices (checked ``at``).

    Raises:
        TimelineError: ``at`` is not a timestamp.
    """
    if at is not None:
        _check_at(at)
    return {
        "cid": conversation_id,
        "at": at,
        "now": now_ms(),
        "extra": count - 1,
        "messages": count,
    }


def reservation_refused(connection: Connection, conversation_id: str, at: int | None) -> Exception:
    """Why a reservation changed no row: the conversation does not exist
    (:class:`ConversationNotFoundError`, raised here) or ``at`` is not later than its last
    ``ts`` (the :class:`TimelineError` returned)."""
    return _refused(connection, conversation_id, at)


def reserve_messages(
    connection: Connection, conversation_id: str, count: int, *, at: int | None = None
) -> tuple[int, int]:
    """Reserve ``count`` timestamps and message indices in one statement; returns the
    first of each (the timestamps as :func:`tick` chooses them).

    Raises:
        TimelineError: ``at`` is not later than the conversation's last ``ts``.
        ConversationNotFoundError: no conversation has this id.
    """
    row = _TICK_MESSAGES.first(connection, reservation_params(conversation_id, count, at))
    if row is None:
        raise _refused(connection, conversation_id, at)
    return int(row[0]) - count + 1, int(row[1]) - count


_SET_MESSAGE_COUNT = Statement(
    lambda: (
        update(conversations)
        .where(_c.id == bindparam("cid"))
        .values(message_count=bindparam("count"))
    )
)


def set_message_count(connection: Connection, conversation_id: str, count: int) -> None:
    """Record how many messages the conversation holds (after a rollback or a restore)."""
    _SET_MESSAGE_COUNT.run(connection, {"cid": conversation_id, "count": count}).close()
