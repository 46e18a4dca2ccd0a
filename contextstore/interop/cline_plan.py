"""Placing a Cline task on one timeline: which row comes when, checked before anything is written.

Cline keeps two clocks: UI messages carry ``ts`` (and ``conversationHistoryIndex``, the index
of the last API message when they were added), while the API messages of 3.5x carry none.
The timeline is built in UI order:

* API message ``k`` goes just after the last UI message whose ``conversationHistoryIndex``
  is below ``k - 1``. A checkpoint restore in Cline keeps
  ``apiConversationHistory[0 : conversationHistoryIndex + 2]``, so with this placement
  ``messages(cid, as_of=checkpoint.ts)`` is exactly what that restore keeps. (Without any
  index, messages with their own ``ts`` go before the first UI message stamped later; with
  neither, they all come first, so that no rollback can lose them.)
* Each UI message becomes a ``source_records`` row; an ``api_req_started`` is followed by its
  request row, a ``checkpoint_created`` by its checkpoint (with ``lastCheckpointHash``):
  :mod:`.cline_ui_rows` makes these rows.
* A new ``conversationHistoryDeletedRange`` becomes a range row just before the first UI
  message that shows it, or, when that message follows an ``api_req_started``, between the
  request's UI row and its request row (Cline truncates after announcing the request and
  before sending it, so the request was sent with the new range). The ``HistoryItem``'s
  range, the authority for the current one, closes the timeline when it differs.
* A ``context_history.json`` update goes before the first UI message stamped no earlier
  than it (Cline's restore to a message keeps the updates stamped ``<=`` its ``ts``) and
  after the message it rewrites.

:func:`~contextstore.interop.plan.stamp` then gives each row Cline's own stamp, or the
previous row's ``ts`` + 1 where Cline's stamps tie or run backwards.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final

from contextstore.core.content import normalize_message_dict
from contextstore.core.overlays import block_text
from contextstore.core.rows import (
    MessageRow,
    UpdateRow,
)
from contextstore.core.validate import MAX_ID_LENGTH, is_model_id
from contextstore.interop.cline import (
    API_HISTORY_FILE,
    CONTEXT_HISTORY_FILE,
    IMPORT_SOURCE,
    TASK_HISTORY_FILE,
    TASK_METADATA_FILE,
    ClineTask,
    ClineUpdate,
    history_index,
)
from contextstore.interop.cline_messages import EMPTY_CONTENT_KEY, as_written, is_stand_in
from contextstore.interop.cline_ui_rows import ORIGIN, ui_slots
from contextstore.interop.cline_window import stated_window
from contextstore.interop.errors import ClineTaskError
from contextstore.interop.files import (
    Note,
    json_kind,
    path_text,
    without_nul,
)
from contextstore.interop.plan import (
    ImportPlan,
    MetadataPart,
    Slot,
    clock_start,
    fit_metadata,
    stamp,
    usable_ts,
)
from contextstore.interop.stand_in import (
    NO_ORIGINAL,
    REFUSED_KEY,
    fitted_stand_in,
    refused_original,
)

_TITLE_CHARS: Final = 120


def plan_task(task: ClineTask, *, max_message_bytes: int) -> ImportPlan:
    """Lay a task's files out as one stamped timeline (see the module docstring).

    A message over the store's ``max_message_bytes`` is kept as a stand-in without its
    original (see :func:`~contextstore.interop.stand_in.refused_stand_in`), noted.

    Raises:
        ClineTaskError: ``max_message_bytes`` is too small for even a stand-in.
    """
    notes = list(task.notes)
    task = dataclasses.replace(task, messages=_fitted(task, max_message_bytes, notes))
    ui = task.ui_messages
    count = len(ui)
    anchors = message_anchors(task.messages, ui)
    messages: list[list[Slot]] = [[] for _ in range(count + 1)]
    for k, message in enumerate(task.messages):
        bound = usable_ts(ui[anchors[k]].get("ts")) if anchors[k] < count else None
        messages[anchors[k]].append(
            Slot(usable_ts(message.get("ts")), _message_maker(message), before=bound)
        )
    updates = _update_slots(task, anchors, notes)
    ui_rows = ui_slots(task, anchors, notes)
    slots: list[Slot] = []
    for j in range(count + 1):
        slots.extend(messages[j])
        slots.extend(updates[j])
        slots.extend(ui_rows[j])
    task_id = path_text(task.task_id)
    task_start = int(task_id) if task_id.isascii() and task_id.isdigit() else None
    created = clock_start([usable_ts(task_start)], slots)
    return ImportPlan(
        source=ORIGIN,
        path=path_text(task.directory),
        conversation_id=conversation_id_for(task_id),
        created_ts=created,
        rows=stamp(created, slots),
        title=_title(task),
        model_id=_model_id(task),
        context_window=stated_window(task.messages, task.ui_messages),
        metadata=_metadata(task, notes),
        notes=notes,
    )


def conversation_id_for(task_id: str) -> str:
    """The conversation id of a task: its task id (``cline-<first 58 chars>`` if too long)."""
    return task_id if 0 < len(task_id) <= MAX_ID_LENGTH else f"cline-{task_id[:58]}"


def _fitted(task: ClineTask, limit: int, notes: list[Note]) -> list[dict[str, Any]]:
    """The task's messages, each over ``limit`` replaced by a stand-in without its
    original (a refused message keeps its reason; its original is what did not fit).

    Raises:
        ClineTaskError: a stand-in is over ``limit`` too, even without the original's
            other fields.
    """
    messages = list(task.messages)
    path = task.directory / API_HISTORY_FILE
    for idx, size in enumerate(task.sizes):
        if size <= limit:
            continue
        message = messages[idx]
        original = refused_original(message)
        refused = original is not NO_ORIGINAL
        if not refused:
            original = as_written(message)
        reason = f"it is {size:,} bytes as JSON, over the store's limit of {limit:,}"
        if refused:
            reason = f"{message[REFUSED_KEY]['reason']} And {reason}, so it was not kept."
        previous = messages[idx - 1]["role"] if idx else None
        stand_in = fitted_stand_in(original, reason, previous, limit, markers=(EMPTY_CONTENT_KEY,))
        if stand_in is None:
            raise ClineTaskError(
                path,
                f"message {idx}",
                f"is {size:,} bytes as JSON, over the store's limit of {limit:,}, and the "
                "store cannot hold even a stand-in for it; open the store with a larger "
                "max_message_bytes. Nothing was imported.",
            )
        messages[idx] = stand_in
        why = f"is {size:,} bytes as JSON, over the store's limit of {limit:,} (max_message_bytes)"
        if refused:  # the note said the export writes the original back
            said = message[REFUSED_KEY]["reason"]
            notes[:] = [
                n
                for n in notes
                if not (n.position == f"message {idx}" and n.reason.startswith(said))
            ]
            why = f"{said} Kept with its original, it {why}"
        notes.append(
            Note(
                str(path),
                f"message {idx}",
                f"{why}: it was kept in its place without its content, with an empty text, "
                "which renders leave out, so that the messages after it keep their places; "
                "export cline writes a text saying it was left out in its place (open the "
                "store with a larger max_message_bytes to keep it).",
            )
        )
    return messages


def message_anchors(
    messages: Sequence[Mapping[str, Any]], ui: Sequence[Mapping[str, Any]]
) -> list[int]:
    """For each API message, the UI message it goes before (``len(ui)``: after them all)."""
    indices = [history_index(u) for u in ui]
    if any(i is not None for i in indices):
        last_at: dict[int, int] = {}
        for position, value in enumerate(indices):
            if value is not None:
                last_at[value] = position
        values = sorted(last_at)
        # latest[n]: the last UI position among those whose index is one of values[:n]
        latest = [-1, *itertools.accumulate((last_at[v] for v in values), max)]
        return [latest[bisect.bisect_left(values, k - 1)] + 1 for k in range(len(messages))]
    stamps = [usable_ts(u.get("ts")) or 0 for u in ui]
    highest = list(itertools.accumulate(stamps, max))
    found = []
    for message in messages:
        own = usable_ts(message.get("ts"))
        found.append(bisect.bisect_right(highest, own) if own is not None else 0)
    return found


def _message_maker(message: Mapping[str, Any]) -> Any:
    return lambda ts: MessageRow(ts, message)


def _update_slots(task: ClineTask, anchors: Sequence[int], notes: list[Note]) -> list[list[Slot]]:
    """Each valid update just before the first UI message stamped no earlier than it (or
    after the message it rewrites, when that comes later), in Cline's timestamp order.

    Cline stamps a de-duplication with the ``ts`` of the request before it, and its restore
    to a UI message stamped ``T`` keeps the updates stamped ``<= T``: placed so, the
    updates ``as_of`` that message's row are exactly those."""
    ui = task.ui_messages
    stamps = [usable_ts(u.get("ts")) or 0 for u in ui]
    highest = list(itertools.accumulate(stamps, max))
    placed: list[list[tuple[int, int, ClineUpdate]]] = [[] for _ in range(len(ui) + 1)]
    path = task.directory / CONTEXT_HISTORY_FILE
    for seq, update in enumerate(task.updates):
        problem = _update_problem(update, task.messages)
        if problem:
            notes.append(
                Note(
                    str(path),
                    f"update at ts {update.ts} for message {update.message_idx} block "
                    f"{update.block_idx}",
                    problem,
                )
            )
            continue
        segment = max(bisect.bisect_left(highest, update.ts), anchors[update.message_idx])
        placed[segment].append((update.ts, seq, update))
    return [
        [
            Slot(usable_ts(u.ts), _update_maker(u))
            for _, _, u in sorted(entries, key=lambda e: e[:2])
        ]
        for entries in placed
    ]


