"""Damaged and odd files an import meets: each keeps what can be read, says what was not,
and never ends in an internal error, a hang, or a refusal that names no file.

Found by feeding variants of the real agents' files to ``contextstore import``; every case
here is a small synthetic file in the shape the real ones have.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.interop import (
    ImportConflictError,
    ImportStateError,
    OutsideFolderError,
    export_cline,
    export_gemini,
    import_cline,
    import_gemini,
)
from contextstore.renderers.registry import validate_provider_payload
from tests.interop.cline_factory import story, write_storage

SESSION_ID = "5e55e55e-0000-4000-8000-0000000000b4"
SESSION_NAME = "session-2026-08-04T10-00-5e55e55e.jsonl"


def _session_lines(path: Path, *records: dict[str, object]) -> Path:
    """A JSONL session recording: the metadata record, then ``records``."""
    head = {"sessionId": SESSION_ID, "projectHash": "p", "startTime": "2026-08-04T10:00:00.000Z"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in (head, *records)), encoding="utf-8")
    return path


def _user(record_id: str, text: str, second: int) -> dict[str, object]:
    return {
        "id": record_id,
        "timestamp": f"2026-08-04T10:00:{second:02d}.000Z",
        "type": "user",
        "content": text,
    }


@contextmanager
def _fed_if_opened(fifo: Path, text: str) -> Iterator[None]:
    """While the block runs, write ``text`` into ``fifo`` if anything opens it to read, so
    that a reader that should have left the pipe alone gets a chat instead of hanging."""
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                stop.wait(0.01)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as pipe:
                pipe.write(text)
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join()


# -- files that are not files --------------------------------------------------------------


def test_a_pipe_among_the_chats_of_a_folder_is_skipped_with_a_note_never_read(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Reading a pipe blocks until something writes to it: a folder import hung for good.
    chats = tmp_path / "project" / "chats"
    _session_lines(chats / SESSION_NAME, _user("u1", "hello", 1))
    fifo = chats / "session-2026-08-04T11-00-0000aaaa.jsonl"
    os.mkfifo(fifo)
    other = json.dumps({"sessionId": "from-the-pipe", "projectHash": "p"}) + "\n"
    with _fed_if_opened(fifo, other + json.dumps(_user("u9", "piped", 5)) + "\n"):
        report = import_gemini(memory_store, tmp_path / "project")
    by_path = {Path(item.path).name: item for item in report.items}
    assert by_path[SESSION_NAME].status == "imported"
    piped = by_path[fifo.name]
    assert piped.status == "skipped"
    assert [n.reason for n in piped.skipped] == [
        "is not a regular file (a pipe, a device or a socket); it was not read."
    ]
    assert [c.id for c in memory_store.list_conversations()] == [SESSION_ID]


def test_a_task_file_that_is_a_pipe_is_named_as_one_and_left_alone(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(3).write(tmp_path / "tasks" / "1760000000000")
    (folder / "api_conversation_history.json").unlink()
    os.mkfifo(folder / "api_conversation_history.json")
    os.mkfifo(folder / "context_history.json")
    report = import_cline(memory_store, folder)
    item = report.items[0]
    assert item.status == "imported"
    reasons = {Path(n.file).name: n.reason for n in item.skipped}
    assert reasons["api_conversation_history.json"].startswith(
        "is not a regular file (a pipe, a device or a socket): the task's UI messages"
    )
    assert reasons["context_history.json"] == (
        "is not a regular file (a pipe, a device or a socket); it was left out."
    )


# -- NUL characters: kept in a message's content, replaced everywhere else -----------------


def test_nul_characters_outside_a_messages_content_do_not_refuse_the_import(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Command output with a NUL byte (Cline writes it as \u0000) used to refuse the whole
    # storage folder: "row 5 (source_records, ...): data.text contains a NUL character".
    damaged = story(3)
    damaged.api[0]["content"][0]["text"] = "<task>\nFix \x00 the report.\n</task>"
    damaged.api[1]["modelInfo"] = {"modelId": "claude\x00"}
    damaged.ui[0]["text"] = "Fix \x00 the report."
    damaged.ui[2]["text"] = json.dumps({"tokensIn": 10, "cancelReason": "stopped\x00"})
    damaged.ui[1]["lastCheckpointHash"] = "ab\x00cd"
    damaged.task_metadata = {"files_in_context": [{"path": "src/\x00.py"}]}
    damaged.item = {"ts": damaged.ui[-1]["ts"], "task": "Fix \x00 the report."}
    sound = story(2)
    root = write_storage(tmp_path / "storage", {"1760000000000": damaged, "1760000000001": sound})
    (root / "tasks" / "1760000000000" / "focus_chain_taskid_1760000000000.md").write_text(
        "- [ ] a\x00b", encoding="utf-8"
    )
    report = import_cline(memory_store, root)
    assert [item.status for item in report.items] == ["imported", "imported"]
    notes = {
        (Path(n.file).name, n.position): n.reason
        for n in report.items[0].skipped
        if "NUL" in n.reason
    }
    assert set(notes) == {
        ("api_conversation_history.json", "message 1"),
        ("ui_messages.json", "message 0"),
        ("task_metadata.json", None),
        ("taskHistory.json", "HistoryItem 1760000000000"),
        ("focus_chain_taskid_1760000000000.md", None),
    }
    assert notes[("ui_messages.json", "message 0")].startswith(
        "2 NUL character(s) replaced by U+FFFD (the first here)"
    )
    cid = report.items[0].conversation_id
    assert cid is not None
    messages = memory_store.messages(cid)
    assert len(messages) == len(damaged.api)
    assert messages[0]["content"][0]["text"] == "<task>\nFix \x00 the report.\n</task>"
    assert messages[1]["modelInfo"] == {"modelId": "claude\ufffd"}
    conversation = memory_store.get_conversation(cid)
    assert conversation.title == "Fix \ufffd the report."
    records = memory_store.source_records(cid)
    assert records[0].data["text"] == "Fix \ufffd the report."
    assert memory_store.checkpoints(cid)[0].git_hash == "ab\ufffdcd"
    assert memory_store.requests(cid)[0].failure == "stopped\ufffd"
    assert memory_store.check().ok


def test_nul_characters_in_a_gemini_session_stay_in_its_messages_only(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = tmp_path / "chats" / SESSION_NAME
    _session_lines(path, _user("u1", "read a\x00b", 1))
    with path.open("a", encoding="utf-8") as log:
        answer = {
            "id": "g1",
            "timestamp": "2026-08-04T10:00:02.000Z",
            "type": "gemini",
            "content": "done",
            "model": "gemini\x00",
            "tokens": {"input": 5, "output": 2, "cached": 0},
        }
        log.write(json.dumps(answer) + "\n")
        log.write(json.dumps({"$set": {"summary": "Reading\x00"}}) + "\n")
    item = import_gemini(memory_store, path).items[0]
    assert item.status == "imported"
    assert {(n.position, n.reason[:40]) for n in item.skipped} == {
        ("messages[0]", "2 NUL character(s) replaced by U+FFFD (t"),
        ("session metadata", "1 NUL character(s) replaced by U+FFFD (t"),
    }
    assert memory_store.messages(SESSION_ID)[0]["content"][0]["text"] == "read a\x00b"
    records = memory_store.source_records(SESSION_ID)
    assert [r.data["content"] for r in records] == ["read a\ufffdb", "done"]
    assert memory_store.requests(SESSION_ID)[0].model_id == "gemini\ufffd"
    conversation = memory_store.get_conversation(SESSION_ID)
    assert (conversation.title, conversation.model_id) == ("Reading\ufffd", "gemini\ufffd")
    assert memory_store.check().ok


# -- values of the wrong type where a name is expected -------------------------------------


def test_a_record_whose_type_role_or_call_id_is_an_object_is_left_out_by_itself(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Each of these was looked up in a set of names and ended in an internal error (exit 70).
    path = _session_lines(
        tmp_path / "chats" / SESSION_NAME,
        _user("u1", "hello", 1),
        {**_user("u2", "typed", 2), "type": {"user": True}},
        {"id": "c1", "role": ["user"], "parts": [{"text": "a Content"}]},
        {
            "id": "g1",
            "timestamp": "2026-08-04T10:00:03.000Z",
            "type": "gemini",
            "content": "reading",
            "toolCalls": [{"id": {"call": 1}, "name": "read_file", "args": {}}],
        },
        {
            "id": "g2",
            "timestamp": "2026-08-04T10:00:04.000Z",
            "type": "gemini",
            "content": [{"functionCall": {"id": ["x"], "name": "ls", "args": {}}}],
        },
    )
    item = import_gemini(memory_store, path).items[0]
    assert item.status == "imported"
    reasons = [(n.position, n.reason) for n in item.skipped]
    assert reasons[:2] == [
        (
            "line 3",
            "message type must be one of error, gemini, info, user, warning, got "
            "{'user': True}; left out.",
        ),
        ("line 4", "role must be 'user' or 'model', got ['user']; left out."),
    ]
    assert [position for position, _ in reasons[2:]] == [
        "messages[1].parts[1]",
        "messages[2].parts[0]",
    ]
    assert all("id must be a string" in reason for _, reason in reasons[2:])
    # the two gemini records keep their places as stand-ins (they were no model history)
    messages = memory_store.messages(SESSION_ID)
    assert [m["content"] for m in messages] == [[{"type": "text", "text": "hello"}], "", ""]
    assert [m.get("gemini_ids") for m in messages] == [["u1"], ["g1"], ["g2"]]
    assert all("contextstore_refused" in m for m in messages[1:])
    assert len(memory_store.source_records(SESSION_ID)) == 3


def test_a_tool_result_block_whose_type_is_a_list_keeps_the_history_after_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(3)
    task.api[2]["content"] = [
        {"type": "tool_result", "tool_use_id": "toolu_0000", "content": [{"type": ["text"]}]}
    ]
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    item = import_cline(memory_store, folder).items[0]
    assert item.status == "imported"
    (note,) = [n for n in item.skipped if n.position == "message 2"]
    assert "content[0].content[0] has type ['text']" in note.reason
    assert "kept in its place" in note.reason
    assert len(memory_store.messages("1760000000000")) == len(task.api)


# -- numbers: an integer too long to be one -------------------------------------------------


def test_an_integer_too_long_for_the_store_is_read_as_null_with_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Python refuses to convert an integer of over 4,300 digits (an internal error, exit 70);
    # one of 301 to 4,300 digits refused the whole import when it was written.
    task = story(3)
    task.api[1]["metrics"] = {"tokens": {"prompt": "HUGE"}}
    task.ui[0]["images"] = "LONG"
    task.ui[2]["text"] = json.dumps({"tokensIn": "HUGE", "tokensOut": 7})
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    for name in ("api_conversation_history.json", "ui_messages.json"):
        path = folder / name
        text = path.read_text(encoding="utf-8").replace('"HUGE"', "9" * 5_000)
        text = text.replace('\\"HUGE\\"', "9" * 5_000)
        path.write_text(text.replace('"LONG"', "-" + "1" * 301), encoding="utf-8")
    item = import_cline(memory_store, folder).items[0]
    assert item.status == "imported"
    notes = {(Path(n.file).name, n.position): n.reason for n in item.skipped}
    assert notes[("api_conversation_history.json", None)].startswith("1 number(s) JSON cannot")
    assert notes[("ui_messages.json", None)].startswith("1 number(s) JSON cannot hold")
    request = notes[("ui_messages.json", "message 2 (api_req_started)")]
    assert "JSON cannot hold (NaN, Infinity, or too large) in tokensIn" in request
    cid = "1760000000000"
    assert memory_store.messages(cid)[1]["metrics"] == {"tokens": {"prompt": None}}
    assert memory_store.source_records(cid)[0].data["images"] is None
    first = memory_store.requests(cid)[0]
    assert (first.tokens_in, first.tokens_out) == (None, 7)
    assert memory_store.check().ok


def test_the_longest_integer_the_store_holds_is_kept(tmp_path: Path) -> None:
    from contextstore.interop.recovery import MAX_INT_DIGITS, recover

    longest = "9" * MAX_INT_DIGITS
    value, damage = recover(f"[{longest}, -{longest}, {longest}9]")
    assert damage is None
    assert value == [int(longest), -int(longest), float("inf")]


def test_an_integer_too_long_in_a_session_line_is_read_as_null(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = _session_lines(tmp_path / "chats" / SESSION_NAME, _user("u1", "hello", 1))
    with path.open("a", encoding="utf-8") as log:
        log.write('{"id": "g1", "type": "gemini", "content": "hi", "timestamp": ')
        log.write('"2026-08-04T10:00:02.000Z", "tokens": {"input": ' + "7" * 4_400 + "}}\n")
    item = import_gemini(memory_store, path).items[0]
    assert item.status == "imported"
    assert [(n.position, n.reason[:28]) for n in item.skipped] == [
        ("line 3", "1 number(s) JSON cannot hold")
    ]
    assert memory_store.source_records(SESSION_ID)[1].data["tokens"] == {"input": None}


def test_export_cline_reads_an_integer_too_long_in_task_history_as_null(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    from contextstore.interop import export_cline

    conv = memory_store.create_conversation()
    memory_store.append(conv.id, "user", "Rename the module")
    history = tmp_path / "state" / "taskHistory.json"
    history.parent.mkdir()
    history.write_text('[{"id": "other", "ts": 1, "size": ' + "8" * 5_000 + "}]")
    export_cline(memory_store, conv.id, tmp_path / "tasks" / "1760000000000")
    items = json.loads(history.read_text(encoding="utf-8"))
    assert items[0] == {"id": "other", "ts": 1, "size": None}
    assert [item["id"] for item in items] == ["other", "1760000000000"]


# -- timestamps no clock wrote ---------------------------------------------------------------


def test_a_stamp_past_any_javascript_date_is_no_timestamp(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # A stamp at the store's limit pushed every later row past it: the whole import was
    # refused ("row 2 ts must be an integer from 0 to 9,007,199,254,740,992").
    task = story(3)
    task.ui[0]["ts"] = 2**53
    task.api[0]["ts"] = 2**53 - 1
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    item = import_cline(memory_store, folder).items[0]
    assert item.status == "imported"
    records = memory_store.source_records("1760000000000")
    assert records[0].source_ts is None and records[0].data["ts"] == 2**53
    stamps = [r.ts for r in records]
    assert stamps == sorted(stamps) and stamps[-1] < 2**53 // 2
    assert memory_store.check().ok


_JS_STAMPS = [
    1,
    1_764_000_000_123,
    253_402_300_799_999,  # the last millisecond of 9999
    253_402_300_800_000,  # the first of 10000: "+010000-..."
    253_402_300_800_000 + 146_097 * 86_400_000 - 1,
    5_000_000_000_000_001,
    8_640_000_000_000_000,  # JavaScript's last date
]


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_timestamps_are_written_and_read_as_javascript_writes_them() -> None:
    """Gemini CLI writes ``new Date(ms).toISOString()``: past the year 9999 that is
    ``+010000-01-01T00:00:00.000Z``, which Python's datetime cannot hold, and exporting a
    conversation stamped there ended in ValueError ("year 10000 is out of range")."""
    from contextstore.interop.plan import format_timestamp, parse_timestamp

    script = "for (const ms of JSON.parse(process.argv[1])) console.log(new Date(ms).toISOString())"
    node = shutil.which("node")
    assert node is not None
    written = subprocess.run(
        [node, "-e", script, json.dumps(_JS_STAMPS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert [format_timestamp(ts) for ts in _JS_STAMPS] == written
    assert [parse_timestamp(text) for text in written] == _JS_STAMPS


def test_a_conversation_past_any_javascript_date_is_refused_by_the_gemini_export(
    tmp_path: Path,
) -> None:
    """The store takes stamps up to 2**53; JavaScript's dates end at 8.64e15, so no Gemini
    CLI file can hold such a conversation: refused by name, nothing written (it was an
    internal error, exit 70)."""
    db = tmp_path / "s.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "late", ts=2**53)
    out = tmp_path / "late.json"
    got = CliRunner().invoke(cli, ["--db", str(db), "export", "gemini", cid, str(out)], obj={})
    assert got.exit_code == 2, got.output
    assert "is later than any date JavaScript, and so Gemini CLI, can hold" in got.output
    assert not out.exists()


# -- parts too large for the row they would go in ---------------------------------------------


def test_a_task_metadata_file_too_large_for_the_metadata_is_left_out_by_itself(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # A long task reads thousands of files: its task_metadata.json outgrows the 1 MiB a
    # conversation's metadata holds, which refused the whole storage folder ("metadata is
    # 2,017,417 bytes as JSON ... keep large data outside the store").
    entry = {"path": "src/module.py", "record_state": "active", "record_source": "read_tool"}
    big = story(3)
    big.task_metadata = {"files_in_context": [dict(entry, n=n) for n in range(14_000)]}
    small = story(2)
    small.task_metadata = {"files_in_context": [entry]}
    root = write_storage(tmp_path / "storage", {"1760000000000": big, "1760000000001": small})
    report = import_cline(memory_store, root)
    assert [item.status for item in report.items] == ["imported", "imported"]
    (note,) = [n for n in report.items[0].skipped if "metadata can hold" in n.reason]
    assert Path(note.file).name == "task_metadata.json"
    assert note.reason.startswith("is 1,")
    assert "task_metadata" not in memory_store.get_conversation("1760000000000").metadata["cline"]
    kept = memory_store.get_conversation("1760000000001").metadata["cline"]["task_metadata"]
    assert kept == small.task_metadata
    assert len(memory_store.messages("1760000000000")) == len(big.api)
    again = import_cline(memory_store, root)
    assert [item.status for item in again.items] == ["unchanged", "unchanged"]


def test_a_session_metadata_key_too_large_is_left_out_by_itself(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = _session_lines(tmp_path / "chats" / SESSION_NAME, _user("u1", "hello", 1))
    with path.open("a", encoding="utf-8") as log:
        log.write(json.dumps({"$set": {"memoryScratchpad": "n" * 1_100_000}}) + "\n")
    item = import_gemini(memory_store, path).items[0]
    assert item.status == "imported"
    (note,) = item.skipped
    assert note.position == "session metadata memoryScratchpad"
    session = memory_store.get_conversation(SESSION_ID).metadata["gemini"]["session"]
    assert session["sessionId"] == SESSION_ID and "memoryScratchpad" not in session


def test_request_details_too_large_for_the_row_are_left_to_the_record(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(3)
    failed = {"tokensIn": 10, "cancelReason": "streaming_failed"}
    task.ui[2]["text"] = json.dumps({**failed, "streamingFailedMessage": "<html>" * 200_000})
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    item = import_cline(memory_store, folder).items[0]
    assert item.status == "imported"
    (note,) = item.skipped
    assert (note.position, note.reason[:50]) == (
        "message 2 (api_req_started)",
        "the request's details (streamingFailedMessage) are",
    )
    first = memory_store.requests("1760000000000")[0]
    assert (first.tokens_in, first.failure, first.details) == (10, "streaming_failed", None)
    assert memory_store.source_records("1760000000000")[2].data == task.ui[2]


def test_whatever_else_the_store_refuses_names_the_file(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    from contextstore.core.errors import InvalidInputError
    from contextstore.interop import InteropError

    class Refusing:
        """The store, refusing the rows as it would a value no importer foresaw."""

        def __getattr__(self, name: str) -> object:
            return getattr(memory_store, name)

        def import_timeline(self, *args: object) -> None:
            raise InvalidInputError("row 4 (api_requests, ts 5): something is wrong.")

    folder = story(2).write(tmp_path / "tasks" / "1760000000000")
    with pytest.raises(InteropError) as raised:
        import_cline(Refusing(), folder)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"{folder}: holds what the store refuses, so nothing was imported: row 4 "
        "(api_requests, ts 5): something is wrong."
    )


# -- calls the store would refuse in a message ------------------------------------------------


def _gemini(record_id: str, second: int, **fields: object) -> dict[str, object]:
    stamp = f"2026-08-04T10:00:{second:02d}.000Z"
    return {"id": record_id, "timestamp": stamp, "type": "gemini", **fields}


def test_a_record_whose_calls_make_no_valid_message_is_a_stand_in_by_itself(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Each refused the whole chat ("converted message 2: content[1] and content[2] are two
    # calls with the id ..."), then was no model history; now each keeps its place.
    ls = {"name": "ls", "args": {}}
    path = _session_lines(
        tmp_path / "chats" / SESSION_NAME,
        _user("u\x001", "hello", 1),
        _gemini("g1", 2, content="twice", toolCalls=[{"id": "c2", **ls}, {"id": "c2", **ls}]),
        _gemini("g2", 3, content="long", toolCalls=[{"id": "x" * 300, **ls}]),
        _gemini("g3", 4, content="nul", toolCalls=[{"id": "c\x003", **ls}]),
        _gemini("g4", 5, content="done"),
    )
    item = import_gemini(memory_store, path).items[0]
    assert item.status == "imported"
    problems = [(n.position, n.reason) for n in item.skipped if "stand-in" in n.reason]
    assert [position for position, _ in problems] == ["messages[1]", "messages[2]", "messages[3]"]
    assert "two calls with the id 'c2'" in problems[0][1]
    assert "id must be at most 200 characters" in problems[1][1]
    messages = memory_store.messages(SESSION_ID)
    texts = [m["content"] and m["content"][0]["text"] for m in messages]
    assert texts == ["hello", "", "", "", "done"]
    assert [m["gemini_ids"] for m in messages] == [["u\ufffd1"], ["g1"], ["g2"], ["g3"], ["g4"]]
    for format in ("anthropic", "openai", "gemini"):
        payload = memory_store.render(SESSION_ID, format=format)
        assert validate_provider_payload(format, payload) == []
    assert len(memory_store.source_records(SESSION_ID)) == 5
    assert memory_store.check().ok


def test_checkpoint_turns_repeating_a_call_id_stay_two_messages(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    call = {"functionCall": {"id": "a", "name": "ls", "args": {}}}
    contents = [
        {"role": "user", "parts": [{"text": "list"}]},
        {"role": "model", "parts": [call]},
        {"role": "model", "parts": [call]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"id": "a", "name": "ls", "response": {}}}],
        },
    ]
    path = tmp_path / "checkpoint-twice.json"
    path.write_text(json.dumps(contents), encoding="utf-8")
    report = import_gemini(memory_store, path)
    roles = [m["role"] for m in memory_store.messages(report.conversation_id)]
    assert roles == ["user", "assistant", "assistant", "user"]


# -- importing again a task folder whose files changed ----------------------------------------


def test_a_task_file_moved_away_or_added_since_the_import_is_named_in_the_conflict(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # The conflict used to blame "an older copy of the history, or a checkpoint restore".
    folder = story(3).write(tmp_path / "tasks" / "1760000000000")
    import_cline(memory_store, folder)
    before = memory_store.row_counts()
    (folder / "ui_messages.json").rename(tmp_path / "ui_messages.json")
    with pytest.raises(ImportConflictError) as gone:
        import_cline(memory_store, folder)
    assert "(ui_messages.json no longer there)" in str(gone.value)
    assert memory_store.row_counts() == before
    (tmp_path / "ui_messages.json").rename(folder / "ui_messages.json")
    assert import_cline(memory_store, folder).items[0].status == "unchanged"

    # a long task: a change within its newest 256 rows would be a rewrite in place
    other = story(60).write(tmp_path / "other" / "tasks" / "1770000000000")
    (other / "api_conversation_history.json").rename(tmp_path / "api.json")
    import_cline(memory_store, other)
    (tmp_path / "api.json").rename(other / "api_conversation_history.json")
    with pytest.raises(ImportConflictError) as new:
        import_cline(memory_store, other)
    assert "(api_conversation_history.json there now)" in str(new.value)
    assert import_cline(memory_store, other, replace=True).items[0].status == "replaced"


def test_a_tool_call_with_lines_no_line_column_holds_imports(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # "²" (a digit to str.isdigit, not to int) and 10**30 ended in internal errors (exit 70).
    task = story(3)
    task.api[1]["content"][1]["input"] = {"path": "src/f0.py", "offset": "²", "limit": 10**30}
    task.api[3]["content"][1]["input"] = {"path": "src/f1.py", "start_line": 10**30}
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    item = import_cline(memory_store, folder).items[0]
    assert item.status == "imported" and item.added["messages"] == len(task.api)
    assert memory_store.check().ok


# -- folder and file names ---------------------------------------------------------------------


def test_a_task_folder_named_with_a_digit_int_cannot_read_imports(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # "12³" is digits to str.isdigit, not to int: sorting the tasks ended in exit 70.
    root = write_storage(tmp_path / "storage", {"12\u00b3": story(2), "1760000000000": story(2)})
    report = import_cline(memory_store, root)
    assert [(item.conversation_id, item.status) for item in report.items] == [
        ("1760000000000", "imported"),
        ("12\u00b3", "imported"),
    ]


class _AppendedMeanwhile:
    """A store on which another thread appends a message between two of an exporter's reads
    (an agent still running), just before the exporter reads the messages' timestamps."""

    def __init__(self, store: ContextStore, conversation_id: str) -> None:
        self._store = store
        self._conversation_id = conversation_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def message_timestamps(self, conversation_id: str) -> list[int]:
        agent = threading.Thread(
            target=self._store.append, args=(self._conversation_id, "user", "meanwhile")
        )
        agent.start()
        agent.join()
        return self._store.message_timestamps(conversation_id)


