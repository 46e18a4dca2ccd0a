"""Writing an :class:`~contextstore.interop.plan.ImportPlan` so that importing again is safe.

The conversation's id is the task's (or session's) own id. Its metadata remembers the
import (``metadata["import"]``): how many rows, a digest of all but the newest
:data:`TAIL_ROWS`, a fingerprint and ``ts`` for each of those, and the clock after them.
Importing the same file again then:

* writes nothing when the file holds nothing new (``unchanged``);
* adds only the new rows when the file grew (``updated``). Agents rewrite their newest
  records in place (Cline completes a streaming message, fills in a request's usage, drops
  its ``resume_task`` prompt when a task resumes; Gemini CLI re-appends a record with its
  tokens; Cline restores a recent checkpoint): imported rows from the first such change on
  are replaced by the file's, as long as the change lies within the newest
  :data:`TAIL_ROWS` rows. The rows replaced are archived under a rollback of their own
  (:meth:`~contextstore.interop.store_api.InteropStore.discard_imported_rows`), which the
  report names (``replaced_rollback``), so a restore can put them back;
* writes nothing either, but says so in a note, when the file is unchanged and a rollback
  in contextstore has removed messages it imported: "unchanged" alone would hide that
  the store and the file no longer agree;
* refuses, as a conflict that deletes nothing, a file that holds less than was imported and
  nothing newer (an older copy of the history: a backup, an earlier save, a legacy ``.json``
  session that Gemini CLI has continued in a ``.jsonl``): replacing with it would delete the
  newest imported rows, which no rewrite in place does;
* takes the files when they begin with what exporting the conversation now writes (an
  export put back over the files it came from, perhaps continued by the agent since): the
  rows written in contextstore since the import are archived and read again from the files;
* refuses with :class:`~contextstore.interop.errors.ImportConflictError` when an older row
  changed (Cline restored an older checkpoint and went another way, the file was replaced) or when
  the conversation was changed in contextstore since and the files do not hold it;
  ``replace=True`` starts it over.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from contextstore.core.errors import (
    ContextStoreError,
    ConversationNotFoundError,
    InvalidInputError,
)
from contextstore.core.planning import with_settings_kept
from contextstore.core.records import Conversation, RollbackReport
from contextstore.core.rows import MessageRow, TimelineRow
from contextstore.core.validate import MAX_TS
from contextstore.interop.errors import (
    ImportConflictError,
    ImportStateError,
    InteropError,
    UnsafeInputError,
)
from contextstore.interop.files import Note
from contextstore.interop.plan import ImportPlan, chain, fingerprint
from contextstore.interop.report import (
    CONFLICT,
    IMPORTED,
    REPLACED,
    SKIPPED,
    UNCHANGED,
    UPDATED,
    ImportReport,
    ItemReport,
)
from contextstore.interop.store_api import InteropStore

IMPORT_KEY: Final = "import"
"""Conversation metadata key holding the import's bookkeeping."""
TAIL_ROWS: Final = 256
"""How many of the newest imported rows a later import may find rewritten and replace."""


Progress = Callable[[str, int], None]
"""Called with a task's or file's path and the number of steps (each item is read, then
written): the CLI's progress bar."""
Exported = Callable[[ImportPlan], "ImportPlan | None"]
"""Plans what exporting the plan's conversation now would write, as importing those files
would read them (None: the export would not write the plan's kind of file)."""


def note_for(exc: InteropError) -> Note:
    """An error about one item, as the note a report keeps for it."""
    return Note(str(exc.path), exc.position, str(exc).split(": ", 1)[-1])


