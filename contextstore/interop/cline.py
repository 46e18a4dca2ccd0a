"""Cline task directories as plain values: reading and validating the files.

A Cline task lives in ``<globalStorage>/tasks/<taskId>/``: ``api_conversation_history.json``
(the messages), ``context_history.json`` (positional text rewrites), ``ui_messages.json``
(token accounting and snapshots of the deleted range) and ``task_metadata.json``. The only
durable home of the deleted range is the task's ``HistoryItem`` in ``state/taskHistory.json``.

Everything here is pure file handling and mapping: it never touches a database. Every file
is parsed and validated before a caller writes anything, and a malformed file is an error
naming the file and the position (Cline silently resets a bad overlay file; we never do).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.core.file_reads import ALL_PATHS, REPLACED_PATHS
from contextstore.core.overlays import UpdateKind, block_text
from contextstore.core.validate import MAX_INT32, MAX_TS

API_HISTORY_FILE: Final = "api_conversation_history.json"
UI_MESSAGES_FILE: Final = "ui_messages.json"
LEGACY_UI_MESSAGES_FILE: Final = "claude_messages.json"
CONTEXT_HISTORY_FILE: Final = "context_history.json"
TASK_METADATA_FILE: Final = "task_metadata.json"
TASK_HISTORY_FILE: Final = "state/taskHistory.json"

IMPORT_SOURCE: Final = "cline:context_history.json"
"""The ``source`` recorded on context updates imported from ``context_history.json``."""

_T = TypeVar("_T")
_TITLE_CHARS: Final = 120
USAGE_FIELDS: Final = (
    ("tokens_in", "tokensIn"),
    ("tokens_out", "tokensOut"),
    ("cache_writes", "cacheWrites"),
    ("cache_reads", "cacheReads"),
)


class ClineTaskError(InvalidInputError):
    """A Cline task file is missing, unreadable or malformed; nothing was written.

    Attributes:
        path: the offending file (or directory).
        position: where in the file (``"line 3 column 9 (char 41)"``, ``"message 4"``...),
            or None when the whole file is at fault.
    """

    def __init__(self, path: Path, position: str | None, problem: str) -> None:
        self.path = path
        self.position = position
        where = f"{path}" if position is None else f"{path}, {position}"
        super().__init__(f"{where}: {problem}")


class ClineEditType:
    """Cline's ``EditType`` values: the first element of a ``context_history.json`` entry."""

    UNDEFINED = 0
    NO_FILE_READ = 1
    READ_FILE_TOOL = 2
    ALTER_FILE_TOOL = 3
    FILE_MENTION = 4


_KIND_BY_EDIT_TYPE: Final = {
    ClineEditType.READ_FILE_TOOL: UpdateKind.READ_FILE,
    ClineEditType.ALTER_FILE_TOOL: UpdateKind.ALTER_FILE,
    ClineEditType.FILE_MENTION: UpdateKind.FILE_MENTION,
}
_EDIT_TYPE_BY_KIND: Final = {
    UpdateKind.TRUNCATION_NOTICE: ClineEditType.UNDEFINED,
    UpdateKind.FIRST_USER_REPLACEMENT: ClineEditType.UNDEFINED,
    UpdateKind.READ_FILE: ClineEditType.READ_FILE_TOOL,
    UpdateKind.ALTER_FILE: ClineEditType.ALTER_FILE_TOOL,
    UpdateKind.FILE_MENTION: ClineEditType.FILE_MENTION,
}


def kind_for_edit_type(edit_type: int, message_idx: int) -> str:
    """Map a Cline ``editType`` (and the message it addresses) to an :class:`UpdateKind`.

    ``UNDEFINED`` is Cline's type for its two notices: the truncation notice on message 1
    and the replacement of the task text on message 0. Anything without a counterpart
    becomes ``manual``.
    """
    if edit_type == ClineEditType.UNDEFINED and message_idx == 1:
        return UpdateKind.TRUNCATION_NOTICE
    if edit_type == ClineEditType.UNDEFINED and message_idx == 0:
        return UpdateKind.FIRST_USER_REPLACEMENT
    return _KIND_BY_EDIT_TYPE.get(edit_type, UpdateKind.MANUAL)