@pytest.mark.parametrize("exporter", ["cline", "gemini"])
def test_an_export_reads_one_moment_while_an_agent_appends(tmp_path: Path, exporter: str) -> None:
    # The messages and their timestamps were read apart: an append between the two was
    # "zip() argument 2 is longer than argument 1", exit 70.
    with ContextStore.open(tmp_path / "s.db") as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "Read the config.")
        store.append(cid, "assistant", "It sets the port.")
        racing: Any = _AppendedMeanwhile(store, cid)
        if exporter == "cline":
            report = export_cline(racing, cid, tmp_path / "task")
            written = _load_json(tmp_path / "task" / "api_conversation_history.json")
            assert len(written) == 2 and report.counts["messages"] == 2
        else:
            export_gemini(racing, cid, tmp_path / "chat.json")
            written = _load_json(tmp_path / "chat.json")["messages"]
            assert [r["type"] for r in written] == ["user", "gemini"]
        assert len(store.messages(cid)) == 3  # the agent's message landed, after the moment


def _load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _not_utf8(tmp_path: Path, name: bytes) -> Path:
    path = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), name)))
    try:
        path.mkdir(parents=True)
    except OSError:  # a file system that only takes UTF-8 names
        pytest.skip("this file system refuses names that are not UTF-8")
    return path