def _update_maker(update: ClineUpdate) -> Any:
    return lambda ts: UpdateRow(
        ts,
        update.message_idx,
        update.block_idx,
        update.text,
        kind=update.kind,
        source=IMPORT_SOURCE,
        metadata=update.store_metadata(),
    )


def _update_problem(update: ClineUpdate, messages: Sequence[Mapping[str, Any]]) -> str | None:
    if update.message_idx >= len(messages):
        return (
            f"the history has only {len(messages)} messages (Cline's positional address "
            "drifted); left out."
        )
    message = messages[update.message_idx]
    if message.get(EMPTY_CONTENT_KEY) is True:
        return "the message has empty content, no block to rewrite; left out."
    if is_stand_in(message):
        return "the store could not hold the message, no block to rewrite; left out."
    blocks = normalize_message_dict(message).blocks
    if update.block_idx >= len(blocks):
        return "the message has no such block (Cline's positional address drifted); left out."
    if block_text(blocks[update.block_idx]) is None:
        return "the block has no text to rewrite; left out."
    return None


def _first_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                return str(block["text"])
    return None


def _title(task: ClineTask) -> str | None:
    item = task.history_item or {}
    candidates = [item.get("task")]
    candidates += [m.get("text") for m in task.ui_messages[:1]]
    candidates += [_first_text(m.get("content")) for m in task.messages[:1]]
    for text in candidates:
        if isinstance(text, str):
            lines = [
                line.strip()
                for line in text.replace("<task>", "").replace("</task>", "").splitlines()
                if line.strip()
            ]
            if lines:
                return str(without_nul(lines[0][:_TITLE_CHARS])[0])  # a message may hold NUL
    return None