def edit_type_for_kind(kind: str) -> int:
    """Map an :class:`UpdateKind` back to a Cline ``editType`` (``NO_FILE_READ`` if none)."""
    return _EDIT_TYPE_BY_KIND.get(kind, ClineEditType.NO_FILE_READ)


# -- values -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClineUpdate:
    """One update of ``context_history.json``: new text for one block at a Cline ``ts``."""

    message_idx: int
    block_idx: int
    edit_type: int
    ts: int
    text: str
    metadata: list[Any] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The :class:`UpdateKind` this update becomes in the store."""
        return kind_for_edit_type(self.edit_type, self.message_idx)

    def store_metadata(self) -> dict[str, Any]:
        """The metadata stored with the update: Cline's originals, and mention paths.

        A file-mention update also gets the ``replaced_paths`` and ``all_paths`` lists the
        store's own de-duplication reads.
        """
        stored: dict[str, Any] = {
            "cline_ts": self.ts,
            "cline_edit_type": self.edit_type,
            "cline_metadata": copy.deepcopy(self.metadata),
        }
        if self.kind == UpdateKind.FILE_MENTION:
            stored[REPLACED_PATHS] = list(self.metadata[0])
            stored[ALL_PATHS] = list(self.metadata[1])
        return stored


@dataclass(frozen=True)
class ClineRequest:
    """The usage of one ``api_req_started`` UI message."""

    ts: int | None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cache_writes: int | None = None
    cache_reads: int | None = None
    cost: float | None = None
    model_id: str | None = None
    history_index: int | None = None
    """``conversationHistoryIndex``: the last API message when the request started."""
    failure: str | None = None
    """Cline's ``cancelReason`` (streaming_failed, user_cancelled, retries_exhausted)."""


@dataclass(frozen=True)
class ClineRange:
    """The task's deleted range ``[2, end]``, when it was set, and which file said so."""

    end: int
    ts: int | None
    path: Path
    position: str

    @property
    def source(self) -> str:
        """The file and position the range was read from, for the range row's reason."""
        return f"{self.path.name} ({self.position})"


@dataclass(frozen=True)
class ClineTask:
    """Everything read from a Cline task directory, validated."""

    directory: Path
    task_id: str
    messages: list[dict[str, Any]]
    updates: list[ClineUpdate]
    requests: list[ClineRequest]
    deleted_range: ClineRange | None
    title: str | None
    model_id: str | None
    metadata: dict[str, Any]
    """Conversation metadata: the source, task id and directory, and Cline's task files
    that have no table of their own (``task_metadata.json``, the ``HistoryItem``)."""


@dataclass(frozen=True)
class MessageStep:
    """Append message ``index`` of the task."""

    index: int


Step = MessageStep | ClineUpdate | ClineRequest | ClineRange
"""One write of an import, in timeline order."""


@dataclass(frozen=True)
class ImportPlan:
    """The writes of an import in timeline order, and the updates that cannot apply."""

    steps: list[Step]
    skipped: list[str]


# -- reading ------------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    """Read one JSON file.

    Raises:
        ClineTaskError: the file cannot be read, is not UTF-8, or is not valid JSON (the
            error names the line, column and character offset).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ClineTaskError(path, None, f"cannot be read ({exc.strerror}).") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClineTaskError(
            path, f"byte {exc.start}", "is not UTF-8 text; restore the file from a backup."
        ) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        position = f"line {exc.lineno} column {exc.colno} (char {exc.pos})"
        raise ClineTaskError(
            path,
            position,
            f"invalid JSON ({exc.msg}). Cline would silently reset this file; contextstore "
            "refuses it. Repair the file (or move it away if it is optional) and import again.",
        ) from exc


