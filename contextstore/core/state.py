"""A conversation as the view rules and context management read it, at one moment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from contextstore.core.overlays import BlockAddress, BlockUpdate, Message
from contextstore.core.truncation import DeletedRange

HIDDEN: Message = {}
"""Stands for a message the deleted range hides: never read, only its position counts."""


@dataclass(frozen=True)
class ConversationState:
    """Everything the view needs, as of one moment, read in one snapshot.

    ``messages`` has one entry per stored message; those the deleted range hides are
    :data:`HIDDEN` unless every message was read.
    """

    messages: list[Message]
    deleted_range: DeletedRange | None
    overlays: dict[BlockAddress, BlockUpdate] = field(default_factory=dict)
    stored_bytes: int = 0
    """Bytes of the stored values the state was decoded from (a measure of its size)."""
    last_ts: int | None = None
    """The conversation's newest ``ts`` when the state was read (None when not read)."""
    digest: int | None = None
    """A hash of the rows the state was read from (None when not computed): an importer may
    replace rows in place under the same timestamps (or delete a conversation and write it
    again under the same id), so a timestamp alone does not name what was read."""

    def with_updates(self, updates: Sequence[BlockUpdate]) -> ConversationState:
        """This state with ``updates`` applied, as if they had been written."""
        if not updates:
            return self
        overlays = dict(self.overlays)
        overlays.update({update.address: update for update in updates})
        return replace(self, overlays=overlays)

    def with_range(self, deleted_range: DeletedRange | None) -> ConversationState:
        """This state with another effective range, as if it had been written."""
        return replace(self, deleted_range=deleted_range)
