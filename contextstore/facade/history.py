"""A conversation's history: appending and reading messages, the view, and the range and
rewrite rows the view is computed from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, overload

from contextstore.core.content import NormalizedMessage, normalize_message, normalize_message_dict
from contextstore.core.errors import (
    ContentTooLargeError,
    IntegrityViolationError,
    InvalidInputError,
    InvalidMessageError,
)
from contextstore.core.nodes import (
    CountedMessage,
    NodeRow,
    batch_calls,
    count_message,
    typed_nodes,
)
from contextstore.core.overlays import BlockUpdate, UpdateKind, UpdateMode, block_text, text_hash
from contextstore.core.planning import Plan, TruncationSummarizer, plan_truncation
from contextstore.core.records import AppendedMessage, TruncationDecision
from contextstore.core.state import ConversationState
from contextstore.core.truncation import normalize_keep, past_last_but_one
from contextstore.core.validate import (
    MAX_HASH_LENGTH,
    MAX_KEEP_LENGTH,
    MAX_NAME_LENGTH,
    check_choice,
    check_free_text,
    check_id,
    check_int,
    check_json_object,
    check_text,
    check_tool_input_json,
)
from contextstore.core.view import pending_calls
from contextstore.facade.base import Snapshot
from contextstore.facade.collector import collector_paused
from contextstore.facade.nodes import NodesMixin
from contextstore.processors.pipeline import Pipeline
from contextstore.processors.runner import RunContext, propose_and_view, view_with
from contextstore.processors.secrets import mask_message
from contextstore.renderers import registry
from contextstore.storage import appends, conversations, history, ranges, updates
from contextstore.storage.clock import last_ts, reserve_messages, tick
from contextstore.storage.database import Connection

PROPOSAL_OVERHEAD = 200
"""Bytes a cached proposal costs beyond its text (the update value and its key)."""


class HistoryMixin(NodesMixin):
    """A conversation's history: appending and reading messages, the view, and the range and
    rewrite rows the view is computed from.
    """

    @overload
    def append(
        self,
        conversation_id: str,
        role: str,
        content: str | Iterable[Mapping[str, Any]],
        *,
        meta: Mapping[str, Any] | None = None,
        ts: int | None = None,
    ) -> AppendedMessage: ...

    @overload
    def append(
        self,
        conversation_id: str,
        role: Sequence[Mapping[str, Any]],
        content: None = None,
        *,
        meta: None = None,
        ts: int | None = None,
    ) -> list[AppendedMessage]: ...

    def append(
        self,
        conversation_id: str,
        role: Any,
        content: Any = None,
        *,
        meta: Mapping[str, Any] | None = None,
        ts: int | None = None,
    ) -> AppendedMessage | list[AppendedMessage]:
        """Append one message, or a list of message dicts in one transaction.

        ``append(cid, "user", [{"type": "text", "text": "..."}])`` appends one message;
        ``append(cid, [{"role": "user", "content": "..."}, ...])`` appends several, all or
        none. Fields beside ``role`` and ``content`` (Cline's ``id``, ``modelInfo``,
        ``metrics``...) are kept and come back unchanged from :meth:`messages`.
        ``ts`` forces the (first) message's timestamp; it must be later than the
        conversation's last one.

        Raises:
            InvalidMessageError: a message or block is malformed (nothing is written).
            ContentTooLargeError: a message exceeds ``max_message_bytes``.
            TimelineError: ``ts`` is not later than the conversation's last ``ts``.
            ConversationNotFoundError: no conversation has this id.
        """
        check_id(conversation_id)
        if isinstance(role, Sequence) and not isinstance(role, str | bytes) and content is None:
            return self.append_many(conversation_id, role, ts=ts)
        if isinstance(role, Mapping):
            raise InvalidMessageError(
                "append takes a role and its content, append(cid, 'user', content), or a "
                "list of message dicts, append(cid, [message]); a single message dict was "
                "given: put it in a list."
            )
        extra = check_json_object("meta", meta, max_bytes=None) if meta is not None else None
        normalized = normalize_message(role, content, extra)
        return self._append_normalized(conversation_id, [normalized], ts)[0]

    def append_many(
        self,
        conversation_id: str,
        new_messages: Sequence[Mapping[str, Any]],
        *,
        ts: int | None = None,
    ) -> list[AppendedMessage]:
        """Append several messages (dicts with ``role`` and ``content``) in one transaction."""
        check_id(conversation_id)
        if isinstance(new_messages, str | bytes) or not isinstance(new_messages, Sequence):
            raise InvalidInputError("append_many takes a list of message dicts.")
        if not new_messages:
            raise InvalidInputError("append_many needs at least one message.")
        normalized = []
        for position, message in enumerate(new_messages):
            try:
                normalized.append(normalize_message_dict(message))
            except InvalidInputError as exc:
                raise type(exc)(f"message {position}: {exc}") from exc
        return self._append_normalized(conversation_id, normalized, ts)

    def _prepare_for_write(self, normalized: NormalizedMessage) -> CountedMessage:
        if self.mask_secrets_on_write:
            normalized = normalize_message_dict(mask_message(normalized.to_message()))
        size = normalized.size_over(self.max_message_bytes)
        if size is not None:
            raise ContentTooLargeError(
                f"the message is {size:,} bytes as JSON, over the limit of "
                f"{self.max_message_bytes:,}; split it, store large files outside the "
                "conversation, or open the store with a larger max_message_bytes."
            )
        return count_message(normalized, self.token_counter)

    def _append_normalized(
        self, conversation_id: str, normalized: list[NormalizedMessage], ts: int | None
    ) -> list[AppendedMessage]:
        if len(normalized) >= 2 * appends.APPEND_PART and not self._db.is_sqlite:
            return self._append_in_parts(conversation_id, normalized, ts)
        prepared = [self._prepare_for_write(n) for n in normalized]
        calls, missing = batch_calls(normalized)
        # Typed and encoded before the write lock is taken, so that other writers of the
        # file wait only for the statements and the commit; None when typing must read a
        # call from the store or fails (then it happens inside, where failures are
        # reported after the conversation and ``ts`` are checked).
        ahead = self._typed_ahead(conversation_id, prepared, calls, missing)
        rows = None if ahead is None else _pending(prepared, ahead)
        if rows is not None and not self._db.is_sqlite:

            def alone(connection: Connection) -> list[AppendedMessage]:
                first_ts, first_idx = appends.append_messages(
                    connection, conversation_id, rows, at=ts
                )
                return _appended(conversation_id, first_idx, first_ts, prepared)

            appended = self._db.write(alone, alone=True)
            self._remember_calls(conversation_id, calls)
            return appended

        def work(connection: Connection) -> list[AppendedMessage]:
            first_ts, first_idx = reserve_messages(
                connection, conversation_id, len(prepared), at=ts
            )
            pending = rows
            if pending is None:
                nodes = self._typed(
                    connection, conversation_id, first_idx, prepared, calls, missing
                )
                pending = _pending(prepared, nodes)
            appends.insert_messages(connection, conversation_id, first_idx, first_ts, pending)
            return _appended(conversation_id, first_idx, first_ts, prepared)

        appended = self._db.write(work, pipeline=True)
        self._remember_calls(conversation_id, calls)
        return appended

    def _append_in_parts(
        self, conversation_id: str, normalized: list[NormalizedMessage], ts: int | None
    ) -> list[AppendedMessage]:
        """A long batch on PostgreSQL, in parts of :data:`~contextstore.storage.appends.APPEND_PART`
        messages, in one pipelined transaction: after the reservation, each part is counted,
        typed and sent while the server writes the one before (see
        :func:`~contextstore.storage.appends.insert_part`), so that this process's work and
        the server's overlap on two cores, where the whole batch in one statement makes
        them take turns. All or nothing, as any append."""
        calls, missing = batch_calls(normalized)
        parts = []
        start = 0
        for size in appends.part_sizes(len(normalized)):
            parts.append(normalized[start : start + size])
            start += size
        counted: list[list[CountedMessage]] = []

        def work(connection: Connection) -> tuple[int, int]:
            first_ts, first_idx = reserve_messages(
                connection, conversation_id, len(normalized), at=ts
            )
            known = self._known_calls(connection, conversation_id, calls, missing)
            offset = 0
            after = None
            for number, part in enumerate(parts):
                if number == len(counted):  # counted once, should the write be retried
                    counted.append([self._prepare_for_write(n) for n in part])
                prepared = counted[number]
                written = [(first_idx + offset + n, c) for n, c in enumerate(prepared)]
                nodes = typed_nodes(written, known, after=after)
                rows = _pending(prepared, nodes)
                appends.insert_part(
                    connection, conversation_id, first_idx + offset, first_ts + offset, rows
                )
                offset += len(prepared)
                after = prepared[-1].message
            return first_ts, first_idx

        first_ts, first_idx = self._db.write(work, pipeline=True)
        self._remember_calls(conversation_id, calls)
        every = [message for part in counted for message in part]
        return _appended(conversation_id, first_idx, first_ts, every)

    def messages(self, conversation_id: str, *, as_of: int | None = None) -> list[dict[str, Any]]:
        """The stored messages (originals: no cut, no rewrites), as appended."""
        check_id(conversation_id)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            loaded, _, _ = history.load_messages(connection, conversation_id, limit)
        return loaded

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
        A repeat render of an unchanged conversation reuses the processors' proposals from
        a cache (the view itself is built again from rows).
        """
        check_id(conversation_id)
        limit = self._as_of(as_of)
        active = self._active(pipeline)
        if format is not None:
            registry.check_format(format)
        with collector_paused():
            with self._db.read() as connection:
                newest = last_ts(connection, conversation_id)
                state = history.load_state(
                    connection, conversation_id, limit, digest=bool(active and active.processors)
                )
                context = self._run_context(connection, conversation_id, active, limit)
            moment = (conversation_id, newest, min(limit, newest))
            view = self._processed(active, state, moment, context)
            # Freed before the collector resumes, whose first pass walks every container
            # built meanwhile that is still alive: the view is all the caller keeps.
            del state, context
            return self._format(view, format)

    def _processed(
        self,
        pipeline: Pipeline | None,
        state: ConversationState,
        moment: tuple[str, int, int],
        context: RunContext | None = None,
    ) -> list[dict[str, Any]]:
        """The view of ``state`` with ``pipeline``'s rewrites, those from the cache when
        they are known for this moment and pipeline.

        Inside a transaction the rows read may never commit: nothing is cached then.
        """
        if pipeline is None or not pipeline.processors:
            return view_with(state, ())
        key = (*moment, state.digest, *pipeline.render_key())
        cacheable = not self._db.in_transaction
        cached = self.render_cache.get(key) if cacheable else None
        if cached is not None:
            return view_with(state, cached)
        proposals, view = propose_and_view(pipeline, state, context)
        if cacheable:
            size = sum(len(u.text) + PROPOSAL_OVERHEAD for u in proposals) + PROPOSAL_OVERHEAD
            self.render_cache.put(key, tuple(proposals), size)
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

    def deleted_range(
        self, conversation_id: str, as_of: int | None = None
    ) -> tuple[int, int] | None:
        """The effective deleted range ``(2, end)`` at ``as_of`` (now by default), or None."""
        check_id(conversation_id)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            return ranges.load_deleted_range(connection, conversation_id, limit)

    def set_deleted_range(
        self,
        conversation_id: str,
        end: int,
        *,
        keep: str = "manual",
        reason: str = "set by the caller",
        tokens_total: int | None = None,
        summary: str | None = None,
        ts: int | None = None,
    ) -> int:
        """Hide messages ``2..end`` from the view from now on; returns the row's ``ts``.

        ``ts`` stamps the row with a timestamp of the caller's (an importer replaying
        another tool's clock); it must be later than the conversation's last ``ts``.

        Raises:
            InvalidInputError: ``end`` is below 1, beyond the last message, or smaller than
                the current range's end (a range never shrinks; roll back instead).
        """
        check_id(conversation_id)
        check_int("end", end, minimum=1, optional=False)
        check_int("tokens_total", tokens_total)
        check_text("keep", keep, MAX_KEEP_LENGTH, optional=False)
        check_free_text("reason", reason, optional=False)
        check_free_text("summary", summary)
        reason, summary = self._masked(reason), self._masked(summary)

        def work(connection: Connection) -> int:
            (stamp,) = tick(connection, conversation_id, at=ts)
            count = conversations.message_count(connection, conversation_id)
            current = ranges.load_deleted_range(connection, conversation_id)
            if end >= count - 1:
                raise InvalidInputError(past_last_but_one(end, count))
            if current is not None and end < current[1]:
                raise InvalidInputError(
                    f"end {end} would shrink the current range (2, {current[1]}); ranges only "
                    "grow (roll back to a checkpoint to show hidden messages again)."
                )
            ranges.insert_range(
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

    def truncate(
        self,
        conversation_id: str,
        keep: str = "half",
        *,
        summary: str | None = None,
        summarizer: TruncationSummarizer | None = None,
        reason: str | None = None,
        first_user_replacement: bool = True,
    ) -> TruncationDecision:
        """Truncate now, for the explicit flows: ``none`` after a summary, ``last_two`` for a
        condense, ``quarter`` to retry after a provider's context-window error.

        Writes the new range, the truncation notice (carrying ``summary``, or what
        ``summarizer`` returns for the messages being hidden) and the first-user-message
        replacement, in one transaction. The original rows stay.
        """
        check_id(conversation_id)
        check_free_text("summary", summary)
        self._check_summarizer(summarizer)
        if not isinstance(first_user_replacement, bool):
            raise InvalidInputError("first_user_replacement must be True or False.")
        normalize_keep(keep)  # before keep is formatted: a value of any depth is refused
        why = reason or f"explicit truncation (keep={keep})"
        check_free_text("reason", why)

        def decide(snapshot: Snapshot) -> Plan:
            return plan_truncation(
                snapshot.state,
                keep,
                snapshot.total,
                reason=why,
                summary=summary,
                summarizer=summarizer,
                first_user_replacement=first_user_replacement,
            )

        def write(connection: Connection, plan: Plan, stamps: list[int]) -> None:
            self._write_plan(connection, conversation_id, plan, stamps[0])

        plan, _ = self._planned_write(
            conversation_id,
            decide,
            lambda plan: 1 if plan.writes else 0,
            write,
            local=summarizer is None,
        )
        return plan.decision

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
        ts: int | None = None,
    ) -> int:
        """Rewrite one block's visible text from now on (the original stays); returns ``ts``.

        With ``base_hash`` (see :func:`contextstore.text_hash`), the update is refused when
        the block's current visible text no longer has that hash. ``ts`` stamps the row
        with a timestamp of the caller's (an importer replaying another tool's clock); it
        must be later than the conversation's last ``ts``.

        Raises:
            InvalidInputError: the block does not exist or has no text to rewrite, the kind or
                mode is unknown, or ``base_hash`` does not match.
        """
        check_id(conversation_id)
        check_int("message_idx", message_idx, optional=False)
        check_int("block_idx", block_idx, optional=False)
        check_free_text("text", text, self.max_message_bytes, optional=False, allow_nul=True)
        check_choice("kind", kind, UpdateKind.ALL)
        check_choice("mode", mode, UpdateMode.ALL)
        if mode == UpdateMode.TOOL_INPUT:
            check_tool_input_json(text)
        check_text("source", source, MAX_NAME_LENGTH, optional=False)
        check_text("base_hash", base_hash, MAX_HASH_LENGTH)
        meta = self._masked(check_json_object("metadata", metadata))
        update_value = BlockUpdate(
            message_idx, block_idx, kind, self._masked(text), source, meta, base_hash, mode
        )

        def work(connection: Connection) -> int:
            (stamp,) = tick(connection, conversation_id, at=ts)
            self._check_update_target(connection, conversation_id, update_value)
            updates.insert_updates(connection, conversation_id, stamp, [update_value])
            return stamp

        return self._db.write(work)

    @staticmethod
    def _check_update_target(
        connection: Connection, conversation_id: str, update_value: BlockUpdate
    ) -> None:
        block = history.load_block(
            connection, conversation_id, update_value.message_idx, update_value.block_idx
        )
        if block is None:
            raise InvalidInputError(
                f"message {update_value.message_idx} has no block {update_value.block_idx}; "
                "address an existing block."
            )
        if update_value.mode == UpdateMode.TEXT and block_text(block) is None:
            raise InvalidInputError(
                f"block {update_value.message_idx}.{update_value.block_idx} is a "
                f"{block['type']} block with no text to rewrite; use mode='block' to replace "
                "it with text."
            )
        if update_value.mode == UpdateMode.TOOL_INPUT and block["type"] != "tool_use":
            raise InvalidInputError("mode='tool_input' applies to tool_use blocks only.")
        if update_value.base_hash is not None:
            overlays = updates.load_overlays(connection, conversation_id)
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
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            return updates.update_rows(connection, conversation_id, limit)


def _pending(
    written: Sequence[CountedMessage], nodes: Sequence[Sequence[NodeRow]]
) -> appends.PendingRows:
    """The rows of counted messages and their node rows, ready for the writer's turn."""
    return appends.pending_rows(
        [(c.message, c.tokens, n) for c, n in zip(written, nodes, strict=True)]
    )


def _appended(
    conversation_id: str, first_idx: int, first_ts: int, written: Sequence[CountedMessage]
) -> list[AppendedMessage]:
    """What the caller learns of messages written from ``first_idx`` and ``first_ts`` on."""
    return [
        AppendedMessage(conversation_id, first_idx + n, first_ts + n, c.message.role, c.tokens)
        for n, c in enumerate(written)
    ]