def is_int(value: Any, maximum: int = MAX_TS) -> bool:
    """True for an int (not a bool) from 0 to ``maximum``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= maximum


def _expect_list(value: Any, path: Path, position: str | None, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ClineTaskError(path, position, f"expected {what}, got {type(value).__name__}.")
    return value


def read_task(task_dir: str | os.PathLike[str], *, history_path: Path | None = None) -> ClineTask:
    """Read and validate a Cline task directory.

    Args:
        task_dir: the ``tasks/<taskId>`` directory.
        history_path: Cline's ``state/taskHistory.json``; when given, its ``HistoryItem``
            for this task is the authority for the deleted range (else the last UI message
            is).

    Raises:
        ClineTaskError: a file is missing, unreadable or malformed.
    """
    directory = Path(task_dir)
    if not directory.is_dir():
        raise ClineTaskError(directory, None, "is not a directory; pass a tasks/<id>/ folder.")
    api_path = directory / API_HISTORY_FILE
    if not api_path.is_file():
        raise ClineTaskError(
            directory, None, f"has no {API_HISTORY_FILE}; is this a Cline task directory?"
        )
    messages = parse_api_history(read_json(api_path), api_path)
    updates = _read_optional(directory / CONTEXT_HISTORY_FILE, parse_context_history)
    ui_path = _ui_messages_path(directory)
    ui_messages = _read_optional(ui_path, parse_ui_messages)
    requests = [r for r in (parse_request(m, ui_path, i) for i, m in ui_messages) if r]
    metadata_path = directory / TASK_METADATA_FILE
    task_metadata = read_json(metadata_path) if metadata_path.is_file() else None
    item = None
    if history_path is not None:
        item = find_history_item(read_json(history_path), history_path, directory.name)
    if item is not None and history_path is not None:
        deleted = range_from_history_item(item, history_path)
    else:
        deleted = range_from_ui_messages(ui_messages, ui_path)
    return ClineTask(
        directory=directory,
        task_id=directory.name,
        messages=messages,
        updates=updates,
        requests=requests,
        deleted_range=deleted,
        title=_title(item, messages),
        model_id=_model_id(item, messages, task_metadata),
        metadata=_conversation_metadata(directory, task_metadata, item),
    )


def _read_optional(path: Path, parse: Callable[[Any, Path], list[_T]]) -> list[_T]:
    if not path.is_file():
        return []
    return parse(read_json(path), path)


def _ui_messages_path(directory: Path) -> Path:
    """``ui_messages.json``, or its legacy name ``claude_messages.json`` when only that exists."""
    legacy = directory / LEGACY_UI_MESSAGES_FILE
    current = directory / UI_MESSAGES_FILE
    return legacy if legacy.is_file() and not current.is_file() else current


def parse_api_history(value: Any, path: Path) -> list[dict[str, Any]]:
    """Validate ``api_conversation_history.json``: a non-empty list of message objects.

    Raises:
        ClineTaskError: the file is not such a list, or a message is malformed.
    """
    messages = _expect_list(value, path, None, "a JSON array of messages")
    if not messages:
        raise ClineTaskError(path, None, "holds no messages; there is nothing to import.")
    for idx, message in enumerate(messages):
        try:
            normalize_message_dict(message)
        except InvalidInputError as exc:
            raise ClineTaskError(path, f"message {idx}", str(exc)) from exc
    return messages


def parse_context_history(value: Any, path: Path) -> list[ClineUpdate]:
    """Parse ``context_history.json`` (Cline's Map as an array of pairs) into updates.

    Every update of every list is returned, in file order.

    Raises:
        ClineTaskError: the structure is not ``[[idx, [editType, [[block, [update...]]]]]]``.
    """
    updates: list[ClineUpdate] = []
    for entry_no, entry in enumerate(_expect_list(value, path, None, "a JSON array")):
        where = f"entry {entry_no}"
        if not (isinstance(entry, list) and len(entry) == 2 and is_int(entry[0], MAX_INT32)):
            raise ClineTaskError(path, where, "expected [messageIndex, [editType, blocks]].")
        message_idx, body = entry
        if not (isinstance(body, list) and len(body) == 2 and is_int(body[0], MAX_INT32)):
            raise ClineTaskError(path, where, "expected [editType, blocks] as its second item.")
        edit_type, block_entries = body
        for block_entry in _expect_list(block_entries, path, where, "a list of blocks"):
            updates.extend(_parse_block_entry(block_entry, message_idx, edit_type, path, where))
    return updates


def _parse_block_entry(
    block_entry: Any, message_idx: int, edit_type: int, path: Path, where: str
) -> list[ClineUpdate]:
    if not (
        isinstance(block_entry, list)
        and len(block_entry) == 2
        and is_int(block_entry[0], MAX_INT32)
        and isinstance(block_entry[1], list)
    ):
        raise ClineTaskError(path, where, "expected [blockIndex, [update, ...]] for each block.")
    block_idx, raw_updates = block_entry
    parsed = []
    for update_no, raw in enumerate(raw_updates):
        position = f"{where} (message {message_idx}) block {block_idx} update {update_no}"
        parsed.append(_parse_update(raw, message_idx, block_idx, edit_type, path, position))
    return parsed


def _parse_update(
    raw: Any, message_idx: int, block_idx: int, edit_type: int, path: Path, position: str
) -> ClineUpdate:
    if not (
        isinstance(raw, list)
        and len(raw) == 4
        and is_int(raw[0])
        and raw[1] == "text"
        and isinstance(raw[2], list)
        and raw[2]
        and isinstance(raw[2][0], str)
        and isinstance(raw[3], list)
    ):
        raise ClineTaskError(path, position, 'expected [timestampMs, "text", [newText], metadata].')
    update = ClineUpdate(message_idx, block_idx, edit_type, raw[0], raw[2][0], raw[3])
    if update.kind == UpdateKind.FILE_MENTION and not is_mention_metadata(raw[3]):
        raise ClineTaskError(
            path, position, "a file-mention update needs metadata [[replaced...], [all...]]."
        )
    return update


def is_mention_metadata(metadata: list[Any]) -> bool:
    """True for Cline's file-mention metadata: two lists of paths."""
    return len(metadata) == 2 and all(
        isinstance(paths, list) and all(isinstance(p, str) for p in paths) for paths in metadata
    )


def parse_ui_messages(value: Any, path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Validate ``ui_messages.json``: a list of objects; returns ``(position, message)``.

    Raises:
        ClineTaskError: the file is not a list of objects.
    """
    parsed = []
    for position, message in enumerate(_expect_list(value, path, None, "a JSON array")):
        if not isinstance(message, dict):
            raise ClineTaskError(path, f"message {position}", "expected a JSON object.")
        parsed.append((position, message))
    return parsed


def parse_request(message: Mapping[str, Any], path: Path, position: int) -> ClineRequest | None:
    """The usage of an ``api_req_started`` UI message, or None for any other message.

    A request still ``...Loading...`` (no token field and no cost) gives None.

    Raises:
        ClineTaskError: its ``text`` is not a JSON object, or a token field is not a count.
    """
    if message.get("say") != "api_req_started" or not isinstance(message.get("text"), str):
        return None
    where = f"message {position} (api_req_started)"
    try:
        info = json.loads(message["text"])
    except json.JSONDecodeError as exc:
        raise ClineTaskError(
            path, f"{where} text, char {exc.pos}", f"the request info is not JSON ({exc.msg})."
        ) from exc
    if not isinstance(info, dict):
        raise ClineTaskError(path, where, "the request info is not a JSON object.")
    usage = {name: info.get(key) for name, key in USAGE_FIELDS}
    cost = info.get("cost")
    reason = info.get("cancelReason")
    failure = reason if isinstance(reason, str) and 0 < len(reason) <= 200 else None
    if all(v is None for v in usage.values()) and cost is None and failure is None:
        return None
    _check_usage(usage, cost, path, where)
    model = message.get("modelInfo")
    model_id = model.get("modelId") if isinstance(model, dict) else None
    index = message.get("conversationHistoryIndex")
    return ClineRequest(
        ts=message["ts"] if is_int(message.get("ts")) else None,
        cost=cost,
        model_id=model_id if isinstance(model_id, str) and model_id else None,
        history_index=index if is_int(index, MAX_INT32) else None,
        failure=failure,
        **usage,
    )


def _check_usage(usage: Mapping[str, Any], cost: Any, path: Path, where: str) -> None:
    for name, value in usage.items():
        if value is not None and not is_int(value, MAX_INT32):
            raise ClineTaskError(path, where, f"{name} must be a token count, got {value!r:.40}.")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost <= 1e15
    ):
        raise ClineTaskError(path, where, f"cost must be a number >= 0, got {cost!r:.40}.")


def _range_end(value: Any, path: Path, position: str) -> int:
    if not (isinstance(value, list) and len(value) == 2 and all(is_int(v) for v in value)):
        raise ClineTaskError(
            path, position, f"conversationHistoryDeletedRange must be [start, end], got {value!r}."
        )
    end: int = value[1]
    return end


def range_from_ui_messages(
    ui_messages: Sequence[tuple[int, Mapping[str, Any]]], path: Path
) -> ClineRange | None:
    """The last UI message's deleted range, dated by the first of its trailing run.

    Raises:
        ClineTaskError: the range is not ``[start, end]``.
    """
    if not ui_messages or "conversationHistoryDeletedRange" not in ui_messages[-1][1]:
        return None
    last_position, last = ui_messages[-1]
    value = last["conversationHistoryDeletedRange"]
    end = _range_end(value, path, f"message {last_position}")
    since: Mapping[str, Any] = last
    for _, message in reversed(ui_messages):
        if message.get("conversationHistoryDeletedRange") != value:
            break
        since = message
    ts = since.get("ts")
    return ClineRange(end, ts if is_int(ts) else None, path, f"message {last_position}")


def find_history_item(value: Any, path: Path, task_id: str) -> dict[str, Any]:
    """The ``HistoryItem`` of ``task_id`` in ``taskHistory.json`` (or a lone item object).

    Raises:
        ClineTaskError: the file holds no item with that id.
    """
    items = [value] if isinstance(value, dict) else _expect_list(value, path, None, "an array")
    for item in items:
        if isinstance(item, dict) and str(item.get("id")) == task_id:
            return item
    raise ClineTaskError(
        path, None, f"has no HistoryItem with id {task_id!r}; pass the matching taskHistory.json."
    )


def range_from_history_item(item: Mapping[str, Any], path: Path) -> ClineRange | None:
    """The deleted range of a ``HistoryItem`` (None when it has none).

    Raises:
        ClineTaskError: the range is not ``[start, end]``.
    """
    value = item.get("conversationHistoryDeletedRange")
    if value is None:
        return None
    position = f"HistoryItem {item.get('id')}"
    end = _range_end(value, path, position)
    ts = item.get("ts")
    return ClineRange(end, ts if is_int(ts) else None, path, position)


def _title(item: Mapping[str, Any] | None, messages: Sequence[Mapping[str, Any]]) -> str | None:
    text = item.get("task") if item else None
    if not isinstance(text, str) or not text.strip():
        first = normalize_message_dict(messages[0]).blocks[0]
        text = block_text(first) or ""
        text = text.replace("<task>", "").replace("</task>", "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:_TITLE_CHARS] if lines else None


def _model_id(
    item: Mapping[str, Any] | None, messages: Sequence[Mapping[str, Any]], task_metadata: Any
) -> str | None:
    candidates: list[Any] = [item.get("modelId") if item else None]
    for message in reversed(messages):
        info = message.get("modelInfo")
        candidates.append(info.get("modelId") if isinstance(info, dict) else None)
    usage = task_metadata.get("model_usage") if isinstance(task_metadata, dict) else None
    if isinstance(usage, list) and usage and isinstance(usage[-1], dict):
        candidates.append(usage[-1].get("model_id"))
    found = next((c for c in candidates if isinstance(c, str) and 0 < len(c) <= 200), None)
    return found


def _conversation_metadata(
    directory: Path, task_metadata: Any, item: Mapping[str, Any] | None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "source": "cline",
        "cline_task_id": directory.name,
        "cline_task_dir": str(directory.resolve()),
    }
    if isinstance(task_metadata, dict):
        metadata["cline_task_metadata"] = task_metadata
    if item is not None:
        metadata["cline_history_item"] = dict(item)
    return metadata
