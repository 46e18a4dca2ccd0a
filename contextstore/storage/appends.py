"""Statements that add messages to a conversation's history: one row in ``messages`` per
message and one in ``blocks`` per content block, at the indices and timestamps the clock
reserves for them (:mod:`.clock`). On SQLite the reservation is a statement of its own in
the writer's transaction; on PostgreSQL one statement reserves and inserts (one round trip
for a whole append).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    Boolean,
    Connection,
    Integer,
    Text,
    bindparam,
    cast,
    column,
    func,
    insert,
    select,
)
from sqlalchemy.dialects.postgresql import JSON as JSON_TYPE
from sqlalchemy.dialects.postgresql import JSONB

from contextstore.core.content import NormalizedMessage
from contextstore.core.nodes import NodeRow
from contextstore.storage.clock import (
    message_reservation,
    reservation_params,
    reservation_refused,
)
from contextstore.storage.codec import (
    column_text,
    encode_block,
    encode_json,
    encode_rows,
)
from contextstore.storage.sql import Statement, pipelined
from contextstore.storage.tables import blocks, messages

_m = messages.c


MESSAGE_COLUMNS = ("conversation_id", "idx", "ts", "role", "token_count", "was_string", "meta")
"""The columns an appended message's row fills, in the order the statements list them."""
BLOCK_COLUMNS = (
    "conversation_id",
    "message_idx",
    "block_idx",
    "type",
    "text",
    "tool_use_id",
    "tool_name",
    "data",
    "node_type",
    "path",
    "line_start",
    "line_end",
    "token_count",
)
"""The columns an appended block's row fills, in the order the statements list them."""

APPEND_PART = 250
"""Messages a part of a long batch holds on PostgreSQL (see :func:`insert_part`); a
batch of fewer than two parts goes in one statement (:func:`append_messages`)."""
APPEND_TAIL = 50
"""Messages of a long batch's last part: the server's work on it is the part of the
batch's writing that nothing overlaps, so it is kept short."""


