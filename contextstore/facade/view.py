"""Reading the view (render, messages, ranges, updates) and writing ranges and rewrites."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from contextstore.core.errors import (
    IntegrityViolationError,
    InvalidInputError,
)
from contextstore.core.overlays import BlockUpdate, UpdateKind, UpdateMode, block_text, text_hash
from contextstore.core.validate import (
    check_id,
    check_int,
    check_text,
    json_copy,
)
from contextstore.core.view import pending_calls
from contextstore.facade.base import StoreBase
from contextstore.pipeline_runner import processed_view
from contextstore.processors.pipeline import Pipeline
from contextstore.renderers import registry
from contextstore.storage import queries
from contextstore.storage.clock import last_ts, tick
from contextstore.storage.tables import (
    blocks,
    context_updates,
)


class ViewMixin(StoreBase):
    """The view and the rows it is computed from."""

    def messages(self, conversation_id: str, *, as_of: int | None = None) -> list[dict[str, Any]]:
        """The stored messages (originals: no cut, no rewrites), as appended."""
        check_id(conversation_id)
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            loaded, _ = queries.load_messages(connection, conversation_id, limit)
        return loaded

    def deleted_range(
        self, conversation_id: str, as_of: int | None = None
    ) -> tuple[int, int] | None:
        """The effective deleted range ``(2, end)`` at ``as_of`` (now by default), or None."""
        check_id(conversation_id)
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return queries.load_deleted_range(connection, conversation_id, limit)

    def render(
        self,
        conversation_id: str,
        *,
        as_of: int | None = None,
        format: str | None = None,
        pipeline: Pipeline | None = None,
    ) -> list[dict[str, Any]]:
        """The conversation as the model sees it, now or as of a past ``ts``.

        The view rules apply in order: the cut, the effective block rewrites, the
        processors (the store's pipeline, or ``pipeline``; applied in memory, nothing is
        written), the orphan filter, the pairing repair. With ``format=None`` the view keeps
        every stored field; ``"anthropic"``, ``"openai"`` and ``"gemini"`` give the
        provider's message list, checked against that provider's pairing and role rules.
        A repeat render of an unchanged conversation is served from a cache.
        """
        check_id(conversation_id)
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        active = self.pipeline if pipeline is None else pipeline
        if format is not None:
            registry.check_format(format)
        with self._db.read() as connection:
            newest = last_ts(connection, conversation_id)
            key = (
                conversation_id,
                newest,
                min(limit, newest),
                format,
                active.config_key() if active else None,
            )
            cached = self.render_cache.get(key)
            if cached is not None:
                copied: list[dict[str, Any]] = json_copy(cached)
                return copied
            state = queries.load_state(connection, conversation_id, limit)
        view = self._format(processed_view(active, state), format)
        self.render_cache.put(key, json_copy(view))
        return view

    @staticmethod
    def _format(view: list[dict[str, Any]], format: str | None) -> list[dict[str, Any]]:
        if format is None:
            return view
        rendered = registry.render(format, view)
        # Calls in the last message are waiting for their results: that is a state to show,
        # not a broken history, so the rules are checked on the answered part.
        checked = registry.render(format, view[:-1]) if pending_calls(view) else rendered
        problems = registry.validate_provider_payload(format, checked)
        if problems:
            raise IntegrityViolationError(
                f"the {format} rendering breaks the provider's rules ({'; '.join(problems[:3])}); "
                "run 'contextstore check' on the conversation."
            )
        return rendered

    def set_deleted_range(
        self,
        conversation_id: str,
        end: int,
        *,
        keep: str = "manual",
        reason: str = "set by the caller",
        tokens_total: int | None = None,
        summary: str | None = None,
    ) -> int:
        """Hide messages ``2..end`` from the view from now on; returns the row's ``ts``.

        Raises:
            InvalidInputError: ``end`` is below 1, beyond the last message, or smaller than
                the current range's end (a range never shrinks; roll back instead).
        """
        check_id(conversation_id)
        check_int("end", end, minimum=1, optional=False)
        check_int("tokens_total", tokens_total)
        if not isinstance(reason, str) or not isinstance(keep, str):
            raise InvalidInputError("keep and reason must be strings.")

        def work(connection: Connection) -> int:
            (stamp,) = tick(connection, conversation_id)
            count = queries.next_message_idx(connection, conversation_id)
            current = queries.load_deleted_range(connection, conversation_id)
            if end >= count - 1:
                raise InvalidInputError(
                    f"end {end} is beyond the last message but one (index {count - 2}); the "
                    "newest message always stays visible."
                )
            if current is not None and end < current[1]:
                raise InvalidInputError(
                    f"end {end} would shrink the current range (2, {current[1]}); ranges only "
                    "grow (roll back to a checkpoint to show hidden messages again)."
                )
            queries.insert_range(
                connection,
                conversation_id,
                stamp,
                end,
                keep=keep,
                reason=reason,
                tokens_total=tokens_total,
                summary=summary,
            )
            return stamp

        return self._db.write(work)

    def add_context_update(
        self,
        conversation_id: str,
        message_idx: int,
        block_idx: int,
        text: str,
        *,
        kind: str = UpdateKind.MANUAL,
        source: str = "caller",
        metadata: Mapping[str, Any] | None = None,
        mode: str = UpdateMode.TEXT,
        base_hash: str | None = None,
    ) -> int:
        """Rewrite one block's visible text from now on (the original stays); returns ``ts``.

        With ``base_hash`` (see :func:`contextstore.text_hash`), the update is refused when
        the block's current visible text no longer has that hash.

        Raises:
            InvalidInputError: the block does not exist or has no text to rewrite, the kind or
                mode is unknown, or ``base_hash`` does not match.
        """
        check_id(conversation_id)
        check_int("message_idx", message_idx, optional=False)
        check_int("block_idx", block_idx, optional=False)
        if not isinstance(text, str):
            raise InvalidInputError("text must be a string.")
        if kind not in UpdateKind.ALL:
            raise InvalidInputError(
                f"kind {kind!r} is unknown; use one of {sorted(UpdateKind.ALL)}."
            )
        if mode not in UpdateMode.ALL:
            raise InvalidInputError(
                f"mode {mode!r} is unknown; use one of {sorted(UpdateMode.ALL)}."
            )
        check_text("source", source, 200, optional=False)
        meta = dict(metadata or {})
        update_value = BlockUpdate(
            message_idx, block_idx, kind, text, source, meta, base_hash, mode
        )

        def work(connection: Connection) -> int:
            (stamp,) = tick(connection, conversation_id)
            self._check_update_target(connection, conversation_id, update_value)
            queries.insert_updates(connection, conversation_id, stamp, [update_value])
            return stamp

        return self._db.write(work)

    def _check_update_target(
        self, connection: Connection, conversation_id: str, update_value: BlockUpdate
    ) -> None:
        row = connection.execute(
            select(blocks.c.type, blocks.c.text, blocks.c.data).where(
                blocks.c.conversation_id == conversation_id,
                blocks.c.message_idx == update_value.message_idx,
                blocks.c.block_idx == update_value.block_idx,
            )
        ).first()
        if row is None:
            raise InvalidInputError(
                f"message {update_value.message_idx} has no block {update_value.block_idx}; "
                "address an existing block."
            )
        block = queries._block_from_row(row.type, row.text, row.data, "block")
        if update_value.mode == UpdateMode.TEXT and block_text(block) is None:
            raise InvalidInputError(
                f"block {update_value.message_idx}.{update_value.block_idx} is a {row.type} "
                "block with no text to rewrite; use mode='block' to replace it with text."
            )
        if update_value.mode == UpdateMode.TOOL_INPUT and row.type != "tool_use":
            raise InvalidInputError("mode='tool_input' applies to tool_use blocks only.")
        if update_value.base_hash is not None:
            overlays = queries.load_overlays(connection, conversation_id)
            current = overlays.get(update_value.address)
            visible = current.text if current is not None else block_text(block)
            if visible is None or text_hash(visible) != update_value.base_hash:
                raise InvalidInputError(
                    "the block's visible text changed since base_hash was computed; re-read "
                    "the block and propose the update again."
                )

    def context_updates(
        self, conversation_id: str, *, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """Every context update row (not only the effective ones), oldest first."""
        check_id(conversation_id)
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return queries.rows_as_dicts(
                connection.execute(
                    select(context_updates)
                    .where(
                        context_updates.c.conversation_id == conversation_id,
                        context_updates.c.ts <= limit,
                    )
                    .order_by(context_updates.c.ts, context_updates.c.id)
                )
            )

    def row_counts(self, conversation_id: str | None = None) -> dict[str, int]:
        """Rows per table (for one conversation, or the whole database)."""
        if conversation_id is not None:
            check_id(conversation_id)
        with self._db.read() as connection:
            return queries.count_rows(connection, conversation_id)

    def check(self, conversation_id: str) -> None:
        """Verify a conversation's stored invariants; raise if one is broken.

        Checks that message indices are 0..n-1 with strictly increasing ``ts``, that every
        stored value decodes, and that the rendered view pairs every tool call.

        Raises:
            IntegrityViolationError: naming the first broken invariant.
        """
        check_id(conversation_id)
        view = self.render(conversation_id)
        from contextstore.core.view import ensure_tool_results_follow_tool_use

        if ensure_tool_results_follow_tool_use(view) != view:
            raise IntegrityViolationError(
                f"conversation {conversation_id!r} renders with an unpaired tool call."
            )
