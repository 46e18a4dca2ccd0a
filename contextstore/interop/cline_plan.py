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
  request row, a ``checkpoint_created`` by its checkpoint (with ``lastCheckpointHash``).
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
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from contextstore.core.content import normalize_message_dict
from contextstore.core.overlays import block_text
from contextstore.core.rows import (
    CheckpointRow,
    MessageRow,
    RangeRow,
    RequestRow,
    SourceRecordRow,
    TimelineRow,
    UpdateRow,
)
from contextstore.core.validate import MAX_ID_LENGTH, MAX_INT32
from contextstore.interop.cline import (
    API_HISTORY_FILE,
    CONTEXT_HISTORY_FILE,
    IMPORT_SOURCE,
    TASK_HISTORY_FILE,
    TASK_METADATA_FILE,
    ClineTask,
    ClineUpdate,
    history_index,
    is_int,
)
from contextstore.interop.cline_messages import EMPTY_CONTENT_KEY, as_written, is_stand_in
from contextstore.interop.errors import ClineTaskError
from contextstore.interop.files import (
    Note,
    is_name,
    path_text,
    without_nonfinite_numbers,
    without_nul,
)
from contextstore.interop.plan import (
    ImportPlan,
    MetadataPart,
    Slot,
    clock_start,
    fit_metadata,
    fitting_details,
    stamp,
    usable_ts,
)
from contextstore.interop.recovery import loads
from contextstore.interop.stand_in import (
    NO_ORIGINAL,
    REFUSED_KEY,
    fitted_stand_in,
    refused_original,
)

ORIGIN: Final = "cline"
"""``source_records.origin`` of Cline's UI messages."""
IMPORTED_KEEP: Final = "imported"
"""The ``keep`` recorded on a deleted range imported from Cline."""
USAGE_FIELDS: Final = (
    ("tokens_in", "tokensIn"),
    ("tokens_out", "tokensOut"),
    ("cache_writes", "cacheWrites"),
    ("cache_reads", "cacheReads"),
)
DETAIL_FIELDS: Final = ("streamingFailedMessage", "retryStatus")
"""``api_req_started`` fields kept in the request row's ``details`` as Cline wrote them."""
_TITLE_CHARS: Final = 120


def record_kind(message: Mapping[str, Any]) -> str:
    """``say:<say>`` or ``ask:<ask>``: a UI message's kind as ``source_records.kind``."""
    kind = message.get("type")
    value = message.get(kind) if kind in ("say", "ask") else None
    return f"{kind}:{value}"[:64] if isinstance(value, str) else str(kind or "unknown")[:64]


