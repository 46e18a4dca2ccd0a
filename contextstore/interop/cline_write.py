"""Building Cline's task files from stored rows (export), and writing them atomically.

An imported task comes back as it was read: its UI messages are its ``source_records``,
its messages the stored originals, its ``context_history.json`` every update row in
Cline's own order. Rows written in contextstore after the import (or in a conversation
that started here) get the UI messages Cline writes for them (``say:text``,
``api_req_started``, ``checkpoint_created``), and a rollback that removed UI messages gets
the ``deleted_api_reqs`` message Cline's own checkpoint restore adds, with their totals.
"""

from __future__ import annotations

import bisect
import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from contextstore.core.file_reads import ALL_PATHS, REPLACED_PATHS
from contextstore.core.os_errors import check_regular_targets
from contextstore.core.records import Checkpoint, RemovedSourceRecords, RequestRecord
from contextstore.core.validate import MAX_INT32
from contextstore.interop.cline import (
    ClineEditType,
    edit_type_for_kind,
    is_int,
    is_mention_metadata,
)
from contextstore.interop.cline_ui_rows import USAGE_FIELDS, request_info
from contextstore.interop.errors import ClineTaskError
from contextstore.interop.files import BYTE_ORDER_MARK, without_nonfinite_numbers
from contextstore.interop.recovery import loads

TimedEntry = tuple[int, dict[str, Any]]
"""A UI message and the timeline ``ts`` that orders it."""

_USAGE_SAYS: Final = frozenset({"api_req_started", "deleted_api_reqs", "subagent_usage"})
"""The UI messages whose usage Cline adds up for a task (``subagent_usage``: what the
subagents of a ``use_subagents`` call spent together)."""
_ENVIRONMENT_OPEN: Final = "<environment_details>"
_ENVIRONMENT_CLOSE: Final = "</environment_details>"
_STAMPED_BEFORE_USER_MESSAGE: Final = frozenset({"checkpoint_created", "api_req_started"})
"""Generated UI messages whose index reads two less than the messages before them."""


# -- context_history.json -----------------------------------------------------------------


