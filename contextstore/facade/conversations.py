"""Conversations: create, look up, list, delete; subagents and their settings."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from contextstore.core.errors import (
    ConcurrentChangeError,
    IntegrityViolationError,
    InvalidInputError,
)
from contextstore.core.planning import check_threshold
from contextstore.core.records import Conversation
from contextstore.core.validate import (
    MAX_ID_LENGTH,
    MAX_TITLE_LENGTH,
    check_id,
    check_int,
    check_json_object,
    check_model_id,
    check_text,
    check_ts,
)
from contextstore.facade.base import StoreBase
from contextstore.storage import conversations
from contextstore.storage.clock import last_ts, now_ms
from contextstore.storage.database import Connection


class ConversationsMixin(StoreBase):
    """Conversations: create, look up, list, delete; subagents and their settings."""

    def create_conversation(
        self,
        *,
        model_id: str | None = None,
        context_window: int | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        parent_id: str | None = None,
        created_ts: int | None = None,
    ) -> Conversation:
        """Create a conversation and return it.

        ``context_window`` configured here is authoritative (no model-name clamps); when
        None, context management assumes 128,000 tokens. ``created_ts`` (default: now)
        starts the conversation's clock: an importer passes a moment before the first row
        it replays, so that rows keep the other tool's timestamps.
        """
        check_text("id", id, MAX_ID_LENGTH)
        check_model_id("model_id", model_id)
        check_int("context_window", context_window, minimum=1)
        check_text("title", title, MAX_TITLE_LENGTH)
        if parent_id is not None:
            check_id(parent_id, "parent_id")
        meta = self._masked(check_json_object("metadata", metadata))
        title = self._masked(title)
        conversation_id = id or uuid.uuid4().hex
        check_ts("created_ts", created_ts)
        created = now_ms() if created_ts is None else created_ts

        conversation = Conversation(
            id=conversation_id,
            created_ts=created,
            last_ts=created,
            title=title,
            model_id=model_id,
            context_window=context_window,
            parent_id=parent_id,
            metadata=meta,
        )

        def work(connection: Connection) -> Conversation:
            if parent_id is not None:
                last_ts(connection, parent_id)
            if conversations.find_conversation(connection, conversation_id) is not None:
                raise InvalidInputError(
                    f"a conversation with id {conversation_id!r} already exists; choose "
                    "another id or omit it."
                )
            conversations.insert_conversation(connection, conversation)
            return conversation

        try:
            return self._db.write(work)
        except IntegrityViolationError:
            # On PostgreSQL two writers may both find no such conversation and insert it
            # (two first imports of one task): the second's key is taken by then.
            with self._db.read() as connection:
                if conversations.find_conversation(connection, conversation_id) is None:
                    raise
            raise ConcurrentChangeError(
                f"another writer created conversation {conversation_id!r} at the same moment; "
                "nothing was written. Run the call again: it then finds that conversation."
            ) from None

    def get_conversation(self, conversation_id: str) -> Conversation:
        """Return one conversation.

        Raises:
            ConversationNotFoundError: no conversation has this id.
        """
        check_id(conversation_id)
        with self._db.read() as connection:
            return self._conversation(connection, conversation_id)

    def list_conversations(self) -> list[Conversation]:
        """All conversations, oldest first."""
        with self._db.read() as connection:
            return conversations.list_conversations(connection)

    def delete_conversation(self, conversation_id: str) -> dict[str, int]:
        """Delete a conversation and every row it owns, in one transaction.

        Messages, blocks, ranges, updates, requests, checkpoints, rollbacks and archived
        rows go with it (foreign keys cascade); forks and subagents of it stay, with their
        ``parent_id`` cleared. Returns the rows removed per table.

        Raises:
            ConversationNotFoundError: no conversation has this id.
        """
        check_id(conversation_id)

        def work(connection: Connection) -> dict[str, int]:
            self._conversation(connection, conversation_id)
            counts = conversations.count_rows(connection, conversation_id)
            conversations.delete_conversation(connection, conversation_id)
            return counts

        counts = self._db.write(work)
        # A conversation created again with this id has none of these calls.
        self._forget_calls(conversation_id)
        return counts

    def create_subagent(
        self,
        parent_id: str,
        *,
        model_id: str | None = None,
        context_window: int | None = None,
        title: str | None = None,
    ) -> Conversation:
        """Create a subagent's conversation as a child of ``parent_id``.

        Its prepares follow Cline's SubagentRunner: compaction at 75 % of the window with
        the ``quarter`` strategy, no notices, and no truncation when it cannot progress.
        """
        check_id(parent_id)
        check_model_id("model_id", model_id)
        check_int("context_window", context_window, minimum=1)
        check_text("title", title, MAX_TITLE_LENGTH)
        parent = self.get_conversation(parent_id)
        return self.create_conversation(
            model_id=parent.model_id if model_id is None else model_id,
            context_window=parent.context_window if context_window is None else context_window,
            title=title,
            metadata={"subagent": True},
            parent_id=parent_id,
        )

    def set_auto_condense(self, conversation_id: str, threshold: float | None) -> None:
        """Turn auto-condense on at ``threshold`` (a fraction of the window) or off (None).

        With auto-condense on, a prepare compacts once the previous request reaches
        ``min(floor(window * threshold), max allowed size)`` tokens, unless the last
        truncation left at most two messages (so a summary is never summarised).
        """
        check_id(conversation_id)
        check_threshold("threshold", threshold)

        def work(connection: Connection) -> None:
            conv = self._locked(connection, conversation_id)
            meta = dict(conv.metadata)
            if threshold is None:
                meta.pop("auto_condense", None)
            else:
                meta["auto_condense"] = threshold
            conversations.set_metadata(connection, conversation_id, meta)

        self._db.write(work)

    def set_conversation_model(
        self,
        conversation_id: str,
        *,
        model_id: str | None = None,
        context_window: int | None = None,
    ) -> Conversation:
        """Change the model the conversation talks to, its context window, or both; returns
        the conversation as it now is.

        Call it when the user switches models mid-task: from the next ``prepare_request``
        on, context management decides against the new window (a configured window is
        authoritative, as at creation), and new request rows name the new model. An
        argument left None keeps its current value. The change is a setting of the
        conversation, not a row of its timeline: a rollback does not undo it. Each prepared
        request records the window it was decided with, so the audit judges past requests
        against the window they were sent with.

        Raises:
            InvalidInputError: neither ``model_id`` nor ``context_window`` is given, or one
                is malformed.
            ConversationNotFoundError: no conversation has this id.
        """
        check_id(conversation_id)
        check_model_id("model_id", model_id)
        check_int("context_window", context_window, minimum=1)

        def work(connection: Connection) -> Conversation:
            conv = self._locked(connection, conversation_id)
            if model_id is None and context_window is None:
                raise InvalidInputError(
                    "set_conversation_model needs model_id, context_window or both; pass the "
                    "new model's id and its context window in tokens."
                )
            changed = dataclasses.replace(
                conv,
                model_id=conv.model_id if model_id is None else model_id,
                context_window=conv.context_window if context_window is None else context_window,
            )
            conversations.set_model(
                connection, conversation_id, changed.model_id, changed.context_window
            )
            return changed

        return self._db.write(work)

    def row_counts(self, conversation_id: str | None = None) -> dict[str, int]:
        """Rows per table (for one conversation, or the whole database)."""
        if conversation_id is not None:
            check_id(conversation_id)
        with self._db.read() as connection:
            return conversations.count_rows(connection, conversation_id)