def part_sizes(count: int) -> list[int]:
    """The sizes of the parts a batch of ``count`` messages is written in: parts of
    :data:`APPEND_PART`, then the rest, its last :data:`APPEND_TAIL` messages apart."""
    sizes = [APPEND_PART] * (count // APPEND_PART)
    rest = count % APPEND_PART
    if rest:
        sizes.append(rest)
    if sizes[-1] > APPEND_TAIL:
        sizes[-1] -= APPEND_TAIL
        sizes.append(APPEND_TAIL)
    return sizes


_INSERT_MESSAGE = Statement(
    lambda: insert(messages).values({name: bindparam(name) for name in MESSAGE_COLUMNS})
)
_INSERT_BLOCK = Statement(
    lambda: insert(blocks).values({name: bindparam(name) for name in BLOCK_COLUMNS})
)


class PendingRows(NamedTuple):
    """The rows of messages about to be appended, built before the write transaction
    (outside the writer's lock), without their keys: the clock's reservation gives the
    batch's first index and ``ts``, and a message's offset in the batch the rest.
    ``messages`` holds one row per message, in order; ``blocks`` pairs each block row with
    its message's offset."""

    messages: list[dict[str, Any]]
    blocks: list[tuple[int, dict[str, Any]]]


def pending_rows(
    written: Sequence[tuple[NormalizedMessage, int, Sequence[NodeRow]]],
) -> PendingRows:
    """The message and block rows of ``written`` (messages with their token counts and
    node rows)."""
    message_rows = []
    block_rows: list[tuple[int, dict[str, Any]]] = []
    for offset, (message, tokens, nodes) in enumerate(written):
        message_rows.append(_message_columns(message, tokens))
        block_rows.extend((offset, columns) for columns in _block_columns(message, nodes))
    return PendingRows(message_rows, block_rows)


def insert_messages(
    connection: Connection, conversation_id: str, first_idx: int, first_ts: int, rows: PendingRows
) -> None:
    """Insert pending messages at consecutive indices and timestamps from ``first_idx``
    and ``first_ts``, and their blocks, in two driver calls."""
    message_rows = [
        {"conversation_id": conversation_id, "idx": first_idx + offset, "ts": first_ts + offset}
        | columns
        for offset, columns in enumerate(rows.messages)
    ]
    block_rows = [
        {"conversation_id": conversation_id, "message_idx": first_idx + offset} | columns
        for offset, columns in rows.blocks
    ]
    with pipelined(connection):
        _INSERT_MESSAGE.run_many(connection, message_rows)
        _INSERT_BLOCK.run_many(connection, block_rows)


def _message_columns(message: NormalizedMessage, tokens: int) -> dict[str, Any]:
    """A message row's own columns (its key added by the caller)."""
    return {
        "role": message.role,
        "token_count": tokens,
        "was_string": message.was_string,
        "meta": encode_json(message.meta),
    }


def _block_columns(message: NormalizedMessage, nodes: Sequence[NodeRow]) -> list[dict[str, Any]]:
    """The block rows of ``message`` with their node columns (the message's key added by the
    caller)."""
    rows = []
    for position, (block, node) in enumerate(zip(message.blocks, nodes, strict=True)):
        kind, text, tool_use_id, tool_name, data = encode_block(block)
        rows.append(
            {
                "block_idx": position,
                "type": kind,
                "text": text,
                "tool_use_id": tool_use_id,
                "tool_name": tool_name,
                "data": data,
                "node_type": node.node_type,
                "path": column_text(node.path),
                "line_start": node.line_start,
                "line_end": node.line_end,
                "token_count": node.token_count,
            }
        )
    return rows


def insert_message_rows(
    connection: Connection,
    conversation_id: str,
    rows: Sequence[tuple[int, int, NormalizedMessage, int, Sequence[NodeRow]]],
) -> None:
    """Insert messages given as ``(idx, ts, message, token count, nodes)``, and their
    blocks with their node columns, in two driver calls (an importer's rows keep the other
    tool's timestamps)."""
    message_rows = []
    block_rows: list[dict[str, Any]] = []
    for idx, ts, message, tokens, nodes in rows:
        message_rows.append(
            {"conversation_id": conversation_id, "idx": idx, "ts": ts}
            | _message_columns(message, tokens)
        )
        block_rows.extend(
            {"conversation_id": conversation_id, "message_idx": idx} | columns
            for columns in _block_columns(message, nodes)
        )
    with pipelined(connection):
        _INSERT_MESSAGE.run_many(connection, message_rows)
        _INSERT_BLOCK.run_many(connection, block_rows)


_MESSAGE_FIELDS = (
    ("offset", Integer),
    ("role", Text),
    ("token_count", Integer),
    ("was_string", Boolean),
    ("meta", Text),
)
_BLOCK_FIELDS = (
    ("offset", Integer),
    ("block_idx", Integer),
    ("type", Text),
    ("text", Text),
    ("tool_use_id", Text),
    ("tool_name", Text),
    ("data", Text),
    ("node_type", Text),
    ("path", Text),
    ("line_start", Integer),
    ("line_end", Integer),
    ("token_count", Integer),
)
"""The fields of each message and block row :func:`append_messages` sends (``offset``:
the message's position among those written; JSON columns as their text)."""


def _recordset(name: str, fields: Sequence[tuple[str, Any]]) -> Any:
    """``json_to_recordset(:name) AS name(field type, ...)``: rows from one JSON parameter
    (a list of objects), which the driver sends as one string, cheaper to encode than an
    array per column."""
    rows = func.json_to_recordset(cast(bindparam(name, type_=Text), JSON_TYPE))
    return rows.table_valued(*[column(field, kind) for field, kind in fields]).render_derived(
        name=name, with_types=True
    )


def _written_messages(first_idx: Any, first_ts: Any) -> Any:
    """``INSERT INTO messages ... SELECT ... FROM json_to_recordset(:message_rows)``: each
    row at index ``first_idx`` and timestamp ``first_ts`` plus its offset."""
    rows = _recordset("message_rows", _MESSAGE_FIELDS)
    return insert(messages).from_select(
        list(MESSAGE_COLUMNS),
        select(
            bindparam("cid", type_=_m.conversation_id.type),
            first_idx + rows.c.offset,
            first_ts + rows.c.offset,
            rows.c.role,
            rows.c.token_count,
            rows.c.was_string,
            cast(rows.c.meta, JSONB),
        ),
    )


def _written_blocks(first_idx: Any) -> Any:
    """``INSERT INTO blocks ... SELECT ... FROM json_to_recordset(:block_rows)``: each
    block of the message at ``first_idx`` plus its message's offset."""
    parts = _recordset("block_rows", _BLOCK_FIELDS)
    return insert(blocks).from_select(
        list(BLOCK_COLUMNS),
        select(
            bindparam("cid", type_=_m.conversation_id.type),
            first_idx + parts.c.offset,
            parts.c.block_idx,
            parts.c.type,
            parts.c.text,
            parts.c.tool_use_id,
            parts.c.tool_name,
            cast(parts.c.data, JSONB),
            parts.c.node_type,
            parts.c.path,
            parts.c.line_start,
            parts.c.line_end,
            parts.c.token_count,
        ),
    )


def _append_query() -> Any:
    """``WITH reserved AS (UPDATE conversations ... RETURNING last_ts, message_count),
    INSERT INTO messages ... SELECT ... FROM reserved, json_to_recordset(...), INSERT INTO
    blocks ... SELECT ... FROM reserved, json_to_recordset(...) SELECT last_ts, message_count
    FROM reserved``."""
    reserved = message_reservation().cte("reserved")
    count = bindparam("messages", type_=Integer)
    first_idx = reserved.c.message_count - count
    first_ts = reserved.c.last_ts - count + 1
    return select(reserved.c.last_ts, reserved.c.message_count).add_cte(
        _written_messages(first_idx, first_ts).cte("written_messages"),
        _written_blocks(first_idx).cte("written_blocks"),
    )


_APPEND = Statement(_append_query)
_INSERT_MESSAGE_PART = Statement(
    lambda: _written_messages(
        bindparam("first_idx", type_=Integer), bindparam("first_ts", type_=_m.ts.type)
    )
)
_INSERT_BLOCK_PART = Statement(lambda: _written_blocks(bindparam("first_idx", type_=Integer)))


def append_messages(
    connection: Connection,
    conversation_id: str,
    rows: PendingRows,
    *,
    at: int | None = None,
) -> tuple[int, int]:
    """Reserve timestamps and indices for the pending ``rows`` (as
    :func:`~contextstore.storage.clock.reserve_messages` does) and insert the messages and
    their blocks, in one statement (PostgreSQL only: a data-modifying ``WITH`` reading
    each column from an array); returns the first ``ts`` and index.

    Run on its own (outside a transaction, see ``Database.write(alone=True)``), it is one
    round trip, the server committing the statement as it ends.

    Raises:
        TimelineError: ``at`` is not later than the conversation's last ``ts``.
        ConversationNotFoundError: no conversation has this id.
    """
    count = len(rows.messages)
    params = reservation_params(conversation_id, count, at) | _recordsets(rows)
    row = _APPEND.first(connection, params)
    if row is None:
        raise reservation_refused(connection, conversation_id, at)
    return int(row[0]) - count + 1, int(row[1]) - count


def insert_part(
    connection: Connection, conversation_id: str, first_idx: int, first_ts: int, rows: PendingRows
) -> None:
    """Insert pending messages at consecutive indices and timestamps from ``first_idx``
    and ``first_ts``, and their blocks (PostgreSQL: two statements reading the rows from
    one JSON parameter each, as :func:`append_messages` does).

    For a long batch whose timestamps and indices the transaction reserved with
    :func:`~contextstore.storage.clock.reserve_messages`, written a part at a time: in a
    pipelined transaction (``Database.write(pipeline=True)``) the statements go to the
    server at once, unread, so that it writes one part while the caller makes the next."""
    params = {"cid": conversation_id, "first_idx": first_idx, "first_ts": first_ts}
    params |= _recordsets(rows)
    _INSERT_MESSAGE_PART.run(connection, params).close()
    _INSERT_BLOCK_PART.run(connection, params).close()


def _recordsets(rows: PendingRows) -> dict[str, str]:
    """The ``message_rows`` and ``block_rows`` parameters of the statements that insert
    pending ``rows`` (each with its message's ``offset`` among them)."""
    return {
        "message_rows": encode_rows(
            [{"offset": offset} | columns for offset, columns in enumerate(rows.messages)]
        ),
        "block_rows": encode_rows(
            [{"offset": offset} | columns for offset, columns in rows.blocks]
        ),
    }
