"""Cline task directories: import shows what Cline showed, export round-trips, bad files fail."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from contextstore import ContextStore, UpdateKind
from contextstore.cli import cli
from contextstore.core.notices import DUPLICATE_FILE_READ_NOTICE, TRUNCATION_NOTICE
from contextstore.interop import ClineTaskError, export_cline_task, import_cline_task
from contextstore.interop.cline import (
    ClineEditType,
    edit_type_for_kind,
    kind_for_edit_type,
)
from contextstore.storage.tables import deleted_ranges

DATA = Path(__file__).parent / "data"
TASK_ID = "1732000000000"
TASK = DATA / "tasks" / TASK_ID
HISTORY = DATA / "state" / "taskHistory.json"


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _api_requests(task: Path) -> list[dict[str, Any]]:
    """The usage of every api_req_started UI message that has any, in file order."""
    found = []
    for message in _load(task / "ui_messages.json"):
        if message.get("say") == "api_req_started":
            info = json.loads(message["text"])
            if "cost" in info or "tokensIn" in info:
                found.append({**info, "index": message["conversationHistoryIndex"]})
    return found


@pytest.fixture
def task_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture, laid out as Cline's globalStorage."""
    root = tmp_path / "globalStorage"
    shutil.copytree(DATA, root)
    return root / "tasks" / TASK_ID


def _text(block: dict[str, Any]) -> str:
    if block["type"] == "tool_result":
        content = block["content"]
        return content if isinstance(content, str) else content[0]["text"]
    return str(block["text"])


# -- import -------------------------------------------------------------------------------


def test_import_renders_what_cline_shows(store: ContextStore) -> None:
    result = import_cline_task(store, TASK)
    cid = result.conversation_id
    assert result.counts() == {
        "messages": 17,
        "context_updates": 7,
        "api_requests": 8,
        "deleted_ranges": 1,
    }
    assert result.skipped == ()
    assert store.deleted_range(cid) == (2, 7)
    view = store.render(cid)
    # messages 0 and 1, then everything after the range's end (7)
    assert len(view) == 2 + (17 - 8)
    assert view[1]["content"][0]["text"] == TRUNCATION_NOTICE
    assert view[0]["content"][0]["text"].startswith("<task>\nThe CSV export")
    mention = view[2]["content"][1]["text"]
    assert mention.count(f">{DUPLICATE_FILE_READ_NOTICE}</file_content>") == 2
    first_reread = _text(view[4]["content"][0])
    assert (
        first_reread
        == f"[read_file for 'tests/test_report.py'] Result:\n{DUPLICATE_FILE_READ_NOTICE}"
    )
    newest_read = _text(view[8]["content"][0])
    assert newest_read.startswith("[read_file for 'tests/test_report.py'] Result:\nfrom report")
    assert view[-1]["content"] == (
        "Thanks, the header is right now. Please also update CHANGELOG.md."
    )
    store.check(cid)


def test_import_is_lossless_and_keeps_cline_fields(memory_store: ContextStore) -> None:
    result = import_cline_task(memory_store, TASK)
    cid = result.conversation_id
    assert memory_store.messages(cid) == _load(TASK / "api_conversation_history.json")
    conversation = memory_store.get_conversation(cid)
    assert conversation.title == (
        "The CSV export writes the wrong header. Fix src/report.py so tests/test_report.py passes."
    )
    assert conversation.model_id == "claude-sonnet-4-5-20250929"
    assert conversation.metadata["cline_task_id"] == TASK_ID
    assert conversation.metadata["cline_task_metadata"] == _load(TASK / "task_metadata.json")
    # the fixture's timestamps are older than the new conversation: the store's clock
    # stamps the rows, and each message keeps its Cline ts as a field
    assert result.kept_ts == 0


