"""Cline task folders as plain values: finding tasks, reading and checking their files.

Cline (the VS Code extension ``saoudrizwan.claude-dev``) keeps each task in
``<globalStorage>/tasks/<taskId>/``: ``api_conversation_history.json`` (the messages sent to
the model), ``ui_messages.json`` (everything the user saw: requests with their usage,
checkpoints, tool and command output; ``claude_messages.json`` in old versions),
``context_history.json`` (positional rewrites of blocks) and ``task_metadata.json`` (files in
context, models used, environments). The task's ``HistoryItem`` in
``<globalStorage>/state/taskHistory.json`` is the only durable home of its deleted range.

Reading recovers what a damaged file still holds (Cline itself cannot open a truncated
file, and silently resets a bad ``context_history.json``): every left-out part becomes a
:class:`~contextstore.interop.files.Note` naming the file, the position and the reason.
Nothing here touches a database.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.core.file_reads import ALL_PATHS, REPLACED_PATHS
from contextstore.core.overlays import UpdateKind
from contextstore.core.validate import MAX_INT32, MAX_TS
from contextstore.interop.cline_messages import EMPTY_CONTENT_KEY, with_empty_content
from contextstore.interop.errors import ClineTaskError
from contextstore.interop.files import (
    Folder,
    Note,
    json_kind,
    not_a_file,
    nul_note,
    without_nul,
)
from contextstore.interop.stand_in import (
    refused_stand_in,
)

API_HISTORY_FILE: Final = "api_conversation_history.json"
UI_MESSAGES_FILE: Final = "ui_messages.json"
LEGACY_UI_MESSAGES_FILE: Final = "claude_messages.json"
CONTEXT_HISTORY_FILE: Final = "context_history.json"
TASK_METADATA_FILE: Final = "task_metadata.json"
TASK_HISTORY_FILE: Final = "taskHistory.json"
FOCUS_CHAIN_PREFIX: Final = "focus_chain_taskid_"
"""Cline's focus chain (its task's to-do list, Markdown) is ``focus_chain_taskid_<id>.md``."""


def focus_chain_file(task_id: str) -> str:
    """The name of a task's focus chain file."""
    return f"{FOCUS_CHAIN_PREFIX}{task_id}.md"


TASK_FILES: Final = (
    API_HISTORY_FILE,
    UI_MESSAGES_FILE,
    LEGACY_UI_MESSAGES_FILE,
    CONTEXT_HISTORY_FILE,
    TASK_METADATA_FILE,
)

IMPORT_SOURCE: Final = "cline:context_history.json"
"""The ``source`` recorded on context updates imported from ``context_history.json``."""


def is_int(value: Any, maximum: int = MAX_TS) -> bool:
    """True for an int (not a bool) from 0 to ``maximum``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= maximum


def history_index(message: Mapping[str, Any]) -> int | None:
    """A UI message's ``conversationHistoryIndex`` (-1 before the first API message)."""
    value = message.get("conversationHistoryIndex")
    if isinstance(value, int) and not isinstance(value, bool) and -1 <= value <= MAX_INT32:
        return value
    return None


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


@dataclass(frozen=True)
class ClineUpdate:
    """One update of ``context_history.json``: new text for one block at a Cline ``ts``.

    ``order`` is its place in the file (entry, block entry, update), so an export writes
    the entries back in Cline's own order (a Map's insertion order).
    """

    message_idx: int
    block_idx: int
    edit_type: int
    ts: int
    text: str
    metadata: list[Any] = field(default_factory=list)
    order: tuple[int, int, int] = (0, 0, 0)

    @property
    def kind(self) -> str:
        """The :class:`UpdateKind` this update becomes in the store."""
        return kind_for_edit_type(self.edit_type, self.message_idx)

    def store_metadata(self) -> dict[str, Any]:
        """The metadata stored with the update: Cline's originals, its place in the file,
        and, for a file mention, the path lists the store's own de-duplication reads."""
        stored: dict[str, Any] = {
            "cline_ts": self.ts,
            "cline_edit_type": self.edit_type,
            "cline_metadata": copy.deepcopy(self.metadata),
            "cline_order": list(self.order),
        }
        if self.kind == UpdateKind.FILE_MENTION:
            stored[REPLACED_PATHS] = list(self.metadata[0])
            stored[ALL_PATHS] = list(self.metadata[1])
        return stored


