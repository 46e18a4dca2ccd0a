"""The store operations that interop (Cline, Gemini CLI) needs, as a protocol, and how an
exporter reads them as of one moment."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from contextstore.core.audit_records import AuditReport
from contextstore.core.records import (
    Checkpoint,
    Conversation,
    RemovedSourceRecords,
    RequestRecord,
    RollbackReport,
    SourceRecord,
)
from contextstore.core.rows import TimelineRow


class InteropStore(Protocol):
    """The part of :class:`contextstore.ContextStore` that the importers and exporters use.

    Interop sits beside the storage layer and never imports the store; mypy checks that
    ``ContextStore`` satisfies this protocol wherever one is passed in.
    """

    max_message_bytes: int

    @property
    def path(self) -> Path | None:
        """The SQLite file (None in memory or on a server): no export writes over it."""

    def transaction(self) -> AbstractContextManager[None]: ...

    def snapshot(self) -> AbstractContextManager[None]: ...

    def create_conversation(
        self,
        *,
        model_id: str | None = ...,
        context_window: int | None = ...,
        title: str | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        id: str | None = ...,
        parent_id: str | None = ...,
        created_ts: int | None = ...,
    ) -> Conversation: ...

    def get_conversation(self, conversation_id: str) -> Conversation: ...

    def delete_conversation(self, conversation_id: str) -> dict[str, int]: ...

    def set_conversation_model(
        self,
        conversation_id: str,
        *,
        model_id: str | None = ...,
        context_window: int | None = ...,
    ) -> Conversation: ...

    def set_conversation_metadata(
        self, conversation_id: str, metadata: Mapping[str, Any]
    ) -> None: ...

    def discard_imported_rows(self, conversation_id: str, *, after: int) -> RollbackReport: ...

    def import_timeline(
        self, conversation_id: str, rows: Sequence[TimelineRow]
    ) -> dict[str, int]: ...

    def messages(
        self, conversation_id: str, *, as_of: int | None = ...
    ) -> list[dict[str, Any]]: ...

    def render(
        self,
        conversation_id: str,
        *,
        as_of: int | None = ...,
        format: str | None = ...,
    ) -> list[dict[str, Any]]: ...

    def context_updates(
        self, conversation_id: str, *, as_of: int | None = ...
    ) -> list[dict[str, Any]]: ...

    def requests(self, conversation_id: str, *, as_of: int | None = ...) -> list[RequestRecord]: ...

    def checkpoints(self, conversation_id: str) -> list[Checkpoint]: ...

    def deleted_range(
        self, conversation_id: str, as_of: int | None = ...
    ) -> tuple[int, int] | None: ...

    def source_records(
        self, conversation_id: str, *, as_of: int | None = ..., origin: str | None = ...
    ) -> list[SourceRecord]: ...

    def message_timestamps(self, conversation_id: str) -> list[int]: ...

    def audit(self, conversation_id: str) -> AuditReport: ...

    def removed_source_records(self, conversation_id: str) -> list[RemovedSourceRecords]: ...


P = ParamSpec("P")
R = TypeVar("R")


def in_one_snapshot(
    read: Callable[Concatenate[InteropStore, P], R],
) -> Callable[Concatenate[InteropStore, P], R]:
    """``read`` (an exporter: the store first) with every read it makes inside one
    :meth:`~contextstore.ContextStore.snapshot`, so that an agent appending meanwhile is in
    none of what it writes or in all of it (the messages and their timestamps were read
    apart, and an append between them broke the export)."""

    @functools.wraps(read)
    def within(store: InteropStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with store.snapshot():
            return read(store, *args, **kwargs)

    return within