def _model_id(task: ClineTask) -> str | None:
    candidates: list[Any] = [(task.history_item or {}).get("modelId")]
    for message in [*reversed(task.messages), *reversed(task.ui_messages)]:
        info = message.get("modelInfo")
        candidates.append(info.get("modelId") if isinstance(info, dict) else None)
    return next((c for c in candidates if is_model_id(c)), None)


def _metadata(task: ClineTask, notes: list[Note]) -> dict[str, Any]:
    cline: dict[str, Any] = {
        "task_id": path_text(task.task_id),
        "task_dir": path_text(task.directory),
        "files": list(task.files),
        "ui_file": task.ui_file,
    }
    if task.task_metadata is not None:
        cline["task_metadata"] = task.task_metadata
    if task.focus_chain is not None:
        name, text = task.focus_chain
        cline["focus_chain"] = {"file": path_text(name), "text": text}
    if task.history_item is not None:
        cline["history_item"] = task.history_item
    metadata = {"source": ORIGIN, "cline": cline}
    history = str(task.history_file) if task.history_file else TASK_HISTORY_FILE
    parts = [
        MetadataPart(cline, "task_metadata", str(task.directory / TASK_METADATA_FILE)),
        MetadataPart(cline, "history_item", history, f"HistoryItem {task.task_id}"),
    ]
    if task.focus_chain is not None:
        parts.append(MetadataPart(cline, "focus_chain", str(task.directory / task.focus_chain[0])))
    fit_metadata(metadata, parts, notes)
    kept = cline.get("task_metadata")
    if "task_metadata" in cline and not isinstance(kept, dict):  # noted once it is known to fit
        notes.append(
            Note(
                str(task.directory / TASK_METADATA_FILE),
                None,
                f"holds {json_kind(kept)}, not the object Cline writes (files in context, "
                "models used, environments); it was kept as written in the "
                "conversation's metadata (cline.task_metadata), and export cline writes "
                "it back.",
            )
        )
    return metadata