@dataclass(frozen=True)
class ClineTask:
    """Everything read from one Cline task folder.

    Attributes:
        directory: the ``tasks/<taskId>`` folder.
        task_id: its name, Cline's task id.
        messages: the API history (each message valid for the store).
        ui_messages: the UI messages, as written.
        ui_file: the UI file's name (``ui_messages.json`` or the legacy name), if any.
        updates: every ``context_history.json`` update, in file order.
        history_item: the task's ``HistoryItem``, if one was found.
        task_metadata: ``task_metadata.json``'s value, if readable: an object as Cline
            writes it, or whatever other JSON value the file holds, kept as written.
        focus_chain: the focus chain file's name and text, if there is one.
        history_file: the ``taskHistory.json`` read for the ``HistoryItem``, if any.
        files: the task files present.
        notes: what was left out or repaired while reading.
        sizes: each message's size as the store measures it (``json_size``).
    """

    directory: Path
    task_id: str
    messages: list[dict[str, Any]]
    ui_messages: list[dict[str, Any]]
    ui_file: str | None
    updates: list[ClineUpdate]
    history_item: dict[str, Any] | None
    task_metadata: Any
    files: tuple[str, ...]
    notes: list[Note] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    focus_chain: tuple[str, str] | None = None
    history_file: Path | None = None


# -- finding tasks ------------------------------------------------------------------------


def is_task_dir(path: Path) -> bool:
    """True when ``path`` holds one of a Cline task's files."""
    return path.is_dir() and any((path / name).exists() for name in TASK_FILES)


def find_tasks(path: Path, folder: Folder) -> list[Path]:
    """The task folders under ``path``: the folder itself, every task of a storage folder
    (the one holding ``tasks/``), or every task folder directly in ``path`` (``tasks/``
    itself, or a folder of copied tasks), oldest task id first.

    Raises:
        ClineTaskError: ``path`` is neither.
        OutsideFolderError: a task folder is a link out of ``path``.
    """
    if is_task_dir(path):
        return [path]
    tasks_dir = path / "tasks"
    if path.is_dir() and tasks_dir.is_dir():
        return _task_dirs_in(tasks_dir, folder)
    if path.is_dir():
        found = _task_dirs_in(path, folder)
        if found:
            return found
    if path.name in TASK_FILES and path.is_file():
        raise ClineTaskError(
            path,
            None,
            f"is one of a Cline task's files; import the task folder that holds it "
            f"({path.parent}), which is read whole.",
        )
    raise ClineTaskError(
        path,
        None,
        "is neither a Cline task folder (tasks/<id>/ with api_conversation_history.json or "
        "ui_messages.json), a folder of task folders (tasks/), a Cline 4 session folder "
        "(sessions/<id>/ with <id>.messages.json) or a folder of them (sessions/), nor "
        "Cline's storage folder (holding tasks/ and state/, or sessions/); see "
        "'Bringing histories in and out' in the README for where Cline keeps them.",
    )


def _task_dirs_in(path: Path, folder: Folder) -> list[Path]:
    """The task folders directly in ``path`` (Cline's ``tasks/``, or a copy of some of its
    folders), oldest task id first."""
    found = []
    for child in sorted(path.iterdir(), key=_task_order):
        if is_task_dir(child):
            found.append(folder.check(child) if child.is_symlink() else child)
    return found


def _task_order(path: Path) -> tuple[int, int, str]:
    name = path.name
    return (0, int(name), name) if name.isascii() and name.isdigit() else (1, 0, name)


