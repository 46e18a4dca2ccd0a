"""Nodes: typing the blocks about to be written, and reading a conversation's nodes in
the pristine view (as stored) or the active one (what the model sees)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from contextstore.core.errors import InvalidInputError, NodeInvariantError
from contextstore.core.nodes import (
    MEMORY_SUMMARY,
    CallInfo,
    CountedMessage,
    Node,
    NodeRow,
    typed_nodes,
)
from contextstore.core.overlays import Message, UpdateKind, shown_text
from contextstore.core.shown import shown_by_view
from contextstore.core.truncation import visible_start
from contextstore.core.validate import check_id, shown
from contextstore.facade.base import CALLS_LOCK, StoreBase
from contextstore.processors.runner import propose
from contextstore.storage import history, nodes
from contextstore.storage.clock import last_ts
from contextstore.storage.database import Connection

CALL_MEMORY = 4_096
"""Tool calls a store remembers from its own appends, to type their results without a
SELECT (a result answering a call it does not remember reads the call from the store)."""

View = Literal["pristine", "active"]
VIEWS: tuple[str, ...] = ("pristine", "active")


class NodesMixin(StoreBase):
    """Typed nodes: written with their blocks, read in both views."""

    _recent_calls: dict[tuple[str, str], CallInfo]

    def _typed(
        self,
        connection: Connection,
        conversation_id: str,
        first_idx: int,
        written: Sequence[CountedMessage],
        calls: Mapping[str, CallInfo],
        missing: Sequence[str],
    ) -> list[list[NodeRow]]:
        """The checked node rows of messages about to be written from ``first_idx`` on."""
        return self._typed_at(
            connection,
            conversation_id,
            [(first_idx + n, c) for n, c in enumerate(written)],
            calls,
            missing,
        )

    def _typed_at(
        self,
        connection: Connection,
        conversation_id: str,
        written: Sequence[tuple[int, CountedMessage]],
        calls: Mapping[str, CallInfo],
        missing: Sequence[str],
    ) -> list[list[NodeRow]]:
        """Node rows for ``written``, whose own ``calls`` are known; the ``missing`` calls
        its results answer come from this store's memory of its appends, else from one
        indexed SELECT."""
        return typed_nodes(written, self._known_calls(connection, conversation_id, calls, missing))

    def _known_calls(
        self,
        connection: Connection,
        conversation_id: str,
        calls: Mapping[str, CallInfo],
        missing: Sequence[str],
    ) -> dict[str, CallInfo]:
        """``calls`` and the ``missing`` calls, from this store's memory of its appends,
        else from one indexed SELECT (a result answering no stored call stays unknown)."""
        known = dict(calls)
        if missing:
            memory = self._call_memory()
            rest = []
            for use_id in missing:
                call = memory.get((conversation_id, use_id))
                if call is None:
                    rest.append(use_id)
                else:
                    known[use_id] = call
            if rest:
                known.update(nodes.find_calls(connection, conversation_id, rest))
        return known

    def _typed_ahead(
        self,
        conversation_id: str,
        written: Sequence[CountedMessage],
        calls: Mapping[str, CallInfo],
        missing: Sequence[str],
    ) -> list[list[NodeRow]] | None:
        """The node rows of ``written`` typed before their indices are known (for an append
        in one statement), when each of the ``missing`` calls their results answer (those
        not among ``calls``) is in this store's memory; None when one must be read from the
        store, or when typing fails (the append then types them at their indices, and
        reports that failure with them, after checking the conversation and ``ts`` as
        usual)."""
        known = dict(calls)
        if missing:
            memory = self._call_memory()
            for use_id in missing:
                call = memory.get((conversation_id, use_id))
                if call is None:
                    return None
                known[use_id] = call
        try:
            return typed_nodes(list(enumerate(written)), known)
        except NodeInvariantError:
            return None

    def _call_memory(self) -> dict[tuple[str, str], CallInfo]:
        memory: dict[tuple[str, str], CallInfo] | None = getattr(self, "_recent_calls", None)
        if memory is None:
            memory = {}
            self._recent_calls = memory
        return memory

    def _remember_calls(self, conversation_id: str, found: Mapping[str, CallInfo]) -> None:
        """Keep the calls just appended, so typing their results (usually the next append)
        needs no SELECT; the oldest are forgotten past :data:`CALL_MEMORY`."""
        if not found:
            return
        memory = self._call_memory()
        with CALLS_LOCK:
            for use_id, call in found.items():
                memory[(conversation_id, use_id)] = call
            while len(memory) > CALL_MEMORY:
                del memory[next(iter(memory))]

    def nodes(
        self, conversation_id: str, *, view: View = "pristine", as_of: int | None = None
    ) -> list[Node]:
        """The conversation's blocks as typed nodes, now or as of a past ``ts``.

        ``view="pristine"``: every stored block as appended (Gemini CLI's master graph).
        ``view="active"``: what the model sees: the blocks of the messages the deleted range
        leaves visible, with the effective rewrites (stored context updates, then the
        store's pipeline, applied in memory) in place of the originals; a rewritten node's
        text is counted again, and a truncation notice is a ``memory_summary``. The
        pairing repair's placeholders and the orphan results it drops are not nodes.
        """
        check_id(conversation_id)
        if view not in VIEWS:
            raise InvalidInputError(f"view must be one of {', '.join(VIEWS)}, got {shown(view)}.")
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            pristine = nodes.load_nodes(connection, conversation_id, limit)
            state = (
                history.load_state(connection, conversation_id, limit) if view == "active" else None
            )
        if state is None:
            return pristine
        start = visible_start(state.deleted_range)
        updates = dict(state.overlays)
        updates.update({u.address: u for u in propose(self.pipeline, state)})
        changes = shown_by_view(state.messages, state.deleted_range, updates)
        active = []
        for node in pristine:
            if 2 <= node.message_idx < start:
                continue
            change = changes.get(node.message_idx)
            if change is not None and node.block_idx in change.dropped:
                continue  # an orphan tool result the view drops
            update = updates.get((node.message_idx, node.block_idx))
            if update is None:
                active.append(node)
                continue
            kind = MEMORY_SUMMARY if update.kind == UpdateKind.TRUNCATION_NOTICE else node.node_type
            text = shown_text(_stored_block(state.messages, node), update)
            active.append(
                replace(
                    node,
                    node_type=kind,
                    token_count=self.token_counter.count(text),
                    text=text,
                    rewritten_by=update.kind,
                    rewrite_source=update.source,
                )
            )
        return active


def _stored_block(messages: Sequence[Message], node: Node) -> object:
    """The stored block a node is (None when the message holds no list of blocks)."""
    content = messages[node.message_idx].get("content")
    if isinstance(content, list) and node.block_idx < len(content):
        return content[node.block_idx]
    return None