def run_import(
    store: InteropStore,
    source: str,
    items: Sequence[Path],
    plan: Callable[[Path], ImportPlan],
    *,
    single: bool,
    replace: bool,
    progress: Progress | None,
    exported: Exported | None = None,
    context_window: int | None = None,
) -> ImportReport:
    """Plan each item (reading its files) and write it, all items in one transaction.

    An item whose files hold nothing readable is ``skipped``, one that no longer continues
    its conversation a ``conflict``, each with a note; with ``single`` (one item named
    directly) their error is raised instead. An unsafe file raises for any item, and the
    transaction leaves nothing written. ``exported`` plans what exporting a conversation
    now would write, and ``context_window`` is the window the user gives every
    conversation written (see :func:`apply_plan`).

    Each plan is written before the next item is read, so that only one item's files and
    rows are held in memory at a time: the plans of a whole installation (hundreds of
    tasks, megabytes each) used to be held at once, so the import's memory grew with the
    number of tasks.
    """
    started = time.perf_counter()
    steps = 2 * len(items)
    reports: list[ItemReport] = []
    with store.transaction():
        for item in items:
            try:
                planned: ImportPlan | ItemReport = plan(item)
            except InteropError as exc:
                if single or isinstance(exc, UnsafeInputError):
                    raise
                planned = ItemReport(str(item), None, SKIPPED, skipped=(note_for(exc),))
            if progress is not None:
                progress(str(item), steps)
            report = (
                planned
                if isinstance(planned, ItemReport)
                else _apply(store, planned, replace, single, exported, context_window)
            )
            del planned  # the item's rows, before the next item is read
            reports.append(report)
            if progress is not None:
                progress(report.path, steps)
    return ImportReport(source, tuple(reports), time.perf_counter() - started)


def _apply(
    store: InteropStore,
    plan: ImportPlan,
    replace: bool,
    single: bool,
    exported: Exported | None,
    context_window: int | None,
) -> ItemReport:
    try:
        return apply_plan(
            store, plan, replace=replace, exported=exported, context_window=context_window
        )
    except ImportConflictError as exc:
        if single:
            raise
        return ItemReport(plan.path, plan.conversation_id, CONFLICT, skipped=(note_for(exc),))
    except InteropError:
        raise
    except InvalidInputError as exc:
        # What the plan let through and the store refused: the import stops (part of the
        # item may be written in the transaction), and the message names the file.
        raise InteropError(
            Path(plan.path),
            None,
            f"holds what the store refuses, so nothing was imported: {exc}",
        ) from exc