def test_every_overlay_update_becomes_a_row_after_its_message(memory_store: ContextStore) -> None:
    cid = import_cline_task(memory_store, TASK).conversation_id
    rows = memory_store.context_updates(cid)
    assert [(r["message_idx"], r["block_idx"], r["kind"]) for r in rows] == [
        (4, 1, UpdateKind.READ_FILE),
        (8, 0, UpdateKind.FILE_MENTION),
        (8, 0, UpdateKind.FILE_MENTION),
        (2, 0, UpdateKind.READ_FILE),
        (6, 0, UpdateKind.ALTER_FILE),
        (1, 0, UpdateKind.TRUNCATION_NOTICE),
        (10, 0, UpdateKind.READ_FILE),
    ]
    cline_ts = [r["metadata"]["cline_ts"] for r in rows]
    assert cline_ts == sorted(cline_ts)
    assert all(r["source"] == "cline:context_history.json" for r in rows)
    for row in rows:
        present = memory_store.messages(cid, as_of=row["ts"])
        assert len(present) > row["message_idx"]
    first, second = rows[1]["metadata"], rows[2]["metadata"]
    assert first["replaced_paths"] == ["tests/test_report.py"]
    assert second["replaced_paths"] == ["tests/test_report.py", "src/report.py"]
    assert second["cline_metadata"] == [second["replaced_paths"], second["all_paths"]]
    # the first mention update is visible before the second one was written
    before_second = memory_store.render(cid, as_of=rows[2]["ts"] - 1)
    assert before_second[8]["content"][0]["text"].count(DUPLICATE_FILE_READ_NOTICE) == 1


def test_token_usage_from_ui_messages_is_in_requests(memory_store: ContextStore) -> None:
    cid = import_cline_task(memory_store, TASK).conversation_id
    requests = memory_store.requests(cid)
    expected = _api_requests(TASK)
    assert len(requests) == len(expected) == 8  # the last one is still ...Loading...
    assert sum(r.tokens_in or 0 for r in requests) == sum(e["tokensIn"] for e in expected)
    assert sum(r.tokens_out or 0 for r in requests) == 640
    assert sum(r.cache_writes or 0 for r in requests) == 12070
    assert sum(r.cache_reads or 0 for r in requests) == 58900
    assert sum(r.cost or 0 for r in requests) == pytest.approx(0.1034)
    assert {r.model_id for r in requests} == {"claude-sonnet-4-5-20250929"}
    # each request sits right after the message that started its turn
    for request, entry in zip(requests, expected, strict=True):
        assert len(memory_store.messages(cid, as_of=request.ts)) == entry["index"] + 1
    # the truncation triggered by request 7 is in place before request 8
    assert memory_store.deleted_range(cid, as_of=requests[6].ts) is None
    assert memory_store.deleted_range(cid, as_of=requests[7].ts) == (2, 7)


def test_cline_ts_becomes_the_row_ts_when_later_than_the_clock(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    future = 4_102_444_800_000  # 2100-01-01
    task = tmp_path / "tasks" / str(future)
    task.mkdir(parents=True)
    history = [
        {"role": "user", "content": "<task>\nhello\n</task>", "ts": future},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}], "ts": future + 5},
        {"role": "user", "content": "again", "ts": future + 5},  # not increasing: store picks
    ]
    (task / "api_conversation_history.json").write_text(json.dumps(history))
    result = import_cline_task(memory_store, task)
    assert result.kept_ts == 2
    cid = result.conversation_id
    assert len(memory_store.messages(cid, as_of=future)) == 1
    assert len(memory_store.messages(cid, as_of=future + 5)) == 2
    assert memory_store.messages(cid) == history
    assert result.counts() == {
        "messages": 3,
        "context_updates": 0,
        "api_requests": 0,
        "deleted_ranges": 0,
    }


def test_the_history_item_is_the_authority_for_the_range(
    memory_store: ContextStore, task_copy: Path
) -> None:
    history_path = task_copy.parents[1] / "state" / "taskHistory.json"
    items = _load(history_path)
    items[1]["conversationHistoryDeletedRange"] = [2, 9]
    history_path.write_text(json.dumps(items))
    cid = import_cline_task(memory_store, task_copy, history_path=history_path).conversation_id
    assert memory_store.deleted_range(cid) == (2, 9)
    with memory_store.database.engine.connect() as connection:
        row = connection.execute(
            select(deleted_ranges.c.keep, deleted_ranges.c.reason).where(
                deleted_ranges.c.conversation_id == cid
            )
        ).one()
    assert row.keep == "imported"
    assert "taskHistory.json" in row.reason
    assert memory_store.get_conversation(cid).metadata["cline_history_item"]["id"] == TASK_ID