def request_info(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON object in a ``say`` message's ``text`` (``ClineApiReqInfo``), or None; a
    number JSON cannot hold (NaN, Infinity) in it reads as null, and a NUL character
    becomes U+FFFD (the message itself keeps both as written)."""
    text = message.get("text")
    if not isinstance(text, str):
        return None
    try:
        info = loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(info, dict):
        return None
    return dict(without_nul(without_nonfinite_numbers(text, info)[0])[0])


@dataclass
class _Placer:
    """The rows of one task, segment by segment (segment ``j`` ends with UI message ``j``)."""

    task: ClineTask
    notes: list[Note]
    segments_messages: list[list[Slot]] = field(default_factory=list)
    segments_updates: list[list[tuple[int, int, Slot]]] = field(default_factory=list)
    segments_ui: list[list[Slot]] = field(default_factory=list)


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
    ui_slots = _ui_slots(task, anchors, notes)
    slots: list[Slot] = []
    for j in range(count + 1):
        slots.extend(messages[j])
        slots.extend(updates[j])
        slots.extend(ui_slots[j])
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


@dataclass
class _RangeState:
    """The deleted range as the timeline has it so far, and the last value the UI showed."""

    written: int | None = None
    seen: Any = None
    last_total: int | None = None


def _ui_slots(task: ClineTask, anchors: Sequence[int], notes: list[Note]) -> list[list[Slot]]:
    ui = task.ui_messages
    path = str(task.directory / (task.ui_file or ""))
    state = _RangeState()
    placed = [0] * (len(ui) + 1)
    for anchor in anchors:
        placed[anchor] += 1
    messages_before = list(itertools.accumulate(placed))
    segments: list[list[Slot]] = [[] for _ in range(len(ui) + 1)]
    for j, message in enumerate(ui):
        segment = segments[j]
        where = f"message {j}"
        own = usable_ts(message.get("ts"))
        value = message.get("conversationHistoryDeletedRange")
        if value != state.seen:
            _range_slot(segment, value, state, messages_before[j], path, where, own, notes)
        segment.append(Slot(own, _record_maker(message)))
        if message.get("type") == "say" and message.get("say") == "api_req_started":
            upcoming = ui[j + 1].get("conversationHistoryDeletedRange") if j + 1 < len(ui) else None
            if j + 1 < len(ui) and upcoming != state.seen:
                next_where = f"message {j + 1}"
                next_own = usable_ts(ui[j + 1].get("ts"))
                count = messages_before[j + 1]
                _range_slot(segment, upcoming, state, count, path, next_where, next_own, notes)
            segment.append(_request_slot(message, ui, j, state, path, notes))
        elif message.get("type") == "say" and message.get("say") == "checkpoint_created":
            segment.append(_checkpoint_slot(message, path, where, notes))
    item = task.history_item
    if item is not None and "conversationHistoryDeletedRange" in item:
        history = str(task.directory.parent.parent / "state" / TASK_HISTORY_FILE)
        value = item["conversationHistoryDeletedRange"]
        if value != state.seen:
            where = f"HistoryItem {item.get('id')}"
            _range_slot(
                segments[len(ui)],
                value,
                state,
                len(task.messages),
                history,
                where,
                usable_ts(item.get("ts")),
                notes,
            )
    return segments


def _range_slot(
    segment: list[Slot],
    value: Any,
    state: _RangeState,
    count: int,
    path: str,
    where: str,
    own: int | None,
    notes: list[Note],
) -> None:
    """Append the range row a UI message's (or the HistoryItem's) range calls for, if any."""
    state.seen = value
    if value is None:
        if state.written is not None:
            notes.append(
                Note(
                    path,
                    where,
                    f"shows no deleted range after [2, {state.written}]; a range "
                    "never shrinks, so the range stays.",
                )
            )
        return
    if not (
        isinstance(value, list) and len(value) == 2 and all(is_int(v, MAX_INT32) for v in value)
    ):
        notes.append(
            Note(
                path,
                where,
                f"conversationHistoryDeletedRange {value!r:.60} is not [start, end]; left out.",
            )
        )
        return
    end = int(value[1])
    if end < 1 or (state.written is not None and end < state.written):
        notes.append(
            Note(
                path,
                where,
                f"the deleted range [2, {end}] would shrink the range "
                f"[2, {state.written}] set before it; left out.",
            )
        )
        return
    if state.written == end:
        return
    if count and end >= count - 1:
        notes.append(
            Note(
                path,
                where,
                f"the deleted range [2, {end}] does not fit the {count} messages "
                "of the history at this point (Cline crashed between writes?); left out.",
            )
        )
        return
    state.written = end
    reason = f"imported from Cline's {path.rsplit('/', 1)[-1]} ({where})"
    total = state.last_total
    segment.append(
        Slot(
            None,
            lambda ts: RangeRow(ts, end, keep=IMPORTED_KEEP, reason=reason, tokens_total=total),
        )
    )


def _record_maker(message: Mapping[str, Any]) -> Any:
    kind = record_kind(message)
    own = usable_ts(message.get("ts"))
    return lambda ts: SourceRecordRow(ts, ORIGIN, kind, message, own)


def _request_slot(
    message: Mapping[str, Any],
    ui: Sequence[Mapping[str, Any]],
    j: int,
    state: _RangeState,
    path: str,
    notes: list[Note],
) -> Slot:
    where = f"message {j} (api_req_started)"
    info = request_info(message)
    if info is None:
        notes.append(
            Note(
                path,
                where,
                "its text is not a JSON object; the request was recorded without usage.",
            )
        )
        info = {}
    usage: dict[str, Any] = {}
    for name, key in USAGE_FIELDS:
        value = info.get(key)
        if value is not None and not is_int(value, MAX_INT32):
            notes.append(Note(path, where, f"{key} {value!r:.40} is not a token count; left out."))
            value = None
        usage[name] = value
    cost = info.get("cost")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost <= 1e15
    ):
        notes.append(Note(path, where, f"cost {cost!r:.40} is not a number >= 0; left out."))
        cost = None
    reason = info.get("cancelReason")
    failure = reason if is_name(reason) else None
    details = fitting_details(_request_details(info, ui, j), path, where, notes)
    model = message.get("modelInfo")
    model_id = model.get("modelId") if isinstance(model, dict) else None
    model_id = model_id if is_name(model_id) else None
    if any(v is not None for v in usage.values()):
        state.last_total = sum(v or 0 for v in usage.values())

    def make(ts: int) -> TimelineRow:
        return RequestRow(
            ts, cost=cost, model_id=model_id, failure=failure, details=details, **usage
        )

    return Slot(None, make)


def _request_details(
    info: Mapping[str, Any], ui: Sequence[Mapping[str, Any]], j: int
) -> dict[str, Any] | None:
    """Cline's extras for one request: fields of its info beyond usage, and the retries
    and failures the UI shows before the next request."""
    details: dict[str, Any] = {key: info[key] for key in DETAIL_FIELDS if key in info}
    retries: list[Any] = []
    failures: list[Any] = []
    for position in range(j + 1, len(ui)):
        later = ui[position]
        if later.get("say") == "api_req_started":
            break
        if later.get("say") == "error_retry":
            entry = request_info(later) or {"text": later.get("text")}
            retries.append({**entry, "ts": later.get("ts")})
        elif later.get("ask") == "api_req_failed":
            failures.append({"ts": later.get("ts"), "text": later.get("text")})
    if retries:
        details["retries"] = retries
    if failures:
        details["failures"] = failures
    return details or None


def _checkpoint_slot(message: Mapping[str, Any], path: str, where: str, notes: list[Note]) -> Slot:
    git_hash = message.get("lastCheckpointHash")
    if git_hash is not None and not (isinstance(git_hash, str) and 0 < len(git_hash) <= 64):
        notes.append(
            Note(
                path,
                where,
                f"lastCheckpointHash {git_hash!r:.70} is not a git hash; "
                "the checkpoint was kept without it.",
            )
        )
        git_hash = None
    own = usable_ts(message.get("ts"))
    label = f"cline:{own}" if own is not None else None
    return Slot(None, lambda ts: CheckpointRow(ts, label=label, git_hash=git_hash))


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
    return next((c for c in candidates if is_name(c)), None)


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
    return metadata