def history_file_for(task_dir: Path) -> Path | None:
    """The ``taskHistory.json`` that describes a task folder, when there is one: the
    storage folder's ``state/taskHistory.json``, else one exported beside the task files."""
    storage_file = task_dir.parent.parent / "state" / TASK_HISTORY_FILE
    if task_dir.parent.name == "tasks" and storage_file.is_file():
        return storage_file
    local = task_dir / TASK_HISTORY_FILE
    return local if local.is_file() else None


# -- reading ------------------------------------------------------------------------------


def read_task(
    task_dir: Path,
    folder: Folder,
    *,
    history_path: Path | None = None,
    history_folder: Folder | None = None,
) -> ClineTask:
    """Read a Cline task folder, recovering what damaged files still hold.

    Args:
        task_dir: the ``tasks/<taskId>`` folder.
        folder: the folder the import was given (no file may lead out of it).
        history_path: Cline's ``state/taskHistory.json`` (default: found beside the task).
        history_folder: the folder ``history_path`` is read from (default: ``folder``).

    Raises:
        ClineTaskError: the folder holds neither an API history nor UI messages that can
            be read.
        UnsafeInputError: a file is a link out of the folder, too large or nested too deep.
    """
    notes: list[Note] = []
    files = tuple(name for name in TASK_FILES if folder.is_file(task_dir / name))
    for name in TASK_FILES:
        path = task_dir / name
        if name not in (API_HISTORY_FILE, UI_MESSAGES_FILE, *files) and path.exists():
            notes.append(Note(str(path), None, f"{not_a_file(path)}; it was left out."))
    sizes: list[int] = []
    messages = _read_messages(task_dir / API_HISTORY_FILE, folder, notes, files, sizes)
    ui_file = _ui_file(files)
    ui_messages = _read_ui(task_dir / ui_file, folder, notes) if ui_file else []
    if not messages and not ui_messages:
        raise ClineTaskError(
            task_dir,
            None,
            f"has no message that can be read, in {API_HISTORY_FILE} or {UI_MESSAGES_FILE}; "
            "there is nothing to import." + (f" ({'; '.join(map(str, notes))})" if notes else ""),
        )
    if API_HISTORY_FILE not in files:
        notes.append(
            Note(
                str(task_dir / API_HISTORY_FILE),
                None,
                f"{not_a_file(task_dir / API_HISTORY_FILE)}: the task's UI messages, requests, "
                "checkpoints and ranges were imported, without the model's messages.",
            )
        )
    elif ui_file is None:
        notes.append(
            Note(
                str(task_dir / UI_MESSAGES_FILE),
                None,
                f"{not_a_file(task_dir / UI_MESSAGES_FILE)}: the model's messages were imported, "
                "without the task's UI messages, requests, checkpoints and ranges.",
            )
        )
    updates: list[ClineUpdate] = []
    if CONTEXT_HISTORY_FILE in files:
        raw = folder.read_json(task_dir / CONTEXT_HISTORY_FILE, notes)
        updates = parse_context_history(raw, task_dir / CONTEXT_HISTORY_FILE, notes)
    task_metadata = None
    if TASK_METADATA_FILE in files:
        path = task_dir / TASK_METADATA_FILE
        value = folder.read_json(path, notes, keep_depth=1)
        if value is not None:
            task_metadata = storable(value, path, None, notes)
    focus_chain = _read_focus_chain(task_dir, folder, notes)
    history = history_path or history_file_for(task_dir)
    item = (
        _read_history_item(history, history_folder or folder, task_dir.name, notes)
        if history
        else None
    )
    return ClineTask(
        directory=task_dir,
        task_id=task_dir.name,
        messages=messages,
        ui_messages=ui_messages,
        ui_file=ui_file,
        updates=updates,
        history_item=item,
        task_metadata=task_metadata,
        files=files,
        notes=notes,
        sizes=sizes,
        focus_chain=focus_chain,
        history_file=history,
    )


