"""Statements on conversations: their rows, and what a conversation owns in every table."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update

from contextstore.core.records import Conversation
from contextstore.storage.clock import not_found
from contextstore.storage.codec import decode_object, encode_json
from contextstore.storage.sql import Statement
from contextstore.storage.tables import (
    ARCHIVED_TABLES,
    ARCHIVES,
    blocks,
    conversations,
    rollbacks,
)

_c = conversations.c
_COLUMNS = (
    _c.id,
    _c.created_ts,
    _c.last_ts,
    _c.title,
    _c.model_id,
    _c.context_window,
    _c.parent_id,
    _c.forked_at_ts,
    _c.metadata,
    _c.message_count,
)


def _record(row: tuple[Any, ...]) -> Conversation:
    return Conversation(
        id=row[0],
        created_ts=int(row[1]),
        last_ts=int(row[2]),
        title=row[3],
        model_id=row[4],
        context_window=row[5],
        parent_id=row[6],
        forked_at_ts=row[7],
        metadata=decode_object(row[8], f"conversation {row[0]} metadata"),
    )


_INSERT = Statement(
    lambda: insert(conversations).values(
        {column: bindparam(column.name) for column in (*_COLUMNS[:9], _c.message_count)}
    )
)


def insert_conversation(
    connection: Connection, conversation: Conversation, *, message_count: int = 0
) -> None:
    """Insert a conversation's row (``message_count`` for a fork that copies messages)."""
    _INSERT.run(
        connection,
        {
            "id": conversation.id,
            "created_ts": conversation.created_ts,
            "last_ts": conversation.last_ts,
            "title": conversation.title,
            "model_id": conversation.model_id,
            "context_window": conversation.context_window,
            "parent_id": conversation.parent_id,
            "forked_at_ts": conversation.forked_at_ts,
            "metadata": encode_json(conversation.metadata),
            "message_count": message_count,
        },
    ).close()


_GET = Statement(lambda: select(*_COLUMNS).where(_c.id == bindparam("cid")))


def find_conversation(connection: Connection, conversation_id: str) -> Conversation | None:
    """The conversation's row, or None."""
    row = _GET.first(connection, {"cid": conversation_id})
    return None if row is None else _record(row)


def get_conversation(connection: Connection, conversation_id: str) -> Conversation:
    """The conversation's row.

    Raises:
        ConversationNotFoundError: no conversation has this id.
    """
    found = find_conversation(connection, conversation_id)
    if found is None:
        raise not_found(conversation_id)
    return found


_MESSAGE_COUNT = Statement(lambda: select(_c.message_count).where(_c.id == bindparam("cid")))


def message_count(connection: Connection, conversation_id: str) -> int:
    """How many messages the conversation holds (the next message's index).

    Raises:
        ConversationNotFoundError: no conversation has this id.
    """
    value = _MESSAGE_COUNT.scalar(connection, {"cid": conversation_id})
    if value is None:
        raise not_found(conversation_id)
    return int(value)


_LIST = Statement(lambda: select(*_COLUMNS).order_by(_c.created_ts, _c.id))


def list_conversations(connection: Connection) -> list[Conversation]:
    """Every conversation, oldest first."""
    return [_record(row) for row in _LIST.rows(connection)]


_DELETE = Statement(lambda: delete(conversations).where(_c.id == bindparam("cid")))
_DELETE_UNREFERENCED = tuple(
    Statement(
        lambda table=table: delete(table).where(table.c.conversation_id == bindparam("cid"))  # type: ignore[misc]
    )
    for table in (blocks, *ARCHIVES.values())
)


def delete_conversation(connection: Connection, conversation_id: str) -> None:
    """Delete the conversation's row; its rows in every table go with it (cascades), and
    its blocks and its rollbacks' archived rows, which have no foreign key, by a statement
    each."""
    for statement in _DELETE_UNREFERENCED:
        statement.run(connection, {"cid": conversation_id}).close()
    _DELETE.run(connection, {"cid": conversation_id}).close()


_SET_METADATA = Statement(
    lambda: (
        update(conversations)
        .where(_c.id == bindparam("cid"))
        .values(metadata=bindparam("metadata"))
    )
)


def set_metadata(connection: Connection, conversation_id: str, metadata: dict[str, Any]) -> None:
    """Replace the conversation's ``metadata`` object."""
    _SET_METADATA.run(
        connection, {"cid": conversation_id, "metadata": encode_json(metadata)}
    ).close()


_SET_MODEL = Statement(
    lambda: (
        update(conversations)
        .where(_c.id == bindparam("cid"))
        .values(model_id=bindparam("model_id"), context_window=bindparam("context_window"))
    )
)


def set_model(
    connection: Connection, conversation_id: str, model_id: str | None, context_window: int | None
) -> None:
    """Replace the conversation's ``model_id`` and ``context_window``."""
    _SET_MODEL.run(
        connection,
        {"cid": conversation_id, "model_id": model_id, "context_window": context_window},
    ).close()


OWNED_TABLES = (conversations, *ARCHIVED_TABLES, rollbacks, *ARCHIVES.values())
"""Every table holding rows of a conversation, as :func:`count_rows` reports them."""


def _counter(table: Any, per_conversation: bool) -> Any:
    """``SELECT count(*)`` of ``table``, of one conversation's rows or of all of them."""
    query = select(func.count()).select_from(table)
    if per_conversation:
        column = table.c.id if table is conversations else table.c.conversation_id
        query = query.where(column == bindparam("cid"))
    return query


_COUNTS = {
    (table.name, scoped): Statement(
        lambda table=table, scoped=scoped: _counter(table, scoped)  # type: ignore[misc]
    )
    for table in OWNED_TABLES
    for scoped in (True, False)
}


def count_rows(connection: Connection, conversation_id: str | None = None) -> dict[str, int]:
    """Rows per table, for one conversation or the whole database."""
    scoped = conversation_id is not None
    return {
        table.name: int(_COUNTS[(table.name, scoped)].scalar(connection, {"cid": conversation_id}))
        for table in OWNED_TABLES
    }