def import_state(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The bookkeeping an earlier import left in a conversation's metadata, if any."""
    state = metadata.get(IMPORT_KEY)
    return state if isinstance(state, dict) else None


def imported_until(conversation: Conversation, source: str, target: Path) -> int | None:
    """The ``ts`` of the newest row an import from ``source`` wrote into ``conversation``
    (its bookkeeping's ``last_ts``), or None when it was not imported from there: rows
    after it were written in contextstore. What an export (to ``target``) reads to tell
    the two apart.

    Raises:
        ImportStateError: the bookkeeping's ``source`` or ``last_ts`` is not in the form an
            import writes (edited by hand, a damaged row); the message says what to do.
    """
    state = import_state(conversation.metadata)
    named = state.get("source") if state is not None else None
    if state is None or (isinstance(named, str) and named != source):
        return None
    problem = _state_problem(state, only=("source", "last_ts"))
    if problem is not None:
        raise ImportStateError(
            target,
            None,
            _damaged_state(conversation.id, problem, f"which of its rows came from {source}")
            + " Nothing was written; import again with replace=True from the files it came "
            "from, to start the conversation over from them, then export it.",
        )
    last: int = state["last_ts"]
    return last


def _damaged_state(conversation_id: str, problem: str, unknown: str) -> str:
    """The first sentence of an error about damaged import bookkeeping: what is wrong,
    and what can no longer be told (``unknown``) because of it."""
    return (
        f"conversation {conversation_id!r} holds what an earlier import wrote in its "
        f"metadata ({IMPORT_KEY}) in a form no import writes ({problem}: edited since?), "
        f"so {unknown} cannot be told."
    )


def apply_plan(
    store: InteropStore,
    plan: ImportPlan,
    *,
    replace: bool = False,
    exported: Exported | None = None,
    context_window: int | None = None,
) -> ItemReport:
    """Write a plan (inside the caller's transaction); see the module docstring.

    A conversation written to since its import is in conflict with files that changed too,
    unless the files begin with what exporting the conversation now writes (``exported``
    plans that): the export was put back, perhaps continued by the agent, so the rows
    written here since the import are archived and taken again from the files, with what
    follows them.

    The conversation's context window is ``context_window`` when the user gives one (an
    existing conversation's is changed to it); otherwise the plan's (the window the
    agent's own rule gave the chat), for a new conversation or one whose window nobody
    set. A window is a setting, not a row: it changes nothing an import compares.

    Raises:
        ImportConflictError: the conversation holds a history the plan does not continue.
    """
    prints = [fingerprint(row) for row in plan.rows]
    try:
        existing: Conversation | None = store.get_conversation(plan.conversation_id)
    except ConversationNotFoundError:
        existing = None
    status = IMPORTED
    if existing is not None and replace:
        store.delete_conversation(plan.conversation_id)
        existing, status = None, REPLACED
    if existing is None:
        store.create_conversation(
            id=plan.conversation_id,
            created_ts=plan.created_ts,
            title=plan.title,
            model_id=plan.model_id,
            context_window=plan.context_window if context_window is None else context_window,
            metadata={**plan.metadata, IMPORT_KEY: _state(plan, prints)},
        )
        added = store.import_timeline(plan.conversation_id, plan.rows) if plan.rows else {}
        return _report(plan, status, added)
    report = _continue(store, plan, prints, existing, exported)
    window = context_window
    if window is None and existing.context_window is None:
        window = plan.context_window
    if window is not None and window != existing.context_window:
        store.set_conversation_model(plan.conversation_id, context_window=window)
    return report


def _continue(
    store: InteropStore,
    plan: ImportPlan,
    prints: list[str],
    existing: Conversation,
    exported: Exported | None,
) -> ItemReport:
    state = import_state(existing.metadata)
    if state is None or state.get("source") != plan.source:
        raise ImportConflictError(
            Path(plan.path),
            None,
            f"conversation {plan.conversation_id!r} already exists and was not imported from "
            f"{plan.source}; delete it first or import again with replace=True.",
        )
    problem = _state_problem(state)
    if problem is not None:
        raise ImportStateError(
            Path(plan.path),
            None,
            _damaged_state(plan.conversation_id, problem, "what is new in the file")
            + " Nothing was written; import again with replace=True to start the "
            "conversation over from the file.",
        )
    count = int(state["rows"])
    tail_prints = list(state["tail"])
    tail_ts = list(state["tail_ts"])
    head = count - len(tail_prints)
    if head > len(prints) or chain(prints[:head]) != state.get("head"):
        _refuse_a_cut_short_file(plan, count - min(head, len(prints)))
        raise _files_changed(plan, existing, count) or _rewritten(plan, count, len(prints))
    same = head
    while same < min(count, len(prints)) and prints[same] == tail_prints[same - head]:
        same += 1
    if same == count == len(prints):
        metadata = {**plan.metadata, IMPORT_KEY: state}
        if with_settings_kept(metadata, existing.metadata) != existing.metadata:
            store.set_conversation_metadata(plan.conversation_id, metadata)
        report = _report(plan, UNCHANGED, {})
        gone = _rolled_back(store, plan, state, existing)
        return (
            report if gone is None else dataclasses.replace(report, skipped=(*report.skipped, gone))
        )
    written_here = existing.last_ts != state.get("last_ts")
    from_export = written_here and _begins_with_export(plan, prints, exported)
    if written_here and not from_export:
        raise ImportConflictError(
            Path(plan.path),
            None,
            f"changed since it was imported, but conversation {plan.conversation_id!r} was "
            "also changed in contextstore since (a rollback or a restore, an append), so the "
            "file's new "
            "rows cannot continue the agent's timeline. Nothing was written; fork the "
            "conversation to keep your changes, then import again with replace=True.",
        )
    replaced: RollbackReport | None = None
    cutoff = existing.last_ts
    if same < count:
        _refuse_a_cut_short_file(plan, count - same)
        cutoff = int(tail_ts[same - head - 1]) if same > head else int(state["head_ts"])
        try:
            if not from_export:  # which holds every row the store has
                _refuse_an_older_copy(store, plan, same, count, cutoff, existing.last_ts)
        except ImportConflictError as exc:
            raise _files_changed(plan, existing, count) or exc from None
        replaced = store.discard_imported_rows(plan.conversation_id, after=cutoff)
    elif from_export:
        cutoff = int(state["last_ts"])
        replaced = store.discard_imported_rows(plan.conversation_id, after=cutoff)
    new_rows = _after(plan.rows[same:], cutoff)
    added = store.import_timeline(plan.conversation_id, new_rows) if new_rows else {}
    rows = [*plan.rows[:same], *new_rows]
    new_state = _state(dataclasses.replace(plan, rows=rows), prints)
    store.set_conversation_metadata(plan.conversation_id, {**plan.metadata, IMPORT_KEY: new_state})
    report = _report(plan, UPDATED, added)
    if replaced is None:
        return report
    removed = sum(n for table, n in replaced.removed.items() if table != "blocks")
    return dataclasses.replace(report, replaced=removed, replaced_rollback=replaced.rollback_id)


def _begins_with_export(plan: ImportPlan, prints: list[str], exported: Exported | None) -> bool:
    """Whether the files planned begin with the rows exporting the conversation now would
    write (so they hold every row written in contextstore since the import)."""
    if exported is None:
        return False
    try:
        export = exported(plan)
    except ContextStoreError:  # no export to compare with: the conflict stands
        return False
    if export is None:
        return False
    expected = [fingerprint(row) for row in export.rows]
    return prints[: len(expected)] == expected


def _rolled_back(
    store: InteropStore, plan: ImportPlan, state: dict[str, Any], existing: Conversation
) -> Note | None:
    """A note when the conversation lacks messages that an earlier import of this unchanged
    file wrote (a rollback in contextstore removed them since), or None.

    The file holds nothing new, so nothing is written; but "unchanged" alone would hide
    that the store and the file no longer agree."""
    last = int(state["last_ts"])
    if existing.last_ts == last:
        return None  # nothing happened in contextstore since the import
    imported = sum(1 for row in plan.rows if isinstance(row, MessageRow))
    kept = sum(1 for ts in store.message_timestamps(plan.conversation_id) if ts <= last)
    if kept >= imported:
        return None
    missing = imported - kept
    them = "them" if missing != 1 else "it"
    archived, purged = _rollbacks_since(store, plan.conversation_id, last)
    replace = "import again with replace=True to start the conversation over from the file"
    if purged and archived:
        done = (
            f"rollbacks in contextstore removed {them} after the import: "
            f"{_numbered(archived)} archived what it removed, {_numbered(purged)} kept no "
            "archive"
        )
        ways = f"restore {_numbered(archived)} to put back what it archived, or {replace}"
    elif purged:
        done = f"{_numbered(purged)} removed {them} after the import and kept no archive"
        ways = f"{replace}, the only way to take {them} again"
    else:
        done = f"a rollback in contextstore removed {them} after the import"
        ways = (
            f"restore {_numbered(archived)} to put the rows back, or {replace}"
            if archived
            else f"restore that rollback (the conversation's audit lists it), or {replace}"
        )
    return Note(
        plan.path,
        None,
        f"holds {missing} message{'s' if missing != 1 else ''} that conversation "
        f"{plan.conversation_id!r} no longer has: {done}. Nothing was written; {ways}.",
    )


def _rollbacks_since(
    store: InteropStore, conversation_id: str, last: int
) -> tuple[list[int], list[int]]:
    """The rollbacks, not restored, that removed messages an import wrote up to ``last``:
    those that archived what they removed, and those that purged it."""
    archived: list[int] = []
    purged: list[int] = []
    for event in store.audit(conversation_id).rollbacks:
        removed = event.removed.get("messages", 0) > 0
        if removed and event.cutoff_ts < last < event.ran_at and event.restored_ts is None:
            (purged if event.purged else archived).append(event.rollback_id)
    return archived, purged


def _numbered(rollback_ids: Sequence[int]) -> str:
    """``rollback 4``, ``rollbacks 4 and 7``."""
    if len(rollback_ids) == 1:
        return f"rollback {rollback_ids[0]}"
    return f"rollbacks {', '.join(map(str, rollback_ids[:-1]))} and {rollback_ids[-1]}"


def _state_problem(state: dict[str, Any], *, only: Sequence[str] | None = None) -> str | None:
    """What is wrong with an import's bookkeeping (see :func:`_state`), or None.

    ``only`` names the keys to check (those a reader uses), by default all of them.
    """

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TS

    tail, tail_ts = state.get("tail"), state.get("tail_ts")
    checks = {
        "source": isinstance(state.get("source"), str),
        "rows": whole(state.get("rows")),
        "head": isinstance(state.get("head"), str),
        "head_ts": whole(state.get("head_ts")),
        "tail": isinstance(tail, list) and all(isinstance(p, str) for p in tail),
        "tail_ts": isinstance(tail_ts, list) and all(whole(ts) for ts in tail_ts),
        "last_ts": whole(state.get("last_ts")),
    }
    wrong = [key for key, good in checks.items() if not good and (only is None or key in only)]
    if wrong:
        return f"{', '.join(wrong)} missing or of the wrong type"
    if only is not None:
        return None
    assert isinstance(tail, list) and isinstance(tail_ts, list)
    if len(tail) != len(tail_ts) or len(tail) > state["rows"]:
        return "tail and tail_ts do not match rows"
    return None


def _refuse_a_cut_short_file(plan: ImportPlan, missing: int) -> None:
    """Refuse to replace imported rows from a file that breaks off (an agent's write cut
    short by a crash, or still under way): its missing rows would be deleted for good.

    Raises:
        ImportConflictError: a note of the plan says a file was cut short.
    """
    cut = next((note for note in plan.notes if note.cut_short), None)
    if cut is not None:
        raise ImportConflictError(
            Path(plan.path),
            None,
            f"{cut.file} is cut short ({cut.reason}) and no longer holds {missing} of the "
            f"rows imported into conversation {plan.conversation_id!r}; they were kept and "
            "nothing was written. Import again once the agent has written the file whole, "
            "or with replace=True to take the file as it is.",
        )


def _refuse_an_older_copy(
    store: InteropStore, plan: ImportPlan, same: int, count: int, cutoff: int, last: int
) -> None:
    """Refuse to replace imported rows from the ``same``-th on with a file that holds less
    than was imported and nothing newer: an older copy of the history (a backup, an earlier
    save), or one the agent cut back (Gemini CLI's ``/rewind``) before writing anything new.
    Replacing would delete the rows it lacks, and nothing keeps them.

    A rewrite in place by the agent is let through: it ends later than the imported rows
    (Cline's new resume prompt, the records that follow a rewind), or as late with as many
    rows (a message completed, a request's usage filled in, a record's tokens added).

    Raises:
        ImportConflictError: the file ends before the imported rows, or as late with fewer.
    """
    newer = plan.rows[same:]
    end = plan.rows[-1].ts if plan.rows else plan.created_ts
    if newer and (end > last or (end == last and len(newer) >= count - same)):
        return
    stored = sum(1 for ts in store.message_timestamps(plan.conversation_id) if ts > cutoff)
    lost = stored - sum(isinstance(row, MessageRow) for row in newer)
    fewer = count - len(plan.rows)
    counts = [f"{fewer} fewer"] if fewer > 0 else []
    counts += [f"{lost} fewer messages"] if lost > 0 else []
    differs = f" ({', '.join(counts)})" if counts else ""
    raise ImportConflictError(
        Path(plan.path),
        None,
        f"holds less than was imported into conversation {plan.conversation_id!r} and "
        f"nothing newer: {len(plan.rows)} rows where {count} were imported{differs}, its "
        f"newest at ts {end} and the newest imported at ts {last}. It looks like an older "
        "copy of the history (a backup, an earlier save), or the agent cut its history back "
        "and has written nothing since; importing it would delete the rows it lacks, so they "
        "were kept and nothing was written. Import the newer file (or this one once the agent "
        "has gone on), or import again with replace=True to start the conversation over from "
        "this one.",
    )


def _files_changed(
    plan: ImportPlan, existing: Conversation, count: int
) -> ImportConflictError | None:
    """The conflict of a task folder that no longer holds the files it held when it was
    imported (one moved away, or one added since: its rows fall among the others), or
    None when the same files are there."""
    before = existing.metadata.get(plan.source)
    now = plan.metadata.get(plan.source)
    before_files = before.get("files") if isinstance(before, dict) else None
    now_files = now.get("files") if isinstance(now, dict) else None
    if not isinstance(before_files, list) or not isinstance(now_files, list):
        return None
    gone = [name for name in before_files if name not in now_files]
    new = [name for name in now_files if name not in before_files]
    if not gone and not new:
        return None
    changes = [f"{', '.join(gone)} no longer there"] if gone else []
    changes += [f"{', '.join(new)} there now"] if new else []
    return ImportConflictError(
        Path(plan.path),
        None,
        f"holds other files than when it was imported into conversation "
        f"{plan.conversation_id!r} ({' and '.join(changes)}), and its {len(plan.rows)} rows "
        f"no longer continue the {count} imported. Nothing was written; put the folder back "
        "as it was, or import again with replace=True to start the conversation over from "
        "the folder as it is.",
    )


def _rewritten(plan: ImportPlan, count: int, rows: int) -> ImportConflictError:
    fewer = (
        f"it holds {rows} rows where {count} were imported: an older copy of the history, or "
        if rows < count
        else f"{count} rows; "
    )
    return ImportConflictError(
        Path(plan.path),
        None,
        f"no longer starts with the rows imported into conversation {plan.conversation_id!r} "
        f"({fewer}an older one changed, e.g. by a checkpoint restore in the agent). "
        "Nothing was written; import again with replace=True to start the "
        "conversation over from the file.",
    )


def _after(rows: list[TimelineRow], cutoff: int) -> list[TimelineRow]:
    """``rows`` with their ``ts`` moved, where needed, to follow ``cutoff`` in order."""
    moved: list[TimelineRow] = []
    previous = cutoff
    for row in rows:
        ts = row.ts if row.ts > previous else previous + 1
        moved.append(row if ts == row.ts else dataclasses.replace(row, ts=ts))
        previous = ts
    return moved


def _state(plan: ImportPlan, prints: list[str]) -> dict[str, Any]:
    head = max(len(plan.rows) - TAIL_ROWS, 0)
    return {
        "source": plan.source,
        "path": plan.path,
        "rows": len(plan.rows),
        "head": chain(prints[:head]),
        "head_ts": plan.rows[head - 1].ts if head else plan.created_ts,
        "tail": prints[head:],
        "tail_ts": [row.ts for row in plan.rows[head:]],
        "last_ts": plan.rows[-1].ts if plan.rows else plan.created_ts,
    }


def _report(plan: ImportPlan, status: str, added: dict[str, int]) -> ItemReport:
    return ItemReport(
        path=plan.path,
        conversation_id=plan.conversation_id,
        status=status,
        added={k: v for k, v in added.items() if v},
        skipped=tuple(plan.notes),
    )