def _read_focus_chain(task_dir: Path, folder: Folder, notes: list[Note]) -> tuple[str, str] | None:
    """The task's focus chain file, named by the task id (the folder's name, else the one
    such file the folder holds), and its text; None when there is none."""
    named = task_dir / focus_chain_file(task_dir.name)
    found = [named] if folder.is_file(named) else sorted(task_dir.glob(f"{FOCUS_CHAIN_PREFIX}*.md"))
    if len(found) != 1 or not folder.is_file(found[0]):
        return None
    return found[0].name, storable(folder.read_text(found[0], notes), found[0], None, notes)


def storable(value: Any, path: Path, position: str | None, notes: list[Note]) -> Any:
    """``value`` without NUL characters, which only a message keeps (a note says how many
    were replaced)."""
    value, count = without_nul(value)
    if count:
        notes.append(nul_note(path, position, count))
    return value


def _ui_file(files: Sequence[str]) -> str | None:
    if UI_MESSAGES_FILE in files:
        return UI_MESSAGES_FILE
    return LEGACY_UI_MESSAGES_FILE if LEGACY_UI_MESSAGES_FILE in files else None


def _read_messages(
    path: Path, folder: Folder, notes: list[Note], files: Sequence[str], sizes: list[int]
) -> list[dict[str, Any]]:
    """The API history, every message in its place: one with empty content is kept by
    :func:`with_empty_content`, one the store refuses by :func:`refused_stand_in` (both
    noted); ``sizes`` gets each kept message's size as the store measures it."""
    if API_HISTORY_FILE not in files:
        return []
    value = folder.read_json(path, notes)
    if value is None:
        return []
    if not isinstance(value, list):
        notes.append(
            Note(
                str(path),
                None,
                f"holds {json_kind(value)}, not an array of messages; it was left out.",
            )
        )
        return []
    kept: list[dict[str, Any]] = []
    replaced, first = 0, None
    for idx, message in enumerate(value):
        message, count = _fields_without_nul(message)
        if count:
            first = first or f"message {idx}"
            replaced += count
        original = message
        emptied = with_empty_content(message)
        if emptied is not message:
            notes.append(
                Note(
                    str(path),
                    f"message {idx}",
                    "has empty content ([]), which the store cannot hold and no provider "
                    "takes: it was kept with an empty text as its content, which renders "
                    "leave out, so that the messages after it keep their places; export "
                    "cline writes [] back.",
                )
            )
            message = emptied
        try:
            sizes.append(normalize_message_dict(message).json_size())
        except InvalidInputError as exc:
            notes.append(
                Note(
                    str(path),
                    f"message {idx}",
                    f"{exc} The store cannot hold this message: it was kept in its place "
                    "with an empty text as its content, which renders leave out, so that "
                    f"the {len(value) - idx - 1} after it keep their places; "
                    "export cline writes the original back.",
                )
            )
            previous = kept[-1]["role"] if kept else None
            message = refused_stand_in(original, str(exc), previous, markers=(EMPTY_CONTENT_KEY,))
            sizes.append(normalize_message_dict(message).json_size())
        kept.append(message)
    if replaced:
        notes.append(nul_note(path, first, replaced))
    return kept


def _fields_without_nul(message: Any) -> tuple[Any, int]:
    """A message with NUL characters replaced in every field but its content (which keeps
    them: the store holds a message's content exactly, its other fields as JSON), in
    their order, and how many were replaced."""
    if not isinstance(message, dict):
        return message, 0
    fields, count = without_nul(
        [[key, value] for key, value in message.items() if key != "content"]
    )
    if not count:
        return message, 0
    pairs = iter(fields)
    rebuilt = {}
    for key in message:
        fixed_key, value = ("content", message[key]) if key == "content" else next(pairs)
        rebuilt[fixed_key] = value
    return rebuilt, count


