"""Gemini CLI files in the shapes its current source writes and reads them (0.4x-0.5x).

The records here are written by hand after the types and calls in Gemini CLI's
``chatRecordingService.ts`` / ``geminiChat.ts`` (what it records for one tool round) and the
rules of its loader (``loadConversationRecord``) and resume (``convertSessionToClientHistory``,
``isIgnoredUserContent``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.view import ORPHANS_DROPPED
from contextstore.interop import export_gemini, import_gemini
from tests.interop.real import gemini_files, load, params

SESSIONS = params([p for p in gemini_files() if p.name.startswith("session-")])

SESSION_ID = "a1b2c3d4-1111-2222-3333-444455556666"
CALL_ID = "read_file_1767000000000_0"


def _stamp(second: int) -> str:
    return f"2026-08-04T10:00:{second:02d}.000Z"


def _result() -> list[dict[str, Any]]:
    return [
        {
            "functionResponse": {
                "id": CALL_ID,
                "name": "read_file",
                "response": {"output": "hello world"},
            }
        }
    ]


def _tool_round() -> list[dict[str, Any]]:
    """One prompt, one tool call and its answer, as Gemini CLI appends them today: the
    ``gemini`` record again once its tool calls complete (with their results), then the
    results it sends back as a ``user`` record of their own."""
    first = {
        "id": "g1",
        "timestamp": _stamp(2),
        "type": "gemini",
        "content": "Reading it.",
        "thoughts": [{"subject": "Reading", "description": "Read it.", "timestamp": _stamp(1)}],
        "tokens": {
            "input": 1200,
            "output": 30,
            "cached": 200,
            "thoughts": 12,
            "tool": 0,
            "total": 1242,
        },
        "model": "gemini-3-pro-preview",
    }
    call = {
        "id": CALL_ID,
        "name": "read_file",
        "args": {"file_path": "a.txt"},
        "result": _result(),
        "status": "success",
        "timestamp": _stamp(3),
        "resultDisplay": "Read 1 line",
        "description": "a.txt",
        "displayName": "ReadFile",
        "renderOutputAsMarkdown": True,
    }
    return [
        {
            "sessionId": SESSION_ID,
            "projectHash": "9c09" * 16,
            "startTime": _stamp(0),
            "lastUpdated": _stamp(0),
        },
        {
            "id": "u1",
            "timestamp": _stamp(1),
            "type": "user",
            "content": [{"text": "read a.txt please"}],
        },
        {"$set": {"lastUpdated": _stamp(1)}},
        first,
        {**first, "toolCalls": [call]},
        {"id": "u2", "timestamp": _stamp(4), "type": "user", "content": _result()},
        {"id": "i1", "timestamp": _stamp(5), "type": "info", "content": "Update available"},
        {
            "id": "g2",
            "timestamp": _stamp(6),
            "type": "gemini",
            "content": "It says hello world.",
            "thoughts": [],
            "model": "gemini-3-pro-preview",
        },
    ]


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block
        for message in messages
        for block in message["content"]
        if isinstance(block, dict) and block["type"] == "tool_result"
    ]


def test_results_recorded_as_a_user_record_are_read_once(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = _jsonl(tmp_path / "session-2026-08-04T10-00-a1b2c3d4.jsonl", _tool_round())
    cid = import_gemini(memory_store, path).conversation_id
    stored = memory_store.messages(cid)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    results = _tool_results(stored)
    assert [(r["tool_use_id"], r["content"]) for r in results] == [(CALL_ID, "hello world")]
    assert stored[2]["gemini_ids"] == ["u2"]  # the record that sent them
    view = memory_store.render(cid)
    assert ORPHANS_DROPPED not in json.dumps(view)  # no result was left over
    contents = memory_store.render(cid, format="gemini")
    responses = [p for c in contents for p in c["parts"] if "functionResponse" in p]
    assert len(responses) == 1


def test_a_result_only_the_gemini_record_holds_is_still_read(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # before about 0.44 (and for a call whose answer was never sent) only toolCalls hold it
    records = [r for r in _tool_round() if r.get("id") != "u2"]
    path = _jsonl(tmp_path / "session-2026-08-04T10-00-a1b2c3d4.jsonl", records)
    cid = import_gemini(memory_store, path).conversation_id
    results = _tool_results(memory_store.messages(cid))
    assert [(r["tool_use_id"], r["content"]) for r in results] == [(CALL_ID, "hello world")]


def test_context_gemini_cli_injects_itself_is_no_model_history(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    image = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
    records = [
        {"sessionId": SESSION_ID, "projectHash": "ab" * 32, "startTime": _stamp(0)},
        # what setHistory records after /resume, a compression or a restore
        {
            "id": "e1",
            "timestamp": _stamp(1),
            "type": "user",
            "content": [
                {"text": "\n<session_context>\nThis is the Gemini CLI.\n</session_context>"}
            ],
        },
        {
            "id": "h1",
            "timestamp": _stamp(2),
            "type": "user",
            "content": [{"text": "<hook_context>branch: main</hook_context>"}],
        },
        {"id": "x1", "timestamp": _stamp(3), "type": "user", "content": [{"text": "   "}]},
        {
            "id": "u1",
            "timestamp": _stamp(4),
            "type": "user",
            "content": [image, {"text": "/tmp/shot.png is the error"}],
        },
        {"id": "g1", "timestamp": _stamp(5), "type": "gemini", "content": "I see it."},
    ]
    path = _jsonl(tmp_path / "session-2026-08-04T10-00-a1b2c3d4.jsonl", records)
    cid = import_gemini(memory_store, path).conversation_id
    stored = memory_store.messages(cid)
    # Gemini CLI reads the image first ("[Image: ...]"), so the text is no slash command
    assert [m.get("gemini_ids") for m in stored] == [["u1"], ["g1"]]
    assert [b["type"] for b in stored[0]["content"]] == ["image", "text"]
    kinds = [r.kind for r in memory_store.source_records(cid, origin="gemini")]
    assert kinds.count("user") == 4  # every record is kept, as written


def _metadata_line(path: Path) -> dict[str, Any]:
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert isinstance(first, dict)
    return first


def test_a_checkpoint_exported_as_jsonl_is_a_session_gemini_cli_loads(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Gemini CLI's loader takes a JSONL file whose metadata has no non-empty sessionId and
    # projectHash for no session (it neither lists nor resumes it)
    project = tmp_path / ("5e" * 32)
    project.mkdir()
    saved = project / "checkpoint-fix.json"
    saved.write_text(
        json.dumps(
            {
                "history": [
                    {"role": "user", "parts": [{"text": "fix it"}]},
                    {"role": "model", "parts": [{"text": "done"}]},
                ]
            }
        ),
        encoding="utf-8",
    )
    cid = import_gemini(memory_store, saved).conversation_id
    out = tmp_path / "session.jsonl"
    export_gemini(memory_store, cid, out)
    metadata = _metadata_line(out)
    assert metadata["sessionId"] == cid
    assert metadata["projectHash"] == "5e" * 32  # the project folder it lay in

    made = memory_store.create_conversation(model_id="gemini-2.5-pro")
    memory_store.append(made.id, "user", "hello")
    export_gemini(memory_store, made.id, tmp_path / "made.jsonl")
    hashed = _metadata_line(tmp_path / "made.jsonl")["projectHash"]
    assert isinstance(hashed, str) and len(hashed) == 64


def test_an_imported_session_without_project_hash_gets_one_in_jsonl_only(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    records = [r for r in _tool_round() if "$set" not in r]
    legacy = {k: v for k, v in records[0].items() if k != "projectHash"}
    legacy["messages"] = records[1:]
    path = tmp_path / "session-2026-08-04T10-00-a1b2c3d4.json"
    path.write_text(json.dumps(legacy), encoding="utf-8")
    cid = import_gemini(memory_store, path).conversation_id
    export_gemini(memory_store, cid, tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))
    assert "projectHash" not in again  # a legacy file needs none: it comes back JSON-equal
    export_gemini(memory_store, cid, tmp_path / "again.jsonl")
    assert _metadata_line(tmp_path / "again.jsonl")["projectHash"]


@pytest.mark.parametrize("path", SESSIONS)
def test_a_whole_legacy_session_on_one_jsonl_line_keeps_its_messages(
    tmp_path: Path, path: Path
) -> None:
    # Gemini CLI's loader reads a metadata line that holds messages as a whole legacy
    # record on one line, and loads its messages
    compact = tmp_path / path.with_suffix(".jsonl").name
    compact.write_text(json.dumps(load(path)) + "\n", encoding="utf-8")
    with ContextStore.open(":memory:") as one, ContextStore.open(":memory:") as other:
        cid = import_gemini(one, path).conversation_id
        again = import_gemini(other, compact).conversation_id
        assert again == cid
        assert other.messages(again) == one.messages(cid)
        assert "messages" not in other.get_conversation(again).metadata["gemini"]["session"]


def _shown_on_resume(history: list[dict[str, Any]]) -> list[str]:
    """The texts ``/resume resume <tag>`` shows: Gemini CLI takes the first Content for the
    environment context (INITIAL_HISTORY_LENGTH = 1) and shows the rest."""
    return ["".join(p.get("text", "") for p in c["parts"]) for c in history[1:]]


@pytest.mark.parametrize("path", SESSIONS)
def test_a_session_saved_as_a_checkpoint_shows_its_first_prompt_on_resume(
    tmp_path: Path, path: Path
) -> None:
    with ContextStore.open(":memory:") as store:
        cid = import_gemini(store, path).conversation_id
        out = tmp_path / "checkpoint-saved.json"
        export_gemini(store, cid, out, checkpoint=True)
        history = json.loads(out.read_text(encoding="utf-8"))["history"]
        first = next(m for m in load(path)["messages"] if m["type"] == "user")
        prompt = first["content"] if isinstance(first["content"], str) else first["content"][0]
        prompt = prompt if isinstance(prompt, str) else prompt["text"]
        assert history[0]["parts"][0]["text"].startswith("<session_context>")
        assert prompt in _shown_on_resume(history)[0]
        # importing it again reads the stand-in as context, not as the chat's title
        title = store.get_conversation(import_gemini(store, out).conversation_id).title
        assert title and prompt.strip().startswith(title)
