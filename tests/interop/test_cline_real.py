"""Real Cline tasks (``../shared/real/cline``): import, render, export, re-import, rollback.

Every property is checked against the files themselves or against Cline's own behaviour
as its source (v3.51.0) defines it: ``restoreCheckpoint`` keeps
``apiConversationHistory[0 : (conversationHistoryIndex || 0) + 2]`` and
``clineMessages[0 : index + 1]``, then says ``deleted_api_reqs`` with ``getApiMetrics`` of
the removed UI messages.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.view import RESULT_MISSING
from contextstore.interop import ImportConflictError, export_cline, import_cline
from contextstore.renderers.registry import validate_provider_payload
from tests.interop.real import (
    CLINE,
    archived_rows,
    cline_tasks,
    cline_tasks_with_history,
    earlier_task,
    history_counts,
    load,
    need,
    params,
    stored_rows,
)

ALL = params(cline_tasks())
WITH_HISTORY = params(cline_tasks_with_history())
FORMATS = (None, "anthropic", "openai", "gemini")


def _ui(task: Path) -> list[dict[str, Any]]:
    return load(task / "ui_messages.json")  # type: ignore[no-any-return]


def _says(ui: Sequence[Mapping[str, Any]], say: str) -> list[Mapping[str, Any]]:
    return [m for m in ui if m.get("type") == "say" and m.get("say") == say]


def _info(message: Mapping[str, Any]) -> dict[str, Any]:
    try:
        value = json.loads(message.get("text") or "")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def cline_api_metrics(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cline's getApiMetrics, as its source reads (the oracle for deleted_api_reqs)."""
    totals: dict[str, Any] = {"tokensIn": 0, "tokensOut": 0, "cost": 0}
    for message in messages:
        if message.get("type") == "say" and message.get("say") in (
            "api_req_started",
            "deleted_api_reqs",
            "subagent_usage",
        ):
            info = _info(message)
            for key in ("tokensIn", "tokensOut", "cacheWrites", "cacheReads", "cost"):
                if isinstance(info.get(key), int | float):
                    totals[key] = totals.get(key, 0) + info[key]
    return totals


def cline_restore(
    api: list[Any], ui: list[dict[str, Any]], message_ts: int
) -> tuple[list[Any], list[dict[str, Any]], dict[str, Any]]:
    """What Cline's task restore at the UI message stamped ``message_ts`` leaves: the API
    history, the UI messages (the final deleted_api_reqs without its Date.now() ts) and
    the totals that message carries."""
    index = next(i for i, m in enumerate(ui) if m["ts"] == message_ts)
    message = ui[index]
    kept_api = api[: (message.get("conversationHistoryIndex") or 0) + 2]
    totals = cline_api_metrics(ui[index + 1 :])
    return kept_api, ui[: index + 1], totals


# -- import -------------------------------------------------------------------------------


def test_a_folder_of_real_task_folders_imports_every_task(memory_store: ContextStore) -> None:
    report = import_cline(memory_store, need(CLINE))
    assert [Path(i.path).name for i in report.items] == sorted(p.name for p in cline_tasks())
    assert {i.status for i in report.items} == {"imported"}


@pytest.mark.parametrize("task", ALL)
def test_every_ui_message_is_a_source_record_in_order(
    memory_store: ContextStore, task: Path
) -> None:
    cid = import_cline(memory_store, task).conversation_id
    records = memory_store.source_records(cid, origin="cline")
    ui = _ui(task)
    assert [r.data for r in records] == ui
    assert [r.source_ts for r in records] == [m["ts"] for m in ui]
    # Cline's own stamp is the row's ts unless it ties with or precedes the row before
    stamps = [r.ts for r in records]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    for previous, record in zip([None, *records], records, strict=False):
        if previous is None or record.source_ts > previous.ts:  # type: ignore[operator]
            assert record.ts == record.source_ts


