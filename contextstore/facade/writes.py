"""Appending messages and recording request usage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, overload

from sqlalchemy import Connection, insert, select, update

from contextstore.core.content import NormalizedMessage, normalize_message, normalize_message_dict
from contextstore.core.errors import (
    ContentTooLargeError,
    InvalidInputError,
)
from contextstore.core.tokens import message_tokens
from contextstore.core.validate import (
    check_id,
    check_int,
    check_json_object,
    check_number,
    check_text,
)
from contextstore.facade.base import StoreBase
from contextstore.records import (
    AppendedMessage,
    RequestRecord,
)
from contextstore.storage import queries
from contextstore.storage.clock import last_ts, tick
from contextstore.storage.tables import (
    api_requests,
)


class WritesMixin(StoreBase):
    """Appending messages (validated, token-counted once) and recording usage."""

    @overload
    def append(
        self,
        conversation_id: str,
        role: str,
        content: str | Sequence[Mapping[str, Any]],
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
        if isinstance(role, list | tuple) and content is None:
            return self.append_many(conversation_id, role, ts=ts)
        extra = check_json_object("meta", meta) if meta is not None else None
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

    def _prepare_for_write(self, normalized: NormalizedMessage) -> tuple[NormalizedMessage, int]:
        if self.mask_secrets_on_write:
            from contextstore.processors.secrets import mask_message

            normalized = normalize_message_dict(mask_message(normalized.to_message()))
        size = normalized.json_size()
        if size > self.max_message_bytes:
            raise ContentTooLargeError(
                f"the message is {size:,} bytes as JSON, over the limit of "
                f"{self.max_message_bytes:,}; split it, store large files outside the "
                "conversation, or open the store with a larger max_message_bytes."
            )
        return normalized, message_tokens(normalized.blocks, self.token_counter)

    def _append_normalized(
        self, conversation_id: str, normalized: list[NormalizedMessage], ts: int | None
    ) -> list[AppendedMessage]:
        prepared = [self._prepare_for_write(n) for n in normalized]

        def work(connection: Connection) -> list[AppendedMessage]:
            stamps = tick(connection, conversation_id, len(prepared), at=ts)
            first_idx = queries.next_message_idx(connection, conversation_id)
            written = []
            for offset, ((message, tokens), stamp) in enumerate(zip(prepared, stamps, strict=True)):
                idx = first_idx + offset
                queries.insert_message(connection, conversation_id, idx, stamp, message, tokens)
                written.append(AppendedMessage(conversation_id, idx, stamp, message.role, tokens))
            return written

        return self._db.write(work)

    def record_request(
        self,
        conversation_id: str,
        *,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cache_writes: int | None = None,
        cache_reads: int | None = None,
        cost: float | None = None,
        model_id: str | None = None,
        request_id: int | None = None,
        failure: str | None = None,
    ) -> RequestRecord:
        """Record a model request's token usage and cost, or why it failed.

        With ``request_id`` (from :meth:`prepare_request`), the usage is stored on that
        prepared request's row; otherwise a new request row is written. The next
        :meth:`prepare_request` decides on truncation from the previous request's usage.
        ``failure`` says why a request failed or was cancelled (for example
        ``"context_window_exceeded"`` before ``truncate(keep="quarter")`` and a retry, or
        Cline's ``"user_cancelled"``), so audits can find them.
        """
        check_id(conversation_id)
        for name, value in (
            ("tokens_in", tokens_in),
            ("tokens_out", tokens_out),
            ("cache_writes", cache_writes),
            ("cache_reads", cache_reads),
        ):
            check_int(name, value)
        check_number("cost", cost)
        check_text("model_id", model_id, 200)
        check_int("request_id", request_id, minimum=1)
        check_text("failure", failure, 200)
        usage = {
            "failure": failure,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cache_writes": cache_writes,
            "cache_reads": cache_reads,
            "cost": cost,
        }

        def work(connection: Connection) -> RequestRecord:
            if request_id is None:
                (stamp,) = tick(connection, conversation_id)
                new_id = connection.execute(
                    insert(api_requests)
                    .values(conversation_id=conversation_id, ts=stamp, model_id=model_id, **usage)
                    .returning(api_requests.c.id)
                ).scalar_one()
                return self._request(connection, conversation_id, int(new_id))
            last_ts(connection, conversation_id, lock=True)
            self._request(connection, conversation_id, request_id)
            values: dict[str, Any] = {k: v for k, v in usage.items() if v is not None}
            if model_id is not None:
                values["model_id"] = model_id
            if values:
                connection.execute(
                    update(api_requests).where(api_requests.c.id == request_id).values(**values)
                )
            return self._request(connection, conversation_id, request_id)

        return self._db.write(work)

    def requests(self, conversation_id: str, *, as_of: int | None = None) -> list[RequestRecord]:
        """The conversation's API requests, oldest first."""
        check_id(conversation_id)
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            rows = connection.execute(
                select(api_requests)
                .where(
                    api_requests.c.conversation_id == conversation_id, api_requests.c.ts <= limit
                )
                .order_by(api_requests.c.ts)
            ).all()
        return [self._request_from_row(row) for row in rows]
