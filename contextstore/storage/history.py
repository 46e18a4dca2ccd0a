"""Statements that read a conversation's history: messages and their blocks, and the state
the view is computed from (with the fingerprint that tells whether a state read earlier is
still current, and the stored token counts). Appending is in :mod:`.appends`.

A render reads three things in one snapshot: the effective deleted range
(:mod:`.ranges`), the visible messages joined with their blocks (hidden messages are not
read at all: the view and the truncation arithmetic need only their count), and the
effective context updates of the visible blocks (:mod:`.updates`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
)

from contextstore.core.errors import IntegrityViolationError
from contextstore.core.overlays import Message
from contextstore.core.state import HIDDEN, ConversationState
from contextstore.core.truncation import unread_through
from contextstore.storage.clock import (
    NO_LIMIT,
)
from contextstore.storage.codec import (
    decode_block,
    decode_object,
    loads,
)
from contextstore.storage.ranges import Visible, load_deleted_range
from contextstore.storage.sql import Statement
from contextstore.storage.tables import blocks, context_updates, deleted_ranges, messages
from contextstore.storage.updates import load_overlays

_m, _b, _r, _u = messages.c, blocks.c, deleted_ranges.c, context_updates.c


def _history_query(visible_only: bool) -> Any:
    # JSON columns are read as text: PostgreSQL's driver would decode every jsonb value,
    # where most hold {} and the decoder needs to parse only the others.
    query = (
        select(
            _m.idx,
            _m.ts,
            _m.role,
            _m.was_string,
            cast(_m.meta, Text),
            _b.block_idx,
            _b.type,
            _b.text,
            _b.tool_use_id,
            _b.tool_name,
            cast(_b.data, Text),
        )
        .join(blocks, and_(_b.conversation_id == _m.conversation_id, _b.message_idx == _m.idx))
        .where(_m.conversation_id == bindparam("cid"), _m.ts <= bindparam("as_of"))
        # Ordered by the blocks' key, and the visible range said of both tables: SQLite may
        # walk the blocks' key first (it does on a WITHOUT ROWID messages table without
        # statistics), and then reads neither the hidden blocks nor sorts the rows.
        .order_by(_b.message_idx, _b.block_idx)
    )
    if visible_only:
        hidden = bindparam("hidden_through", type_=Integer)
        query = query.where(
            or_(_m.idx < 2, _m.idx > hidden), or_(_b.message_idx < 2, _b.message_idx > hidden)
        )
    return query


_HISTORY = Visible(_history_query)


def load_messages(
    connection: Connection,
    conversation_id: str,
    as_of: int = NO_LIMIT,
    *,
    hidden_through: int | None = None,
) -> tuple[list[Message], list[int], int]:
    """Messages with ``ts <= as_of`` in index order, their timestamps, and the stored bytes
    they were decoded from.

    With ``hidden_through``, messages ``2..hidden_through`` are not read: they are
    :data:`HIDDEN` in the list and their timestamps are absent.

    Raises:
        IntegrityViolationError: indices are not 0..n-1 or timestamps do not increase.
        CorruptRowError: a stored value does not decode.
    """
    rows, hidden_through = _history_rows(connection, conversation_id, as_of, hidden_through)
    return _decoded(conversation_id, rows, hidden_through)


def _history_rows(
    connection: Connection, conversation_id: str, as_of: int, hidden_through: int | None
) -> tuple[list[tuple[Any, ...]], int | None]:
    """The history rows :func:`load_messages` decodes, and the ``hidden_through`` they
    were read with (None when the range hides nothing that is read at all)."""
    if hidden_through is not None and hidden_through < 2:
        hidden_through = None
    rows = _HISTORY.rows(connection, {"cid": conversation_id, "as_of": as_of}, hidden_through)
    return rows, hidden_through


_HISTORY_AFTER = Statement(
    lambda: _history_query(False).where(
        _m.idx >= bindparam("first"),
        _b.message_idx >= bindparam("first"),
        _m.ts > bindparam("after"),
    )
)


def load_messages_after(
    connection: Connection, conversation_id: str, after: int, first_idx: int
) -> tuple[list[Message], list[int], int]:
    """Messages with ``ts > after`` (appended since a state was read at ``after``), which
    must be ``first_idx`` onwards; as :func:`load_messages` returns them.

    They are read from index ``first_idx`` on, through the primary key (no index covers
    ``ts``); one of them not newer than ``after`` leaves a gap, which raises.

    Raises:
        IntegrityViolationError: their indices do not continue from ``first_idx`` or their
            timestamps do not increase.
        CorruptRowError: a stored value does not decode.
    """
    params = {"cid": conversation_id, "as_of": NO_LIMIT, "after": after, "first": first_idx}
    return _decoded(conversation_id, _HISTORY_AFTER.rows(connection, params), None, first_idx)


def _decoded(
    conversation_id: str,
    rows: Sequence[tuple[Any, ...]],
    hidden_through: int | None,
    first_idx: int = 0,
) -> tuple[list[Message], list[int], int]:
    """Messages decoded from history rows (ordered by message and block), checking their
    indices run from ``first_idx`` (skipping ``2..hidden_through``) and their ``ts`` grow."""
    result: list[Message] = []
    stamps: list[int] = []
    stored = 0
    strings: list[Message] = []
    current_idx = -1
    expected = first_idx
    content: list[dict[str, Any]] = []
    for (
        idx,
        ts,
        role,
        was_string,
        meta,
        block_idx,
        kind,
        text,
        tool_use_id,
        tool_name,
        data,
    ) in rows:
        if idx != current_idx:
            if hidden_through is not None and expected == 2 and idx > 2:
                result.extend([HIDDEN] * (hidden_through - 1))
                expected = hidden_through + 1
            if idx != expected or (stamps and ts <= stamps[-1]):
                raise _broken(conversation_id, idx, expected, ts)
            expected += 1
            current_idx = idx
            stamps.append(ts)
            content = []
            if meta.__class__ is str:
                stored += len(meta)
            message: Message = {"role": role, "content": content}
            if meta != "{}" and meta:
                message.update(decode_object(meta, f"message {idx} metadata"))
            result.append(message)
            if was_string:
                strings.append(message)
        if text is not None:
            stored += len(text)
        if data.__class__ is str:
            stored += len(data)
        if data == "{}" or (data.__class__ is dict and not data):
            # The commonest rows (a text, a tool result's string) hold nothing in data.
            if kind == "text":
                content.append({"type": "text", "text": "" if text is None else text})
                continue
            if kind == "tool_result":
                if tool_use_id is not None and text is not None:
                    content.append(
                        {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
                    )
                    continue
                block: dict[str, Any] = {"type": "tool_result"}
                if tool_use_id is not None:
                    block["tool_use_id"] = tool_use_id
                if text is not None:
                    block["content"] = text
                content.append(block)
                continue
        elif kind == "tool_use" and tool_use_id is not None and tool_name is not None:
            # A call whose data holds only its input, as the store writes it (anything else,
            # a damaged value included, is decode_block's).
            call_input = _input_only(data)
            if call_input is not None:
                content.append(
                    {"type": "tool_use", "id": tool_use_id, "name": tool_name, "input": call_input}
                )
                continue
        content.append(decode_block(kind, text, tool_use_id, tool_name, data, idx, block_idx))
    for message in strings:
        message["content"] = message["content"][0]["text"]
    return result, stamps, stored


def _input_only(data: Any) -> Any:
    """The input of a ``tool_use`` row whose data is ``{"input": ...}`` and nothing else
    (text, or PostgreSQL's decoded ``jsonb``); None for any other data."""
    if data.__class__ is str:
        if not data.startswith('{"input":'):
            return None
        try:
            data = loads(data)
        except ValueError:
            return None
    if data.__class__ is dict and len(data) == 1:
        return data.get("input")
    return None


def _broken(conversation_id: str, idx: int, position: int, ts: int) -> IntegrityViolationError:
    return IntegrityViolationError(
        f"conversation {conversation_id!r} has message {idx} at position {position} "
        f"(ts {ts}); indices must be 0..n-1 with increasing ts and every message needs a "
        "block. Run 'contextstore check'."
    )


_BLOCK = Statement(
    lambda: select(_b.type, _b.text, _b.tool_use_id, _b.tool_name, _b.data).where(
        _b.conversation_id == bindparam("cid"),
        _b.message_idx == bindparam("message_idx"),
        _b.block_idx == bindparam("block_idx"),
    )
)


def load_block(
    connection: Connection, conversation_id: str, message_idx: int, block_idx: int
) -> dict[str, Any] | None:
    """One stored block as appended, or None when the message has no such block."""
    row = _BLOCK.first(
        connection,
        {"cid": conversation_id, "message_idx": message_idx, "block_idx": block_idx},
    )
    if row is None:
        return None
    return decode_block(row[0], row[1], row[2], row[3], row[4], message_idx, block_idx)


# The state a view is computed from -------------------------------------------------------


def load_state(
    connection: Connection,
    conversation_id: str,
    as_of: int = NO_LIMIT,
    *,
    every_message: bool = False,
    last_ts: int | None = None,
    digest: bool = False,
) -> ConversationState:
    """Read the deleted range, the messages and the effective updates as of ``as_of``.

    Unless ``every_message``, the messages and updates the range hides are not read.
    ``last_ts`` (the conversation's clock, read in the same snapshot) is kept on the state
    so that a write planned from it can check nothing changed since. With ``digest``, the
    state carries a hash of the rows it was read from (see ``ConversationState.digest``).
    """
    deleted_range = load_deleted_range(connection, conversation_id, as_of)
    hidden = None if every_message else unread_through(deleted_range)
    rows, read_hidden = _history_rows(connection, conversation_id, as_of, hidden)
    # Python's own hashing, in C over the rows as read (text, JSON as text, keys, ts).
    rows_hash = hash(tuple(rows)) if digest else None
    loaded, _stamps, size = _decoded(conversation_id, rows, read_hidden)
    # The rows as read are let go before the updates are read, so that the two are never
    # held together: a render's peak memory is the decoded messages and the updates' rows.
    del rows
    overlays = load_overlays(connection, conversation_id, as_of, hidden_through=hidden)
    state = ConversationState(loaded, deleted_range, overlays, size, last_ts)
    if rows_hash is None:
        return state
    updates = tuple((a, u.kind, u.mode, u.text) for a, u in overlays.items())
    return replace(state, digest=hash((rows_hash, deleted_range, updates)))


def _tallies() -> list[tuple[Any, list[Any]]]:
    """Each table a state is read from, with what is summed over its rows: 1 (a count),
    ``ts``, and for messages the stored token count (a message rewritten in place by an
    importer keeps its ``ts``, rarely its count)."""
    return [
        (messages, [literal(1), _m.ts, _m.token_count]),
        (context_updates, [literal(1), _u.ts]),
        (deleted_ranges, [literal(1), _r.ts]),
    ]


def _fingerprint_query() -> Any:
    columns: list[Any] = []
    for table, measures in _tallies():
        early = case((table.c.ts <= bindparam("since"), 1), else_=0)
        sums = [func.coalesce(func.sum(m), 0) for m in measures]
        sums += [func.coalesce(func.sum(m * early), 0) for m in measures]
        tally = select(*sums).where(table.c.conversation_id == bindparam("cid")).subquery()
        columns.extend(tally.c)
    return select(*columns)


_FINGERPRINT = Statement(_fingerprint_query)

Fingerprint = tuple[int, ...]
"""How many messages, context updates and range rows a conversation holds, with the sums of
their timestamps (and of the messages' token counts)."""


def history_fingerprint(
    connection: Connection, conversation_id: str, since: int
) -> tuple[Fingerprint, Fingerprint]:
    """The conversation's rows counted (with the sums of their ``ts`` and the messages'
    token counts), once among those with ``ts <= since`` and once among all, in one
    statement.

    History is append-only between rollbacks, restores, purges and an importer's
    replacement of its rows, and those remove or bring back rows at or before a time
    already read: a state read at ``since`` is still valid, once brought up to date with
    the rows written after it, when the first fingerprint equals the second one taken
    back then.
    """
    row = _FINGERPRINT.first(connection, {"cid": conversation_id, "since": since})
    assert row is not None
    values = [int(value) for value in row]
    every: list[int] = []
    early: list[int] = []
    position = 0
    for _, measures in _tallies():
        width = len(measures)
        every.extend(values[position : position + width])
        early.extend(values[position + width : position + 2 * width])
        position += 2 * width
    return tuple(early), tuple(every)


_TOKEN_COUNTS = Statement(
    lambda: select(_m.idx, _m.token_count).where(
        _m.conversation_id == bindparam("cid"), _m.ts <= bindparam("as_of")
    )
)


def token_counts(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> dict[int, int]:
    """The stored token count of each message with ``ts <= as_of``, by index."""
    rows = _TOKEN_COUNTS.rows(connection, {"cid": conversation_id, "as_of": as_of})
    return {int(idx): int(count) for idx, count in rows}
