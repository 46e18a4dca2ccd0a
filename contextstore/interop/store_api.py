"""The store operations that interop (Cline, Gemini CLI) needs, as a protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from contextstore.core.records import AppendedMessage, Conversation, RequestRecord


class InteropStore(Protocol):
    """The part of :class:`contextstore.ContextStore` that the importers and exporters use.

    Interop sits beside the storage layer and never imports the store; mypy checks that
    ``ContextStore`` satisfies this protocol wherever one is passed in.
    """

    max_message_bytes: int

    def create_conversation(
        self,
        *,
        model_id: str | None = ...,
        context_window: int | None = ...,
        title: str | None = ...,
        metadata: Mapping[str, Any] | None = ...,
    ) -> Conversation: ...

    def get_conversation(self, conversation_id: str) -> Conversation: ...

    def delete_conversation(self, conversation_id: str) -> dict[str, int]: ...

    def append(
        self,
        conversation_id: str,
        role: str,
        content: str | Sequence[Mapping[str, Any]],
        *,
        meta: Mapping[str, Any] | None = ...,
        ts: int | None = ...,
    ) -> AppendedMessage: ...

    def append_many(
        self,
        conversation_id: str,
        new_messages: Sequence[Mapping[str, Any]],
        *,
        ts: int | None = ...,
    ) -> list[AppendedMessage]: ...

    def add_context_update(
        self,
        conversation_id: str,
        message_idx: int,
        block_idx: int,
        text: str,
        *,
        kind: str = ...,
        source: str = ...,
        metadata: Mapping[str, Any] | None = ...,
    ) -> int: ...

    def set_deleted_range(
        self, conversation_id: str, end: int, *, keep: str = ..., reason: str = ...
    ) -> int: ...

    def record_request(
        self,
        conversation_id: str,
        *,
        tokens_in: int | None = ...,
        tokens_out: int | None = ...,
        cache_writes: int | None = ...,
        cache_reads: int | None = ...,
        cost: float | None = ...,
        model_id: str | None = ...,
        failure: str | None = ...,
    ) -> RequestRecord: ...

    def messages(
        self, conversation_id: str, *, as_of: int | None = ...
    ) -> list[dict[str, Any]]: ...

    def context_updates(
        self, conversation_id: str, *, as_of: int | None = ...
    ) -> list[dict[str, Any]]: ...

    def requests(self, conversation_id: str, *, as_of: int | None = ...) -> list[RequestRecord]: ...

    def deleted_range(
        self, conversation_id: str, as_of: int | None = ...
    ) -> tuple[int, int] | None: ...