def test_the_ui_range_names_its_source(memory_store: ContextStore) -> None:
    cid = import_cline_task(memory_store, TASK).conversation_id
    with memory_store.database.engine.connect() as connection:
        reason = connection.execute(
            select(deleted_ranges.c.reason).where(deleted_ranges.c.conversation_id == cid)
        ).scalar_one()
    assert "ui_messages.json (message 20)" in reason


def test_missing_optional_files_are_fine(memory_store: ContextStore, task_copy: Path) -> None:
    for name in ("context_history.json", "ui_messages.json", "task_metadata.json"):
        (task_copy / name).unlink()
    result = import_cline_task(memory_store, task_copy)
    assert result.counts() == {
        "messages": 17,
        "context_updates": 0,
        "api_requests": 0,
        "deleted_ranges": 0,
    }
    assert memory_store.deleted_range(result.conversation_id) is None


def test_an_overlay_for_a_block_that_drifted_away_is_skipped_and_reported(
    memory_store: ContextStore, task_copy: Path
) -> None:
    overlay = _load(task_copy / "context_history.json")
    overlay.append([16, [2, [[3, [[1732000060500, "text", ["gone"], []]]]]]])
    overlay.append([40, [2, [[0, [[1732000060600, "text", ["gone"], []]]]]]])
    (task_copy / "context_history.json").write_text(json.dumps(overlay))
    result = import_cline_task(memory_store, task_copy)
    assert result.context_updates == 7
    assert len(result.skipped) == 2
    assert "message 16 block 3" in result.skipped[0]
    assert "only 17 messages" in result.skipped[1]


# -- refusals -----------------------------------------------------------------------------


def _corrupt(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "name",
    [
        "api_conversation_history.json",
        "context_history.json",
        "ui_messages.json",
        "task_metadata.json",
    ],
)
def test_a_corrupted_file_is_refused_with_nothing_written(
    memory_store: ContextStore, task_copy: Path, name: str
) -> None:
    import_cline_task(memory_store, TASK)
    before = memory_store.row_counts()
    _corrupt(task_copy / name)
    with pytest.raises(ClineTaskError) as caught:
        import_cline_task(memory_store, task_copy)
    assert caught.value.path == task_copy / name
    assert re.fullmatch(r"line \d+ column \d+ \(char \d+\)", caught.value.position or "")
    assert name in str(caught.value) and "invalid JSON" in str(caught.value)
    assert memory_store.row_counts() == before


def test_a_corrupted_task_history_is_refused(memory_store: ContextStore, task_copy: Path) -> None:
    history_path = task_copy.parents[1] / "state" / "taskHistory.json"
    _corrupt(history_path)
    before = memory_store.row_counts()
    with pytest.raises(ClineTaskError, match=r"taskHistory\.json, line 1 column"):
        import_cline_task(memory_store, task_copy, history_path=history_path)
    assert memory_store.row_counts() == before


def _edit_json(path: Path, change: Any) -> None:
    value = _load(path)
    change(value)
    path.write_text(json.dumps(value))


def _bad_request_text(ui: list[dict[str, Any]]) -> None:
    ui[2]["text"] = '{"request":"x","tokensIn":12'


def _bad_request_tokens(ui: list[dict[str, Any]]) -> None:
    ui[2]["text"] = '{"request":"x","tokensIn":-3}'


def _bad_overlay_shape(overlay: list[Any]) -> None:
    overlay[1][1][1][0][1][0] = [1732000030100, "text", "not a list", []]


def _bad_mention_metadata(overlay: list[Any]) -> None:
    overlay[1][1][1][0][1][0][3] = []


def _range_past_the_end(ui: list[dict[str, Any]]) -> None:
    ui[-1]["conversationHistoryDeletedRange"] = [2, 16]


