"""Moving Cline tasks into and out of a store, through the public ``ContextStore`` API only.

:func:`import_cline` reads and writes one task after another, all of them in one
transaction: an import lands whole or not at all (a link out of the folder, a file over the
size limit or nested too deep stops everything, and nothing is written).
:func:`export_cline` writes a conversation back as a task folder.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.os_errors import check_regular_targets, os_errors
from contextstore.core.store_files import check_not_store_files
from contextstore.core.validate import check_flags, check_id
from contextstore.interop.arguments import (
    check_import_options,
    optional_path_argument,
    path_argument,
)
from contextstore.interop.cline import (
    API_HISTORY_FILE,
    CONTEXT_HISTORY_FILE,
    FOCUS_CHAIN_PREFIX,
    TASK_HISTORY_FILE,
    TASK_METADATA_FILE,
    UI_MESSAGES_FILE,
    find_tasks,
    focus_chain_file,
    is_task_dir,
    read_task,
)
from contextstore.interop.cline_messages import as_written
from contextstore.interop.cline_plan import plan_task
from contextstore.interop.cline_session import (
    SESSIONS_DIR,
    is_session_dir,
    read_session,
    read_subagent,
    session_dirs_in,
    session_file_folder,
    subagent_transcripts,
)
from contextstore.interop.cline_session_plan import plan_session
from contextstore.interop.cline_ui_rows import ORIGIN
from contextstore.interop.cline_write import (
    TimedEntry,
    check_targets,
    checkpoint_message,
    context_history_value,
    deleted_api_reqs,
    history_item,
    request_message,
    text_message,
    upsert_history_item,
    with_positions,
)
from contextstore.interop.errors import ClineSessionError, ClineTaskError, ImportStateError
from contextstore.interop.files import MAX_FILE_BYTES, Folder, Note
from contextstore.interop.plan import ImportPlan
from contextstore.interop.report import ExportReport, ImportReport
from contextstore.interop.store_api import InteropStore, in_one_snapshot
from contextstore.interop.sync import Progress, imported_until, run_import
from contextstore.interop.writing import json_text, utf8_files, write_bytes_atomic

EMPTY_TASK_METADATA: dict[str, Any] = {
    "files_in_context": [],
    "model_usage": [],
    "environment_history": [],
}


def import_cline(
    store: InteropStore,
    path: str | os.PathLike[str],
    *,
    history_path: str | os.PathLike[str] | None = None,
    replace: bool = False,
    max_file_bytes: int = MAX_FILE_BYTES,
    progress: Progress | None = None,
    context_window: int | None = None,
) -> ImportReport:
    """Import a Cline task or session folder, or every task and session of Cline's storage.

    Each task becomes the conversation whose id is the task id; each Cline 4 session
    (``sessions/<sessionId>/``) the conversation ``cline-session-<sessionId>``, and each
    of its subagents' transcripts one of its own (see the README section "Bringing
    histories in and out" for what goes where). Importing again
    is idempotent: an unchanged task or session is skipped, one that grew gets only its
    new rows.

    Args:
        store: an open :class:`contextstore.ContextStore`.
        path: ``tasks/<taskId>/``, ``sessions/<sessionId>/``, a folder of either
            (``tasks/``, ``sessions/``), or the folder holding them (``~/.cline/data``,
            VS Code's storage folder).
        history_path: Cline's ``state/taskHistory.json`` (default: found beside the tasks).
        replace: start conversations that no longer match their files over from them.
        max_file_bytes: the largest file read (default :data:`MAX_FILE_BYTES`).
        progress: called after each task or session.
        context_window: the window, in tokens, of the model the tasks ran on, set on
            every conversation this import writes, those imported before included.
            Without it a task gets the window Cline stated to the model in its
            environment details, if it did (:mod:`~contextstore.interop.cline_window`),
            else none (the 128,000 default applies).

    Raises:
        InvalidInputError: ``path`` or ``history_path`` is no path, ``replace`` no flag,
            ``max_file_bytes`` no positive integer, ``progress`` nothing to call,
            ``context_window`` no positive integer.
        ClineTaskError: ``path`` holds no task or session, or a single one holds nothing
            readable (:class:`ClineSessionError` for a session, also when it is of a
            version this contextstore does not read).
        UnsafeInputError: a link leads out of ``path``, or a file is too large or too deep.
        ImportConflictError: a single task or session no longer matches its conversation.
    """
    root = path_argument("path", path)
    history = optional_path_argument("history_path", history_path)
    check_import_options(
        replace=replace,
        max_file_bytes=max_file_bytes,
        progress=progress,
        context_window=context_window,
    )
    folder, items = cline_tasks(root, max_file_bytes=max_file_bytes)
    history_folder = Folder(history.parent, max_file_bytes=max_file_bytes) if history else folder

    def plan(item: Path) -> ImportPlan:
        if item.is_file():
            subagent = read_subagent(item, folder)
            return plan_session(subagent, max_message_bytes=store.max_message_bytes)
        if is_session_dir(item):
            session = read_session(item, folder)
            return plan_session(session, max_message_bytes=store.max_message_bytes)
        task = read_task(item, folder, history_path=history, history_folder=history_folder)
        return plan_task(task, max_message_bytes=store.max_message_bytes)

    def exported(imported: ImportPlan) -> ImportPlan | None:
        return _plan_of_export(store, imported, max_file_bytes)

    # one task or session named directly (with its subagents' transcripts)
    single = items[0] == root and all(item.parent == root for item in items[1:])
    return run_import(
        store,
        ORIGIN,
        items,
        plan,
        single=single,
        replace=replace,
        progress=progress,
        exported=exported,
        context_window=context_window,
    )


def _plan_of_export(
    store: InteropStore, imported: ImportPlan, max_file_bytes: int
) -> ImportPlan | None:
    """What importing the task folder :func:`export_cline` writes for the conversation now
    would read (the export goes to a scratch folder under the task's own name), or None
    for a Cline 4 session, which the export does not write."""
    name = Path(imported.path).name
    if imported.conversation_id != name:
        return None
    with tempfile.TemporaryDirectory(prefix="contextstore-export-") as scratch:
        base = Path(scratch)
        task_dir = base / "tasks" / name
        history = base / TASK_HISTORY_FILE
        export_cline(store, imported.conversation_id, task_dir, history_path=history)
        folder = Folder(base, max_file_bytes=max_file_bytes)
        task = read_task(task_dir, folder, history_path=history, history_folder=folder)
        return plan_task(task, max_message_bytes=store.max_message_bytes)


def cline_tasks(
    path: str | os.PathLike[str], *, max_file_bytes: int = MAX_FILE_BYTES
) -> tuple[Folder, list[Path]]:
    """The task and session folders :func:`import_cline` would import from ``path``
    (tasks first, oldest first; then sessions, each followed by its subagents'
    transcripts), and the folder no file may lead out of
    (the storage folder when ``path`` is one of its tasks or its ``tasks/`` folder).

    Raises:
        ClineTaskError: ``path`` is no task or session folder and holds none, or is one
            of their files (the error names the folder to import instead).
        OutsideFolderError: a task or session folder is a link out of ``path``.
    """
    root = Path(path)
    if root.parent.name == "tasks" and is_task_dir(root):
        base = root.parent.parent
    elif root.name == "tasks" and (root.parent / "state").is_dir():
        base = root.parent
    else:
        base = root
    folder = Folder(base, max_file_bytes=max_file_bytes)
    if is_session_dir(root):
        return folder, [root, *subagent_transcripts(root, folder)]
    owner = session_file_folder(root)
    if owner is not None:
        raise ClineSessionError(
            root,
            None,
            f"is one of a Cline session's files; import the session folder that holds it "
            f"({owner}), which is read whole.",
        )
    sessions = [
        item
        for found in session_dirs_in(root / SESSIONS_DIR, folder) or session_dirs_in(root, folder)
        for item in (found, *subagent_transcripts(found, folder))
    ]
    try:
        tasks = find_tasks(root, folder)
    except ClineTaskError:
        if not sessions:
            raise
        tasks = []
    if not tasks and not sessions:
        raise ClineTaskError(
            root,
            None,
            "holds no task folders under tasks/ and no session folders under sessions/; "
            "nothing to import.",
        )
    return folder, tasks + sessions


@in_one_snapshot
def export_cline(
    store: InteropStore,
    conversation_id: str,
    out_dir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    history_path: str | os.PathLike[str] | None = None,
) -> ExportReport:
    """Write a conversation as a Cline task folder.

    Writes ``api_conversation_history.json``, ``ui_messages.json``,
    ``context_history.json`` and ``task_metadata.json``, and the task's ``HistoryItem``:
    into ``history_path``, else into ``state/taskHistory.json`` when ``out_dir`` is a
    ``tasks/<id>`` folder of Cline's storage, else into ``out_dir/taskHistory.json``. For
    an imported task that did not change, every file is JSON-equal to what was imported;
    after a rollback, the files are what Cline's own checkpoint restore leaves.

    The conversation is read as of one moment (:meth:`~contextstore.ContextStore.snapshot`):
    an agent appending meanwhile is in none of the files or in all of them.

    Raises:
        ClineTaskError: a target file exists and ``overwrite`` is False (nothing written).
        InvalidInputError: a target file is the store's database or a file beside it;
            ``out_dir`` or ``history_path`` is no path, or ``overwrite`` no flag; the
            conversation has no messages (an empty task folder no importer can open).
        ConversationNotFoundError: no conversation has this id.
        ImportStateError: the conversation's import bookkeeping was edited into a form no
            import writes (nothing written).
    """
    check_id(conversation_id)
    target = path_argument("out_dir", out_dir)
    optional_path_argument("history_path", history_path)
    check_flags(overwrite=overwrite)
    conversation = store.get_conversation(conversation_id)
    cline = conversation.metadata.get("cline")
    cline = cline if isinstance(cline, dict) else {}
    until = imported_until(conversation, ORIGIN, target)
    imported = until is not None
    present = _imported_files(conversation_id, cline, target) if imported else set()
    messages = [as_written(message) for message in store.messages(conversation_id)]
    notes: list[Note] = []
    ui = _ui_messages(store, conversation_id, until)
    if not messages and not ui:
        raise InvalidInputError(
            f"conversation {conversation_id} has no messages: a Cline task holds at least its "
            "first one, and neither Cline nor import cline can open an empty task folder, so "
            "nothing was written; export it once it has a message (or export a moment of it "
            "that had one)."
        )
    updates = [u for u in store.context_updates(conversation_id) if _exportable(u, notes)]
    files: dict[str, Any] = {}
    if messages or API_HISTORY_FILE in present or not imported:
        files[API_HISTORY_FILE] = messages
    files[UI_MESSAGES_FILE] = ui
    if updates or CONTEXT_HISTORY_FILE in present:
        files[CONTEXT_HISTORY_FILE] = context_history_value(updates)
    task_metadata = cline.get("task_metadata")
    if "task_metadata" in cline and (imported or isinstance(task_metadata, dict)):
        files[TASK_METADATA_FILE] = task_metadata  # an imported one as read, object or not
    elif not imported:
        files[TASK_METADATA_FILE] = EMPTY_TASK_METADATA
    changed = conversation.last_ts != until
    stored_item = cline.get("history_item")
    item = history_item(
        stored_item if isinstance(stored_item, dict) else None,
        str(cline.get("task_id") or target.name),
        ui,
        messages,
        store.deleted_range(conversation_id),
        changed=changed,
    )
    if conversation.parent_id is not None and item.get("id") != target.name:
        # A fork holds its parent's HistoryItem: under the parent's id it would replace the
        # parent's entry in taskHistory.json. Cline finds a task by that id, its folder's name.
        # Nor is the parent's ulid (Cline's key for a task's telemetry) the fork's: without
        # one, Cline makes a new one when the task is opened.
        item["id"] = target.name
        item.pop("ulid", None)
    history_file = _history_file(target, history_path)
    texts = _focus_chain(cline, target) if imported else {}
    paths = [target / name for name in [*files, *texts]]
    check_not_store_files([*paths, history_file], store.path)
    check_targets(
        [*paths, *([history_file] if history_file.parent == target else [])], overwrite=overwrite
    )
    check_regular_targets([history_file])
    history = upsert_history_item(history_file, item)  # read, and refused, before any write
    written = {
        **{
            target / name: json_text(value, indent=2 if name == TASK_METADATA_FILE else None)
            for name, value in files.items()
        },
        **{target / name: text for name, text in texts.items()},
        history_file: json_text(history),
    }
    encoded = utf8_files(written, name_holder=target)  # refused before any write
    with os_errors("write the Cline task files", target):
        # The history file's folder too, so that a missing one fails before any file is
        # written (it left the task files behind, under an error naming a temporary file).
        for folder in (target, history_file.parent):
            folder.mkdir(parents=True, exist_ok=True)
    for path, data in encoded.items():
        with os_errors("write the Cline task files", path):
            write_bytes_atomic(path, data)
    counts = {
        "messages": len(messages),
        "ui_messages": len(ui),
        "context_updates": len(updates),
    }
    return ExportReport(conversation_id, (*paths, history_file), tuple(notes), counts)


def _imported_files(conversation_id: str, cline: dict[str, Any], target: Path) -> set[str]:
    """The task files the import read (``$.cline.files``), which the export writes again
    even when empty.

    Raises:
        ImportStateError: the list is not one of file names (edited by hand, a damaged row).
    """
    files = cline.get("files", [])
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        return set(files)
    raise ImportStateError(
        target,
        None,
        f"conversation {conversation_id!r} holds what an earlier import wrote in its metadata "
        "(cline.files, the task files it read) in a form no import writes (not a list of "
        "file names: edited since?), so which files to write cannot be told. Nothing was "
        "written; import again with replace=True from the task folder it came from, to "
        "start the conversation over from it, then export it.",
    )


def _focus_chain(cline: dict[str, Any], target: Path) -> dict[str, str]:
    """The imported focus chain file to write into ``target``: under its own name in a
    folder named as the imported one, else named by ``target``'s name (the task id Cline
    reads it by)."""
    focus = cline.get("focus_chain")
    if not isinstance(focus, dict) or not isinstance(focus.get("text"), str):
        return {}
    stored = focus.get("file")
    own_name = (
        isinstance(stored, str)
        and Path(stored).name == stored  # a name, never a path (metadata can be edited)
        and stored.startswith(FOCUS_CHAIN_PREFIX)
        and target.name == cline.get("task_id")
    )
    name = stored if own_name and isinstance(stored, str) else focus_chain_file(target.name)
    return {name: focus["text"]}


def _history_file(target: Path, history_path: str | os.PathLike[str] | None) -> Path:
    if history_path is not None:
        return Path(history_path)
    state_dir = target.parent.parent / "state"
    if target.parent.name == "tasks" and state_dir.is_dir():
        return state_dir / TASK_HISTORY_FILE
    return target / TASK_HISTORY_FILE


def _exportable(row: dict[str, Any], notes: list[Note]) -> bool:
    if row.get("mode", "text") != "text":
        notes.append(
            Note(
                CONTEXT_HISTORY_FILE,
                f"update {row['id']} (message {row['message_idx']} block {row['block_idx']})",
                f"replaces a whole block (mode {row['mode']!r}), which Cline's format cannot "
                "hold; left out.",
            )
        )
        return False
    return True


def _ui_messages(
    store: InteropStore, conversation_id: str, until: int | None
) -> list[dict[str, Any]]:
    """The UI messages: imported ones as read, generated ones for rows written here, and
    one ``deleted_api_reqs`` per rollback that removed UI messages, all in ``ts`` order."""
    entries: list[TimedEntry] = [
        (r.ts, r.data) for r in store.source_records(conversation_id, origin=ORIGIN)
    ]
    after = -1 if until is None else until
    stored = store.messages(conversation_id)
    message_ts = store.message_timestamps(conversation_id)
    generated: list[TimedEntry] = []
    for idx, (message, ts) in enumerate(zip(stored, message_ts, strict=True)):
        entry = text_message(message, ts, first=idx == 0) if ts > after else None
        if entry is not None:
            generated.append((ts, entry))
    generated += [
        (r.ts, request_message(r)) for r in store.requests(conversation_id) if r.ts > after
    ]
    generated += [
        (c.ts, checkpoint_message(c)) for c in store.checkpoints(conversation_id) if c.ts > after
    ]
    for removed in store.removed_source_records(conversation_id):
        model_info = next(
            (
                d.get("modelInfo")
                for t, d in reversed(entries)
                if t <= removed.cutoff_ts and d.get("modelInfo") is not None
            ),
            None,
        )
        kept = sum(1 for t in message_ts if t <= removed.cutoff_ts)
        current = store.deleted_range(conversation_id, as_of=removed.cutoff_ts)
        generated.append((removed.ran_at, deleted_api_reqs(removed, kept - 1, current, model_info)))
    ranges = [
        (ts, (store.deleted_range(conversation_id, as_of=ts) or (2, None))[1])
        for ts in sorted({t for t, _ in generated})
    ]
    positioned = with_positions(generated, message_ts, ranges)
    return [entry for _, entry in sorted([*entries, *positioned], key=lambda e: e[0])]
