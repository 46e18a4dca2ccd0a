"""Gemini CLI chats: checkpoints and session recordings import, render, and bad files fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.interop.gemini import read_chat
from contextstore.interop.gemini_convert import GeminiChatError
from contextstore.interop.gemini_import import import_gemini_chat
from contextstore.renderers.registry import validate_provider_payload

DATA = Path(__file__).parent / "data" / "gemini"
CHECKPOINT = DATA / "checkpoint-report-fix.json"
LEGACY = DATA / "checkpoint-legacy.json"
SESSION = DATA / "session-2026-08-04T10-00-a1b2c3d4.jsonl"
FIXTURES = [CHECKPOINT, LEGACY, SESSION]


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


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# -- import and render --------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixtures_import_and_render_in_every_format(store: ContextStore, path: Path) -> None:
    result = import_gemini_chat(store, path)
    cid = result.conversation_id
    assert store.messages(cid) == list(result.messages)
    for message in result.messages:
        normalize_message_dict(message)
    for format in ("anthropic", "openai", "gemini"):
        payload = store.render(cid, format=format)
        assert payload
        assert validate_provider_payload(format, payload) == []


def test_checkpoint_keeps_context_image_and_signature(memory_store: ContextStore) -> None:
    result = import_gemini_chat(memory_store, CHECKPOINT)
    messages = list(result.messages)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 4
    assert messages[0]["content"][0]["text"].startswith("<session_context>")
    conversation = memory_store.get_conversation(result.conversation_id)
    assert conversation.title == (
        "The CSV export in src/report.py drops the last row. Here is the failing screenshot."
    )
    image = _blocks(messages, "image")[0]
    assert image["source"]["type"] == "base64"
    assert image["source"]["media_type"] == "image/png"
    document = _blocks(messages, "document")[0]
    assert document["source"] == {
        "type": "url",
        "url": "https://example.com/specs/report-export.pdf",
    }
    read_call = _blocks(messages, "tool_use")[0]
    assert read_call["thoughtSignature"] == "CiQBVKhc7sig1"
    assert memory_store.messages(result.conversation_id)[3]["content"][1] == read_call


def test_thoughts_are_dropped(memory_store: ContextStore) -> None:
    result = import_gemini_chat(memory_store, CHECKPOINT)
    assert not any("off-by-one" in text for text in _texts(list(result.messages)))
    assert _blocks(list(result.messages), "thinking") == []


def test_code_execution_becomes_text_and_same_role_turns_merge() -> None:
    messages = read_chat(CHECKPOINT).messages
    assert [b["text"] for b in messages[5]["content"]] == [
        "```python\nrows = [1, 2, 3]\nprint(rows[:-1])\n```",
        "Output:\n[1, 2]\n",
        "`rows[:-1]` skips the last row; iterate over `rows` instead.",
    ]


def test_calls_pair_with_responses_with_and_without_ids() -> None:
    messages = read_chat(CHECKPOINT).messages
    calls = {b["name"]: b["id"] for b in _blocks(messages, "tool_use")}
    assert calls == {
        "read_file": "read_file-1754300000000-1",
        "run_shell_command": "gemini_call_3_3",
    }
    results = {b["tool_use_id"]: b for b in _blocks(messages, "tool_result")}
    assert set(results) == set(calls.values())
    assert results["gemini_call_3_3"]["is_error"] is True
    assert results["gemini_call_3_3"]["content"] == "Command exited with code 1: 1 failed"
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
    results = _blocks(read_chat(path).messages, "tool_result")
    assert [r["tool_use_id"] for r in results] == ["gemini_call_1_0", "gemini_response_2_1"]
    assert results[0]["content"] == '{"files": ["a"]}'


def test_the_legacy_bare_array_is_read_and_empty_turns_dropped(
    memory_store: ContextStore,
) -> None:
    result = import_gemini_chat(memory_store, LEGACY)
    assert result.kind == "legacy-checkpoint"
    messages = list(result.messages)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2]["content"][0]["tool_use_id"] == messages[1]["content"][0]["id"]


def test_a_chat_starting_with_the_model_gets_a_user_message_first(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.json", [{"role": "model", "parts": [{"text": "Hello."}]}])
    chat = read_chat(path)
    assert [m["role"] for m in chat.messages] == ["user", "assistant"]
    assert chat.messages[0]["gemini_synthetic"] is True
    assert any("starts with a model turn" in note for note in chat.skipped)


def test_other_media_types_become_a_text_note(tmp_path: Path) -> None:
    part = {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}}
    path = _write(tmp_path / "c.json", [{"role": "user", "parts": [part]}])
    chat = read_chat(path)
    assert chat.messages[0]["content"][0]["text"] == (
        "[inlineData omitted: audio/wav, 8 base64 characters]"
    )
    assert "audio/wav" in chat.skipped[0]


# -- session recordings -------------------------------------------------------------------


def test_session_last_write_wins_and_rewind_removes_the_tail(memory_store: ContextStore) -> None:
    result = import_gemini_chat(memory_store, SESSION)
    messages = list(result.messages)
    texts = _texts(messages)
    assert "I'll glob for them." in texts
    assert "Delete src/dates.py." not in texts and "Deleting it now." not in texts
    assert texts[-2:] == ["Which one exports CSV?", "src/report.py exports CSV."]
    assert [m["gemini_ids"] for m in messages] == [["u1"], ["g1"], ["g1"], ["g2"], ["u4"], ["g4"]]
    assert _blocks(messages, "tool_result")[0]["content"] == "src/report.py\nsrc/dates.py"
    conversation = memory_store.get_conversation(result.conversation_id)
    assert conversation.model_id == "gemini-2.5-flash"
    assert conversation.metadata["gemini_session"]["summary"].startswith("Listing")


def test_session_skips_info_commands_and_unknown_records() -> None:
    skipped = read_chat(SESSION).skipped
    assert any(n.startswith("line 13: record of unknown kind") for n in skipped)
    assert any("info message 'i1'" in n for n in skipped)
    assert any("slash command 'u2'" in n for n in skipped)


def test_set_messages_replaces_the_whole_list(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "type": "user", "content": "old question"},
            {"id": "b", "type": "gemini", "content": "old answer"},
            {"$set": {"messages": [{"id": "c", "type": "user", "content": "summary"}]}},
            {"id": "d", "type": "gemini", "content": "new answer"},
        ],
    )
    assert _texts(read_chat(path).messages) == ["summary", "new answer"]


def test_content_records_are_read_as_turns(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "s.jsonl",
        [
            {"id": "1", "role": "user", "parts": [{"text": "hi"}]},
            {"id": "2", "role": "model", "parts": [{"text": "hello"}]},
            {"$rewindTo": "2"},
        ],
    )
    assert read_chat(path).messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "gemini_ids": ["1"]}
    ]


# -- refusals -----------------------------------------------------------------------------


def _corrupt(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_a_corrupted_file_is_refused_with_nothing_written(
    memory_store: ContextStore, tmp_path: Path, path: Path
) -> None:
    import_gemini_chat(memory_store, CHECKPOINT)
    before = memory_store.row_counts()
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    _corrupt(copy)
    with pytest.raises(GeminiChatError) as caught:
        import_gemini_chat(memory_store, copy)
    assert caught.value.path == copy
    assert (caught.value.position or "").startswith("line ")
    assert "invalid JSON" in str(caught.value)
    assert isinstance(caught.value, InvalidInputError)
    assert memory_store.row_counts() == before


def test_a_bad_jsonl_line_is_named(tmp_path: Path) -> None:
    lines = SESSION.read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4][:30]
    path = tmp_path / SESSION.name
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(GeminiChatError, match=r"line 5 column \d+: invalid JSON"):
        read_chat(path)


@pytest.mark.parametrize(
    ("value", "position", "problem"),
    [
        ({"history": [{"role": "system", "parts": []}]}, "history[0]", "role must be"),
        ({"history": [{"role": "user", "parts": "hi"}]}, "history[0]", "parts must be"),
        ({"history": [{"role": "user", "parts": [7]}]}, "history[0].parts[0]", "Part object"),
        (
            {"history": [{"role": "user", "parts": [{"functionCall": {"name": "x"}}]}]},
            "history[0].parts[0]",
            "belongs in a model turn",
        ),
        (
            [{"role": "model", "parts": [{"functionCall": {"name": "x", "args": []}}]}],
            "[0].parts[0]",
            "args must be an object",
        ),
        ([{"role": "user", "parts": [{"inlineData": {"data": "x"}}]}], "[0].parts[0]", "mime"),
        ({"history": []}, None, "holds no messages"),
        ({"messages": "x", "sessionId": "s"}, "messages", "must be an array"),
        ("text", None, "expected"),
    ],
)
def test_wrong_shapes_are_refused_with_their_position(
    memory_store: ContextStore, tmp_path: Path, value: Any, position: str | None, problem: str
) -> None:
    path = _write(tmp_path / "checkpoint-bad.json", value)
    with pytest.raises(GeminiChatError, match=problem) as caught:
        import_gemini_chat(memory_store, path)
    assert caught.value.position == position
    assert memory_store.row_counts()["conversations"] == 0


def test_a_bad_session_record_names_its_line(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "s.jsonl", [{"id": "a", "type": "user", "content": "x"}, {"id": 3}])
    with pytest.raises(GeminiChatError) as caught:
        read_chat(path)
    assert caught.value.position == "line 2"


def test_a_message_over_the_size_limit_is_refused_before_writing(tmp_path: Path) -> None:
    with ContextStore.open(":memory:", max_message_bytes=200) as small:
        path = _write(tmp_path / "c.json", [{"role": "user", "parts": [{"text": "x" * 500}]}])
        with pytest.raises(GeminiChatError, match="over the store's limit"):
            import_gemini_chat(small, path)
        assert small.row_counts()["conversations"] == 0


def test_a_failed_append_undoes_the_conversation(
    memory_store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise InvalidInputError("simulated failure")

    monkeypatch.setattr(memory_store, "append_many", failing)
    with pytest.raises(InvalidInputError, match="undone: simulated failure"):
        import_gemini_chat(memory_store, CHECKPOINT)
    assert memory_store.row_counts()["conversations"] == 0


# -- command line -------------------------------------------------------------------------


def test_cli_import_prints_the_id(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import-gemini", str(SESSION)], obj={})
    assert result.exit_code == 0, result.output
    cid = result.stdout.strip()  # only the id on stdout
    assert "6 messages imported from a Gemini CLI session" in result.stderr
    assert "skipped: line 13" in result.stderr
    with ContextStore.open(db) as opened:
        assert len(opened.messages(cid)) == 6


def test_cli_import_of_a_corrupted_file_fails_cleanly(tmp_path: Path) -> None:
    copy = tmp_path / CHECKPOINT.name
    shutil.copy(CHECKPOINT, copy)
    _corrupt(copy)
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "cli.db"), "import-gemini", str(copy)], obj={}
    )
    assert result.exit_code == 2
    assert f"{copy.name}, line " in result.stderr
    assert "Traceback" not in result.output


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
                },
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "x"}]},
    ]
    contents = render_contents(messages)
    call = contents[1]["parts"][0]
    assert call["thoughtSignature"] == "sig-from-gemini"
