"""Cline tasks beyond what the real files show: overlays, HistoryItem ranges, damaged and
unsafe files, growth, conflicts, storage folders, and exports of conversations made here.

``data/tasks/1732000000000`` is a hand-written task with every file (its README tells the
story); :mod:`tests.interop.cline_factory` generates tasks the way Cline 3.5x writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, InvalidInputError, UpdateKind
from contextstore.core.notices import TRUNCATION_NOTICE
from contextstore.interop import (
    ClineTaskError,
    FileTooLargeError,
    ImportConflictError,
    NestingTooDeepError,
    OutsideFolderError,
    export_cline,
    import_cline,
)
from contextstore.interop.cline import ClineEditType, edit_type_for_kind, kind_for_edit_type
from tests.interop.cline_factory import NOTE, dedupe_history, story, write_storage
from tests.interop.real import archived_rows, history_counts

DATA = Path(__file__).parent / "data"
TASK_ID = "1732000000000"
TASK = DATA / "tasks" / TASK_ID


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, separators=(",", ":")), encoding="utf-8")


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    """A writable copy of the hand-written fixture, laid out as Cline's globalStorage."""
    root = tmp_path / "globalStorage"
    shutil.copytree(DATA / "tasks", root / "tasks")
    shutil.copytree(DATA / "state", root / "state")
    return root


# -- the hand-written task -----------------------------------------------------------------


def test_import_renders_what_cline_shows(store: ContextStore, storage: Path) -> None:
    report = import_cline(store, storage / "tasks" / TASK_ID)
    (item,) = report.items
    assert item.conversation_id == TASK_ID and item.status == "imported"
    assert item.added == {
        "messages": 17,
        "source_records": 21,
        "api_requests": 9,
        "checkpoints": 2,
        "deleted_ranges": 1,
        "context_updates": 7,
    }
    assert item.skipped == ()
    assert store.deleted_range(TASK_ID) == (2, 7)
    view = store.render(TASK_ID)
    assert len(view) == 2 + (17 - 8)
    assert view[1]["content"][0]["text"] == TRUNCATION_NOTICE
    conversation = store.get_conversation(TASK_ID)
    assert conversation.title == (
        "The CSV export writes the wrong header. Fix src/report.py so tests/test_report.py passes."
    )
    assert conversation.metadata["cline"]["task_metadata"] == _load(TASK / "task_metadata.json")
    assert conversation.metadata["cline"]["history_item"]["id"] == TASK_ID
    store.check(TASK_ID)


def test_without_ui_messages_the_messages_own_ts_are_the_row_ts(
    memory_store: ContextStore, storage: Path
) -> None:
    task = storage / "tasks" / TASK_ID
    (task / "ui_messages.json").unlink()
    cid = import_cline(memory_store, task).conversation_id
    api = _load(TASK / "api_conversation_history.json")
    assert memory_store.message_timestamps(cid) == [m["ts"] for m in api]
    assert memory_store.messages(cid) == api


def test_with_ui_messages_the_index_places_messages_and_their_ts_stays_a_field(
    memory_store: ContextStore,
) -> None:
    """UI message 1 (a checkpoint) has conversationHistoryIndex -1: Cline's restore to it
    keeps message 0, so message 0 comes first although its own ts is later than UI 0's."""
    cid = import_cline(memory_store, TASK).conversation_id
    records = memory_store.source_records(cid)
    stamps = memory_store.message_timestamps(cid)
    assert stamps[0] < records[0].ts
    assert memory_store.messages(cid, as_of=memory_store.checkpoints(cid)[0].ts) == [
        _load(TASK / "api_conversation_history.json")[0]
    ]
    assert memory_store.messages(cid)[0]["ts"] == 1732000000100


def test_overlay_updates_are_kept_where_clines_restore_would_keep_them(
    memory_store: ContextStore,
) -> None:
    """Cline's truncateContextHistory(T) keeps the updates stamped <= T: so does as_of."""
    cid = import_cline(memory_store, TASK).conversation_id
    rows = memory_store.context_updates(cid)
    assert sorted((r["message_idx"], r["block_idx"], r["kind"]) for r in rows) == sorted(
        [
            (4, 1, UpdateKind.READ_FILE),
            (8, 0, UpdateKind.FILE_MENTION),
            (8, 0, UpdateKind.FILE_MENTION),
            (2, 0, UpdateKind.READ_FILE),
            (6, 0, UpdateKind.ALTER_FILE),
            (1, 0, UpdateKind.TRUNCATION_NOTICE),
            (10, 0, UpdateKind.READ_FILE),
        ]
    )
    for record in memory_store.source_records(cid):
        kept = memory_store.context_updates(cid, as_of=record.ts)
        expected = [r for r in rows if r["metadata"]["cline_ts"] <= record.data["ts"]]
        assert kept == expected
    for row in rows:
        assert len(memory_store.messages(cid, as_of=row["ts"])) > row["message_idx"]
    second = [r for r in rows if r["kind"] == UpdateKind.FILE_MENTION][1]["metadata"]
    assert second["replaced_paths"] == ["tests/test_report.py", "src/report.py"]


def test_the_history_item_range_closes_the_timeline(
    memory_store: ContextStore, storage: Path
) -> None:
    history = storage / "state" / "taskHistory.json"
    items = _load(history)
    items[1]["conversationHistoryDeletedRange"] = [2, 9]
    _dump(history, items)
    cid = import_cline(memory_store, storage / "tasks" / TASK_ID).conversation_id
    last_ui = memory_store.source_records(cid)[-1]
    assert memory_store.deleted_range(cid, as_of=last_ui.ts) == (2, 7)
    assert memory_store.deleted_range(cid) == (2, 9)
    assert memory_store.get_conversation(cid).metadata["cline"]["history_item"] == items[1]


def test_a_history_item_range_that_would_shrink_is_left_out(
    memory_store: ContextStore, storage: Path
) -> None:
    history = storage / "state" / "taskHistory.json"
    items = _load(history)
    items[1]["conversationHistoryDeletedRange"] = [2, 5]
    _dump(history, items)
    report = import_cline(memory_store, storage / "tasks" / TASK_ID)
    assert memory_store.deleted_range(TASK_ID) == (2, 7)
    (note,) = report.items[0].skipped
    assert note.file.endswith("taskHistory.json") and note.position == f"HistoryItem {TASK_ID}"
    assert "would shrink" in note.reason


def test_the_legacy_ui_file_name_is_read(memory_store: ContextStore, storage: Path) -> None:
    task = storage / "tasks" / TASK_ID
    (task / "ui_messages.json").rename(task / "claude_messages.json")
    report = import_cline(memory_store, task)
    assert report.items[0].added["api_requests"] == 9
    assert memory_store.deleted_range(TASK_ID) == (2, 7)


def test_a_cancelled_request_keeps_its_reason_and_failure_message_both_ways(
    memory_store: ContextStore, storage: Path, tmp_path: Path
) -> None:
    task = storage / "tasks" / TASK_ID
    ui = _load(task / "ui_messages.json")
    info = {
        "request": "x",
        "tokensIn": 900,
        "cancelReason": "streaming_failed",
        "streamingFailedMessage": "connection reset",
    }
    ui[-1]["text"] = json.dumps(info)
    _dump(task / "ui_messages.json", ui)
    cid = import_cline(memory_store, task).conversation_id
    last = memory_store.requests(cid)[-1]
    assert (last.failure, last.tokens_in) == ("streaming_failed", 900)
    assert last.details == {"streamingFailedMessage": "connection reset"}
    export_cline(memory_store, cid, tmp_path / "out")
    assert _load(tmp_path / "out" / "ui_messages.json")[-1] == ui[-1]


