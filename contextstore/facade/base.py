"""The state every part of the store shares: the database, settings, conversations."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, insert, select

from contextstore.core.errors import (
    ConversationNotFoundError,
    RequestNotFoundError,
)
from contextstore.core.tokens import TiktokenCounter, TokenCounter
from contextstore.core.validate import (
    MAX_MESSAGE_BYTES,
    check_ts,
    payload_sha256,
)
from contextstore.pipeline_runner import RenderCache
from contextstore.processors.pipeline import Pipeline, default_pipeline
from contextstore.records import (
    Conversation,
    RequestRecord,
)
from contextstore.storage import queries
from contextstore.storage.engine import Database
from contextstore.storage.tables import (
    api_requests,
    conversations,
    request_options,
)


class StoreBase:
    """The database handle, settings and conversation lookups every operation needs."""

    def __init__(
        self,
        database: Database,
        *,
        location: str,
        token_counter: TokenCounter | None = None,
        mask_secrets_on_write: bool = False,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        pipeline: Pipeline | None = None,
    ) -> None:
        self._db = database
        self.pipeline: Pipeline | None = default_pipeline() if pipeline is None else pipeline
        self.render_cache = RenderCache()
        self.location = location
        self.token_counter: TokenCounter = token_counter or TiktokenCounter()
        self.mask_secrets_on_write = mask_secrets_on_write
        self.max_message_bytes = max_message_bytes
        self._closed = False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Make every call inside one transaction: all of their rows land, or none do.

        ``with store.transaction(): store.append(...); store.record_request(...)``. Calls
        inside see each other's rows; a call refused inside (an error raised and caught)
        leaves nothing of itself, the others stay; an exception leaving the block undoes
        them all. Other threads' writes wait until the block ends, so keep it short (no
        model calls inside).

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        with self._db.transaction():
            yield

    @property
    def database(self) -> Database:
        """The underlying database (engine and transaction helpers)."""
        return self._db

    @staticmethod
    def _conversation_from_row(row: Any) -> Conversation:
        meta = queries._json(row.metadata, f"conversation {row.id} metadata")
        return Conversation(
            id=row.id,
            created_ts=row.created_ts,
            last_ts=row.last_ts,
            title=row.title,
            model_id=row.model_id,
            context_window=row.context_window,
            parent_id=row.parent_id,
            forked_at_ts=row.forked_at_ts,
            metadata=meta if isinstance(meta, dict) else {},
        )

    def _conversation(self, connection: Connection, conversation_id: str) -> Conversation:
        row = connection.execute(
            select(conversations).where(conversations.c.id == conversation_id)
        ).first()
        if row is None:
            raise ConversationNotFoundError(
                f"no conversation has id {conversation_id!r}; list them with "
                "ContextStore.list_conversations() or 'contextstore conversations'."
            )
        return self._conversation_from_row(row)

    def _request(
        self, connection: Connection, conversation_id: str, request_id: int
    ) -> RequestRecord:
        row = connection.execute(
            select(api_requests).where(
                api_requests.c.id == request_id, api_requests.c.conversation_id == conversation_id
            )
        ).first()
        if row is None:
            raise RequestNotFoundError(
                f"conversation {conversation_id!r} has no request {request_id}; use the "
                "request_id returned by prepare_request."
            )
        return self._request_from_row(row)

    @staticmethod
    def _request_from_row(row: Any) -> RequestRecord:
        return RequestRecord(
            id=row.id,
            conversation_id=row.conversation_id,
            ts=row.ts,
            tokens_in=row.tokens_in,
            tokens_out=row.tokens_out,
            cache_writes=row.cache_writes,
            cache_reads=row.cache_reads,
            cost=row.cost,
            model_id=row.model_id,
            format=row.format,
            payload_sha256=row.payload_sha256,
            failure=row.failure,
            details=row.details,
        )

    @staticmethod
    def _as_of(as_of: Any) -> int:
        check_ts("as_of", as_of, optional=False)
        return int(as_of)

    def _store_options(self, connection: Connection, options: Mapping[str, Any]) -> str:
        digest = payload_sha256(options)
        exists = connection.execute(
            select(request_options.c.sha256).where(request_options.c.sha256 == digest)
        ).first()
        if exists is None:
            connection.execute(insert(request_options).values(sha256=digest, data=dict(options)))
        return digest