def context_history_value(rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Every update row as ``context_history.json``: Cline's Map as an array of pairs.

    Imported updates keep their place in Cline's file (``cline_order``), their timestamps,
    edit types and metadata; updates written in contextstore follow, in ``ts`` order, with
    the edit type of their kind.
    """
    ordered = sorted(rows, key=_update_order)
    entries: dict[int, tuple[int, dict[int, list[Any]]]] = {}
    for row in ordered:
        metadata = row.get("metadata") or {}
        message_idx = int(row["message_idx"])
        stored_type: Any = metadata.get("cline_edit_type")
        edit_type = (
            int(stored_type) if is_int(stored_type, MAX_INT32) else edit_type_for_kind(row["kind"])
        )
        entry = entries.setdefault(message_idx, (edit_type, {}))
        stored_ts = metadata.get("cline_ts")
        ts = stored_ts if is_int(stored_ts) else int(row["ts"])
        entry[1].setdefault(int(row["block_idx"]), []).append(
            [ts, "text", [row["text"]], _update_metadata(metadata, entry[0])]
        )
    return [
        [message_idx, [edit_type, [[block, updates] for block, updates in blocks.items()]]]
        for message_idx, (edit_type, blocks) in entries.items()
    ]


def _update_order(row: Mapping[str, Any]) -> tuple[int, list[int], int]:
    order = (row.get("metadata") or {}).get("cline_order")
    if isinstance(order, list) and all(is_int(v, MAX_INT32) for v in order):
        return (0, order, int(row["ts"]))
    return (1, [], int(row["ts"]))


def _update_metadata(metadata: Mapping[str, Any], edit_type: int) -> list[Any]:
    """Cline's metadata of an update: as imported, else the paths of a file-read
    de-duplication; an update's metadata is the caller's own, so anything else (paths that
    are no list) is none."""
    replaced, every = metadata.get(REPLACED_PATHS), metadata.get(ALL_PATHS)
    if isinstance(metadata.get("cline_metadata"), list):
        value: list[Any] = copy.deepcopy(metadata["cline_metadata"])
    elif isinstance(replaced, list) and isinstance(every, list):
        value = [list(replaced), list(every)]
    else:
        value = []
    if edit_type == ClineEditType.FILE_MENTION and not is_mention_metadata(value):
        value = [[], []]
    return value


# -- ui_messages.json ---------------------------------------------------------------------


def api_metrics(ui_messages: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Cline's ``getApiMetrics``: token and cost totals of ``api_req_started``,
    ``deleted_api_reqs`` and ``subagent_usage`` messages (cache totals only when some
    message has them)."""
    totals: dict[str, Any] = {"tokensIn": 0, "tokensOut": 0, "cost": 0}
    for message in ui_messages:
        if message.get("type") != "say" or message.get("say") not in _USAGE_SAYS:
            continue
        info = request_info(message) or {}
        for key in ("tokensIn", "tokensOut", "cacheWrites", "cacheReads", "cost"):
            value = info.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    return {key: _js_number(value) for key, value in totals.items()}


def _js_number(value: Any) -> Any:
    """A sum as JavaScript prints it (``0``, not ``0.0``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def deleted_api_reqs(
    removed: RemovedSourceRecords,
    history_index: int,
    deleted_range: tuple[int, int] | None,
    model_info: Any,
) -> dict[str, Any]:
    """The ``deleted_api_reqs`` message Cline's checkpoint restore adds: the totals of the
    UI messages a rollback removed, so the task's cost is not lost."""
    metrics = api_metrics(r.data for r in removed.records)
    info = {
        key: metrics[key]
        for key in ("tokensIn", "tokensOut", "cacheWrites", "cacheReads", "cost")
        if key in metrics
    }
    message: dict[str, Any] = {
        "ts": removed.ran_at,
        "type": "say",
        "say": "deleted_api_reqs",
        "text": json.dumps(info, separators=(",", ":")),
    }
    if model_info is not None:
        message["modelInfo"] = copy.deepcopy(model_info)
    message["conversationHistoryIndex"] = history_index
    if deleted_range is not None:
        message["conversationHistoryDeletedRange"] = list(deleted_range)
    return message


def request_message(record: RequestRecord) -> dict[str, Any]:
    """The ``api_req_started`` UI message of a request written in contextstore."""
    info: dict[str, Any] = {"request": ""}
    for name, key in USAGE_FIELDS:
        value = getattr(record, name)
        if value is not None:
            info[key] = value
    if record.cost is not None:
        info["cost"] = record.cost
    if record.failure is not None:
        info["cancelReason"] = record.failure
    for key, value in (record.details or {}).items():
        if key in ("streamingFailedMessage", "retryStatus"):
            info[key] = value
    message: dict[str, Any] = {
        "ts": record.ts,
        "type": "say",
        "say": "api_req_started",
        "text": json.dumps(info, separators=(",", ":")),
    }
    if record.model_id is not None:
        message["modelInfo"] = {"modelId": record.model_id}
    return message


def checkpoint_message(checkpoint: Checkpoint) -> dict[str, Any]:
    """The ``checkpoint_created`` UI message of a checkpoint written in contextstore."""
    message: dict[str, Any] = {"ts": checkpoint.ts, "type": "say", "say": "checkpoint_created"}
    if checkpoint.git_hash is not None:
        message["lastCheckpointHash"] = checkpoint.git_hash
    message["isCheckpointCheckedOut"] = False
    return message


def _is_environment_details(text: str) -> bool:
    """Whether a user text block is the ``<environment_details>`` Cline appends to a
    request (never part of what the user typed, so never shown as theirs)."""
    stripped = text.strip()
    return stripped.startswith(_ENVIRONMENT_OPEN) and stripped.endswith(_ENVIRONMENT_CLOSE)


def text_message(message: Mapping[str, Any], ts: int, first: bool) -> dict[str, Any] | None:
    """The UI message showing a message's text (``task`` for the first, ``user_feedback``
    for later user messages, ``text`` for the assistant's); None when it has no text.

    A user message's ``<environment_details>`` block is not part of its text (Cline adds
    it to the request, the user never typed it), and the first message's ``<task>`` tags
    are taken off, as Cline shows the task."""
    content = message.get("content")
    user = message.get("role") == "user"
    texts = (
        [content]
        if isinstance(content, str)
        else [
            b["text"]
            for b in content or []
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
    )
    text = "\n\n".join(t for t in texts if t.strip() and not (user and _is_environment_details(t)))
    if not text:
        return None
    if first:
        text = text.replace("<task>\n", "").replace("\n</task>", "")
        text = text.replace("<task>", "").replace("</task>", "").strip()
    say = "task" if first else "text" if not user else "user_feedback"
    entry: dict[str, Any] = {"ts": ts, "type": "say", "say": say, "text": text}
    if user:
        entry.update(images=[], files=[])
    return entry


def with_positions(
    entries: Sequence[TimedEntry],
    message_ts: Sequence[int],
    ranges: Sequence[tuple[int, int | None]],
) -> list[TimedEntry]:
    """Generated UI messages with the ``conversationHistoryIndex`` and deleted range Cline
    stamps on every message, as of each one's ``ts`` (``ranges``: the range's end at each
    of those moments); entries already carrying an index keep theirs."""
    ends = dict(ranges)
    out: list[TimedEntry] = []
    for ts, entry in entries:
        if "conversationHistoryIndex" not in entry:
            entry = dict(entry)
            before = bisect.bisect_left(message_ts, ts)
            # Cline stamps a checkpoint or a request before it adds the user message that
            # follows them, and its restore to one keeps that message (``[0 : index + 2]``):
            # a row written here after n messages reads n - 2, so the restore keeps those n.
            after_turn = entry.get("say") in _STAMPED_BEFORE_USER_MESSAGE
            entry["conversationHistoryIndex"] = before - (2 if after_turn else 1)
            end = ends.get(ts)
            if end is not None:
                entry["conversationHistoryDeletedRange"] = [2, end]
        out.append((ts, entry))
    return out


# -- the HistoryItem ----------------------------------------------------------------------


def history_item(
    stored: Mapping[str, Any] | None,
    task_id: str,
    ui_messages: Sequence[Mapping[str, Any]],
    api_messages: Sequence[Mapping[str, Any]],
    deleted_range: tuple[int, int] | None,
    *,
    changed: bool,
) -> dict[str, Any]:
    """The task's ``HistoryItem``: the imported one as it was when nothing changed since;
    otherwise with the fields Cline derives from the files recomputed as Cline does
    (``ts`` of the last message that is not a resume prompt, totals of ``ui[1:]``, the
    current range, the last model)."""
    item: dict[str, Any] = dict(stored) if stored else {"id": task_id}
    if stored is not None and not changed:
        return item
    if ui_messages:
        relevant = [
            m for m in ui_messages if m.get("ask") not in ("resume_task", "resume_completed_task")
        ]
        item["ts"] = (relevant or ui_messages)[-1].get("ts")
        first = ui_messages[0].get("text")
        item["task"] = first if isinstance(first, str) else item.get("task", "")
    metrics = api_metrics(ui_messages[1:])
    item["tokensIn"] = metrics["tokensIn"]
    item["tokensOut"] = metrics["tokensOut"]
    for key in ("cacheWrites", "cacheReads"):
        if key in metrics:
            item[key] = metrics[key]
        else:
            item.pop(key, None)
    item["totalCost"] = metrics["cost"]
    if deleted_range is None:
        item.pop("conversationHistoryDeletedRange", None)
    else:
        item["conversationHistoryDeletedRange"] = list(deleted_range)
    model = next(
        (
            m["modelInfo"].get("modelId")
            for m in reversed(api_messages)
            if isinstance(m.get("modelInfo"), dict)
        ),
        None,
    )
    if model is not None:
        item["modelId"] = model
    return item


def upsert_history_item(path: Path, item: Mapping[str, Any]) -> list[Any]:
    """``taskHistory.json``'s items with ``item`` replacing the one of its id (or added).

    Raises:
        ClineTaskError: the file exists and is not a JSON array.
    """
    items: list[Any] = []
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8").removeprefix(BYTE_ORDER_MARK)
            value = loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ClineTaskError(
                path, None, f"cannot be read as JSON ({exc}); the item was not written."
            ) from exc
        value = without_nonfinite_numbers(text, value)[0]
        if not isinstance(value, list):
            raise ClineTaskError(path, None, "is not a JSON array of HistoryItems.")
        items = value
    kept = [i for i in items if not (isinstance(i, dict) and str(i.get("id")) == str(item["id"]))]
    position = next(
        (
            n
            for n, i in enumerate(items)
            if isinstance(i, dict) and str(i.get("id")) == str(item["id"])
        ),
        len(kept),
    )
    kept.insert(position, dict(item))
    return kept


# -- writing ------------------------------------------------------------------------------


def check_targets(paths: Sequence[Path], *, overwrite: bool) -> None:
    """Refuse to replace existing files unless asked, and anything but a regular file.

    Raises:
        ClineTaskError: some exist and ``overwrite`` is False (nothing written).
        InvalidInputError: one is not a regular file (nothing written).
    """
    check_regular_targets(paths)
    existing = [p for p in paths if p.exists()]
    if existing and not overwrite:
        names = ", ".join(p.name for p in existing)
        raise ClineTaskError(
            existing[0].parent,
            None,
            f"already holds {names}; pass overwrite to replace. Nothing was written.",
        )
