"""Planning a Cline import: checking every message and placing every row on the timeline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from contextstore.core.content import normalize_message_dict
from contextstore.core.overlays import block_text
from contextstore.core.validate import MAX_TS
from contextstore.interop.cline import (
    API_HISTORY_FILE,
    CONTEXT_HISTORY_FILE,
    ClineRequest,
    ClineTask,
    ClineTaskError,
    ClineUpdate,
    ImportPlan,
    MessageStep,
    Step,
    is_int,
)


def plan_import(task: ClineTask, *, max_message_bytes: int) -> ImportPlan:
    """Order an import's writes on one timeline and check them before anything is written.

    Each update, request and range gets a slot: the number of messages appended before it.
    An update comes after the message it rewrites and before the first message newer than
    its Cline ``ts``; a request comes right after ``conversationHistoryIndex``; the range
    after the messages it hides. Within a slot, rows keep Cline's timestamp order.
    Updates whose block no longer exists or has no text (Cline's positional addressing
    drifts) are skipped and reported.

    Raises:
        ClineTaskError: a message is over ``max_message_bytes``, or the range would hide
            the newest message.
    """
    blocks = _checked_blocks(task, max_message_bytes)
    count = len(task.messages)
    message_ts = [m.get("ts") if is_int(m.get("ts")) else None for m in task.messages]
    placed: list[tuple[int, int, int, Step]] = []
    skipped: list[str] = []
    for seq, update in enumerate(task.updates):
        problem = _update_problem(update, blocks)
        if problem:
            skipped.append(problem)
            continue
        slot = max(update.message_idx + 1, _slot_by_ts(update.ts, message_ts))
        placed.append((slot, update.ts, seq, update))
    for seq, request in enumerate(task.requests, start=len(placed)):
        placed.append((_request_slot(request, message_ts, count), request.ts or 0, seq, request))
    if task.deleted_range is not None:
        placed.append(_range_slot(task, message_ts, len(placed)))
    placed.sort(key=lambda item: item[:3])
    return ImportPlan(_interleave(placed, count), skipped)


def _checked_blocks(task: ClineTask, max_message_bytes: int) -> list[list[dict[str, Any]]]:
    path = task.directory / API_HISTORY_FILE
    checked = []
    for idx, message in enumerate(task.messages):
        normalized = normalize_message_dict(message)
        size = normalized.json_size()
        if size > max_message_bytes:
            raise ClineTaskError(
                path,
                f"message {idx}",
                f"is {size:,} bytes as JSON, over the store's limit of {max_message_bytes:,}; "
                "open the store with a larger max_message_bytes.",
            )
        checked.append(normalized.blocks)
    return checked


def _update_problem(update: ClineUpdate, blocks: Sequence[Sequence[Any]]) -> str | None:
    where = (
        f"{CONTEXT_HISTORY_FILE} update at ts {update.ts} for message {update.message_idx} "
        f"block {update.block_idx}"
    )
    if update.message_idx >= len(blocks):
        return f"{where}: the history has only {len(blocks)} messages (skipped)."
    if update.block_idx >= len(blocks[update.message_idx]):
        return f"{where}: the message has no such block (skipped)."
    if block_text(blocks[update.message_idx][update.block_idx]) is None:
        return f"{where}: the block has no text to rewrite (skipped)."
    return None


def _slot_by_ts(ts: int | None, message_ts: Sequence[int | None]) -> int:
    if ts is not None:
        for idx, value in enumerate(message_ts):
            if value is not None and value > ts:
                return idx
    return len(message_ts)


def _request_slot(request: ClineRequest, message_ts: Sequence[int | None], count: int) -> int:
    if request.history_index is not None:
        return min(request.history_index + 1, count)
    return _slot_by_ts(request.ts, message_ts)


def _range_slot(
    task: ClineTask, message_ts: Sequence[int | None], seq: int
) -> tuple[int, int, int, Step]:
    deleted = task.deleted_range
    assert deleted is not None
    count = len(task.messages)
    if not 1 <= deleted.end <= count - 2:
        raise ClineTaskError(
            deleted.path,
            deleted.position,
            f"the deleted range [2, {deleted.end}] does not fit the {count} messages of "
            f"{API_HISTORY_FILE} (its end must be from 1 to {count - 2}); the task files "
            "disagree, which happens when Cline crashed between writes.",
        )
    by_ts = _slot_by_ts(deleted.ts, message_ts) if deleted.ts is not None else count
    return (max(deleted.end + 2, by_ts), deleted.ts or MAX_TS, seq, deleted)


def _interleave(placed: Iterable[tuple[int, int, int, Step]], count: int) -> list[Step]:
    by_slot: dict[int, list[Step]] = {}
    for slot, _, _, step in placed:
        by_slot.setdefault(slot, []).append(step)
    steps: list[Step] = []
    for idx in range(count + 1):
        steps.extend(by_slot.get(idx, []))
        if idx < count:
            steps.append(MessageStep(idx))
    return steps