def _read_ui(path: Path, folder: Folder, notes: list[Note]) -> list[dict[str, Any]]:
    value = folder.read_json(path, notes)
    if value is None:
        return []
    if not isinstance(value, list):
        notes.append(Note(str(path), None, "is not a list of UI messages; it was left out."))
        return []
    kept = []
    replaced, first = 0, None
    for position, message in enumerate(value):
        if not isinstance(message, dict):
            notes.append(Note(str(path), f"message {position}", "is not a JSON object; left out."))
            continue
        message, count = without_nul(message)
        if count and first is None:
            first = f"message {position}"
        replaced += count
        kept.append(message)
    if replaced:
        notes.append(nul_note(path, first, replaced))
    return kept


def _read_history_item(
    path: Path, folder: Folder, task_id: str, notes: list[Note]
) -> dict[str, Any] | None:
    value = folder.read_json(path, notes)
    items = [value] if isinstance(value, dict) else value if isinstance(value, list) else []
    for item in items:
        if isinstance(item, dict) and str(item.get("id")) == task_id:
            return dict(storable(item, path, f"HistoryItem {task_id}", notes))
    return None


def parse_context_history(value: Any, path: Path, notes: list[Note]) -> list[ClineUpdate]:
    """Parse ``context_history.json`` (Cline's Map as an array of pairs) into updates.

    Every well-formed update of every list is returned, in file order; a malformed entry,
    block entry or update is left out with a note naming it.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        notes.append(Note(str(path), None, "is not a JSON array; it was left out."))
        return []
    updates: list[ClineUpdate] = []
    for entry_no, entry in enumerate(value):
        where = f"entry {entry_no}"
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and is_int(entry[0], MAX_INT32)
            and isinstance(entry[1], list)
            and len(entry[1]) == 2
            and is_int(entry[1][0], MAX_INT32)
            and isinstance(entry[1][1], list)
        ):
            notes.append(
                Note(str(path), where, "is not [messageIndex, [editType, blocks]]; left out.")
            )
            continue
        message_idx, (edit_type, block_entries) = entry
        for block_no, block_entry in enumerate(block_entries):
            if not (
                isinstance(block_entry, list)
                and len(block_entry) == 2
                and is_int(block_entry[0], MAX_INT32)
                and isinstance(block_entry[1], list)
            ):
                notes.append(
                    Note(
                        str(path),
                        f"{where} (message {message_idx}) block entry {block_no}",
                        "is not [blockIndex, [update, ...]]; left out.",
                    )
                )
                continue
            block_idx, raw_updates = block_entry
            for update_no, raw in enumerate(raw_updates):
                position = f"{where} (message {message_idx}) block {block_idx} update {update_no}"
                update = _parse_update(
                    raw, message_idx, block_idx, edit_type, (entry_no, block_no, update_no)
                )
                if isinstance(update, str):
                    notes.append(Note(str(path), position, update))
                else:
                    metadata = storable(update.metadata, path, position, notes)
                    updates.append(dataclasses.replace(update, metadata=metadata))
    return updates


def _parse_update(
    raw: Any, message_idx: int, block_idx: int, edit_type: int, order: tuple[int, int, int]
) -> ClineUpdate | str:
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
        return 'is not [timestampMs, "text", [newText], metadata]; left out.'
    update = ClineUpdate(message_idx, block_idx, edit_type, raw[0], raw[2][0], raw[3], order)
    if update.kind == UpdateKind.FILE_MENTION and not is_mention_metadata(raw[3]):
        return "is a file-mention update without its metadata [[replaced...], [all...]]; left out."
    return update


def is_mention_metadata(metadata: list[Any]) -> bool:
    """True for Cline's file-mention metadata: two lists of paths."""
    return len(metadata) == 2 and all(
        isinstance(paths, list) and all(isinstance(p, str) for p in paths) for paths in metadata
    )
