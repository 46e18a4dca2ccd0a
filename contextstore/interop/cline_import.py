"""Moving Cline tasks into and out of a store, through the public ``ContextStore`` API only.

Import reads and checks every file first (:func:`contextstore.interop.cline.read_task` and
:func:`~contextstore.interop.cline.plan_import`), then writes the rows in timeline order:
messages (Cline's ``ts`` used as the row's ``ts`` when it is later than the conversation's
clock, and always kept in the message as the ``ts`` field), every ``context_history.json``
update, one request per ``api_req_started`` with usage, and the deleted range. Export
writes the stored originals and the effective rewrites back in Cline's formats.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextstore.core.errors import ContextStoreError
from contextstore.core.records import AppendedMessage, Conversation, RequestRecord
from contextstore.core.validate import MAX_TS
from contextstore.interop.cline import (
    API_HISTORY_FILE,
    CONTEXT_HISTORY_FILE,
    IMPORT_SOURCE,
    UI_MESSAGES_FILE,
    ClineRange,
    ClineRequest,
    ClineTask,
    ClineTaskError,
    ClineUpdate,
    MessageStep,
    Step,
    read_task,
)
from contextstore.interop.cline_plan import plan_import
from contextstore.interop.cline_write import (
    api_request_message,
    context_history_value,
    update_from_row,
    write_task,
)
from contextstore.interop.store_api import InteropStore

IMPORTED_KEEP = "imported"
"""The ``keep`` recorded on a deleted range imported from Cline."""


@dataclass(frozen=True)
class ClineImportResult:
    """What an import wrote.

    Attributes:
        conversation_id: the new conversation.
        messages: messages appended.
        kept_ts: how many of them kept their Cline ``ts`` as the row's ``ts``.
        context_updates: ``context_history.json`` updates written.
        requests: API requests recorded from ``api_req_started`` UI messages.
        deleted_ranges: 1 when a deleted range was imported, else 0.
        skipped: one line per overlay update that could not apply (its block is gone or
            has no text: Cline's positional addressing drifted).
    """

    conversation_id: str
    messages: int
    kept_ts: int
    context_updates: int
    requests: int
    deleted_ranges: int
    skipped: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        """Rows written per table."""
        return {
            "messages": self.messages,
            "context_updates": self.context_updates,
            "api_requests": self.requests,
            "deleted_ranges": self.deleted_ranges,
        }


@dataclass(frozen=True)
class ClineExportResult:
    """What an export wrote: the files, and the rewrites Cline's format cannot hold."""

    files: tuple[Path, ...]
    messages: int
    context_updates: int
    requests: int
    skipped: tuple[str, ...] = ()


def import_cline_task(
    store: InteropStore,
    task_dir: str | os.PathLike[str],
    *,
    history_path: str | os.PathLike[str] | None = None,
    title: str | None = None,
    model_id: str | None = None,
    context_window: int | None = None,
) -> ClineImportResult:
    """Import a Cline task directory as a new conversation.

    Every file is parsed and checked before the first write, so a malformed file leaves
    the store untouched.

    Args:
        store: an open :class:`contextstore.ContextStore`.
        task_dir: the task's ``tasks/<taskId>`` directory.
        history_path: Cline's ``state/taskHistory.json``; its ``HistoryItem`` is then the
            authority for the deleted range (else the last UI message's snapshot is).
        title: the conversation's title (default: the HistoryItem's task, else the first
            line of the ``<task>``).
        model_id: the model (default: from the HistoryItem, the messages' ``modelInfo`` or
            ``task_metadata.json``).
        context_window: the window to manage the conversation with (default: unset).

    Raises:
        ClineTaskError: a task file is missing, unreadable or malformed (nothing written).
    """
    history = Path(history_path) if history_path is not None else None
    task = read_task(task_dir, history_path=history)
    plan = plan_import(task, max_message_bytes=store.max_message_bytes)
    conversation = store.create_conversation(
        model_id=model_id or task.model_id,
        context_window=context_window,
        title=title or task.title,
        metadata=task.metadata,
    )
    try:
        counts = _write_steps(store, conversation, task, plan.steps)
    except BaseException as exc:
        # The import spans several transactions; undo it as a whole, so a failure part way
        # (a database error, an interrupt) leaves nothing behind.
        store.delete_conversation(conversation.id)
        if isinstance(exc, ContextStoreError):
            raise type(exc)(f"the import stopped part way and was undone: {exc}") from exc
        raise
    return ClineImportResult(conversation_id=conversation.id, skipped=tuple(plan.skipped), **counts)


def _write_steps(
    store: InteropStore, conversation: Conversation, task: ClineTask, steps: Sequence[Step]
) -> dict[str, int]:
    counts = dict.fromkeys(
        ("messages", "kept_ts", "context_updates", "requests", "deleted_ranges"), 0
    )
    last = conversation.last_ts
    cid = conversation.id
    for step in steps:
        if isinstance(step, MessageStep):
            message = task.messages[step.index]
            written = _append(store, cid, message, last)
            counts["kept_ts"] += written.ts == message.get("ts")
            counts["messages"] += 1
            last = written.ts
        elif isinstance(step, ClineUpdate):
            last = _add_update(store, cid, step)
            counts["context_updates"] += 1
        elif isinstance(step, ClineRequest):
            last = _record(store, cid, step)
            counts["requests"] += 1
        else:
            last = _set_range(store, cid, step)
            counts["deleted_ranges"] += 1
    return counts


def _append(
    store: InteropStore, cid: str, message: Mapping[str, Any], last: int
) -> AppendedMessage:
    cline_ts = message.get("ts")
    keep = (
        isinstance(cline_ts, int) and not isinstance(cline_ts, bool) and last < cline_ts <= MAX_TS
    )
    meta = {k: v for k, v in message.items() if k not in ("role", "content")}
    return store.append(
        cid, message["role"], message["content"], meta=meta, ts=cline_ts if keep else None
    )


def _add_update(store: InteropStore, cid: str, update: ClineUpdate) -> int:
    return store.add_context_update(
        cid,
        update.message_idx,
        update.block_idx,
        update.text,
        kind=update.kind,
        source=IMPORT_SOURCE,
        metadata=update.store_metadata(),
    )


def _record(store: InteropStore, cid: str, request: ClineRequest) -> int:
    return store.record_request(
        cid,
        tokens_in=request.tokens_in,
        tokens_out=request.tokens_out,
        cache_writes=request.cache_writes,
        cache_reads=request.cache_reads,
        cost=request.cost,
        model_id=request.model_id,
        failure=request.failure,
    ).ts


def _set_range(store: InteropStore, cid: str, deleted: ClineRange) -> int:
    return store.set_deleted_range(
        cid,
        deleted.end,
        keep=IMPORTED_KEEP,
        reason=f"imported from Cline's {deleted.source}",
    )


def export_cline_task(
    store: InteropStore,
    conversation_id: str,
    out_dir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
) -> ClineExportResult:
    """Write a conversation as a Cline task directory.

    Writes ``api_conversation_history.json`` (the stored originals with their extra fields),
    ``context_history.json`` (the effective rewrites, with their Cline timestamps and edit
    types when they were imported) and ``ui_messages.json`` (one ``api_req_started`` per
    recorded request, carrying the deleted range as of that request), each atomically.
    Rewrites that replace a whole block or a tool input have no Cline form; they are
    reported in ``skipped``.

    Raises:
        ClineTaskError: a target file exists and ``overwrite`` is False (nothing written).
        ConversationNotFoundError: no conversation has this id.
    """
    messages = store.messages(conversation_id)
    updates, skipped = _effective_updates(store.context_updates(conversation_id))
    requests = store.requests(conversation_id)
    ui_messages = [_ui_request(store, conversation_id, r) for r in requests]
    tail = _range_tail(store, conversation_id, ui_messages)
    if tail is not None:
        ui_messages.append(tail)
    files = {
        API_HISTORY_FILE: messages,
        CONTEXT_HISTORY_FILE: context_history_value(updates),
        UI_MESSAGES_FILE: ui_messages,
    }
    written = write_task(Path(out_dir), files, overwrite=overwrite)
    return ClineExportResult(
        files=tuple(written),
        messages=len(messages),
        context_updates=len(updates),
        requests=len(requests),
        skipped=tuple(skipped),
    )


def _effective_updates(rows: Sequence[Mapping[str, Any]]) -> tuple[list[ClineUpdate], list[str]]:
    newest: dict[tuple[int, int], Mapping[str, Any]] = {}
    for row in rows:
        newest[(row["message_idx"], row["block_idx"])] = row
    updates, skipped = [], []
    for (message_idx, block_idx), row in sorted(newest.items()):
        if row.get("mode", "text") != "text":
            skipped.append(
                f"update {row['id']} on message {message_idx} block {block_idx}: mode "
                f"{row['mode']!r} has no {CONTEXT_HISTORY_FILE} form (skipped)."
            )
            continue
        updates.append(update_from_row(row))
    return updates, skipped


def _ui_request(store: InteropStore, cid: str, record: RequestRecord) -> dict[str, Any]:
    visible = store.messages(cid, as_of=record.ts)
    request = ClineRequest(
        ts=record.ts,
        tokens_in=record.tokens_in,
        tokens_out=record.tokens_out,
        cache_writes=record.cache_writes,
        cache_reads=record.cache_reads,
        cost=record.cost,
        model_id=record.model_id,
        history_index=len(visible) - 1 if visible else None,
        failure=record.failure,
    )
    return api_request_message(request, store.deleted_range(cid, as_of=record.ts))


def _range_tail(
    store: InteropStore, cid: str, ui_messages: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """A closing UI message carrying the range when no request carries the current one."""
    current = store.deleted_range(cid)
    carried = ui_messages[-1].get("conversationHistoryDeletedRange") if ui_messages else None
    if current is None or carried == list(current):
        return None
    return {
        "ts": store.get_conversation(cid).last_ts,
        "type": "say",
        "say": "text",
        "text": f"[contextstore] exported conversation {cid}",
        "conversationHistoryDeletedRange": list(current),
    }


__all__ = [
    "ClineExportResult",
    "ClineImportResult",
    "ClineTaskError",
    "InteropStore",
    "export_cline_task",
    "import_cline_task",
]