@pytest.mark.parametrize("task", ALL)
def test_one_checkpoint_per_checkpoint_created_with_its_hash(
    memory_store: ContextStore, task: Path
) -> None:
    cid = import_cline(memory_store, task).conversation_id
    created = _says(_ui(task), "checkpoint_created")
    checkpoints = memory_store.checkpoints(cid)
    assert len(checkpoints) == len(created) > 0
    assert [c.git_hash for c in checkpoints] == [m.get("lastCheckpointHash") for m in created]
    assert [c.label for c in checkpoints] == [f"cline:{m['ts']}" for m in created]


@pytest.mark.parametrize("task", ALL)
def test_every_api_request_is_a_request_row_with_its_usage_and_extras(
    memory_store: ContextStore, task: Path
) -> None:
    cid = import_cline(memory_store, task).conversation_id
    ui = _ui(task)
    started = _says(ui, "api_req_started")
    requests = memory_store.requests(cid)
    assert len(requests) == len(started) > 0
    for request, message in zip(requests, started, strict=True):
        info = _info(message)
        assert request.tokens_in == info.get("tokensIn")
        assert request.tokens_out == info.get("tokensOut")
        assert request.cache_writes == info.get("cacheWrites")
        assert request.cache_reads == info.get("cacheReads")
        assert request.cost == info.get("cost")
        assert request.failure == info.get("cancelReason")
        details = request.details or {}
        assert details.get("streamingFailedMessage") == info.get("streamingFailedMessage")
    retries = sum(len((r.details or {}).get("retries", [])) for r in requests)
    failed = sum(len((r.details or {}).get("failures", [])) for r in requests)
    after_first = ui[ui.index(started[0]) :]
    assert retries == len(_says(after_first, "error_retry"))
    assert failed == sum(1 for m in after_first if m.get("ask") == "api_req_failed")


@pytest.mark.parametrize("task", ALL)
def test_ranges_hold_at_the_time_of_every_ui_message(
    memory_store: ContextStore, task: Path
) -> None:
    cid = import_cline(memory_store, task).conversation_id
    for record in memory_store.source_records(cid, origin="cline"):
        shown = record.data.get("conversationHistoryDeletedRange")
        expected = tuple(shown) if shown else None
        assert memory_store.deleted_range(cid, as_of=record.ts) == expected, record.data["ts"]


def test_the_task_with_ranges_has_them_all() -> None:
    task = next((t for t in cline_tasks() if t.name == "coregems-task-sample"), None)
    if task is None:
        pytest.skip("the real agents' files are absent")
    with ContextStore.open(":memory:") as store:
        cid = import_cline(store, task).conversation_id
        ends = [
            r.data["conversationHistoryDeletedRange"][1]
            for r in store.source_records(cid)
            if "conversationHistoryDeletedRange" in r.data
        ]
        assert sorted(set(ends)) == [17, 39, 57, 79]
        assert store.deleted_range(cid) == (2, 79)


@pytest.mark.parametrize("task", WITH_HISTORY)
def test_as_of_a_checkpoint_is_what_clines_restore_keeps(store: ContextStore, task: Path) -> None:
    cid = import_cline(store, task).conversation_id
    api = load(task / "api_conversation_history.json")
    assert store.messages(cid) == api
    records = store.source_records(cid)
    for checkpoint in store.checkpoints(cid):
        ui_message = [r for r in records if r.ts < checkpoint.ts][-1].data
        assert ui_message["say"] == "checkpoint_created"
        kept, _, _ = cline_restore(api, _ui(task), ui_message["ts"])
        assert store.messages(cid, as_of=checkpoint.ts) == kept


@pytest.mark.parametrize("task", ALL)
def test_renders_in_every_format(memory_store: ContextStore, task: Path) -> None:
    cid = import_cline(memory_store, task).conversation_id
    for format in FORMATS:
        memory_store.render(cid, format=format)
    memory_store.check(cid)