def _bad_message(api: list[dict[str, Any]]) -> None:
    api[5]["content"].append({"type": "tool_result", "tool_use_id": "x", "content": "y"})


@pytest.mark.parametrize(
    ("name", "change", "position"),
    [
        ("ui_messages.json", _bad_request_text, "message 2 (api_req_started) text, char 28"),
        ("ui_messages.json", _bad_request_tokens, "message 2 (api_req_started)"),
        ("context_history.json", _bad_overlay_shape, "entry 1 (message 8) block 0 update 0"),
        ("context_history.json", _bad_mention_metadata, "entry 1 (message 8) block 0 update 0"),
        ("ui_messages.json", _range_past_the_end, "message 20"),
        ("api_conversation_history.json", _bad_message, "message 5"),
    ],
)
def test_malformed_content_is_refused_with_its_position(
    memory_store: ContextStore, task_copy: Path, name: str, change: Any, position: str
) -> None:
    _edit_json(task_copy / name, change)
    with pytest.raises(ClineTaskError) as caught:
        import_cline_task(memory_store, task_copy)
    assert caught.value.path == task_copy / name
    assert caught.value.position == position
    assert memory_store.row_counts()["conversations"] == 0


def test_a_directory_without_history_is_refused(memory_store: ContextStore, tmp_path: Path) -> None:
    with pytest.raises(ClineTaskError, match=r"no api_conversation_history\.json"):
        import_cline_task(memory_store, tmp_path)
    assert memory_store.row_counts()["conversations"] == 0


# -- export -------------------------------------------------------------------------------


def test_import_export_import_round_trips(memory_store: ContextStore, tmp_path: Path) -> None:
    first = import_cline_task(memory_store, TASK).conversation_id
    out = tmp_path / "tasks" / TASK_ID
    exported = export_cline_task(memory_store, first, out)
    assert {p.name for p in exported.files} == {
        "api_conversation_history.json",
        "context_history.json",
        "ui_messages.json",
    }
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in exported.files)
    second = import_cline_task(memory_store, out).conversation_id
    assert memory_store.messages(second) == memory_store.messages(first)
    assert memory_store.render(second) == memory_store.render(first)
    assert memory_store.render(second, format="anthropic") == memory_store.render(
        first, format="anthropic"
    )
    assert memory_store.deleted_range(second) == memory_store.deleted_range(first) == (2, 7)
    usage = [
        (r.tokens_in, r.tokens_out, r.cache_writes, r.cache_reads, r.cost)
        for r in memory_store.requests(first)
    ]
    assert usage == [
        (r.tokens_in, r.tokens_out, r.cache_writes, r.cache_reads, r.cost)
        for r in memory_store.requests(second)
    ]


def test_export_writes_clines_formats(memory_store: ContextStore, tmp_path: Path) -> None:
    cid = import_cline_task(memory_store, TASK).conversation_id
    export_cline_task(memory_store, cid, tmp_path)
    assert _load(tmp_path / "api_conversation_history.json") == _load(
        TASK / "api_conversation_history.json"
    )
    overlay = _load(tmp_path / "context_history.json")
    assert [entry[0] for entry in overlay] == [1, 2, 4, 6, 8, 10]
    by_message = {entry[0]: entry[1] for entry in overlay}
    assert by_message[1][0] == ClineEditType.UNDEFINED
    assert by_message[1][1][0][1][0][2] == [TRUNCATION_NOTICE]
    mention_type, mention_blocks = by_message[8]
    assert mention_type == ClineEditType.FILE_MENTION
    (only,) = mention_blocks[0][1]  # the effective update, with its Cline ts and metadata
    assert only[0] == 1732000034600
    assert only[3] == [
        ["tests/test_report.py", "src/report.py"],
        ["src/report.py", "tests/test_report.py"],
    ]
    ui = _load(tmp_path / "ui_messages.json")
    assert [m["say"] for m in ui] == ["api_req_started"] * 8
    assert ui[-1]["conversationHistoryDeletedRange"] == [2, 7]
    assert "conversationHistoryDeletedRange" not in ui[0]


