"""What Cline's UI messages (``ui_messages.json``) become on a task's timeline.

Each UI message becomes a ``source_records`` row; an ``api_req_started`` is followed by its
request row (usage and cost from the JSON in its ``text``, the retries and failures the UI
shows before the next request in ``details``), a ``checkpoint_created`` by its checkpoint
(with ``lastCheckpointHash``). A new ``conversationHistoryDeletedRange`` becomes a range row
just before the first UI message that shows it, or, when that message follows an
``api_req_started``, between the request's UI row and its request row; the ``HistoryItem``'s
range closes the timeline when it differs. :mod:`.cline_plan` places these rows among the
task's API messages and context updates.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from contextstore.core.rows import (
    CheckpointRow,
    RangeRow,
    RequestRow,
    SourceRecordRow,
    TimelineRow,
)
from contextstore.core.validate import MAX_INT32, is_model_id
from contextstore.interop.cline import (
    TASK_HISTORY_FILE,
    ClineTask,
    is_int,
)
from contextstore.interop.files import (
    Note,
    is_name,
    without_nonfinite_numbers,
    without_nul,
)
from contextstore.interop.plan import (
    Slot,
    fitting_details,
    usable_ts,
)
from contextstore.interop.recovery import loads

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


def record_kind(message: Mapping[str, Any]) -> str:
    """``say:<say>`` or ``ask:<ask>``: a UI message's kind as ``source_records.kind``."""
    kind = message.get("type")
    value = message.get(kind) if kind in ("say", "ask") else None
    return f"{kind}:{value}"[:64] if isinstance(value, str) else str(kind or "unknown")[:64]


def request_info(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON object in a ``say`` message's ``text`` (``ClineApiReqInfo``), or None; a
    number JSON cannot hold (NaN, Infinity) in it reads as null, and a NUL character
    becomes U+FFFD (the message itself keeps both as written)."""
    return _read_request_info(message)[0]


def _read_request_info(message: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """:func:`request_info`, and the keys of its fields that held a number JSON cannot hold
    (read as null)."""
    text = message.get("text")
    if not isinstance(text, str):
        return None, []
    try:
        info = loads(text)
    except json.JSONDecodeError:
        return None, []
    if not isinstance(info, dict):
        return None, []
    finite, count = without_nonfinite_numbers(text, info)
    nulled = [str(key) for key in info if info[key] != finite[key]] if count else []
    return dict(without_nul(finite)[0]), nulled


def _nonfinite_note(path: str, where: str, keys: Sequence[str], recorded: str) -> Note:
    """The note for fields of a request's info read as null (see :func:`request_info`)."""
    return Note(
        path,
        where,
        "its text holds a number JSON cannot hold (NaN, Infinity, or too large) in "
        f"{', '.join(keys)}, read as null, as JavaScript writes it: {recorded} with null "
        "in its place (the UI message keeps its text as written).",
    )


@dataclass
class _RangeState:
    """The deleted range as the timeline has it so far, and the last value the UI showed."""

    written: int | None = None
    seen: Any = None
    last_total: int | None = None


def ui_slots(task: ClineTask, anchors: Sequence[int], notes: list[Note]) -> list[list[Slot]]:
    """The rows of each UI message, by segment (segment ``j`` ends with UI message ``j``;
    the last, after every UI message, holds the ``HistoryItem``'s range), given where each
    API message goes (``anchors``, see :func:`~contextstore.interop.cline_plan.message_anchors`)."""
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
        # The file the item was read from: the user's --history, not where Cline keeps it.
        history = str(
            task.history_file or task.directory.parent.parent / "state" / TASK_HISTORY_FILE
        )
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
                TASK_HISTORY_FILE,
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
    file_name: str | None = None,
) -> None:
    """Append the range row a UI message's (or the HistoryItem's) range calls for, if any.

    Notes name ``path``, the file read; the row's reason names Cline's file by
    ``file_name`` (default: ``path``'s name), so that the row is the same whichever copy
    of ``taskHistory.json`` was read (a re-import compares rows)."""
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
    written = f"[{int(value[0])}, {end}]"  # as the file has it: notes quote the file
    if end < 1 or (state.written is not None and end < state.written):
        notes.append(
            Note(
                path,
                where,
                f"the deleted range {written} would shrink the range "
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
                f"the deleted range {written} does not fit the {count} messages "
                "of the history at this point (Cline crashed between writes?); left out.",
            )
        )
        return
    state.written = end
    if value[0] != 2:
        notes.append(
            Note(
                path,
                where,
                f"the deleted range {value!r} starts at {value[0]}, not 2; Cline keeps "
                "messages 0 and 1 whatever the start and hides those from 2 to the end, "
                f"so it was imported as the deleted range [2, {end}].",
            )
        )
    reason = f"imported from Cline's {file_name or path.rsplit('/', 1)[-1]} ({where})"
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
    info, nulled = _read_request_info(message)
    if nulled:
        notes.append(_nonfinite_note(path, where, nulled, "the request was recorded"))
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
    details = fitting_details(_request_details(info, ui, j, path, notes), path, where, notes)
    model = message.get("modelInfo")
    model_id = model.get("modelId") if isinstance(model, dict) else None
    model_id = model_id if is_model_id(model_id) else None
    if any(v is not None for v in usage.values()):
        state.last_total = sum(v or 0 for v in usage.values())

    def make(ts: int) -> TimelineRow:
        return RequestRow(
            ts, cost=cost, model_id=model_id, failure=failure, details=details, **usage
        )

    return Slot(None, make)


def _request_details(
    info: Mapping[str, Any], ui: Sequence[Mapping[str, Any]], j: int, path: str, notes: list[Note]
) -> dict[str, Any] | None:
    """Cline's extras for one request: fields of its info beyond usage, and the retries
    and failures the UI shows before the next request (a retry's number JSON cannot hold
    read as null, noted)."""
    details: dict[str, Any] = {key: info[key] for key in DETAIL_FIELDS if key in info}
    retries: list[Any] = []
    failures: list[Any] = []
    for position in range(j + 1, len(ui)):
        later = ui[position]
        if later.get("say") == "api_req_started":
            break
        if later.get("say") == "error_retry":
            retry, nulled = _read_request_info(later)
            if nulled:
                where = f"message {position} (error_retry)"
                notes.append(_nonfinite_note(path, where, nulled, "its retry was recorded"))
            entry = retry or {"text": later.get("text")}
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