@pytest.mark.parametrize("task", WITH_HISTORY)
def test_text_tool_results_become_tool_results_with_no_placeholder(
    memory_store: ContextStore, task: Path
) -> None:
    """Cline 3.5x wrote every result as a text block; the view answers each call with it."""
    api = load(task / "api_conversation_history.json")
    assert not any(
        b.get("type") == "tool_result"
        for m in api
        if isinstance(m["content"], list)
        for b in m["content"]
    )
    cid = import_cline(memory_store, task).conversation_id
    view = memory_store.render(cid, format="anthropic")
    calls = [b["id"] for m in view for b in m["content"] if b["type"] == "tool_use"]
    results = {
        b["tool_use_id"]: b["content"]
        for m in view
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    pending = calls[-1:] if view[-1]["role"] == "assistant" else []
    assert sorted(results) == sorted(c for c in calls if c not in pending)
    assert RESULT_MISSING not in results.values()
    assert all(text.startswith("[") or text.startswith("Tool [") for text in results.values())
    assert memory_store.messages(cid) == api  # the stored rows stay as Cline wrote them


# -- export and re-import ------------------------------------------------------------------


def _exported_files_equal(task: Path, out: Path) -> None:
    for name in (
        "api_conversation_history.json",
        "ui_messages.json",
        "task_metadata.json",
        "context_history.json",
    ):
        original = task / name
        written = out / name
        assert written.exists() == original.exists(), name
        if original.exists():
            assert load(written) == load(original), name
    # Cline's focus chain (its to-do list) comes back byte for byte.
    for original in task.glob("focus_chain_taskid_*.md"):
        assert (out / original.name).read_bytes() == original.read_bytes()


@pytest.mark.parametrize("task", ALL)
def test_export_gives_every_file_back_json_equal(
    memory_store: ContextStore, task: Path, tmp_path: Path
) -> None:
    cid = import_cline(memory_store, task).conversation_id
    out = tmp_path / "tasks" / task.name
    export_cline(memory_store, cid, out)
    _exported_files_equal(task, out)
    exported_ui = load(out / "ui_messages.json")
    assert [m["ts"] for m in exported_ui] == [m["ts"] for m in _ui(task)]


@pytest.mark.parametrize("task", ALL)
def test_importing_again_is_idempotent_and_the_export_imports_the_same(
    store: ContextStore, task: Path, tmp_path: Path
) -> None:
    first = import_cline(store, task)
    before = store.row_counts()
    again = import_cline(store, task)
    assert again.items[0].status == "unchanged" and again.items[0].added == {}
    assert store.row_counts() == before
    out = tmp_path / task.name
    export_cline(store, first.conversation_id, out)
    with ContextStore.open(":memory:") as other:
        cid = import_cline(other, out).conversation_id
        assert [r.data for r in other.source_records(cid)] == [
            r.data for r in store.source_records(first.conversation_id)
        ]
        assert other.messages(cid) == store.messages(first.conversation_id)


@pytest.mark.parametrize("task", ALL)
def test_a_task_that_grew_gets_only_its_new_rows(
    store: ContextStore, task: Path, tmp_path: Path
) -> None:
    grown = tmp_path / "later" / task.name
    shutil.copytree(task, grown)
    earlier = earlier_task(task, tmp_path / "earlier" / task.name, len(_ui(task)) // 2)
    first = import_cline(store, earlier).items[0]
    with ContextStore.open(":memory:") as fresh:
        whole = import_cline(fresh, grown).items[0]
        expected_rows = history_counts(fresh, whole.conversation_id)
        expected = [r.data for r in fresh.source_records(whole.conversation_id)]
    update = import_cline(store, grown).items[0]
    assert update.conversation_id == first.conversation_id == task.name
    assert update.status == "updated"
    added = {k: first.added.get(k, 0) + update.added.get(k, 0) for k in whole.added}
    assert sum(added.values()) - update.replaced == sum(whole.added.values())
    assert history_counts(store, task.name) == expected_rows
    assert archived_rows(store, task.name) == update.replaced  # kept, not deleted
    assert [r.data for r in store.source_records(task.name)] == expected
    assert import_cline(store, grown).items[0].status == "unchanged"


def _put_back(copy: Path, folder: Path) -> None:
    """Copy the files of ``copy`` over the task ``folder``, as a user restoring a backup."""
    for file in copy.iterdir():
        shutil.copyfile(file, folder / file.name)


@pytest.mark.parametrize("task", ALL)
def test_an_older_copy_of_the_task_never_deletes_what_was_imported(
    store: ContextStore, task: Path, tmp_path: Path
) -> None:
    """Cline rewrites each file whole; a copy from ten UI messages earlier put back over the
    task holds less than was imported and nothing newer. Importing it would delete the
    newest rows for good (it did: they were replaced by nothing), so it is a conflict that
    writes nothing; the current files are then unchanged, and replace=True takes the older
    copy on purpose."""
    folder = tmp_path / "tasks" / task.name
    shutil.copytree(task, folder)
    cid = import_cline(store, folder).conversation_id
    stored = stored_rows(store, cid)
    older = earlier_task(task, tmp_path / "backup" / task.name, len(_ui(task)) - 10)
    _put_back(older, folder)
    with pytest.raises(ImportConflictError, match="holds less than was imported") as caught:
        import_cline(store, folder)
    assert caught.value.path == folder
    assert "nothing was written" in str(caught.value)
    assert stored_rows(store, cid) == stored
    _put_back(task, folder)
    assert import_cline(store, folder).items[0].status == "unchanged"
    assert stored_rows(store, cid) == stored
    _put_back(older, folder)
    assert import_cline(store, folder, replace=True).items[0].status == "replaced"
    with ContextStore.open(":memory:") as fresh:
        import_cline(fresh, folder)
        assert stored_rows(store, cid)[:3] == stored_rows(fresh, cid)[:3]


@pytest.mark.parametrize("task", WITH_HISTORY)
def test_an_older_api_history_beside_the_current_ui_messages_is_refused(
    memory_store: ContextStore, task: Path, tmp_path: Path
) -> None:
    """Only the API history put back from a backup, two messages shorter: the UI messages
    still end where they did, but the file lacks two imported messages."""
    folder = tmp_path / task.name
    shutil.copytree(task, folder)
    cid = import_cline(memory_store, folder).conversation_id
    stored = stored_rows(memory_store, cid)
    api_file = folder / "api_conversation_history.json"
    api_file.write_text(json.dumps(load(api_file)[:-2]))
    with pytest.raises(ImportConflictError, match=r"\(2 fewer, 2 fewer messages\)"):
        import_cline(memory_store, folder)
    assert stored_rows(memory_store, cid) == stored


# -- rollback, then export: what Cline's restore would leave -----------------------------


@pytest.mark.parametrize("task", WITH_HISTORY)
def test_rollback_then_export_is_clines_checkpoint_restore(
    memory_store: ContextStore, task: Path, tmp_path: Path
) -> None:
    api = load(task / "api_conversation_history.json")
    ui = _ui(task)
    cid = import_cline(memory_store, task).conversation_id
    checkpoints = memory_store.checkpoints(cid)
    for checkpoint in checkpoints[:: max(len(checkpoints) // 6, 1)]:
        ui_ts = int(checkpoint.label.split(":")[1])  # type: ignore[union-attr]
        kept_api, kept_ui, totals = cline_restore(api, ui, ui_ts)
        report = memory_store.rollback(cid, to=checkpoint.ts)
        out = tmp_path / str(checkpoint.id)
        export_cline(memory_store, cid, out)
        assert load(out / "api_conversation_history.json") == kept_api
        exported = load(out / "ui_messages.json")
        assert exported[:-1] == kept_ui
        marker = exported[-1]
        assert marker["say"] == "deleted_api_reqs" and marker["ts"] > kept_ui[-1]["ts"]
        assert json.loads(marker["text"]) == totals
        assert marker["conversationHistoryIndex"] == len(kept_api) - 1
        item = load(out / "taskHistory.json")[0]
        assert item["tokensIn"] == cline_api_metrics(ui[1:])["tokensIn"]
        assert item["ts"] == marker["ts"]
        memory_store.restore(cid, report.rollback_id)  # type: ignore[arg-type]
    out = tmp_path / "restored"
    export_cline(memory_store, cid, out)
    assert load(out / "ui_messages.json") == ui


def test_the_readme_audit_of_failed_requests_counts_the_real_ones(tmp_path: Path) -> None:
    import re
    import sqlite3

    task = next((t for t in cline_tasks() if t.name == "haram333-fineye"), None)
    if task is None:
        pytest.skip("the real agents' files are absent")
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Bringing histories in and out", 1)[1].split("\n## ", 1)[0]
    (statement,) = re.findall(r"```sql\n(.*?)```", section, flags=re.S)
    with ContextStore.open(tmp_path / "audit.db") as store:
        import_cline(store, task)
    connection = sqlite3.connect(tmp_path / "audit.db")
    (row,) = connection.execute(statement).fetchall()
    connection.close()
    ui = _ui(task)
    assert row == (
        sum(1 for m in _says(ui, "api_req_started") if "cancelReason" in _info(m)),
        sum(
            1
            for m in ui[ui.index(_says(ui, "api_req_started")[0]) :]
            if m.get("ask") == "api_req_failed"
        ),
        len(_says(ui[ui.index(_says(ui, "api_req_started")[0]) :], "error_retry")),
    )
    assert row[0] == 7 and row[2] > 0


# -- an API message with empty content ---------------------------------------------------


def _with_empty_messages(task: Path, into: Path, indices: Sequence[int]) -> list[Any]:
    """A copy of the real task whose API messages at ``indices`` have ``"content": []``;
    returns the API history written."""
    shutil.copytree(task, into)
    api = load(into / "api_conversation_history.json")
    for idx in indices:
        api[idx]["content"] = []
    (into / "api_conversation_history.json").write_text(json.dumps(api), encoding="utf-8")
    return api  # type: ignore[no-any-return]


@pytest.mark.parametrize("task", WITH_HISTORY)
def test_a_message_with_empty_content_keeps_the_history_after_it(
    store: ContextStore, task: Path, tmp_path: Path
) -> None:
    """An API message whose content is [] used to end the imported history there: every
    message after it was left out. It is kept with an empty text (which renders leave
    out), noted, every message after it keeps its index (so Cline's checkpoints, ranges
    and UI messages still line up), and the export writes [] back."""
    folder = tmp_path / "tasks" / task.name
    middle = len(load(task / "api_conversation_history.json")) // 2
    empty = [middle - middle % 2 + 1, middle - middle % 2 + 4]  # an assistant, a user message
    api = _with_empty_messages(task, folder, empty)
    report = import_cline(store, folder).items[0]
    notes = [n for n in report.skipped if "empty content" in n.reason]
    assert [n.position for n in notes] == [f"message {idx}" for idx in empty]
    assert "export cline writes [] back" in notes[0].reason
    stored = store.messages(report.conversation_id)
    assert len(stored) == len(api)
    for idx, (message, original) in enumerate(zip(stored, api, strict=True)):
        if idx in empty:
            assert message["content"] == "" and message["role"] == original["role"]
        else:
            assert message == original
    ui = _ui(folder)
    records = store.source_records(report.conversation_id)
    assert [r.data for r in records] == ui
    for checkpoint in store.checkpoints(report.conversation_id):
        ui_message = [r for r in records if r.ts < checkpoint.ts][-1].data
        kept, _, _ = cline_restore(api, ui, ui_message["ts"])
        assert len(store.messages(report.conversation_id, as_of=checkpoint.ts)) == len(kept)
    with ContextStore.open(":memory:") as whole:
        cid = import_cline(whole, task).conversation_id
        for format in ("anthropic", "openai", "gemini"):
            # no more than the task as Cline wrote it (its last call may be unanswered)
            payload = store.render(report.conversation_id, format=format)
            expected = validate_provider_payload(format, whole.render(cid, format=format))
            assert validate_provider_payload(format, payload) == expected
    store.check(report.conversation_id)
    out = tmp_path / "out" / task.name
    export_cline(store, report.conversation_id, out)
    assert load(out / "api_conversation_history.json") == api
    assert load(out / "ui_messages.json") == ui
    assert import_cline(store, folder).items[0].status == "unchanged"
    with ContextStore.open(":memory:") as other:
        again = import_cline(other, out).items[0]
        assert other.messages(again.conversation_id) == stored


# -- an API message the store refuses ----------------------------------------------------


def _refused(kind: str, message: dict[str, Any], limit: int) -> str:
    """Edit ``message`` (a copy's) the way ``kind`` says; returns what the note says."""
    content = message["content"]
    if kind == "unknown block type":
        content.append({"type": "mcp_tool_use", "id": "mcptoolu_1", "input": {}})
        return "unknown type 'mcp_tool_use'"
    if kind == "tool input not an object":  # Cline 3.5x, when the arguments parse to an array
        next(b for b in content if b["type"] == "tool_use")["input"] = ["a", "b"]
        return "input must be an object"
    if kind == "image without data":  # Cline's image block for a data URL without a comma
        content.append({"type": "image", "source": {"type": "base64", "media_type": "image/png"}})
        return "has no source.data"
    content.append({"type": "text", "text": "x" * limit})
    return f"over the store's limit of {limit:,}"


REFUSED = ("unknown block type", "tool input not an object", "image without data", "oversized")


@pytest.mark.parametrize("kind", REFUSED)
@pytest.mark.parametrize("task", WITH_HISTORY)
def test_a_message_the_store_refuses_keeps_the_history_after_it(
    task: Path, kind: str, tmp_path: Path
) -> None:
    """An API message the store refuses used to end the imported history there. It is
    kept in its place as a stand-in that renders leave out: every later message keeps
    its index (Cline's checkpoints and UI messages still line up), renders break no rule
    the unedited task does not, the export writes the original back (a stand-in text for
    one too large to keep) and importing the folder again changes nothing."""
    folder = tmp_path / "tasks" / task.name
    shutil.copytree(task, folder)
    api = load(folder / "api_conversation_history.json")
    role = "user" if kind == "image without data" else "assistant"
    middle = len(api) // 2
    idx = next(
        i
        for i in range(middle, len(api))
        if api[i]["role"] == role
        and (
            kind != "tool input not an object"
            or any(b["type"] == "tool_use" for b in api[i]["content"])
        )
    )
    limit = max(len(json.dumps(m, ensure_ascii=False).encode()) for m in api) + 1_000
    reason = _refused(kind, api[idx], limit)
    (folder / "api_conversation_history.json").write_text(json.dumps(api), encoding="utf-8")
    with (
        ContextStore.open(":memory:", max_message_bytes=limit) as store,
        ContextStore.open(":memory:", max_message_bytes=limit) as whole,
    ):
        item = import_cline(store, folder).items[0]
        (note,) = [n for n in item.skipped if n.position == f"message {idx}"]
        assert reason in note.reason
        cid = item.conversation_id
        stored = store.messages(cid)
        assert len(stored) == len(api)
        for position, (message, original) in enumerate(zip(stored, api, strict=True)):
            if position == idx:
                assert message["content"] == "" and message["role"] == original["role"]
            else:
                assert message == original
        ui = _ui(folder)
        records = store.source_records(cid)
        assert [r.data for r in records] == ui
        for checkpoint in store.checkpoints(cid):
            ui_message = [r for r in records if r.ts < checkpoint.ts][-1].data
            kept, _, _ = cline_restore(api, ui, ui_message["ts"])
            assert len(store.messages(cid, as_of=checkpoint.ts)) == len(kept)
        assert import_cline(whole, task).conversation_id == cid
        for format in ("anthropic", "openai", "gemini"):
            expected = validate_provider_payload(format, whole.render(cid, format=format))
            assert validate_provider_payload(format, store.render(cid, format=format)) == expected
        store.check(cid)
        out = tmp_path / "out" / task.name
        export_cline(store, cid, out)
        written = load(out / "api_conversation_history.json")
        if kind == "oversized":
            (text,) = [b["text"] for b in written[idx]["content"]]
            assert text.startswith("[This message was left out") and reason in text
            written[idx]["content"] = api[idx]["content"]
        assert written == api
        assert load(out / "ui_messages.json") == ui
        assert import_cline(store, folder).items[0].status == "unchanged"


# -- a checkpoint restore in Cline, imported again ---------------------------------------


def _restored_in_cline(
    task: Path, folder: Path, checkpoint_ui_ts: int
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The task folder as Cline leaves it after restoring the task to the checkpoint whose
    UI message is stamped ``checkpoint_ui_ts`` (its ``deleted_api_reqs`` stamped later than
    anything), then one new question of the user's."""
    api, ui = load(task / "api_conversation_history.json"), _ui(task)
    kept_api, kept_ui, totals = cline_restore(api, ui, checkpoint_ui_ts)
    last = max(m["ts"] for m in ui)
    index = len(kept_api) - 1
    kept_ui = [
        *kept_ui,
        {
            "ts": last + 1000,
            "type": "say",
            "say": "deleted_api_reqs",
            "text": json.dumps(totals, separators=(",", ":")),
            "conversationHistoryIndex": index,
        },
        {
            "ts": last + 2000,
            "type": "say",
            "say": "user_feedback",
            "text": "Try again.",
            "conversationHistoryIndex": index,
        },
    ]
    (folder / "api_conversation_history.json").write_text(json.dumps(kept_api))
    (folder / "ui_messages.json").write_text(json.dumps(kept_ui))
    return kept_api, kept_ui


@pytest.mark.parametrize("task", WITH_HISTORY)
def test_a_checkpoint_restore_in_cline_archives_the_rows_it_replaces(
    store: ContextStore, task: Path, tmp_path: Path
) -> None:
    """Cline restored a recent checkpoint (within the newest rows an import may find
    rewritten): importing again replaces the rows after it by the file's. They used to be
    deleted for good; a rollback of their own now archives them, the audit lists it, and
    a restore brings them back, as after any rollback. The export is the file as Cline
    left it (no deleted_api_reqs of contextstore's beside Cline's own)."""
    folder = tmp_path / "tasks" / task.name
    shutil.copytree(task, folder)
    cid = import_cline(store, folder).conversation_id
    before = stored_rows(store, cid)
    checkpoint = store.checkpoints(cid)[-3]
    ui_ts = int(str(checkpoint.label).split(":")[1])
    kept_api, kept_ui = _restored_in_cline(task, folder, ui_ts)
    item = import_cline(store, folder).items[0]
    assert item.status == "updated" and item.replaced > 0
    assert item.replaced_rollback is not None
    (event,) = store.audit(cid).rollbacks
    assert event.rollback_id == item.replaced_rollback and event.target is None
    assert event.rows_archived == event.total_removed >= item.replaced
    assert store.messages(cid) == kept_api
    assert [r.data for r in store.source_records(cid)] == kept_ui
    out = tmp_path / "out" / task.name
    export_cline(store, cid, out)
    assert load(out / "api_conversation_history.json") == kept_api
    assert load(out / "ui_messages.json") == kept_ui
    assert import_cline(store, folder).items[0].status == "unchanged"
    # the rows Cline's restore took: roll back what replaced them, then restore
    store.rollback(cid, to=event.cutoff_ts)
    store.restore(cid, item.replaced_rollback)
    assert stored_rows(store, cid)[1:] == before[1:]
    store.check(cid)