def test_export_refuses_to_overwrite_unless_asked(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    cid = import_cline_task(memory_store, TASK).conversation_id
    export_cline_task(memory_store, cid, tmp_path)
    with pytest.raises(ClineTaskError, match="already holds"):
        export_cline_task(memory_store, cid, tmp_path)
    export_cline_task(memory_store, cid, tmp_path, overwrite=True)
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]


def test_export_carries_a_range_newer_than_the_last_request(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    conv = memory_store.create_conversation()
    for i in range(3):
        memory_store.append(conv.id, "user", f"question {i}")
        memory_store.append(conv.id, "assistant", f"answer {i}")
    memory_store.set_deleted_range(conv.id, 3)
    export_cline_task(memory_store, conv.id, tmp_path)
    ui = _load(tmp_path / "ui_messages.json")
    assert ui[-1]["conversationHistoryDeletedRange"] == [2, 3]
    again = import_cline_task(memory_store, tmp_path).conversation_id
    assert memory_store.render(again) == memory_store.render(conv.id)


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


# -- command line -------------------------------------------------------------------------


def test_cli_import_prints_the_id_and_counts(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "import-cline", str(TASK)], obj={})
    assert result.exit_code == 0, result.output
    cid = result.stdout.strip()  # only the id on stdout: CID=$(contextstore import-cline ...)
    assert re.search(r"context_updates\s+7", result.stderr)
    assert re.search(r"api_requests\s+8", result.stderr)
    with ContextStore.open(db) as opened:
        assert opened.get_conversation(cid).title is not None
        assert opened.deleted_range(cid) == (2, 7)
    out = tmp_path / "exported"
    exported = runner.invoke(cli, ["--db", str(db), "export-cline", cid, str(out)], obj={})
    assert exported.exit_code == 0, exported.output
    assert (out / "context_history.json").is_file()


def test_cli_import_of_a_corrupted_task_fails_cleanly(task_copy: Path, tmp_path: Path) -> None:
    _corrupt(task_copy / "context_history.json")
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "cli.db"), "import-cline", str(task_copy)], obj={}
    )
    assert result.exit_code == 2
    assert "context_history.json, line 1 column" in result.stderr
    assert "Traceback" not in result.output


def test_the_legacy_ui_file_name_is_read(memory_store: ContextStore, task_copy: Path) -> None:
    (task_copy / "ui_messages.json").rename(task_copy / "claude_messages.json")
    result = import_cline_task(memory_store, task_copy)
    assert result.requests == 8
    assert memory_store.deleted_range(result.conversation_id) == (2, 7)


def test_a_failure_part_way_undoes_the_whole_import(
    memory_store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import spans several transactions; a failure in the middle leaves nothing."""
    from contextstore import DatabaseBusyError

    before = memory_store.row_counts()
    calls = 0
    original = memory_store.record_request

    def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise DatabaseBusyError("simulated lock timeout")
        return original(*args, **kwargs)

    monkeypatch.setattr(memory_store, "record_request", flaky)
    with pytest.raises(DatabaseBusyError, match="stopped part way and was undone"):
        import_cline_task(memory_store, TASK)
    assert calls == 2
    assert memory_store.row_counts() == before


def test_a_cancelled_request_keeps_its_reason_both_ways(
    memory_store: ContextStore, task_copy: Path, tmp_path: Path
) -> None:
    ui_path = task_copy / "ui_messages.json"
    ui = _load(ui_path)
    ui[-1]["text"] = json.dumps({"request": "x", "tokensIn": 900, "cancelReason": "user_cancelled"})
    ui_path.write_text(json.dumps(ui), encoding="utf-8")
    cid = import_cline_task(memory_store, task_copy).conversation_id
    last = memory_store.requests(cid)[-1]
    assert (last.failure, last.tokens_in) == ("user_cancelled", 900)
    export_cline_task(memory_store, cid, tmp_path / "out")
    exported = _load(tmp_path / "out" / "ui_messages.json")
    infos = [json.loads(m["text"]) for m in exported if m.get("say") == "api_req_started"]
    assert infos[-1]["cancelReason"] == "user_cancelled"
