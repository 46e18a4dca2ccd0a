"""A Gemini CLI message the store cannot hold, in generated sessions and a real one.

A message over the store's ``max_message_bytes`` (a user pasting a large file, a huge tool
output) used to refuse the whole import. Now it keeps its place as a stand-in that renders
leave out, with a note naming the record: every later message keeps its place (so the
rows a re-import fingerprints line up and importing the same file again is ``unchanged``),
renders break no provider rule (a call whose result sat in the stand-in is answered
``result missing``), and ``export gemini`` writes the record back JSON-equal (the record
itself stays whole among the source records). A record too large even for its source
record row is kept as a placeholder that ``export gemini`` writes as a record Gemini CLI
loads, saying it was left out.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.view import RESULT_MISSING
from contextstore.interop import GeminiChatError, export_gemini, gemini_plan, import_gemini
from contextstore.interop.files import Folder
from contextstore.interop.gemini import read_chat, record_problem
from contextstore.renderers.registry import validate_provider_payload
from tests.interop.real import GEMINI, need

LIMIT = 20_000
"""The stores' max_message_bytes: every generated message fits, a ``HUGE`` text does not."""
HUGE = "x" * (LIMIT + 1)
FORMATS = ("anthropic", "openai", "gemini")
NAME = "session-2026-08-04T10-00-a1b2c3d4"
Edit = Callable[[list[dict[str, Any]]], int]
"""Changes a session's records; returns the index of the record made too large."""


def _session(turns: int) -> dict[str, Any]:
    """A legacy single-JSON session: per turn a user question, then a model answer with a
    ``read_file`` call and its result, and its tokens."""
    records: list[dict[str, Any]] = []
    for k in range(turns):
        stamp = f"2026-08-04T10:{k:02d}:00.000Z"
        records.append({"id": f"u{k}", "timestamp": stamp, "type": "user", "content": f"Q{k}?"})
        call = {
            "id": f"read_file-{k}",
            "name": "read_file",
            "args": {"absolute_path": f"/src/f{k}.py"},
            "result": [
                {
                    "functionResponse": {
                        "id": f"read_file-{k}",
                        "name": "read_file",
                        "response": {"output": f"print({k})"},
                    }
                }
            ],
            "status": "success",
            "timestamp": f"2026-08-04T10:{k:02d}:02.000Z",
        }
        records.append(
            {
                "id": f"g{k}",
                "timestamp": f"2026-08-04T10:{k:02d}:01.000Z",
                "type": "gemini",
                "content": f"Reading f{k}.py.",
                "toolCalls": [call],
                "tokens": {"input": 100 + k, "output": 10, "cached": 0, "total": 110 + k},
                "model": "gemini-2.5-pro",
            }
        )
    return {
        "sessionId": "5e55e55e-0000-4000-8000-0000000000aa",
        "projectHash": "ab12",
        "startTime": "2026-08-04T10:00:00.000Z",
        "lastUpdated": f"2026-08-04T10:{turns:02d}:00.000Z",
        "messages": records,
    }


def pasted_file(at: int) -> Edit:
    """The user record ``u<at>`` holds a pasted file over the limit."""

    def edit(records: list[dict[str, Any]]) -> int:
        records[2 * at]["content"] = [{"text": "Look at this:"}, {"text": HUGE}]
        return 2 * at

    return edit


def tool_output(at: int) -> Edit:
    """The call of ``g<at>`` returned an output over the limit (its user turn is)."""

    def edit(records: list[dict[str, Any]]) -> int:
        response = records[2 * at + 1]["toolCalls"][0]["result"][0]["functionResponse"]
        response["response"]["output"] = HUGE
        return 2 * at + 1

    return edit


def model_text(at: int) -> Edit:
    """``g<at>`` answered with a text over the limit (its model turn, with its call)."""

    def edit(records: list[dict[str, Any]]) -> int:
        records[2 * at + 1]["content"] = HUGE
        return 2 * at + 1

    return edit


TURNS = 5
CASES: dict[str, tuple[Edit, str]] = {
    "pasted file, middle": (pasted_file(2), "user"),
    "tool output, middle": (tool_output(2), "user"),
    "model text, middle": (model_text(2), "assistant"),
    "pasted file, end": (pasted_file(TURNS), "user"),
    "tool output, end": (tool_output(TURNS - 1), "user"),
}


def _write(session: dict[str, Any], folder: Path, suffix: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(session, indent=2), encoding="utf-8")
    else:
        head = {k: v for k, v in session.items() if k != "messages"}
        lines = [head, *session["messages"]]
        path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return path