def test_edit_types_map_to_kinds_and_back() -> None:
    assert kind_for_edit_type(ClineEditType.UNDEFINED, 1) == UpdateKind.TRUNCATION_NOTICE
    assert kind_for_edit_type(ClineEditType.UNDEFINED, 0) == UpdateKind.FIRST_USER_REPLACEMENT
    assert kind_for_edit_type(ClineEditType.UNDEFINED, 5) == UpdateKind.MANUAL
    assert kind_for_edit_type(ClineEditType.READ_FILE_TOOL, 5) == UpdateKind.READ_FILE
    assert kind_for_edit_type(ClineEditType.ALTER_FILE_TOOL, 5) == UpdateKind.ALTER_FILE
    assert kind_for_edit_type(ClineEditType.FILE_MENTION, 5) == UpdateKind.FILE_MENTION
    for kind in UpdateKind.ALL - {UpdateKind.MANUAL, UpdateKind.PROCESSOR}:
        index = 1 if kind == UpdateKind.TRUNCATION_NOTICE else 0 if kind.startswith("first") else 5
        assert kind_for_edit_type(edit_type_for_kind(kind), index) == kind
    assert edit_type_for_kind(UpdateKind.PROCESSOR) == ClineEditType.NO_FILE_READ


# -- generated tasks: overlays, ranges, growth ---------------------------------------------


