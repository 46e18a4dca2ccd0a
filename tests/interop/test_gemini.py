"""Gemini CLI chats beyond the real files: JSONL logs ($set, $rewindTo, re-appended ids),
/chat save checkpoints {history, authType}, conversion rules, folders, damaged files.

``data/gemini`` holds hand-written files; the rest are generated here, in the shapes Gemini
CLI's ``chatRecordingService.ts`` and ``logger.ts`` write.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.hardening import DEFAULT_CONTINUATION
from contextstore.core.rows import MessageRow
from contextstore.interop import (
    GeminiChatError,
    ImportConflictError,
    NestingTooDeepError,
    OutsideFolderError,
    export_gemini,
    import_gemini,
)
from contextstore.interop.files import Folder
from contextstore.interop.gemini import read_chat
from contextstore.interop.gemini_plan import plan_chat
from contextstore.interop.plan import parse_timestamp
from contextstore.renderers.registry import validate_provider_payload

DATA = Path(__file__).parent / "data" / "gemini"
CHECKPOINT = DATA / "checkpoint-report-fix.json"
LEGACY = DATA / "checkpoint-legacy.json"
SESSION = DATA / "session-2026-08-04T10-00-a1b2c3d4.jsonl"
FIXTURES = [CHECKPOINT, LEGACY, SESSION]
SESSION_ID = "5e55e55e-0000-4000-8000-000000000042"


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _messages(path: Path) -> list[dict[str, Any]]:
    plan = plan_chat(read_chat(path, Folder(path.parent)), max_message_bytes=2**25, file_ms=1)
    return [dict(row.message) for row in plan.rows if isinstance(row, MessageRow)]


def _blocks(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        block
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == kind
    ]


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(block["text"]) for block in _blocks(messages, "text")]


def _ts(value: str) -> int:
    found = parse_timestamp(value)
    assert found is not None
    return found


def _record(rid: str, kind: str, content: Any, second: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "timestamp": f"2026-08-04T10:00:{second:02d}.000Z",
        "type": kind,
        "content": content,
        **extra,
    }


def session_log(tmp_path: Path) -> Path:
    """A JSONL session as Gemini CLI 0.39+ writes it: metadata, records, $set after each
    record, a record re-appended when its tokens and tool results arrive, a rewind."""
    meta = {
        "sessionId": SESSION_ID,
        "projectHash": "ab12",
        "startTime": "2026-08-04T10:00:00.000Z",
        "lastUpdated": "2026-08-04T10:00:00.000Z",
        "kind": "main",
    }
    call = {
        "id": "glob-1",
        "name": "glob",
        "args": {"pattern": "*.py"},
        "status": "executing",
        "timestamp": "2026-08-04T10:00:03.000Z",
    }
    done = {
        **call,
        "status": "success",
        "resultDisplay": "Found 2 files",
        "result": [
            {
                "functionResponse": {
                    "id": "glob-1",
                    "name": "glob",
                    "response": {"output": "a.py\nb.py"},
                }
            }
        ],
    }
    tokens = {"input": 900, "output": 30, "cached": 400, "thoughts": 12, "tool": 0, "total": 942}
    records: list[Any] = [
        meta,
        _record("u1", "user", [{"text": "Which Python files are there?"}], 1),
        {"$set": {"lastUpdated": "2026-08-04T10:00:01.000Z"}},
        _record("g1", "gemini", "", 3, model="gemini-2.5-pro", toolCalls=[call]),
        _record("i1", "info", "Loaded cached credentials.", 4),
        _record(
            "g1",
            "gemini",
            [{"text": "Globbing."}],
            3,
            model="gemini-2.5-pro",
            thoughts=[
                {"subject": "Plan", "description": "glob", "timestamp": "2026-08-04T10:00:02.500Z"}
            ],
            tokens=tokens,
            toolCalls=[done],
        ),
        _record("u2", "user", "Delete b.py.", 10),
        _record("g2", "gemini", "Deleting it.", 11, model="gemini-2.5-pro"),
        {"$rewindTo": "u2"},
        _record("u3", "user", "Which one has tests?", 20),
        _record("w1", "warning", "Context is getting long.", 21),
        _record(
            "g3",
            "gemini",
            "a.py has tests.",
            22,
            model="gemini-2.5-flash",
            tokens={**tokens, "input": 1500, "cached": 0},
        ),
        {"$set": {"summary": "Listing Python files", "lastUpdated": "2026-08-04T10:00:22.000Z"}},
    ]
    (tmp_path / "chats").mkdir(parents=True, exist_ok=True)
    return _jsonl(tmp_path / "chats" / "session-2026-08-04T10-00-5e55e55e.jsonl", records)


# -- JSONL session recordings ----------------------------------------------------------------


def test_a_session_log_is_replayed_as_gemini_cli_loads_it(
    store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    report = import_gemini(store, path)
    assert report.conversation_id == SESSION_ID
    records = store.source_records(SESSION_ID)
    # the re-appended g1 replaced the first copy where it stood; the rewind removed u2, g2
    assert [r.data["id"] for r in records] == ["u1", "g1", "i1", "u3", "w1", "g3"]
    assert records[1].data["toolCalls"][0]["status"] == "success"
    assert records[1].data["toolCalls"][0]["resultDisplay"] == "Found 2 files"
    assert records[1].data["thoughts"][0]["subject"] == "Plan"
    assert [r.source_ts for r in records] == [_ts(r.data["timestamp"]) for r in records]
    assert [r.ts for r in records] == [r.source_ts for r in records]
    messages = store.messages(SESSION_ID)
    assert _texts(messages) == [
        "Which Python files are there?",
        "Globbing.",
        "Which one has tests?",
        "a.py has tests.",
    ]
    assert _blocks(messages, "tool_result")[0]["content"] == "a.py\nb.py"
    conversation = store.get_conversation(SESSION_ID)
    assert conversation.title == "Listing Python files"
    assert conversation.model_id == "gemini-2.5-flash"
    session = conversation.metadata["gemini"]["session"]
    assert session["projectHash"] == "ab12" and session["summary"] == "Listing Python files"
    assert session["lastUpdated"] == "2026-08-04T10:00:22.000Z"
    for format in ("anthropic", "openai", "gemini"):
        assert validate_provider_payload(format, store.render(SESSION_ID, format=format)) == []


def test_tokens_become_request_rows_before_the_answer(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    import_gemini(memory_store, session_log(tmp_path))
    first, second = memory_store.requests(SESSION_ID)
    assert (first.tokens_in, first.cache_reads, first.tokens_out) == (500, 400, 30)
    assert first.details == {
        "tokens": {
            "input": 900,
            "output": 30,
            "cached": 400,
            "thoughts": 12,
            "tool": 0,
            "total": 942,
        }
    }
    assert (second.tokens_in, second.model_id) == (1500, "gemini-2.5-flash")
    answer_at = next(r.ts for r in memory_store.source_records(SESSION_ID) if r.data["id"] == "g1")
    assert answer_at < first.ts
    assert _texts(memory_store.messages(SESSION_ID, as_of=first.ts)) == [
        "Which Python files are there?"
    ]


def test_the_non_model_records_are_kept_but_never_sent(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    import_gemini(memory_store, session_log(tmp_path))
    kinds = [r.kind for r in memory_store.source_records(SESSION_ID)]
    assert kinds.count("info") == 1 and kinds.count("warning") == 1
    rendered = json.dumps(memory_store.render(SESSION_ID, format="gemini"))
    assert "cached credentials" not in rendered and "getting long" not in rendered


def test_set_messages_replaces_the_whole_list_and_later_records_apply(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "s.jsonl",
        [
            {"sessionId": "s", "projectHash": "p"},
            _record("a", "user", "old question", 1),
            _record("b", "gemini", "old answer", 2),
            {"$set": {"messages": [_record("c", "user", "summary", 3)]}},
            _record("d", "gemini", "new answer", 4),
        ],
    )
    assert _texts(_messages(path)) == ["summary", "new answer"]


def test_a_rewind_to_an_unknown_id_empties_the_list_as_gemini_cli_does(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "s.jsonl",
        [
            {"sessionId": "s", "projectHash": "p"},
            _record("a", "user", "question", 1),
            {"$rewindTo": "zz"},
            _record("b", "user", "again", 2),
        ],
    )
    chat = read_chat(path, Folder(tmp_path))
    assert [r["id"] for r in chat.records] == ["b"]
    assert any(n.position == "line 3" and "unknown message" in n.reason for n in chat.notes)


def test_a_broken_line_is_left_out_and_named(memory_store: ContextStore, tmp_path: Path) -> None:
    path = session_log(tmp_path)
    lines = path.read_text().splitlines()
    lines[6] = lines[6][:40]  # u2 cut short, as by a crash mid-append
    lines.append('{"id": "u9", "type": "user", "content": "half')
    path.write_text("\n".join(lines))
    report = import_gemini(memory_store, path)
    notes = {(n.position, n.reason.split(" (")[0]) for n in report.items[0].skipped}
    assert ("line 7", "is not JSON") in notes and ("line 14", "is not JSON") in notes
    assert [r.data["id"] for r in memory_store.source_records(SESSION_ID)][-1] == "g3"


def test_records_of_no_known_shape_are_left_out_and_named(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "s.jsonl",
        [
            {"sessionId": "s", "projectHash": "p"},
            {"id": "a", "type": "system", "content": "x"},
            {"id": "b", "type": "user", "content": 7},
            {"$checkpoint": 1},
            _record("c", "user", "fine", 1),
        ],
    )
    chat = read_chat(path, Folder(tmp_path))
    assert [r["id"] for r in chat.records] == ["c"]
    assert [n.position for n in chat.notes] == ["line 2", "line 3", "line 4"]


def test_a_session_that_grew_gets_only_its_new_rows(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:6]) + "\n")  # up to the re-appended g1
    first = import_gemini(memory_store, path).items[0]
    path.write_text("\n".join(lines) + "\n")
    update = import_gemini(memory_store, path).items[0]
    assert update.status == "updated" and update.replaced == 0
    with ContextStore.open(":memory:") as fresh:
        whole = import_gemini(fresh, path).items[0]
        assert fresh.row_counts(SESSION_ID) == memory_store.row_counts(SESSION_ID)
    assert sum(first.added.values()) + sum(update.added.values()) == sum(whole.added.values())


def test_a_record_re_appended_with_its_tokens_replaces_the_imported_one(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n")  # g1 still executing, no tokens
    import_gemini(memory_store, path)
    assert memory_store.requests(SESSION_ID) == []
    path.write_text("\n".join(lines) + "\n")
    update = import_gemini(memory_store, path).items[0]
    assert update.status == "updated" and update.replaced > 0
    assert len(memory_store.requests(SESSION_ID)) == 2


def test_a_rewind_replaces_imported_records_only_once_the_session_goes_on(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """Right after a $rewindTo the session holds less than was imported and nothing newer, as
    an older copy does: a conflict that keeps the rows. The records written after the rewind
    end later than the imported ones: the rewound rows are then replaced as a rewrite."""
    path = session_log(tmp_path)
    lines = path.read_text().splitlines()
    assert json.loads(lines[8]) == {"$rewindTo": "u2"}
    path.write_text("\n".join(lines[:8]) + "\n")  # up to g2
    import_gemini(memory_store, path)
    before = memory_store.row_counts(SESSION_ID)
    path.write_text("\n".join(lines[:9]) + "\n")  # rewound, nothing new yet
    with pytest.raises(ImportConflictError, match=r"\(4 fewer, 2 fewer messages\)"):
        import_gemini(memory_store, path)
    assert memory_store.row_counts(SESSION_ID) == before
    path.write_text("\n".join(lines) + "\n")
    update = import_gemini(memory_store, path).items[0]
    assert update.status == "updated" and update.replaced == 4
    assert [r.data["id"] for r in memory_store.source_records(SESSION_ID)] == [
        "u1",
        "g1",
        "i1",
        "u3",
        "w1",
        "g3",
    ]


def test_export_writes_jsonl_as_gemini_cli_rewrites_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    import_gemini(memory_store, path)
    out = tmp_path / "out" / "session.jsonl"
    export_gemini(memory_store, SESSION_ID, out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    chat = read_chat(path, Folder(tmp_path))
    assert lines[0] == chat.metadata
    assert lines[1:] == chat.records
    again = read_chat(out, Folder(out.parent))
    assert (again.metadata, again.records) == (chat.metadata, chat.records)
    legacy = tmp_path / "out" / "session.json"
    export_gemini(memory_store, SESSION_ID, legacy)
    assert json.loads(legacy.read_text()) == {**chat.metadata, "messages": chat.records}
    with pytest.raises(GeminiChatError, match="already exists"):
        export_gemini(memory_store, SESSION_ID, out)
    shouted = tmp_path / "out" / "SESSION.JSONL"  # the suffix in any case is JSONL
    export_gemini(memory_store, SESSION_ID, shouted)
    assert shouted.read_text() == out.read_text()
    again = read_chat(shouted, Folder(shouted.parent))
    assert (again.metadata, again.records) == (chat.metadata, chat.records)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"history": 5}, "got an object whose history is a number, not an array"),
        ({"messages": {}}, "got an object whose messages is an object, not an array"),
        ({"history": None, "messages": "x"}, "whose history is null and messages is a string,"),
        ({"turns": []}, "got an object with neither history nor messages"),
    ],
)
def test_an_object_that_is_no_chat_is_refused_saying_what_its_keys_hold(
    tmp_path: Path, value: dict[str, Any], said: str
) -> None:
    path = _write(tmp_path / "c.json", value)
    with pytest.raises(GeminiChatError, match="is not a Gemini CLI chat") as refused:
        read_chat(path, Folder(tmp_path))
    assert said in str(refused.value)


def test_a_fork_exports_as_a_session_of_its_own_and_imports_beside_its_parent(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    import_gemini(memory_store, session_log(tmp_path))
    fork = memory_store.fork(SESSION_ID)
    memory_store.append(fork.id, "user", "And in tests/?")
    out = tmp_path / "fork.json"
    export_gemini(memory_store, fork.id, out)
    assert json.loads(out.read_text())["sessionId"] == fork.id
    parent = tmp_path / "parent.json"
    export_gemini(memory_store, SESSION_ID, parent)
    assert json.loads(parent.read_text())["sessionId"] == SESSION_ID  # an import keeps its id
    with ContextStore.open(":memory:") as other:
        import_gemini(other, session_log(tmp_path))
        before = other.messages(SESSION_ID)
        report = import_gemini(other, out)
        assert report.conversation_id == fork.id
        assert other.messages(SESSION_ID) == before
        assert other.messages(fork.id)[-1]["content"] == [
            {"type": "text", "text": "And in tests/?"}
        ]


@pytest.mark.parametrize("at", [0, None], ids=["before-it-began", "now"])
def test_a_fork_is_last_updated_no_earlier_than_it_was_made(
    memory_store: ContextStore, tmp_path: Path, at: int | None
) -> None:
    import_gemini(memory_store, session_log(tmp_path))
    fork = memory_store.fork(SESSION_ID, at=at)
    out = tmp_path / "fork.json"
    export_gemini(memory_store, fork.id, out)
    written = json.loads(out.read_text())
    updated = parse_timestamp(written["lastUpdated"])
    assert updated is not None and updated >= fork.created_ts
    assert updated >= (parse_timestamp(written["startTime"]) or 0)


def test_messages_written_here_become_records_of_their_own(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    import_gemini(memory_store, session_log(tmp_path))
    memory_store.append(SESSION_ID, "user", "And in tests/?")
    memory_store.append(
        SESSION_ID,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "glob",
                        "input": {"pattern": "tests/*.py"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "tests/test_a.py"}
                ],
            },
        ],
    )
    out = tmp_path / "s.jsonl"
    export_gemini(memory_store, SESSION_ID, out)
    chat = read_chat(out, Folder(tmp_path))
    new = chat.records[-2:]
    assert new[0]["type"] == "user" and new[0]["content"] == [{"text": "And in tests/?"}]
    assert new[1]["toolCalls"][0]["result"][0]["functionResponse"]["response"] == {
        "output": "tests/test_a.py"
    }
    assert chat.metadata["lastUpdated"] != "2026-08-04T10:00:22.000Z"
    with ContextStore.open(":memory:") as other:
        cid = import_gemini(other, out).conversation_id
        assert _texts(other.messages(cid))[-1] == "And in tests/?"
        assert _blocks(other.messages(cid), "tool_result")[-1]["content"] == "tests/test_a.py"


SEARCH_RESULT = {
    "type": "search_result",
    "source": "docs/retries.md",
    "title": "Retries",
    "content": [
        {"type": "text", "text": "Set max_retries in client.toml."},
        {"type": "text", "text": "The default is 3."},
    ],
}
SEARCH_RESULT_TEXT = (
    "[Search result: Retries]\nSource: docs/retries.md\n"
    "Set max_retries in client.toml.\n\nThe default is 3."
)


def _search_conversation(store: ContextStore, result: list[dict[str, Any]]) -> str:
    """A conversation written here whose tool result is ``result``."""
    cid = store.create_conversation(model_id="gemini-2.5-pro").id
    store.append(cid, "user", "How are retries configured?")
    call = {"type": "tool_use", "id": "t1", "name": "search_docs", "input": {"q": "retries"}}
    store.append(cid, "assistant", [call])
    store.append(cid, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": result}])
    store.append(cid, "assistant", "Set max_retries.")
    return cid


def _exported_output(path: Path) -> Any:
    (record,) = [r for r in read_chat(path, Folder(path.parent)).records if r.get("toolCalls")]
    return record["toolCalls"][0]["result"][0]["functionResponse"]["response"]["output"]


def _rendered_output(store: ContextStore, cid: str) -> Any:
    (output,) = [
        part["functionResponse"]["response"]["output"]
        for content in store.render(cid, format="gemini")
        for part in content["parts"]
        if "functionResponse" in part
    ]
    return output


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ([SEARCH_RESULT], SEARCH_RESULT_TEXT),
        (
            [SEARCH_RESULT, {"type": "text", "text": "1 result."}],
            f"{SEARCH_RESULT_TEXT}\n\n1 result.",
        ),
        (
            [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "max_retries=3"},
                },
                {"type": "text", "text": "from client.toml"},
            ],
            "max_retries=3\n\nfrom client.toml",
        ),
    ],
    ids=["search result", "search result and text", "plain-text document"],
)
def test_a_tool_result_exports_as_the_text_the_gemini_renderer_sends(
    memory_store: ContextStore, tmp_path: Path, result: list[dict[str, Any]], expected: str
) -> None:
    """A search result (or a plain-text document) in a tool result was exported as an empty
    output: its content was lost from the session file."""
    cid = _search_conversation(memory_store, result)
    out = tmp_path / "session.jsonl"
    export_gemini(memory_store, cid, out)
    assert _exported_output(out) == expected == _rendered_output(memory_store, cid)
    with ContextStore.open(":memory:") as other:
        again = import_gemini(other, out).conversation_id
        assert _blocks(other.messages(again), "tool_result")[0]["content"] == expected
        assert other.render(again, format="gemini") == memory_store.render(cid, format="gemini")


def test_usage_recorded_here_goes_on_the_answer_it_produced(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """Gemini CLI keeps a request's usage as the ``tokens`` of the answer's record; a
    session made here exported none, so Gemini CLI and a re-import saw no usage at all."""
    cid = memory_store.create_conversation(model_id="gemini-2.5-pro").id
    memory_store.append(cid, "user", "Hello")
    failed = memory_store.prepare_request(cid).request_id
    memory_store.record_request(cid, request_id=failed, failure="overloaded")
    retried = memory_store.prepare_request(cid).request_id
    memory_store.append(cid, "assistant", "Hi.")
    memory_store.record_request(
        cid,
        request_id=retried,
        tokens_in=1_000,
        tokens_out=20,
        cache_writes=300,
        cache_reads=200,
        model_id="gemini-2.5-flash",
    )
    memory_store.append(cid, "user", "Bye")
    memory_store.append(cid, "assistant", "Bye.")  # answered by no recorded request
    out = tmp_path / "session.jsonl"
    export_gemini(memory_store, cid, out)
    answers = [r for r in read_chat(out, Folder(tmp_path)).records if r["type"] == "gemini"]
    assert answers[0]["tokens"] == {
        "input": 1_500,
        "output": 20,
        "cached": 200,
        "thoughts": 0,
        "tool": 0,
        "total": 1_520,
    }
    assert answers[0]["model"] == "gemini-2.5-flash"
    assert "tokens" not in answers[1] and answers[1]["model"] == "gemini-2.5-pro"
    with ContextStore.open(":memory:") as other:
        again = import_gemini(other, out).conversation_id
        (request,) = other.requests(again)
        # cache writes are read back as prompt tokens: Gemini has no cache writes
        assert (request.tokens_in, request.cache_reads, request.tokens_out) == (1_300, 200, 20)
        assert request.model_id == "gemini-2.5-flash"
        assert request.total_tokens == memory_store.requests(cid)[1].total_tokens


# -- /chat save checkpoints --------------------------------------------------------------------


def test_a_checkpoint_with_auth_type_comes_back_json_equal(
    store: ContextStore, tmp_path: Path
) -> None:
    value = {
        "history": [
            {"role": "user", "parts": [{"text": "Fix the header."}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Looking.", "thought": True},
                    {"functionCall": {"name": "read_file", "args": {"path": "a.py"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "read_file", "response": {"output": "x = 1"}}}
                ],
            },
            {"role": "model", "parts": [{"text": "Done."}]},
        ],
        "authType": "oauth-personal",
    }
    path = _write(tmp_path / "checkpoint-header.json", value)
    report = import_gemini(store, path)
    cid = report.conversation_id
    assert cid.startswith("gemini-")
    assert [r.kind for r in store.source_records(cid)] == [
        "content:user",
        "content:model",
        "content:user",
        "content:model",
    ]
    assert store.get_conversation(cid).metadata["gemini"]["checkpoint"] == {
        "authType": "oauth-personal"
    }
    out = tmp_path / "out.json"
    export_gemini(store, cid, out, checkpoint=True)
    assert json.loads(out.read_text()) == value
    assert import_gemini(store, path).items[0].status == "unchanged"


def test_the_legacy_bare_array_is_read_and_exported_bare(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    cid = import_gemini(memory_store, LEGACY).conversation_id
    messages = memory_store.messages(cid)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2]["content"][0]["tool_use_id"] == messages[1]["content"][0]["id"]
    export_gemini(memory_store, cid, tmp_path / "c.json", checkpoint=True)
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(LEGACY.read_text())


def test_a_session_exports_as_a_checkpoint_of_its_history(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    import_gemini(memory_store, session_log(tmp_path))
    export_gemini(memory_store, SESSION_ID, tmp_path / "c.json", checkpoint=True)
    value = json.loads((tmp_path / "c.json").read_text())
    roles = [c["role"] for c in value["history"]]
    assert roles == ["user", "user", "model", "user", "model"]  # the context stand-in first
    assert value["history"][-1]["parts"] == [{"text": "a.py has tests."}]


@pytest.mark.parametrize("source", [CHECKPOINT, LEGACY], ids=["checkpoint", "bare array"])
def test_a_checkpoint_exports_as_a_session_of_its_messages(
    memory_store: ContextStore, tmp_path: Path, source: Path
) -> None:
    cid = import_gemini(memory_store, source).conversation_id
    out = tmp_path / "session.jsonl"
    export_gemini(memory_store, cid, out)
    chat = read_chat(out, Folder(tmp_path))
    assert {r["type"] for r in chat.records} == {"user", "gemini"}  # it wrote nothing before
    with ContextStore.open(":memory:") as other:
        again = import_gemini(other, out).conversation_id

        def unsigned(contents: Any) -> Any:  # a session's tool calls carry no signature
            if isinstance(contents, list):
                return [unsigned(item) for item in contents]
            if isinstance(contents, dict):
                return {k: unsigned(v) for k, v in contents.items() if k != "thoughtSignature"}
            return contents

        theirs, ours = (
            s.render(c, format="gemini") for s, c in ((other, again), (memory_store, cid))
        )
        if ours[0]["parts"][0].get("text", "").startswith("<session_context>"):
            # a session's environment-context record is no model history (Gemini CLI
            # injects its own on resume), so the chat starts with the model's answer
            ours[0] = {"role": "user", "parts": [{"text": DEFAULT_CONTINUATION}]}
        assert unsigned(theirs) == unsigned(ours)


# -- conversion rules --------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixtures_import_and_render_in_every_format(store: ContextStore, path: Path) -> None:
    cid = import_gemini(store, path).conversation_id
    for format in ("anthropic", "openai", "gemini"):
        assert validate_provider_payload(format, store.render(cid, format=format)) == []


def test_checkpoint_keeps_context_image_and_signature(memory_store: ContextStore) -> None:
    cid = import_gemini(memory_store, CHECKPOINT).conversation_id
    messages = memory_store.messages(cid)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 4
    assert messages[0]["content"][0]["text"].startswith("<session_context>")
    assert memory_store.get_conversation(cid).title == (
        "The CSV export in src/report.py drops the last row. Here is the failing screenshot."
    )
    image = _blocks(messages, "image")[0]
    assert image["source"]["media_type"] == "image/png"
    assert _blocks(messages, "document")[0]["source"] == {
        "type": "url",
        "url": "https://example.com/specs/report-export.pdf",
    }
    assert _blocks(messages, "tool_use")[0]["thoughtSignature"] == "CiQBVKhc7sig1"
    assert not any("off-by-one" in text for text in _texts(messages))
    assert _blocks(messages, "thinking") == []


def test_code_execution_becomes_text_and_same_role_turns_merge() -> None:
    messages = _messages(CHECKPOINT)
    assert [b["text"] for b in messages[5]["content"]] == [
        "```python\nrows = [1, 2, 3]\nprint(rows[:-1])\n```",
        "Output:\n[1, 2]\n",
        "`rows[:-1]` skips the last row; iterate over `rows` instead.",
    ]


def test_calls_pair_with_responses_with_and_without_ids() -> None:
    messages = _messages(CHECKPOINT)
    calls = {b["name"]: b["id"] for b in _blocks(messages, "tool_use")}
    assert calls == {
        "read_file": "read_file-1754300000000-1",
        "run_shell_command": "gemini_call_3_3",
    }
    results = {b["tool_use_id"]: b for b in _blocks(messages, "tool_result")}
    assert set(results) == set(calls.values())
    assert results["gemini_call_3_3"]["is_error"] is True
    assert "is_error" not in results["read_file-1754300000000-1"]


def test_an_unanswered_name_gets_a_synthetic_response_id(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "checkpoint-x.json",
        {
            "history": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "ls", "response": {"files": ["a"]}}},
                        {"functionResponse": {"name": "cat", "response": {"output": "x"}}},
                    ],
                },
            ]
        },
    )
    results = _blocks(_messages(path), "tool_result")
    assert [r["tool_use_id"] for r in results] == ["gemini_call_1_0", "gemini_response_2_1"]
    assert results[0]["content"] == '{"files": ["a"]}'


def _response(call_id: str, name: str, output: str) -> dict[str, Any]:
    """A ``functionResponse`` part with an id of its own and an ``output``."""
    return {"functionResponse": {"id": call_id, "name": name, "response": {"output": output}}}


def test_responses_whose_ids_no_call_has_answer_calls_without_ids_by_name(
    tmp_path: Path,
) -> None:
    """What /chat share writes: calls without ids, each response with an id of its own."""
    read = {"name": "read_file", "args": {"path": "a.py"}}
    path = _write(
        tmp_path / "shared.json",
        [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": read},
                    {"functionCall": {"name": "ls", "args": {}}},
                    {"functionCall": {**read, "args": {"path": "b.py"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    _response("ls-17-1", "ls", "."),
                    _response("read_file-17-2", "read_file", "A"),
                    _response("read_file-17-3", "read_file", "B"),
                    _response("cat-17-4", "cat", "?"),
                ],
            },
        ],
    )
    results = _blocks(_messages(path), "tool_result")
    assert [(r["tool_use_id"], r["content"]) for r in results] == [
        ("gemini_call_1_1", "."),
        ("gemini_call_1_0", "A"),
        ("gemini_call_1_2", "B"),
        ("cat-17-4", "?"),  # no call of that name: its own id, an orphan the view drops
    ]


def test_a_response_id_a_call_has_is_not_taken_by_an_earlier_response_by_name(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "c.json",
        [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": "r1", "name": "read_file", "args": {}}},
                    {"functionCall": {"id": "r2", "name": "read_file", "args": {}}},
                ],
            },
            {
                "role": "user",
                "parts": [_response("other", "read_file", "x"), _response("r1", "read_file", "y")],
            },
        ],
    )
    results = _blocks(_messages(path), "tool_result")
    assert [(r["tool_use_id"], r["content"]) for r in results] == [("r2", "x"), ("r1", "y")]


def test_a_chat_starting_with_the_model_gets_a_user_message_first(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.json", [{"role": "model", "parts": [{"text": "Hello."}]}])
    messages = _messages(path)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["gemini_synthetic"] is True


def test_other_media_types_become_a_text_note(tmp_path: Path) -> None:
    part = {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}}
    path = _write(tmp_path / "c.json", [{"role": "user", "parts": [part]}])
    assert _messages(path)[0]["content"][0]["text"] == (
        "[inlineData omitted: audio/wav, 8 base64 characters]"
    )


def test_a_content_with_a_bad_part_stays_a_record_and_a_stand_in_in_its_place(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = _write(
        tmp_path / "checkpoint-bad.json",
        {
            "history": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "user", "parts": [{"functionCall": {"name": "x"}}]},
                {"role": "system", "parts": []},
            ]
        },
    )
    report = import_gemini(memory_store, path)
    reasons = [(n.position, n.reason) for n in report.items[0].skipped]
    assert reasons[0] == ("history[2]", "role must be 'user' or 'model', got 'system'; left out.")
    assert reasons[1][0] == "history[1].parts[0]" and "belongs in a model turn" in reasons[1][1]
    cid = report.conversation_id
    assert len(memory_store.source_records(cid)) == 2
    messages = memory_store.messages(cid)
    assert _texts(messages) == ["go"]
    assert [(m["role"], "contextstore_refused" in m) for m in messages] == [
        ("user", False),
        ("user", True),
    ]


def test_an_imported_thought_signature_is_sent_back_to_gemini() -> None:
    from contextstore.renderers.gemini import render_contents

    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "c1",
                    "name": "ls",
                    "input": {},
                    "thoughtSignature": "sig-from-gemini",
                }
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "x"}]},
    ]
    assert render_contents(messages)[1]["parts"][0]["thoughtSignature"] == "sig-from-gemini"


# -- folders, damaged and unsafe files ---------------------------------------------------------


def test_the_gemini_tmp_folder_imports_every_project(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    tmp = tmp_path / ".gemini" / "tmp"
    project = tmp / "ab12"
    session_log(project)
    shutil.copy(CHECKPOINT, project / "checkpoint-report.json")
    (project / "checkpoints").mkdir()
    _write(project / "checkpoints" / "tool-restore.json", {"toolCall": {}})  # /restore data
    _write(project / "logs.json", [{"sessionId": "x", "message": "hi"}])
    other = tmp / "cd34" / "chats"
    other.mkdir(parents=True)
    shutil.copy(SESSION, other / SESSION.name)
    steps: list[str] = []
    report = import_gemini(memory_store, tmp, progress=lambda p, n: steps.append(p))
    assert sorted(Path(i.path).name for i in report.items) == sorted(
        ["checkpoint-report.json", "session-2026-08-04T10-00-5e55e55e.jsonl", SESSION.name]
    )
    assert all(i.status == "imported" for i in report.items)
    assert len(steps) == 2 * len(report.items)


def test_a_folder_of_archived_sessions_imports_those_named_as_gemini_names_them(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    archive = tmp_path / "Archives"
    (archive / "2026").mkdir(parents=True)
    shutil.copy(SESSION, archive / "2026" / SESSION.name)
    session_log(tmp_path)
    shutil.move(tmp_path / "chats" / "session-2026-08-04T10-00-5e55e55e.jsonl", archive)
    _write(archive / "settings.json", {"theme": "dark"})
    _write(archive / "session-notes.json", {"sessionId": SESSION_ID, "messages": []})
    report = import_gemini(memory_store, archive)
    assert sorted(Path(i.path).name for i in report.items) == sorted(
        ["session-2026-08-04T10-00-5e55e55e.jsonl", SESSION.name]
    )
    assert all(i.status == "imported" for i in report.items)


def test_a_legacy_json_session_and_its_jsonl_continuation_are_one_conversation(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    chat = read_chat(path, Folder(tmp_path))
    legacy = tmp_path / "chats" / "session-2026-08-04T10-00-5e55e55e.json"
    earlier = [r for r in chat.records if r["id"] != "g3"]
    _write(legacy, {**chat.metadata, "messages": earlier})
    report = import_gemini(memory_store, tmp_path / "chats")
    assert [Path(i.path).suffix for i in report.items] == [".json", ".jsonl"]
    assert [i.status for i in report.items] == ["skipped", "imported"]
    (note,) = report.items[0].skipped
    assert "older copy of session-2026-08-04T10-00-5e55e55e.jsonl" in note.reason
    assert [r.data["id"] for r in memory_store.source_records(SESSION_ID)] == [
        r["id"] for r in chat.records
    ]


def test_importing_a_resumed_legacy_session_again_writes_nothing(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Gemini CLI copies a resumed .json whole into the .jsonl; with more new records than
    # an import re-checks, reading the .json as its own item made a false conflict.
    path = session_log(tmp_path)
    chat = read_chat(path, Folder(tmp_path))
    _write(path.with_suffix(".json"), {**chat.metadata, "messages": chat.records[:2]})
    later = [_record(f"n{i}", "info", f"note {i}", 30 + i) for i in range(300)]
    with path.open("a") as file:
        file.writelines(json.dumps(record) + "\n" for record in later)
    import_gemini(memory_store, tmp_path / "chats")
    before = memory_store.source_records(SESSION_ID)
    again = import_gemini(memory_store, tmp_path / "chats")
    assert [i.status for i in again.items] == ["skipped", "unchanged"]
    assert memory_store.source_records(SESSION_ID) == before


def test_a_legacy_session_continued_beside_it_is_refused_when_named(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    chat = read_chat(path, Folder(tmp_path))
    legacy = _write(path.with_suffix(".json"), {**chat.metadata, "messages": chat.records[:2]})
    import_gemini(memory_store, path)
    before = memory_store.source_records(SESSION_ID)
    with pytest.raises(GeminiChatError, match=r"older copy of .*; import .*\.jsonl instead"):
        import_gemini(memory_store, legacy)
    assert memory_store.source_records(SESSION_ID) == before


def test_a_truncated_legacy_session_keeps_its_complete_records(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = session_log(tmp_path)
    chat = read_chat(path, Folder(tmp_path))
    legacy = tmp_path / "session-x.json"
    text = json.dumps({**chat.metadata, "messages": chat.records})
    cut = text.index('"id": "u3"')
    legacy.write_text(text[: cut + 20])
    report = import_gemini(memory_store, legacy)
    (note,) = report.items[0].skipped
    assert "the JSON breaks off" in note.reason and note.position.startswith("line 1 column")
    assert [r.data["id"] for r in memory_store.source_records(SESSION_ID)] == ["u1", "g1", "i1"]


def test_nothing_readable_is_refused(memory_store: ContextStore, tmp_path: Path) -> None:
    path = tmp_path / "checkpoint-x.json"
    path.write_text("{not json")
    with pytest.raises(GeminiChatError, match="is not a Gemini CLI chat"):
        import_gemini(memory_store, path)
    _write(path, {"history": []})
    with pytest.raises(GeminiChatError, match=r"holds no records; there is nothing to import"):
        import_gemini(memory_store, path)
    # A recording whose only line is not JSON says so; "holds no records" alone read as an
    # empty file.
    session = tmp_path / "session-2026-01-01T10-00-0123abcd.jsonl"
    session.write_text("{not json\n")
    with pytest.raises(GeminiChatError) as refused:
        import_gemini(memory_store, session)
    assert str(refused.value).endswith(
        "holds no records that could be read (line 1: is not JSON (Expecting property name "
        "enclosed in double quotes, column 2); the line was left out (a write cut short?), "
        "the rest was read); there is nothing to import."
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(GeminiChatError, match="holds no Gemini CLI chats"):
        import_gemini(memory_store, tmp_path / "empty")
    assert memory_store.row_counts()["conversations"] == 0


def test_unsafe_files_are_refused_with_nothing_written(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    chats = tmp_path / "chats"
    chats.mkdir()
    shutil.copy(SESSION, chats / SESSION.name)
    outside = tmp_path / "elsewhere.jsonl"
    shutil.copy(SESSION, outside)
    os.symlink(outside, chats / "session-2026-08-05T10-00-ffffffff.jsonl")
    with pytest.raises(OutsideFolderError):
        import_gemini(memory_store, chats)
    os.unlink(chats / "session-2026-08-05T10-00-ffffffff.jsonl")
    deep = "[" * 150 + "]" * 150
    (chats / "session-2026-08-05T10-00-eeeeeeee.jsonl").write_text(
        json.dumps({"sessionId": "d", "projectHash": "p"}) + "\n" + deep + "\n"
    )
    with pytest.raises(NestingTooDeepError, match="line 2"):
        import_gemini(memory_store, chats)
    assert memory_store.row_counts()["conversations"] == 0


def test_a_checkpoint_content_over_the_size_limit_is_a_stand_in(tmp_path: Path) -> None:
    """It refused the whole file; now it keeps its place (test_gemini_refused.py has more)
    and the checkpoint exports as it was."""
    contents = [
        {"role": "user", "parts": [{"text": "x" * 500}]},
        {"role": "model", "parts": [{"text": "Too long."}]},
    ]
    with ContextStore.open(":memory:", max_message_bytes=200) as small:
        path = _write(tmp_path / "c.json", contents)
        item = import_gemini(small, path).items[0]
        (note,) = item.skipped
        assert note.position == "[0]" and "over the store's limit of 200" in note.reason
        messages = small.messages(item.conversation_id)
        assert [(m["role"], m["content"] == "") for m in messages] == [
            ("user", True),
            ("assistant", False),
        ]
        export_gemini(small, item.conversation_id, tmp_path / "out.json", checkpoint=True)
        assert json.loads((tmp_path / "out.json").read_text()) == contents
        assert import_gemini(small, path).items[0].status == "unchanged"


def test_a_lone_surrogate_in_a_jsonl_line_becomes_a_replacement_character(tmp_path: Path) -> None:
    from contextstore.interop.files import Note
    from contextstore.interop.gemini import SessionReplay

    notes: list[Note] = []
    replay = SessionReplay(tmp_path / "session.jsonl", notes)
    replay.line('{"id": "u1", "type": "user", "content": [{"text": "a \\ud83d b"}]}', 2)
    assert replay.records["u1"]["content"][0]["text"] == "a \ufffd b"
    assert [(n.position, "lone surrogate" in n.reason) for n in notes] == [("line 2", True)]


def test_numbers_json_cannot_hold_in_a_jsonl_line_are_read_as_null(tmp_path: Path) -> None:
    from contextstore.interop.files import Note
    from contextstore.interop.gemini import SessionReplay

    notes: list[Note] = []
    replay = SessionReplay(tmp_path / "session.jsonl", notes)
    line = '{"id": "g1", "type": "gemini", "content": "1e999", "tokens": {"input": NaN, '
    line += '"output": -Infinity, "total": 1e308, "cached": -1E400, '
    replay.line(line + '"thoughts": 1E-400}}', 3)
    tokens = replay.records["g1"]["tokens"]
    expected = {"input": None, "output": None, "total": 1e308, "cached": None, "thoughts": 0.0}
    assert tokens == expected
    assert replay.records["g1"]["content"] == "1e999"
    assert [(n.position, n.reason[:12]) for n in notes] == [("line 3", "3 number(s) ")]