def test_names_that_are_not_utf8_are_stored_with_a_replacement_character(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Python keeps such bytes as lone surrogates, which no store takes: a checkpoint's
    # conversation id (a hash of its path) ended in exit 70, the rest refused the import.
    task = _not_utf8(tmp_path, b"storage/tasks/17600\xff0000000")
    story(2).write(task)
    item = import_cline(memory_store, task.parent.parent).items[0]
    assert item.status == "imported"
    assert item.conversation_id == "17600\ufffd0000000"
    assert item.path == str(tmp_path / "storage" / "tasks" / "17600\ufffd0000000")
    folder = _not_utf8(tmp_path, b"proj\xe9")
    checkpoint = folder / "checkpoint-fix.json"
    checkpoint.write_text(json.dumps([{"role": "user", "parts": [{"text": "hi"}]}]))
    saved = import_gemini(memory_store, checkpoint).items[0]
    assert saved.status == "imported" and saved.conversation_id is not None
    metadata = memory_store.get_conversation(saved.conversation_id).metadata
    assert metadata["gemini"]["file"] == str(tmp_path / "proj\ufffd" / "checkpoint-fix.json")
    assert memory_store.check().ok


def test_a_note_about_a_file_in_a_folder_whose_name_is_not_utf8_prints_on_a_strict_stdout(
    tmp_path: Path,
) -> None:
    # The note kept the name's lone surrogates: `import --json` on a terminal whose
    # encoding refuses them (PYTHONIOENCODING=utf-8, an en_US.UTF-8 desktop) was exit 70.
    task = _not_utf8(tmp_path, b"tasks/caf\xe9-1760000000000")
    story(2).write(task)
    (task / "ui_messages.json").write_text('[{"ts": 1,', encoding="utf-8")
    environment = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    command = ["import", "cline", str(task), "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", "--db", str(tmp_path / "s.db"), *command],
        capture_output=True,
        env=environment,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    (item,) = json.loads(done.stdout.decode("utf-8"))["items"]
    (note,) = item["skipped"]
    assert note["file"] == str(tmp_path / "tasks" / "caf\ufffd-1760000000000" / "ui_messages.json")


# -- importing again over bookkeeping edited since ---------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rows", "x"),
        ("tail", 5),
        ("tail_ts", ["a"]),
        ("head_ts", None),
        ("last_ts", True),
        ("tail_ts", [2**63]),
        ("last_ts", 2**63),
    ],
)
def test_import_bookkeeping_edited_since_is_a_conflict_that_names_it(
    memory_store: ContextStore, tmp_path: Path, key: str, value: object
) -> None:
    # "rows": "x" and "tail": 5 ended in internal errors (int(), list()); the others
    # passed while the file stayed as it was, and were read with int() once it changed.
    # A timestamp past the store's limit (2**53) was taken as it was.
    folder = story(3).write(tmp_path / "tasks" / "1760000000000")
    import_cline(memory_store, folder)
    metadata = memory_store.get_conversation("1760000000000").metadata
    metadata["import"][key] = value
    memory_store.set_conversation_metadata("1760000000000", metadata)
    before = memory_store.row_counts()
    with pytest.raises(ImportConflictError) as raised:
        import_cline(memory_store, folder)
    assert f"({key} missing or of the wrong type: edited since?)" in str(raised.value)
    assert memory_store.row_counts() == before
    assert import_cline(memory_store, folder, replace=True).items[0].status == "replaced"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("last_ts", "x"),
        ("last_ts", None),
        ("last_ts", [1]),
        ("last_ts", 5.5),
        ("last_ts", True),
        ("last_ts", 2**63),
        ("last_ts", ...),
        ("source", ...),
        ("source", 7),
    ],
)
@pytest.mark.parametrize("kind", ["cline", "gemini", "gemini checkpoint"])
def test_an_export_over_import_bookkeeping_edited_since_is_refused_naming_it(
    tmp_path: Path, key: str, value: object, kind: str
) -> None:
    # int(state["last_ts"]) ended a non-integer, a missing key or a wrong type in exit 70
    # with a traceback; 5.5 and True were taken as 5 and 1, so every imported row was
    # exported again as one written in contextstore, beside its own record.
    folder = story(3).write(tmp_path / "tasks" / "1760000000000")
    session = _session_lines(tmp_path / "chats" / SESSION_NAME, _user("u1", "hello", 1))
    conversation = "1760000000000" if kind == "cline" else SESSION_ID
    db = tmp_path / "a.db"
    with ContextStore.open(db) as store:
        import_cline(store, folder)
        import_gemini(store, session)
        metadata = store.get_conversation(conversation).metadata
        if value is ...:
            del metadata["import"][key]
        else:
            metadata["import"][key] = value
        store.set_conversation_metadata(conversation, metadata)
        out = tmp_path / "out" / ("task" if kind == "cline" else "chat.json")
        export = (
            (lambda: export_cline(store, conversation, out))
            if kind == "cline"
            else (lambda: export_gemini(store, conversation, out, checkpoint=" " in kind))
        )
        with pytest.raises(ImportStateError) as raised:
            export()
        assert f"conversation {conversation!r} holds what an earlier import wrote" in str(
            raised.value
        )
        assert f"({key} missing or of the wrong type: edited since?)" in str(raised.value)
        assert not out.exists()
    out.parent.mkdir(exist_ok=True)  # the folder of a file a command writes must exist
    args = ["export", *kind.split()[:1], conversation, str(out)]
    result = CliRunner().invoke(cli, ["--db", str(db), *args, *(["--checkpoint"] * (" " in kind))])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.stderr
    assert "import again with --replace from the files it came from" in result.stderr
    assert not out.exists()