def test_generated_context_history_comes_back_in_clines_order(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(8)
    task.context_history = dedupe_history(task, at_request=-1)
    assert [entry[0] for entry in task.context_history] != sorted(
        entry[0] for entry in task.context_history
    )
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    updates = memory_store.context_updates(cid)
    assert len(updates) == len(task.context_history)
    view = memory_store.render(cid)
    assert view[1]["content"][0]["text"] == "[NOTE] Some history was removed."
    notices = [m for m in view if m["role"] == "user" and NOTE in json.dumps(m)]
    assert len(notices) == 8 - 2  # every read but the newest of each of the two files
    out = tmp_path / "out"
    export_cline(memory_store, cid, out)
    assert _load(out / "context_history.json") == task.context_history
    # before the de-duplication's request the reads are intact
    before = task.request_ts()[-1] - 1
    as_of = [r.ts for r in memory_store.source_records(cid) if r.data["ts"] <= before][-1]
    assert memory_store.context_updates(cid, as_of=as_of) == []


@pytest.mark.parametrize("paths", [5, "a.py", {"a.py": 1}, None])
def test_an_update_whose_path_metadata_is_no_list_exports_without_it(
    memory_store: ContextStore, tmp_path: Path, paths: object
) -> None:
    # An update's metadata is the caller's: list(5) ended the export in exit 70.
    cid = memory_store.create_conversation().id
    memory_store.append(cid, "user", "hi")
    memory_store.append(cid, "assistant", "yo")
    metadata = {"replaced_paths": paths, "all_paths": ["a.py"]}
    memory_store.add_context_update(cid, 0, 0, "hello", metadata=metadata)
    export_cline(memory_store, cid, tmp_path / "out")
    ((index, (_, [(block, [update])])),) = _load(tmp_path / "out" / "context_history.json")
    assert (index, block, update[1:]) == (0, 0, ["text", ["hello"], []])


def test_generated_ranges_hold_at_their_times_and_in_the_request_they_were_made_for(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(8, deleted=(5, 5))
    cid = import_cline(memory_store, task.write(tmp_path / "t")).conversation_id
    for record in memory_store.source_records(cid):
        shown = record.data.get("conversationHistoryDeletedRange")
        assert memory_store.deleted_range(cid, as_of=record.ts) == (tuple(shown) if shown else None)
    requests = memory_store.requests(cid)
    made_for = next(r for r in requests if (r.tokens_in or 0) > 50_000)
    announced = [r for r in memory_store.source_records(cid) if r.ts < made_for.ts][-1]
    assert announced.kind == "say:api_req_started"
    assert "conversationHistoryDeletedRange" not in announced.data
    assert memory_store.deleted_range(cid, as_of=announced.ts) is None
    assert memory_store.deleted_range(cid, as_of=made_for.ts) == (2, 5)
    earlier = requests[requests.index(made_for) - 1]
    assert made_for.details is None and earlier.tokens_in is not None
    from contextstore.storage.tables import deleted_ranges

    with memory_store.database.read() as connection:
        (row,) = connection.execute(deleted_ranges.select()).all()
    assert row.keep == "imported" and row.tokens_total == earlier.total_tokens
    assert "ui_messages.json" in row.reason


def test_generated_history_items_carry_the_current_range(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """The HistoryItem is the only durable home of the current range: a range newer than
    every UI message closes the timeline; one equal to the UI's adds nothing."""
    newer, same = story(8, deleted=(5, 5)), story(8, deleted=(5, 5))
    newer.item = {
        "ts": newer.ui[-1]["ts"],
        "task": "Fix the report.",
        "conversationHistoryDeletedRange": [2, 9],
    }
    same.item = {
        "ts": same.ui[-1]["ts"],
        "task": "Fix the report.",
        "conversationHistoryDeletedRange": [2, 5],
    }
    root = write_storage(
        tmp_path / "globalStorage",
        {"1760000000001": newer, "1760000000002": same},
        extra_items=[{"id": "1750000000000", "ts": 1, "task": "a task not on disk"}],
    )
    report = import_cline(memory_store, root)
    assert [i.added["deleted_ranges"] for i in report.items] == [2, 1]
    last_ui = memory_store.source_records("1760000000001")[-1]
    assert memory_store.deleted_range("1760000000001", as_of=last_ui.ts) == (2, 5)
    assert memory_store.deleted_range("1760000000001") == (2, 9)
    assert memory_store.deleted_range("1760000000002") == (2, 5)
    from contextstore.storage.tables import deleted_ranges

    with memory_store.database.read() as connection:
        reasons = connection.execute(
            deleted_ranges.select().where(deleted_ranges.c.conversation_id == "1760000000001")
        ).all()
    assert "taskHistory.json (HistoryItem 1760000000001)" in reasons[-1].reason
    export_cline(memory_store, "1760000000001", root / "tasks" / "1760000000001", overwrite=True)
    assert _load(root / "state" / "taskHistory.json") == [
        {"id": "1760000000002", **same.item},
        {"id": "1760000000001", **newer.item},
        {"id": "1750000000000", "ts": 1, "task": "a task not on disk"},
    ]


def test_a_task_resumed_in_cline_replaces_the_rows_cline_rewrote(
    store: ContextStore, tmp_path: Path
) -> None:
    """Cline completes its newest messages in place and drops the resume prompt on resume:
    those imported rows are replaced, everything older stays, nothing is duplicated."""
    whole = story(6)
    earlier = story(6)
    cut = next(
        i
        for i, m in enumerate(earlier.ui)
        if m.get("say") == "api_req_started" and m["conversationHistoryIndex"] >= 7
    )
    earlier.ui = [dict(m) for m in earlier.ui[: cut + 1]]
    earlier.ui[-1]["text"] = '{"request":"...\\n\\nLoading..."}'
    earlier.ui.append(
        {
            "ts": earlier.ui[-1]["ts"] + 1,
            "type": "ask",
            "ask": "resume_task",
            "conversationHistoryIndex": 7,
        }
    )
    earlier.api = earlier.api[:8]
    folder = tmp_path / "tasks" / "1760000000000"
    earlier.write(folder)
    first = import_cline(store, folder).items[0]
    whole.write(folder)
    update = import_cline(store, folder).items[0]
    # from the first row that differs: the result Cline appended after the checkpoint
    # belongs before it (a restore there keeps it), then that checkpoint (record and row),
    # the request (record and row) and the resume prompt
    assert update.status == "updated" and update.replaced == 5
    with ContextStore.open(":memory:") as fresh:
        expected = import_cline(fresh, folder).items[0]
        cid = first.conversation_id
        assert history_counts(store, cid) == history_counts(fresh, cid)
        assert archived_rows(store, cid) == update.replaced  # kept, not deleted
        assert store.render(first.conversation_id) == fresh.render(first.conversation_id)
        assert [r.data for r in store.source_records(first.conversation_id)] == whole.ui
        assert expected.added["source_records"] == len(whole.ui)


def test_an_older_row_that_changed_is_a_conflict_and_replace_starts_over(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(40)  # more rows than an import may find rewritten in place
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    import_cline(memory_store, folder)
    before = memory_store.row_counts()
    task.api[1]["content"][0]["text"] = "A different first answer (a checkpoint restore)."
    task.write(folder)
    with pytest.raises(ImportConflictError, match="no longer starts with") as caught:
        import_cline(memory_store, folder)
    assert caught.value.path == folder
    assert memory_store.row_counts() == before
    report = import_cline(memory_store, folder, replace=True)
    assert report.items[0].status == "replaced"
    assert memory_store.messages("1760000000000") == task.api


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        ("api_conversation_history.json", "emptied"),
        ("api_conversation_history.json", "cut"),
        ("ui_messages.json", "cut"),
    ],
)
@pytest.mark.parametrize("size", [6, 40], ids=["short", "long"])
def test_a_file_cut_short_by_a_crash_never_deletes_imported_rows(
    memory_store: ContextStore, tmp_path: Path, file: str, damage: str, size: int
) -> None:
    folder = story(size).write(tmp_path / "tasks" / "1760000000000")
    import_cline(memory_store, folder)
    before = memory_store.row_counts()
    path = folder / file
    whole = path.read_bytes()
    path.write_bytes(b"" if damage == "emptied" else whole[: len(whole) * 2 // 3])
    with pytest.raises(ImportConflictError, match="is cut short") as caught:
        import_cline(memory_store, folder)
    assert "were kept and nothing was written" in str(caught.value)
    assert memory_store.row_counts() == before
    path.write_bytes(whole)  # the agent writes it whole again
    assert import_cline(memory_store, folder).items[0].status == "unchanged"


def test_a_task_grown_after_a_change_in_contextstore_is_a_conflict(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(6)
    earlier = story(6)
    earlier.ui = earlier.ui[:10]
    earlier.api = earlier.api[:4]
    folder = earlier.write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    memory_store.append(cid, "user", "a note written in contextstore")
    task.write(folder)
    with pytest.raises(ImportConflictError, match="changed in contextstore"):
        import_cline(memory_store, folder)


def _cline_goes_on(folder: Path, text: str) -> None:
    """Cline, with the task open again, adds an answer to both of its files."""
    api = _load(folder / "api_conversation_history.json")
    ui = _load(folder / "ui_messages.json")
    api.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    ui.append(
        {
            "ts": ui[-1]["ts"] + 1_000,
            "type": "say",
            "say": "text",
            "text": text,
            "conversationHistoryIndex": len(api) - 2,
        }
    )
    _dump(folder / "api_conversation_history.json", api)
    _dump(folder / "ui_messages.json", ui)


@pytest.mark.parametrize("cline_went_on", [False, True], ids=["as exported", "continued"])
def test_a_task_continued_here_and_exported_over_its_folder_imports_again(
    memory_store: ContextStore, tmp_path: Path, cline_went_on: bool
) -> None:
    """The round trip of a task: imported, continued here, exported back for Cline to open,
    perhaps continued there, imported again. The folder changed and so did the
    conversation, which was a conflict; the folder holds every row written here, so they
    are archived and taken again from it, with what Cline added."""
    folder = story(6).write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    assert cid is not None
    memory_store.append(cid, "user", "Now the tests, please.")
    memory_store.checkpoint(cid, git_hash="c" * 40)
    memory_store.append(cid, "assistant", [{"type": "text", "text": "Tests added."}])
    export_cline(memory_store, cid, folder, overwrite=True)
    written = memory_store.messages(cid)
    if cline_went_on:
        _cline_goes_on(folder, "Anything else?")
    (item,) = import_cline(memory_store, folder).items
    assert item.status == "updated"
    assert item.replaced > 0 and item.replaced_rollback is not None  # archived, not lost
    expected = [
        *written,
        *([{"role": "assistant", "content": [_text("Anything else?")]}] if cline_went_on else []),
    ]
    assert memory_store.messages(cid) == expected
    assert [c.git_hash for c in memory_store.checkpoints(cid)][-1] == "c" * 40
    assert import_cline(memory_store, folder).items[0].status == "unchanged"
    with ContextStore.open(":memory:") as other:
        assert other.messages(import_cline(other, folder).conversation_id) == expected


def test_a_folder_that_lacks_what_was_written_here_since_its_export_is_a_conflict(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(6).write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    assert cid is not None
    memory_store.append(cid, "user", "Now the tests, please.")
    export_cline(memory_store, cid, folder, overwrite=True)
    memory_store.append(cid, "user", "And the docs.")  # after the export: not in the folder
    _cline_goes_on(folder, "Anything else?")
    before = memory_store.row_counts()
    with pytest.raises(ImportConflictError, match="changed in contextstore"):
        import_cline(memory_store, folder)
    assert memory_store.row_counts() == before


@pytest.mark.parametrize("purge", [False, True], ids=["archived", "purged"])
def test_an_unchanged_task_after_a_rollback_here_is_unchanged_with_a_note_saying_so(
    memory_store: ContextStore, tmp_path: Path, purge: bool
) -> None:
    task = story(6)
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    assert cid is not None
    kept = 3
    cutoff = memory_store.message_timestamps(cid)[kept - 1]
    rolled = memory_store.rollback(cid, to=cutoff, purge=purge)
    before = memory_store.row_counts()
    (item,) = import_cline(memory_store, folder).items
    assert item.status == "unchanged" and item.added == {}
    missing = len(task.api) - kept
    (note,) = [n for n in item.skipped if "rollback" in n.reason]
    assert note.reason.startswith(f"holds {missing} messages that conversation {cid!r}")
    replace = "import again with replace=True to start the conversation over from the file"
    if purge:  # no archive: restoring is no way back, and the note used to advise it
        assert note.reason.endswith(
            f": rollback {rolled.rollback_id} removed them after the import and kept no "
            f"archive. Nothing was written; {replace}, the only way to take them again."
        )
    else:
        assert note.reason.endswith(
            ": a rollback in contextstore removed them after the import. Nothing was "
            f"written; restore rollback {rolled.rollback_id} to put the rows back, or "
            f"{replace}."
        )
    assert memory_store.row_counts() == before
    assert len(memory_store.messages(cid)) == kept
    if not purge:
        memory_store.restore(cid, rolled.rollback_id)
        (again,) = import_cline(memory_store, folder).items
        assert again.status == "unchanged"
        assert not any("rollback" in n.reason for n in again.skipped)


def test_the_note_after_rollbacks_that_purged_and_archived_names_each(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(6).write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    assert cid is not None
    stamps = memory_store.message_timestamps(cid)
    purged = memory_store.rollback(cid, to=stamps[4], purge=True)
    archived = memory_store.rollback(cid, to=stamps[1])
    (item,) = import_cline(memory_store, folder).items
    (note,) = [n for n in item.skipped if "rollback" in n.reason]
    assert note.reason.endswith(
        f"no longer has: rollbacks in contextstore removed them after the import: rollback "
        f"{archived.rollback_id} archived what it removed, rollback {purged.rollback_id} kept "
        f"no archive. Nothing was written; restore rollback {archived.rollback_id} to put back "
        "what it archived, or import again with replace=True to start the conversation over "
        "from the file."
    )


def test_an_unchanged_task_after_an_append_here_is_unchanged_without_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(6).write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    assert cid is not None
    memory_store.append(cid, "user", "a note written in contextstore")
    (item,) = import_cline(memory_store, folder).items
    assert item.status == "unchanged" and item.skipped == ()


def test_auto_condense_set_here_survives_importing_the_task_again(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(6).write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    assert cid is not None
    memory_store.set_auto_condense(cid, 0.7)
    (item,) = import_cline(memory_store, folder).items
    assert item.status == "unchanged"
    _cline_goes_on(folder, "more work")
    (item,) = import_cline(memory_store, folder).items
    assert item.status == "updated"
    assert memory_store.get_conversation(cid).metadata["auto_condense"] == 0.7


def test_a_storage_folder_imports_every_task_and_reports_each(
    memory_store: ContextStore, storage: Path
) -> None:
    story(3).write(storage / "tasks" / "1760000000000")
    (storage / "tasks" / "1733000000000").mkdir()  # an empty task folder is no task
    steps: list[tuple[str, int]] = []
    report = import_cline(memory_store, storage, progress=lambda p, n: steps.append((p, n)))
    assert [i.conversation_id for i in report.items] == [TASK_ID, "1760000000000"]
    assert [i.status for i in report.items] == ["imported", "imported"]
    assert len(steps) == 4 and {n for _, n in steps} == {4}
    assert memory_store.deleted_range(TASK_ID) == (2, 7)  # its HistoryItem was found
    again = import_cline(memory_store, storage)
    assert [i.status for i in again.items] == ["unchanged", "unchanged"]
    assert report.to_json()["items"][0]["added"]["messages"] == 17


def test_the_tasks_folder_named_itself_imports_every_task_with_its_history_item(
    memory_store: ContextStore, storage: Path
) -> None:
    story(3).write(storage / "tasks" / "1760000000000")
    (storage / "tasks" / "notes").mkdir()  # a folder holding no task file is no task
    report = import_cline(memory_store, storage / "tasks")
    assert [i.conversation_id for i in report.items] == [TASK_ID, "1760000000000"]
    assert [i.status for i in report.items] == ["imported", "imported"]
    assert memory_store.deleted_range(TASK_ID) == (2, 7)  # state/taskHistory.json was read


def test_a_folder_of_copied_task_folders_imports_each(
    memory_store: ContextStore, storage: Path, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    shutil.copytree(storage / "tasks" / TASK_ID, backup / TASK_ID)
    story(3).write(backup / "1760000000000")
    report = import_cline(memory_store, backup)
    assert [i.conversation_id for i in report.items] == [TASK_ID, "1760000000000"]


def test_a_folder_without_tasks_is_refused_naming_what_is_accepted(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ClineTaskError, match=r"a folder of task folders \(tasks/\)"):
        import_cline(memory_store, tmp_path / "empty")
    assert memory_store.row_counts()["conversations"] == 0


def test_a_failure_while_writing_undoes_every_task(
    memory_store: ContextStore, storage: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextstore import DatabaseBusyError

    story(3).write(storage / "tasks" / "1760000000000")
    before = memory_store.row_counts()
    original = memory_store.import_timeline
    calls = 0

    def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise DatabaseBusyError("simulated lock timeout")
        return original(*args, **kwargs)

    monkeypatch.setattr(memory_store, "import_timeline", flaky)
    with pytest.raises(DatabaseBusyError):
        import_cline(memory_store, storage)
    assert calls == 2
    assert memory_store.row_counts() == before


# -- damaged and missing files: recover, say what was skipped --------------------------------


def test_a_truncated_api_history_keeps_its_complete_messages(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(6)
    folder = task.write(tmp_path / "t")
    path = folder / "api_conversation_history.json"
    raw = path.read_text()
    cut = raw.index('{"role":"user"', raw.index("toolu_0003"))
    path.write_text(raw[: cut + 40])  # a write cut off inside message 8
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert note.file == str(path)
    assert note.position == f"line 1 column {cut + 41} (char {cut + 40})"
    assert "the first 8 complete entries were kept" in note.reason
    assert memory_store.messages(report.conversation_id) == task.api[:8]
    assert report.items[0].added["source_records"] == len(task.ui)


def test_garbage_after_the_end_is_ignored_and_said(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(2)
    folder = task.write(tmp_path / "t")
    path = folder / "ui_messages.json"
    path.write_text(path.read_text() + "]")
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert "1 characters after the end of the JSON value were ignored" in note.reason
    assert [r.data for r in memory_store.source_records(report.conversation_id)] == task.ui


def test_bytes_that_are_not_utf8_are_replaced_and_said(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(2)
    folder = task.write(tmp_path / "t")
    path = folder / "ui_messages.json"
    raw = path.read_bytes()
    at = raw.index(b"Fix the report")
    path.write_bytes(raw[:at] + b"\xff" + raw[at + 1 :])
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert note.position == f"byte {at}" and "invalid UTF-8" in note.reason
    first = memory_store.source_records(report.conversation_id)[0].data
    assert first["text"] == "\ufffdix the report."


def test_malformed_entries_are_left_out_one_by_one(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(4)
    task.context_history = dedupe_history(task, at_request=-1)
    task.context_history.append("not an entry")
    task.context_history.append([40, [2, [[0, [[1, "text", ["gone"], []]]]]]])
    task.context_history[1][1][1][0][1].append([5, "text", "not a list", []])
    assert task.ui[2]["say"] == "api_req_started"
    task.ui[2]["text"] = '{"request":"x","tokensIn":-3}'
    task.ui.insert(3, "not an object")  # type: ignore[arg-type]
    folder = task.write(tmp_path / "t")
    report = import_cline(memory_store, folder)
    reasons = {(n.position, n.reason.split(";")[0]) for n in report.items[0].skipped}
    assert ("message 3", "is not a JSON object") in reasons
    assert ("entry 3", "is not [messageIndex, [editType, blocks]]") in reasons
    assert any(
        p and p.startswith("entry 1 (message ") and p.endswith("update 1") for p, _ in reasons
    )
    assert any(p == "update at ts 1 for message 40 block 0" for p, _ in reasons)
    assert ("message 2 (api_req_started)", "tokensIn -3 is not a token count") in reasons
    assert len(memory_store.context_updates(report.conversation_id)) == 3  # of 3 valid ones


def test_a_message_the_store_refuses_keeps_its_place_and_the_history_after_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(4)
    task.api[5]["content"].append({"type": "tool_result", "content": "no id"})
    folder = task.write(tmp_path / "t")
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert note.position == "message 5" and "tool_result without a tool_use_id" in note.reason
    assert "kept in its place" in note.reason and "the 3 after it keep" in note.reason
    stored = memory_store.messages(report.conversation_id)
    assert stored[:5] == task.api[:5] and stored[6:] == task.api[6:]
    assert stored[5]["content"] == "" and stored[5]["role"] == "assistant"
    export_cline(memory_store, report.conversation_id, tmp_path / "out")
    assert _load(tmp_path / "out" / "api_conversation_history.json") == task.api


def test_messages_with_empty_content_keep_their_places_and_export_as_written(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """Content [] (first, middle, last): no provider takes it and the store cannot hold it,
    so it is kept as an empty text that renders leave out; it used to end the history."""
    task = story(4)
    task.context_history = dedupe_history(task, at_request=-1)  # rewrites message 1 first
    empty = [0, 1, len(task.api) - 1]
    for idx in empty:
        task.api[idx]["content"] = []
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    report = import_cline(memory_store, folder)
    notes = report.items[0].skipped
    assert [n.position for n in notes if "empty content ([])" in n.reason] == [
        f"message {idx}" for idx in empty
    ]
    (update_note,) = [n for n in notes if n.position and n.position.startswith("update")]
    assert str(update_note.position).endswith("message 1 block 0")
    assert "has empty content, no block to rewrite" in update_note.reason
    cid = report.conversation_id
    stored = memory_store.messages(cid)
    assert [m["content"] for m in stored] == [
        "" if idx in empty else m["content"] for idx, m in enumerate(task.api)
    ]
    view = memory_store.render(cid, format="anthropic")
    assert all(m["content"] for m in view) and view[0]["role"] == "user"
    out = tmp_path / "out" / "1760000000000"
    export_cline(memory_store, cid, out)
    assert _load(out / "api_conversation_history.json") == task.api
    assert _load(out / "ui_messages.json") == task.ui


def test_a_first_message_the_store_refuses_is_kept_as_a_user_message(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(4)
    task.api[0] = 1  # type: ignore[assignment]  # a number where a message should be
    folder = task.write(tmp_path / "t")
    report = import_cline(memory_store, folder)
    (note,) = [n for n in report.items[0].skipped if n.position == "message 0"]
    assert "got int" in note.reason and "kept in its place" in note.reason
    stored = memory_store.messages(report.conversation_id)
    assert stored[0]["role"] == "user" and stored[0]["content"] == ""
    assert stored[1:] == task.api[1:]
    export_cline(memory_store, report.conversation_id, tmp_path / "out")
    assert _load(tmp_path / "out" / "api_conversation_history.json") == task.api


def test_a_task_with_only_its_api_history_imports_its_messages(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(3)
    folder = task.write(tmp_path / "t")
    (folder / "ui_messages.json").unlink()
    report = import_cline(memory_store, folder)
    assert report.items[0].added == {"messages": len(task.api)}
    assert memory_store.messages(report.conversation_id) == task.api


def test_a_folder_with_nothing_readable_is_refused_and_nothing_written(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "ui_messages.json").write_text("garbage")
    with pytest.raises(ClineTaskError, match="nothing to import") as caught:
        import_cline(memory_store, folder)
    assert "ui_messages.json" in str(caught.value)
    assert memory_store.row_counts()["conversations"] == 0
    with pytest.raises(ClineTaskError, match="neither a Cline task folder"):
        import_cline(memory_store, tmp_path / "nowhere")


# -- unsafe input: a clear error, nothing written ----------------------------------------------


def test_a_link_out_of_the_folder_is_refused_before_anything_is_written(
    memory_store: ContextStore, storage: Path, tmp_path: Path
) -> None:
    outside = story(2).write(tmp_path / "elsewhere")
    os.symlink(outside / "ui_messages.json", storage / "tasks" / TASK_ID / "claude_messages.json")
    with pytest.raises(OutsideFolderError, match="outside the folder imported") as caught:
        import_cline(memory_store, storage)
    assert caught.value.path.name == "claude_messages.json"
    os.unlink(storage / "tasks" / TASK_ID / "claude_messages.json")
    os.symlink(outside, storage / "tasks" / "1760000000000")
    with pytest.raises(OutsideFolderError):
        import_cline(memory_store, storage)
    assert memory_store.row_counts()["conversations"] == 0


def test_a_link_inside_the_folder_is_followed(memory_store: ContextStore, storage: Path) -> None:
    task = storage / "tasks" / TASK_ID
    (task / "ui_messages.json").rename(storage / "ui-copy.json")
    os.symlink(storage / "ui-copy.json", task / "ui_messages.json")
    report = import_cline(memory_store, storage)
    assert report.items[0].added["source_records"] == 21


def test_a_file_over_the_limit_is_refused(memory_store: ContextStore, tmp_path: Path) -> None:
    folder = story(2).write(tmp_path / "t")
    size = (folder / "ui_messages.json").stat().st_size
    with pytest.raises(FileTooLargeError, match="MAX_FILE_BYTES"):
        import_cline(memory_store, folder, max_file_bytes=size - 1)
    assert memory_store.row_counts()["conversations"] == 0
    import_cline(memory_store, folder, max_file_bytes=size)  # at the limit is fine


def test_deep_nesting_is_refused(memory_store: ContextStore, tmp_path: Path) -> None:
    from contextstore.interop import MAX_JSON_DEPTH

    task = story(2)
    folder = task.write(tmp_path / "t")
    for depth, refused in ((MAX_JSON_DEPTH, False), (MAX_JSON_DEPTH + 1, True)):
        nested: Any = "x"
        for _ in range(depth - 5):  # list, message, content, block and input hold it
            nested = [nested]
        api = json.loads(json.dumps(task.api))
        api[1]["content"][1]["input"] = {"path": nested}
        _dump(folder / "api_conversation_history.json", api)
        if refused:
            with pytest.raises(NestingTooDeepError, match=f"{depth} levels deep"):
                import_cline(memory_store, folder, replace=True)
        else:
            import_cline(memory_store, folder, replace=True)


# -- export of conversations that started here ----------------------------------------------


def test_a_conversation_made_here_exports_as_a_task_cline_opens(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    conv = memory_store.create_conversation(model_id="claude-sonnet-4-5")
    memory_store.append(conv.id, "user", "<task>\nRename the module\n</task>")
    memory_store.checkpoint(conv.id, git_hash="a" * 40)
    memory_store.record_request(conv.id, tokens_in=100, tokens_out=20, cost=0.01)
    memory_store.append(conv.id, "assistant", [{"type": "text", "text": "Renamed."}])
    memory_store.append(conv.id, "user", "Thanks")
    memory_store.append(conv.id, "assistant", "You're welcome.")
    memory_store.set_deleted_range(conv.id, 2)
    storage_root = tmp_path / "globalStorage"
    (storage_root / "state").mkdir(parents=True)
    _dump(storage_root / "state" / "taskHistory.json", [{"id": "other", "ts": 1, "task": "x"}])
    out = storage_root / "tasks" / "1760000000000"
    report = export_cline(memory_store, conv.id, out)
    assert {p.name for p in report.files} == {
        "api_conversation_history.json",
        "ui_messages.json",
        "task_metadata.json",
        "taskHistory.json",
    }
    assert _load(out / "api_conversation_history.json") == memory_store.messages(conv.id)
    ui = _load(out / "ui_messages.json")
    # Cline stamps a message's text before it adds the message to the API history, so the
    # text of message k reads k - 1; a checkpoint or request before the next user message
    # reads one less (the task, its checkpoint and first request all -1, as in the real files).
    assert [(m["say"], m["conversationHistoryIndex"]) for m in ui] == [
        ("task", -1),
        ("checkpoint_created", -1),
        ("api_req_started", -1),
        ("text", 0),
        ("user_feedback", 1),
        ("text", 2),
    ]
    assert ui[0]["text"] == "Rename the module"
    items = _load(storage_root / "state" / "taskHistory.json")
    assert [i["id"] for i in items] == ["other", "1760000000000"]
    assert items[1]["tokensIn"] == 100 and items[1]["conversationHistoryDeletedRange"] == [2, 2]
    with ContextStore.open(":memory:") as other:
        cid = import_cline(other, storage_root).items[0].conversation_id
        assert cid == "1760000000000"
        assert other.messages(cid) == memory_store.messages(conv.id)
        assert [c.git_hash for c in other.checkpoints(cid)] == ["a" * 40]
        assert [r.tokens_in for r in other.requests(cid)] == [100]
        assert other.deleted_range(cid) == (2, 2)


def _cline_restore_keeps(api: list[Any], ui: list[dict[str, Any]], ts: int) -> list[Any]:
    """The API history Cline's task restore to the UI message stamped ``ts`` keeps
    (``apiConversationHistory[0 : (conversationHistoryIndex || 0) + 2]``)."""
    message = next(m for m in ui if m["ts"] == ts)
    return api[: (message.get("conversationHistoryIndex") or 0) + 2]


def test_cline_restores_a_checkpoint_made_here_to_the_messages_before_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """A turn as an agent writes it here: the user's message, the prepared request, the
    reply, a checkpoint. Cline's restore to an exported checkpoint (or request) keeps
    exactly the messages the store had at its moment; it used to keep one more (the next
    user message, written after the checkpoint), and importing the export again moved
    that message before the checkpoint."""
    conv = memory_store.create_conversation(model_id="claude-sonnet-4-5")
    memory_store.append(conv.id, "user", [{"type": "text", "text": "<task>\nFix it\n</task>"}])
    memory_store.checkpoint(conv.id, git_hash="0" * 40)
    for turn in range(3):
        if turn:
            result = {"type": "tool_result", "tool_use_id": f"t{turn - 1}", "content": "ok"}
            memory_store.append(conv.id, "user", [result])
        ctx = memory_store.prepare_request(conv.id)
        call = {"type": "tool_use", "id": f"t{turn}", "name": "read_file", "input": {}}
        memory_store.append(conv.id, "assistant", [{"type": "text", "text": "On it."}, call])
        memory_store.record_request(conv.id, request_id=ctx.request_id, tokens_in=10)
        memory_store.checkpoint(conv.id, git_hash=f"{turn + 1}" * 40)
    out = tmp_path / "tasks" / "1760000000000"
    export_cline(memory_store, conv.id, out)
    api, ui = _load(out / "api_conversation_history.json"), _load(out / "ui_messages.json")
    rows = [(c.ts, c.git_hash) for c in memory_store.checkpoints(conv.id)]
    rows += [(r.ts, None) for r in memory_store.requests(conv.id)]
    stamped = [m for m in ui if m["say"] in ("checkpoint_created", "api_req_started")]
    assert len(stamped) == len(rows) == 7
    for (ts, _), message in zip(sorted(rows), stamped, strict=True):
        kept = memory_store.messages(conv.id, as_of=ts)
        assert _cline_restore_keeps(api, ui, message["ts"]) == kept
    with ContextStore.open(":memory:") as other:
        cid = import_cline(other, out).items[0].conversation_id
        again = [len(other.messages(cid, as_of=c.ts)) for c in other.checkpoints(cid)]
        ours = memory_store.checkpoints(conv.id)
        here = [len(memory_store.messages(conv.id, as_of=c.ts)) for c in ours]
        assert again == here == [1, 2, 4, 6]
        assert [len(other.messages(cid, as_of=r.ts)) for r in other.requests(cid)] == [1, 3, 5]


def test_a_task_made_here_shows_what_the_user_typed(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """The first UI message is Cline's ``task`` (what current Cline writes and looks for:
    editing the first message, the completion's task preview); a user message's
    ``<environment_details>`` block, which Cline adds to each request, is not shown as the
    user's words, nor is it the task's title in the history list. The export used to
    write the first message as a ``text``, and the details into the task and into a
    ``user_feedback`` for every tool result."""
    details = {"type": "text", "text": "<environment_details>\n# cwd\n/src\n</environment_details>"}
    conv = memory_store.create_conversation()
    memory_store.append(
        conv.id, "user", [{"type": "text", "text": "<task>\nRename it\n</task>"}, details]
    )
    call = {"type": "tool_use", "id": "t0", "name": "read_file", "input": {"path": "a"}}
    memory_store.append(conv.id, "assistant", [call])
    result = {"type": "tool_result", "tool_use_id": "t0", "content": "x"}
    memory_store.append(conv.id, "user", [result, details])
    memory_store.append(conv.id, "assistant", "Done.")
    memory_store.append(conv.id, "user", [{"type": "text", "text": "Thanks"}, details])
    out = tmp_path / "tasks" / "1760000000000"
    export_cline(memory_store, conv.id, out)
    ui = _load(out / "ui_messages.json")
    assert [(m["say"], m["text"]) for m in ui] == [
        ("task", "Rename it"),
        ("text", "Done."),
        ("user_feedback", "Thanks"),
    ]
    assert _load(out / "taskHistory.json")[0]["task"] == "Rename it"


def test_an_existing_history_is_written_back_as_json_cline_can_parse(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    conv = memory_store.create_conversation()
    memory_store.append(conv.id, "user", "Rename the module")
    history = tmp_path / "state" / "taskHistory.json"
    history.parent.mkdir()
    history.write_text('[{"id": "other", "ts": 1, "task": "x", "totalCost": NaN}]')
    export_cline(memory_store, conv.id, tmp_path / "tasks" / "1760000000000")

    def not_json(name: str) -> None:
        raise AssertionError(f"{name} in a file JavaScript's JSON.parse reads")

    items = json.loads(history.read_text(), parse_constant=not_json)
    assert items[0] == {"id": "other", "ts": 1, "task": "x", "totalCost": None}


def test_a_history_saved_with_a_byte_order_mark_takes_the_exported_item(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """An editor may save taskHistory.json with a UTF-8 byte order mark; the items it
    holds are kept and the export's item added (the file is written back without it)."""
    conv = memory_store.create_conversation()
    memory_store.append(conv.id, "user", "Rename the module")
    history = tmp_path / "state" / "taskHistory.json"
    history.parent.mkdir()
    history.write_text('\ufeff[{"id": "other", "ts": 1, "task": "x"}]', encoding="utf-8")
    export_cline(memory_store, conv.id, tmp_path / "tasks" / "1760000000000")
    text = history.read_text(encoding="utf-8")
    assert not text.startswith("\ufeff")
    assert [item["id"] for item in json.loads(text)] == ["other", "1760000000000"]


def test_export_refuses_to_overwrite_unless_asked(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    cid = import_cline(memory_store, TASK).conversation_id
    export_cline(memory_store, cid, tmp_path)
    with pytest.raises(ClineTaskError, match="already holds"):
        export_cline(memory_store, cid, tmp_path)
    export_cline(memory_store, cid, tmp_path, overwrite=True)
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="file names are Unicode there")
def test_export_into_a_folder_whose_name_is_not_utf8_is_refused_before_any_write(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """The task's id is its folder's name: a name that is not UTF-8 (b"\\xff...", read by
    Python as a lone surrogate) raised UnicodeEncodeError writing taskHistory.json, after
    the four task files were written (the CLI: an internal error, exit 70)."""
    from tests.cli.conftest import run

    conv = memory_store.create_conversation()
    memory_store.append(conv.id, "user", "Rename the module")
    target = tmp_path / os.fsdecode(b"\xff1760000000000")
    said = (
        f"the name of {tmp_path}/\\xff1760000000000 is not UTF-8, and the files written there "
        "would hold it (as the task's id); name a folder whose name is UTF-8 text. Nothing "
        "was written."
    )
    with pytest.raises(InvalidInputError) as refused:
        export_cline(memory_store, conv.id, target)
    assert str(refused.value) == said
    assert list(tmp_path.iterdir()) == []
    db = tmp_path / "s.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "Rename the module")
    got = run("--db", str(db), "export", "cline", cid, str(target))
    assert (got.code, got.err) == (2, f"error: {said}\n")
    assert not target.exists()


def test_the_exported_history_item_is_the_imported_one(
    memory_store: ContextStore, storage: Path, tmp_path: Path
) -> None:
    cid = import_cline(memory_store, storage / "tasks" / TASK_ID).conversation_id
    export_cline(memory_store, cid, tmp_path / "out")
    (item,) = _load(tmp_path / "out" / "taskHistory.json")
    assert item == _load(storage / "state" / "taskHistory.json")[1]


def test_a_fork_exported_into_clines_storage_gets_a_history_item_of_its_own(
    memory_store: ContextStore, storage: Path
) -> None:
    cid = import_cline(memory_store, storage / "tasks" / TASK_ID).conversation_id
    history = storage / "state" / "taskHistory.json"
    before = _load(history)
    fork = memory_store.fork(cid)
    memory_store.append(fork.id, "user", "And once more, in the fork.")
    export_cline(memory_store, fork.id, storage / "tasks" / "1800000000000")
    after = _load(history)
    assert after[: len(before)] == before  # the parent's entry is as it was
    (added,) = after[len(before) :]
    assert added["id"] == "1800000000000"
    parent = next(i for i in before if i["id"] == TASK_ID)
    assert "ulid" in parent and "ulid" not in added  # Cline makes the fork one of its own


def test_imported_overlay_updates_record_the_node_each_replaces(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(8)
    task.context_history = dedupe_history(task, at_request=-1)
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    updates = sorted(memory_store.context_updates(cid), key=lambda u: u["ts"])
    assert updates
    block_ts = {(n.message_idx, n.block_idx): n.ts for n in memory_store.nodes(cid)}
    expected = set()
    previous: dict[tuple[int, int], int] = {}
    for u in updates:
        address = (u["message_idx"], u["block_idx"])
        if address in previous:
            source = ("update", previous[address], *address)
        else:
            source = ("block", block_ts[address], *address)
        expected.add((("update", u["ts"], *address), "replaces", source))
        previous[address] = u["ts"]
    edges = memory_store.lineage_edges(cid)
    assert {(e.derived.key, e.relation, e.source.key) for e in edges} == expected
    assert len(edges) == len(updates)


def test_a_lone_surrogate_escape_becomes_a_replacement_character_with_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(4)
    task.api[0]["content"][0]["text"] = "task \ud83d cut inside an emoji"
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    raw = (folder / "api_conversation_history.json").read_text(encoding="utf-8")
    assert "\\ud83d" in raw  # as JavaScript's JSON.stringify writes it
    report = import_cline(memory_store, folder)
    item = report.items[0]
    assert item.status == "imported"
    assert any("lone surrogate" in note.reason for note in item.skipped)
    first = memory_store.messages(item.conversation_id)[0]["content"][0]["text"]
    assert first == "task \ufffd cut inside an emoji"


def test_numbers_json_cannot_hold_are_read_as_null_with_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Python's decoder takes NaN, Infinity and 1e999; JSON has no such numbers, no backend
    # stores them, and one of them used to refuse a whole storage folder's import.
    task = story(4)
    task.api[1]["metrics"] = {"cost": float("nan"), "tokens": {"prompt": 1e999}}
    started = next(m for m in task.ui if m.get("say") == "api_req_started")
    started["text"] = json.dumps({"tokensIn": 10, "retryStatus": {"delay": float("inf")}})
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    report = import_cline(memory_store, folder)
    item = report.items[0]
    assert item.status == "imported"
    (note, request) = [n for n in item.skipped if "JSON cannot hold" in n.reason]
    assert note.reason.startswith("2 number(s)")
    assert Path(note.file).name == "api_conversation_history.json"
    assert Path(request.file).name == "ui_messages.json"
    assert request.position == f"message {task.ui.index(started)} (api_req_started)"
    assert "too large) in retryStatus, read as null" in request.reason
    metrics = memory_store.messages(item.conversation_id)[1]["metrics"]
    assert metrics == {"cost": None, "tokens": {"prompt": None}}
    (first, *_) = memory_store.requests(item.conversation_id)
    assert first.details == {"retryStatus": {"delay": None}}


def test_a_request_number_json_cannot_hold_is_recorded_as_null_with_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # 1e400 overflows to infinity: the request's cost used to become null without a note.
    task = story(2)
    started = [m for m in task.ui if m.get("say") == "api_req_started"]
    started[1]["text"] = '{"request":"x","tokensIn":10,"cost":1e400}'
    at = task.ui.index(started[1]) + 1
    retry = {**started[1], "ts": started[1]["ts"] + 1, "say": "error_retry"}
    retry["text"] = '{"attempt":1,"maxAttempts":3,"delaySec":NaN}'
    task.ui.insert(at, retry)
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    report = import_cline(memory_store, folder)
    notes = {n.position: n for n in report.items[0].skipped}
    assert set(notes) == {f"message {at - 1} (api_req_started)", f"message {at} (error_retry)"}
    cost = notes[f"message {at - 1} (api_req_started)"]
    assert cost.file == str(folder / "ui_messages.json")
    assert "(NaN, Infinity, or too large) in cost, read as null" in cost.reason
    assert "the request was recorded with null in its place" in cost.reason
    delay = notes[f"message {at} (error_retry)"].reason
    assert "in delaySec, read as null" in delay and "its retry was recorded" in delay
    second = memory_store.requests(report.conversation_id)[1]
    assert (second.tokens_in, second.cost) == (10, None)
    assert second.details == {
        "retries": [{"attempt": 1, "maxAttempts": 3, "delaySec": None, "ts": retry["ts"]}]
    }
    export_cline(memory_store, report.conversation_id, tmp_path / "out")
    assert _load(tmp_path / "out" / "ui_messages.json")[at - 1 : at + 1] == [started[1], retry]


def test_a_deleted_range_that_does_not_fit_is_quoted_as_the_file_has_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """The note named "[2, 2]", a range the file does not hold, for its [5, 2]."""
    task = story(1)
    task.ui[-1]["conversationHistoryDeletedRange"] = [5, 2]
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert note.reason.startswith("the deleted range [5, 2] does not fit the 3 messages ")
    assert memory_store.deleted_range(report.conversation_id) is None


def test_a_deleted_range_not_starting_at_2_is_imported_from_2_with_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Cline keeps messages 0 and 1 and hides those up to the range's end, whatever its
    # start: [5, 2] (ending before it starts) hides message 2, the store's (2, 2).
    task = story(4)
    first = next(j for j, m in enumerate(task.ui) if m["conversationHistoryIndex"] >= 6)
    for message in task.ui[first:]:
        message["conversationHistoryDeletedRange"] = [5, 2]
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert note.file == str(folder / "ui_messages.json") and note.position == f"message {first}"
    assert note.reason == (
        "the deleted range [5, 2] starts at 5, not 2; Cline keeps messages 0 and 1 whatever "
        "the start and hides those from 2 to the end, so it was imported as the deleted "
        "range [2, 2]."
    )
    assert memory_store.deleted_range(report.conversation_id) == (2, 2)
    export_cline(memory_store, report.conversation_id, tmp_path / "out")
    assert _load(tmp_path / "out" / "ui_messages.json") == task.ui


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ([1], "an array"),
        (5, "a number"),
        ("files", "a string"),
        (True, "true or false"),
        ({}, None),
    ],
    ids=["array", "number", "string", "true", "object"],
)
def test_a_task_metadata_file_that_is_no_object_is_kept_as_written_with_a_note(
    store: ContextStore, tmp_path: Path, value: Any, kind: str | None
) -> None:
    # Cline writes an object; anything else is kept and written back as it was read
    # (it used to be dropped without a note, and export wrote no task_metadata.json).
    folder = story(2).write(tmp_path / "tasks" / "1760000000000")
    (folder / "task_metadata.json").write_text(json.dumps(value), encoding="utf-8")
    report = import_cline(store, folder)
    notes = report.items[0].skipped
    if kind is None:
        assert notes == ()
    else:
        (note,) = notes
        assert note.file == str(folder / "task_metadata.json") and note.position is None
        assert note.reason.startswith(f"holds {kind}, not the object Cline writes")
        assert "kept as written" in note.reason and "export cline writes it back" in note.reason
    cid = report.conversation_id
    assert store.get_conversation(cid).metadata["cline"]["task_metadata"] == value
    export_cline(store, cid, tmp_path / "out" / "1760000000000")
    assert _load(tmp_path / "out" / "1760000000000" / "task_metadata.json") == value
    assert import_cline(store, folder).items[0].status == "unchanged"


def test_a_task_metadata_file_too_large_to_keep_gets_one_note_saying_it_was_left_out(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(2).write(tmp_path / "tasks" / "1760000000000")
    large = ["x" * 100] * 12_000  # an array over the 1 MiB a conversation's metadata holds
    (folder / "task_metadata.json").write_text(json.dumps(large), encoding="utf-8")
    report = import_cline(memory_store, folder)
    (note,) = report.items[0].skipped
    assert "left out of the conversation's metadata" in note.reason
    cid = report.conversation_id
    assert "task_metadata" not in memory_store.get_conversation(cid).metadata["cline"]


def test_the_focus_chain_comes_back_byte_for_byte_under_the_task_id_read_by_cline(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(4).write(tmp_path / "tasks" / "1760000000000")
    focus = folder / "focus_chain_taskid_1760000000000.md"
    focus.write_bytes("# Focus\r\n- [x] read a.py\n- [ ] fix \u00e9\n".encode())
    cid = import_cline(memory_store, folder).conversation_id
    same = tmp_path / "again" / "1760000000000"
    report = export_cline(memory_store, cid, same)
    assert (same / focus.name).read_bytes() == focus.read_bytes()
    assert same / focus.name in report.files
    other = tmp_path / "elsewhere" / "1770000000000"
    export_cline(memory_store, cid, other)
    assert (other / "focus_chain_taskid_1770000000000.md").read_bytes() == focus.read_bytes()
    metadata = memory_store.get_conversation(cid).metadata
    metadata["cline"]["focus_chain"]["file"] = "../escaped.md"  # an edited name is no path
    memory_store.set_conversation_metadata(cid, metadata)
    third = tmp_path / "third" / "1760000000000"
    export_cline(memory_store, cid, third)
    assert (third / focus.name).exists() and not (tmp_path / "third" / "escaped.md").exists()


# -- usage Cline adds up --------------------------------------------------------------------


def test_subagent_usage_counts_in_the_task_totals_and_a_restores_removed_requests(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """Cline (since its ``use_subagents`` tool) says ``subagent_usage`` with what the
    subagents spent (``{"source": "subagents", tokensIn, tokensOut, cacheWrites,
    cacheReads, cost}``) and adds it to the task's totals like a request's. The export's
    ``HistoryItem`` and the ``deleted_api_reqs`` of a rollback used to leave it out."""
    task = story(4)
    usage = {
        "source": "subagents",
        "tokensIn": 7000,
        "tokensOut": 300,
        "cacheWrites": 0,
        "cacheReads": 5000,
        "cost": 0.25,
    }
    spot = max(i for i, m in enumerate(task.ui) if m.get("say") == "checkpoint_created")
    before = task.ui[spot - 1]
    task.ui.insert(
        spot,
        {
            **{k: v for k, v in before.items() if k not in ("text", "partial", "say")},
            "ts": before["ts"] + 1,
            "say": "subagent_usage",
            "text": json.dumps(usage),
        },
    )
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    cid = import_cline(memory_store, folder).conversation_id
    requests = [json.loads(m["text"]) for m in task.ui if m.get("say") == "api_req_started"]
    checkpoint = memory_store.checkpoints(cid)[-2]  # before the subagents ran
    memory_store.rollback(cid, to=checkpoint.ts)
    out = tmp_path / "out" / "1760000000000"
    export_cline(memory_store, cid, out)
    marker = _load(out / "ui_messages.json")[-1]
    assert marker["say"] == "deleted_api_reqs"
    cut = next(i for i, m in enumerate(task.ui) if f"cline:{m['ts']}" == checkpoint.label)
    after = [json.loads(m["text"]) for m in task.ui[cut:] if m.get("say") == "api_req_started"]
    removed = json.loads(marker["text"])
    assert removed["tokensIn"] == sum(r["tokensIn"] for r in after) + 7000
    assert removed["cost"] == pytest.approx(sum(r["cost"] for r in after) + 0.25)
    item = _load(out / "taskHistory.json")[0]
    assert item["tokensIn"] == sum(r["tokensIn"] for r in requests) + 7000
    assert item["cacheReads"] == sum(r["cacheReads"] for r in requests) + 5000
    assert item["totalCost"] == pytest.approx(sum(r["cost"] for r in requests) + 0.25)