def _replayed(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    chat = read_chat(path, Folder(path.parent))
    return chat.records, chat.metadata


def _missing(view: list[dict[str, Any]]) -> list[str]:
    return [
        b["tool_use_id"]
        for m in view
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("content") == RESULT_MISSING
    ]


def _stand_ins(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if "contextstore_refused" in m]


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
@pytest.mark.parametrize(("edit", "role"), list(CASES.values()), ids=list(CASES))
def test_an_oversized_message_keeps_its_place_and_the_session_comes_in_whole(
    tmp_path: Path, suffix: str, edit: Edit, role: str
) -> None:
    session = _session(TURNS)
    if edit is CASES["pasted file, end"][0]:  # a last question, pasted, not answered yet
        session["messages"].append(
            {"id": f"u{TURNS}", "timestamp": "2026-08-04T11:00:00.000Z", "type": "user"}
        )
    unedited = json.loads(json.dumps(session))
    unedited["messages"][-1].setdefault("content", "Q?")
    at = edit(session["messages"])
    record_id = session["messages"][at]["id"]
    path = _write(session, tmp_path / "edited" / "chats", suffix)
    plain = _write(unedited, tmp_path / "unedited" / "chats", suffix)
    with (
        ContextStore.open(":memory:", max_message_bytes=LIMIT) as store,
        ContextStore.open(":memory:", max_message_bytes=LIMIT) as whole,
    ):
        item = import_gemini(store, path).items[0]
        assert item.status == "imported"
        (note,) = item.skipped
        assert note.position == f"messages[{at}]"
        assert f"record {record_id!r}" in note.reason
        assert f"over the store's limit of {LIMIT:,}" in note.reason
        assert "export gemini writes it back" in note.reason
        cid = item.conversation_id
        assert import_gemini(whole, plain).conversation_id == cid
        ours, theirs = store.messages(cid), whole.messages(cid)
        # every message keeps its place; only the oversized one is a stand-in
        assert len(ours) == len(theirs)
        (idx,) = _stand_ins(ours)
        assert ours[idx]["role"] == role and ours[idx]["content"] == ""
        assert ours[idx]["gemini_ids"] == theirs[idx]["gemini_ids"] == [record_id]
        assert ours[:idx] == theirs[:idx] and ours[idx + 1 :] == theirs[idx + 1 :]
        # the records are kept whole, the request rows too; the timelines line up
        records = [r.data for r in store.source_records(cid, origin="gemini")]
        assert records == session["messages"]
        assert len(store.requests(cid)) == len(whole.requests(cid))
        assert store.message_timestamps(cid) == whole.message_timestamps(cid)
        for format in FORMATS:
            assert validate_provider_payload(format, whole.render(cid, format=format)) == []
            assert validate_provider_payload(format, store.render(cid, format=format)) == []
        view = store.render(cid, format="anthropic")
        if edit in (CASES["tool output, middle"][0], CASES["tool output, end"][0]):
            # the call whose result sat in the stand-in is answered "result missing"
            assert _missing(view) == [f"read_file-{(at - 1) // 2}"]
        else:
            assert _missing(view) == []
        assert HUGE not in json.dumps(view)
        store.check(cid)
        # export writes the record back where it was kept; importing again changes nothing
        out = tmp_path / "out" / f"{NAME}{suffix}"
        export_gemini(store, cid, out)
        if suffix == ".json":
            assert json.loads(out.read_text(encoding="utf-8")) == session
        else:
            assert _replayed(out) == _replayed(path)
        assert import_gemini(store, path).items[0].status == "unchanged"


def test_a_rewind_past_the_stand_in_and_more_recorded_after_it(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """Gemini CLI's /rewind to before an oversized message, then a new turn: the import
    replaces the stand-in and what follows (the newest rows), and the rewound file imports
    as it would have without the oversized message."""
    with ContextStore.open(":memory:", max_message_bytes=LIMIT) as store:
        session = _session(TURNS)
        at = tool_output(TURNS - 1)(session["messages"])
        path = _write(session, tmp_path / "chats", ".jsonl")
        cid = import_gemini(store, path).conversation_id
        assert _stand_ins(store.messages(cid)) == [len(store.messages(cid)) - 1]
        rewound = session["messages"][at - 1]["id"]  # the question before it
        again = {"id": "u9", "timestamp": "2026-08-04T11:00:00.000Z", "type": "user"}
        with path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps({"$rewindTo": rewound}) + "\n")
            stream.write(json.dumps({**again, "content": "Smaller, please."}) + "\n")
        item = import_gemini(store, path).items[0]
        assert item.status == "updated"
        messages = store.messages(cid)
        assert _stand_ins(messages) == []
        assert messages[-1]["content"] == [{"type": "text", "text": "Smaller, please."}]
        assert import_gemini(store, path).items[0].status == "unchanged"


def test_a_record_too_large_for_its_source_record_exports_as_a_placeholder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record over what a source record holds (MAX_MESSAGE_BYTES, 32 MiB: lowered here)
    is kept as a placeholder with its other fields; ``export gemini`` writes it as a record
    Gemini CLI loads (id, timestamp, type, content) that says it was left out, without the
    marker; every other record comes back as it was."""
    monkeypatch.setattr(gemini_plan, "RECORD_LIMIT", 2 * LIMIT)
    session = _session(TURNS)
    records = session["messages"]
    records[5]["toolCalls"][0]["result"][0]["functionResponse"]["response"]["output"] = HUGE * 2
    path = _write(session, tmp_path / "chats", ".json")
    with ContextStore.open(":memory:", max_message_bytes=LIMIT) as store:
        item = import_gemini(store, path).items[0]
        cid = item.conversation_id
        stand_in, placeholder_note = item.skipped
        assert stand_in.position == placeholder_note.position == "messages[5]"
        assert "export gemini writes a placeholder record" in stand_in.reason
        assert "a placeholder with its other fields" in placeholder_note.reason
        kept = store.source_records(cid, origin="gemini")[5].data
        assert kept["contextstore_refused"]["reason"].startswith("it is ")
        assert kept["tokens"] == records[5]["tokens"] and "toolCalls" not in kept
        for format in FORMATS:
            assert validate_provider_payload(format, store.render(cid, format=format)) == []
        out = tmp_path / "out" / f"{NAME}.json"
        export_gemini(store, cid, out)
        written = json.loads(out.read_text(encoding="utf-8"))["messages"]
        placeholder = written[5]
        assert record_problem(placeholder) is None
        assert "contextstore_refused" not in placeholder
        assert {k: placeholder[k] for k in ("id", "timestamp", "type", "model", "tokens")} == {
            k: records[5][k] for k in ("id", "timestamp", "type", "model", "tokens")
        }
        ((text,),) = [[p["text"] for p in placeholder["content"]]]
        assert text.startswith("[This message was left out when the session was imported")
        assert written[:5] == records[:5] and written[6:] == records[6:]
        assert import_gemini(store, path).items[0].status == "unchanged"


def test_a_stand_in_the_store_cannot_hold_either_refuses_the_file(tmp_path: Path) -> None:
    """With a limit below even an empty message's size the file is refused, naming it."""
    path = _write(_session(1), tmp_path / "chats", ".json")
    path.write_text(path.read_text().replace("Q0?", HUGE))
    with ContextStore.open(":memory:", max_message_bytes=20) as small:
        with pytest.raises(GeminiChatError, match="cannot hold even a stand-in"):
            import_gemini(small, path)
        assert small.row_counts()["conversations"] == 0


REAL = GEMINI / "m-gemini" / "session-2025-12-30T01-16-3f9ce747.json"


@pytest.mark.parametrize("at", [8, 10, 12], ids=["user, middle", "tool output", "model, end"])
def test_a_real_session_with_an_oversized_message_comes_in_whole(tmp_path: Path, at: int) -> None:
    """A real session (Gemini CLI 0.22.2) copied and edited: a pasted file in the second
    question, a huge shell output, a long last answer."""
    source = need(REAL)
    original = json.loads(source.read_text(encoding="utf-8"))
    edited = json.loads(source.read_text(encoding="utf-8"))
    record = edited["messages"][at]
    if record["type"] == "user":
        record["content"] = [{"text": "Here is the log:"}, {"text": HUGE}]
    elif record.get("toolCalls"):
        response = record["toolCalls"][0]["result"][0]["functionResponse"]["response"]
        response["output"] = HUGE
    else:
        record["content"] = HUGE
    (tmp_path / "plain").mkdir()
    (tmp_path / "edited").mkdir()
    plain = shutil.copy(source, tmp_path / "plain" / source.name)
    path = tmp_path / "edited" / source.name
    path.write_text(json.dumps(edited, indent=2), encoding="utf-8")
    with (
        ContextStore.open(":memory:", max_message_bytes=LIMIT) as store,
        ContextStore.open(":memory:", max_message_bytes=LIMIT) as whole,
    ):
        item = import_gemini(store, path).items[0]
        cid = item.conversation_id
        (note,) = [n for n in item.skipped if n.position == f"messages[{at}]"]
        assert f"record {record['id']!r}" in note.reason
        assert list(import_gemini(whole, Path(plain)).items[0].skipped) == [
            n for n in item.skipped if n is not note
        ]
        ours, theirs = store.messages(cid), whole.messages(cid)
        assert len(ours) == len(theirs)
        (idx,) = _stand_ins(ours)
        assert record["id"] in ours[idx]["gemini_ids"]
        assert ours[:idx] == theirs[:idx] and ours[idx + 1 :] == theirs[idx + 1 :]
        for format in FORMATS:
            before = validate_provider_payload(format, whole.render(cid, format=format))
            assert validate_provider_payload(format, store.render(cid, format=format)) == before
        store.check(cid)
        out = tmp_path / "out" / source.name
        export_gemini(store, cid, out)
        written = json.loads(out.read_text(encoding="utf-8"))
        assert written == edited and written != original
        assert import_gemini(store, path).items[0].status == "unchanged"


def test_a_pasted_file_over_32_mib_at_the_stores_own_limits(
    store: ContextStore, tmp_path: Path
) -> None:
    """At the default limits (32 MiB for a message and for a source record), a user pasting
    a file of 33 MiB: the message is a stand-in, the record a placeholder; the session comes
    in whole on each backend, exports as a session Gemini CLI loads and imports again
    ``unchanged``."""
    session = _session(3)
    session["messages"][2]["content"] = [{"text": "x" * (33 * 1024 * 1024)}]
    path = _write(session, tmp_path / "chats", ".jsonl")
    item = import_gemini(store, path).items[0]
    assert item.status == "imported"
    assert [n.position for n in item.skipped] == ["messages[2]", "messages[2]"]
    cid = item.conversation_id
    messages = store.messages(cid)
    assert len(messages) == 9 and _stand_ins(messages) == [3]
    for format in FORMATS:
        assert validate_provider_payload(format, store.render(cid, format=format)) == []
    out = tmp_path / "out" / f"{NAME}.jsonl"
    export_gemini(store, cid, out)
    records, metadata = _replayed(out)
    assert metadata == _replayed(path)[1]
    placeholder = records[2]
    assert record_problem(placeholder) is None and "contextstore_refused" not in placeholder
    assert placeholder["id"] == "u1" and placeholder["type"] == "user"
    assert "left out when the session was imported" in placeholder["content"][0]["text"]
    assert records[:2] + records[3:] == session["messages"][:2] + session["messages"][3:]
    assert import_gemini(store, path).items[0].status == "unchanged"


def test_a_checkpoint_with_a_stand_in_exports_as_a_session_saying_what_was_left_out(
    tmp_path: Path,
) -> None:
    """A checkpoint's Contents become session records when exported as a session (they are
    no session records themselves): a stand-in's record says what was left out and why,
    where it would have exported as nothing (a user message) or an empty answer."""
    contents = [
        {"role": "user", "parts": [{"text": "Q0?"}]},
        {"role": "model", "parts": [{"text": "A0."}]},
        {"role": "user", "parts": [{"text": HUGE}]},
        {"role": "model", "parts": [{"text": "A1."}]},
    ]
    path = tmp_path / "checkpoint-big.json"
    path.write_text(json.dumps({"history": contents}), encoding="utf-8")
    with ContextStore.open(":memory:", max_message_bytes=LIMIT) as store:
        item = import_gemini(store, path).items[0]
        ((note_position),) = [n.position for n in item.skipped]
        assert note_position == "history[2]"
        cid = item.conversation_id
        out = tmp_path / "out" / f"{NAME}.jsonl"
        export_gemini(store, cid, out)
        records, _ = _replayed(out)
        assert [(r["type"], r["content"][0]["text"][:40]) for r in records] == [
            ("user", "Q0?"),
            ("gemini", "A0."),
            ("user", "[This message was left out when the sess"),
            ("gemini", "A1."),
        ]
        assert f"over the store's limit of {LIMIT:,}" in records[2]["content"][0]["text"]
        export_gemini(store, cid, tmp_path / "again.json", checkpoint=True)
        saved = json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))
        assert saved == {"history": contents}
        assert import_gemini(store, path).items[0].status == "unchanged"