def test_an_export_over_a_task_file_list_edited_since_is_refused_naming_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # set(5) ended in exit 70 with a traceback.
    folder = story(3).write(tmp_path / "tasks" / "1760000000000")
    import_cline(memory_store, folder)
    metadata = memory_store.get_conversation("1760000000000").metadata
    for files in (5, [1], "api_conversation_history.json"):
        metadata["cline"]["files"] = files
        memory_store.set_conversation_metadata("1760000000000", metadata)
        with pytest.raises(ImportStateError, match=r"\(cline\.files, the task files it read\)"):
            export_cline(memory_store, "1760000000000", tmp_path / "out")
        assert not (tmp_path / "out").exists()
    assert import_cline(memory_store, folder, replace=True).items[0].status == "replaced"
    assert export_cline(memory_store, "1760000000000", tmp_path / "out").files


# -- JSONL lines ---------------------------------------------------------------------------------


def test_a_session_line_holding_a_line_separator_is_one_record(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # JSON.stringify leaves U+2028, U+2029 and U+0085 in strings as they are; str.splitlines()
    # cut the record there, so it was lost and every later line number was off.
    text = "para one\u2028line two\u2029three\x85four"
    path = tmp_path / "chats" / SESSION_NAME
    _session_lines(path, _user("u1", text, 1))
    raw = path.read_text(encoding="utf-8").replace("\\u2028", "\u2028")
    raw = raw.replace("\\u2029", "\u2029").replace("\\u0085", "\x85")
    assert "\u2028" in raw
    path.write_text((raw + '{"id": "broken"\n').replace("\n", "\r\n"), encoding="utf-8")
    item = import_gemini(memory_store, path).items[0]
    assert [(n.position, n.reason[:10]) for n in item.skipped] == [("line 3", "is not JSO")]
    assert memory_store.messages(SESSION_ID)[0]["content"][0]["text"] == text


# -- links that are no chat or task ------------------------------------------------------------


def test_a_link_out_of_the_folder_that_is_no_chat_or_task_is_left_alone(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # It refused the whole import ("copy the file into the folder instead") though it was
    # never going to be read.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("not a chat")
    story(2).write(outside / "not-a-task-but-a-task")
    project = tmp_path / "gemini" / "tmp" / "project"
    _session_lines(project / "chats" / SESSION_NAME, _user("u1", "hello", 1))
    os.symlink(outside / "notes.txt", project / "notes.txt")
    report = import_gemini(memory_store, tmp_path / "gemini" / "tmp")
    assert [item.status for item in report.items] == ["imported"]
    storage = write_storage(tmp_path / "cline", {"1760000000000": story(2)})
    os.symlink(outside / "notes.txt", storage / "tasks" / "notes.txt")
    assert [i.status for i in import_cline(memory_store, storage).items] == ["imported"]
    os.symlink(outside / "not-a-task-but-a-task", storage / "tasks" / "1770000000000")
    with pytest.raises(OutsideFolderError):
        import_cline(memory_store, storage)
