"""Work a conversation's prepares keep for the next one: the state read, the rewritten
messages of its cut, and its messages rendered for the Anthropic payload.

History is append-only between rollbacks, restores and purges, and every row carries the
``ts`` it was written at: a state read at ``ts = T`` is brought up to date by reading only
the rows written after ``T``, once a fingerprint of the rows at or before ``T`` (their
counts and the sums of their timestamps, per table) shows none was removed or added since.
Messages that are the same objects as last time need no rewriting and no rendering again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contextstore.core.overlays import Message
from contextstore.core.records import Conversation
from contextstore.core.state import ConversationState
from contextstore.core.truncation import unread_through
from contextstore.core.view import CutMemo
from contextstore.renderers.anthropic import RenderedMessage
from contextstore.storage import history, ranges, requests, updates
from contextstore.storage.database import Connection
from contextstore.storage.history import Fingerprint

OBJECT_BYTES = 2048
"""What the objects of one kept message take besides its text, about (measured with
``tracemalloc`` on the benchmark's conversation: 18.8 MB held for 5,002 visible messages
of which 6.9 MB text and JSON)."""

RenderedPieces = dict[int, tuple[Message, RenderedMessage]]
"""Rendered messages by the ``id`` of the view message they were rendered from (kept, so
the ``id`` stays that message's)."""


@dataclass(frozen=True)
class PrepareMemo:
    """What one prepare of a conversation read and built, for the next prepare.

    Attributes:
        state: The state as read (``last_ts`` set), every message object kept.
        fingerprint: :func:`~contextstore.storage.history.history_fingerprint` of every
            row when ``state`` was read.
        cut: The cut's rewritten messages.
        pieces: The view's messages rendered for the Anthropic payload.
        read_messages: How many messages this prepare read from the database.
        rendered: How many messages it rendered (the others were reused).
        request: The id and ``ts`` of the request row the prepare wrote. Every removal
            of rows at or before ``state``'s time (a rollback, an importer replacing its
            rows, in any process) removes this newer row too, so while it is there the
            state read is still the history up to its time.
    """

    state: ConversationState
    fingerprint: Fingerprint
    cut: CutMemo = field(default_factory=dict)
    pieces: RenderedPieces = field(default_factory=dict)
    read_messages: int = 0
    rendered: int = 0
    request: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        """Bytes it holds, roughly: the state's stored bytes, the rendered JSON, and the
        Python objects of each visible message (its dicts and lists, twice: as read and as
        rendered)."""
        encoded = sum(len(piece.canonical) for _, piece in self.pieces.values())
        return held_at_least(self.state) + encoded


def held_at_least(state: ConversationState) -> int:
    """The bytes a memo of ``state`` holds before its rendered JSON is counted: a state
    above the cache's budget by this much alone will not be kept."""
    unread = unread_through(state.deleted_range) or 0
    visible = len(state.messages) - max(0, unread - 1)
    return state.stored_bytes + OBJECT_BYTES * visible


def read_state(
    connection: Connection, conversation: Conversation, previous: PrepareMemo | None
) -> tuple[ConversationState, Fingerprint, int]:
    """The conversation's state now, read in ``connection``'s snapshot: ``previous``'s
    state with the rows written since when it is still valid, else read whole; with the
    fingerprint of every row and how many messages were read."""
    cid = conversation.id
    if previous is not None and _still_current(connection, cid, previous):
        since = previous.state.last_ts
        assert since is not None
        early, every = history.history_fingerprint(connection, cid, since)
        deleted_range = ranges.load_deleted_range(connection, cid)
        old = previous.state
        if early == previous.fingerprint and deleted_range == old.deleted_range:
            hidden = unread_through(deleted_range)
            new, _stamps, size = history.load_messages_after(
                connection, cid, since, len(old.messages)
            )
            newer = updates.load_overlays_after(connection, cid, since, hidden_through=hidden)
            state = ConversationState(
                old.messages + new if new else old.messages,
                deleted_range,
                {**old.overlays, **newer} if newer else old.overlays,
                old.stored_bytes + size,
                conversation.last_ts,
            )
            return state, every, len(new)
    state = history.load_state(connection, cid, last_ts=conversation.last_ts)
    _, every = history.history_fingerprint(connection, cid, conversation.last_ts)
    return state, every, sum(1 for m in state.messages if m)


def _still_current(connection: Connection, conversation_id: str, previous: PrepareMemo) -> bool:
    """The request row ``previous`` wrote is still there, with its ``ts``."""
    if previous.request is None or previous.state.last_ts is None:
        return False
    request_id, ts = previous.request
    found = requests.find_request(connection, conversation_id, request_id)
    return found is not None and found.ts == ts
