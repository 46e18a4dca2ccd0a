"""Real Gemini CLI files (``../shared/real/gemini``): import, render, export, re-import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.interop import ImportConflictError, export_gemini, import_gemini
from contextstore.interop.plan import parse_timestamp
from tests.interop.real import (
    GEMINI,
    archived_rows,
    continued_session,
    gemini_files,
    load,
    need,
    older_session,
    params,
    stored_rows,
)

FILES = params(gemini_files())
SESSIONS = params([p for p in gemini_files() if p.name.startswith("session-")])
FORMATS = (None, "anthropic", "openai", "gemini")


@pytest.mark.parametrize("path", FILES)
def test_imports_and_renders_in_every_format(store: ContextStore, path: Path) -> None:
    report = import_gemini(store, path)
    cid = report.conversation_id
    assert report.items[0].status == "imported"
    assert store.messages(cid)
    for format in FORMATS:
        store.render(cid, format=format)
    store.check(cid)


def test_a_users_archive_folder_of_sessions_imports_whole(memory_store: ContextStore) -> None:
    archive = need(GEMINI / "m-gemini")
    report = import_gemini(memory_store, archive)
    assert sorted(Path(i.path).name for i in report.items) == sorted(
        p.name for p in archive.glob("session-*.json")
    )
    assert [i.status for i in report.items] == ["imported"] * len(report.items)


@pytest.mark.parametrize("path", SESSIONS)
def test_every_record_is_kept_at_its_timestamp(memory_store: ContextStore, path: Path) -> None:
    cid = import_gemini(memory_store, path).conversation_id
    original = load(path)
    records = memory_store.source_records(cid, origin="gemini")
    assert [r.data for r in records] == original["messages"]
    assert [r.kind for r in records] == [m["type"] for m in original["messages"]]
    for record in records:
        assert record.source_ts == parse_timestamp(record.data["timestamp"])
    stamps = [r.ts for r in records]
    assert stamps == sorted(stamps)
    # a record's row is at its own timestamp unless an earlier row already took that ms
    taken = [r for r in records if r.ts != r.source_ts]
    assert all(r.source_ts is not None and r.ts > r.source_ts for r in taken)
    assert len(taken) <= len(records) // 4
    non_model = [r for r in records if r.kind in ("info", "error", "warning")]
    assert len(non_model) == sum(
        1 for m in original["messages"] if m["type"] in ("info", "error", "warning")
    )


@pytest.mark.parametrize("path", SESSIONS)
def test_each_gemini_record_with_tokens_is_a_request_row(
    memory_store: ContextStore, path: Path
) -> None:
    cid = import_gemini(memory_store, path).conversation_id
    with_tokens = [
        m
        for m in load(path)["messages"]
        if m["type"] == "gemini" and isinstance(m.get("tokens"), dict)
    ]
    requests = memory_store.requests(cid)
    assert len(requests) == len(with_tokens) > 0
    for request, record in zip(requests, with_tokens, strict=True):
        tokens = record["tokens"]
        assert request.tokens_in == tokens["input"] - tokens["cached"]
        assert request.cache_reads == tokens["cached"]
        assert request.tokens_out == tokens["output"]
        assert request.total_tokens == tokens["input"] + tokens["output"]
        assert request.details == {"tokens": tokens}
        assert request.model_id == record.get("model")
        # the request comes before the model's answer on the timeline
        before = memory_store.source_records(cid, as_of=request.ts)
        assert before[-1].data is not None and before[-1].data["id"] == record["id"]


@pytest.mark.parametrize("path", SESSIONS)
def test_session_metadata_is_kept_on_the_conversation(
    memory_store: ContextStore, path: Path
) -> None:
    cid = import_gemini(memory_store, path).conversation_id
    original = load(path)
    conversation = memory_store.get_conversation(cid)
    session = conversation.metadata["gemini"]["session"]
    assert session == {k: v for k, v in original.items() if k != "messages"}
    assert cid == original["sessionId"]
    assert conversation.created_ts <= parse_timestamp(original["startTime"])  # type: ignore[operator]
    if "summary" in original:
        assert conversation.title == original["summary"]


def _replayed(path: Path) -> dict[str, Any]:
    """A session file as Gemini CLI's loader reads it: metadata plus the final records."""
    from contextstore.interop.files import Folder
    from contextstore.interop.gemini import read_chat

    chat = read_chat(path, Folder(path.parent))
    return {**chat.metadata, "messages": chat.records}


@pytest.mark.parametrize("path", SESSIONS)
def test_export_gives_the_session_back_in_both_forms(
    memory_store: ContextStore, path: Path, tmp_path: Path
) -> None:
    cid = import_gemini(memory_store, path).conversation_id
    export_gemini(memory_store, cid, tmp_path / "s.json")
    assert load(tmp_path / "s.json") == load(path)
    export_gemini(memory_store, cid, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + len(load(path)["messages"])
    assert _replayed(tmp_path / "s.jsonl") == load(path)


@pytest.mark.parametrize("path", FILES)
def test_importing_again_is_idempotent(store: ContextStore, path: Path, tmp_path: Path) -> None:
    import_gemini(store, path)
    before = store.row_counts()
    again = import_gemini(store, path)
    assert again.items[0].status == "unchanged"
    assert store.row_counts() == before


def _older_records(path: Path, older: str) -> list[Any]:
    """The records of an older save of the real session ``path``: its first two thirds, or
    everything up to its last answer but one, saved before that answer's tokens arrived."""
    records: list[Any] = load(path)["messages"]
    if older == "fewer records":
        return records[: len(records) * 2 // 3]
    last = max(i for i, r in enumerate(records[:-1]) if r["type"] == "gemini" and "tokens" in r)
    return [*records[:last], {k: v for k, v in records[last].items() if k != "tokens"}]


@pytest.mark.parametrize("older", ["fewer records", "tokens not yet in"])
@pytest.mark.parametrize("path", SESSIONS)
def test_an_older_copy_of_a_session_never_deletes_what_was_imported(
    store: ContextStore, path: Path, tmp_path: Path, older: str
) -> None:
    """The session continued in its .jsonl is imported; an older save of the legacy .json,
    kept elsewhere (a backup, an archive folder), holds less and nothing newer. Importing it
    deleted the newest rows for good (they were replaced by nothing); now it is a conflict
    that writes nothing, and the .jsonl stays unchanged."""
    session = continued_session(path, tmp_path / "chats")
    copy = older_session(path, tmp_path / "backup", _older_records(path, older))
    cid = import_gemini(store, session).conversation_id
    stored = stored_rows(store, cid)
    with pytest.raises(ImportConflictError, match="holds less than was imported") as caught:
        import_gemini(store, copy)
    assert caught.value.path == copy
    assert "rows where" in str(caught.value) and "nothing was written" in str(caught.value)
    assert stored_rows(store, cid) == stored
    assert import_gemini(store, session).items[0].status == "unchanged"
    assert stored_rows(store, cid) == stored


@pytest.mark.parametrize("path", SESSIONS)
def test_an_older_copy_imported_first_is_continued_by_the_jsonl(
    memory_store: ContextStore, path: Path, tmp_path: Path
) -> None:
    session = continued_session(path, tmp_path / "chats")
    copy = older_session(path, tmp_path / "backup", _older_records(path, "tokens not yet in"))
    assert import_gemini(memory_store, copy).items[0].status == "imported"
    update = import_gemini(memory_store, session).items[0]
    assert update.status == "updated"
    with ContextStore.open(":memory:") as fresh:
        cid = import_gemini(fresh, session).conversation_id
        assert stored_rows(memory_store, cid) == stored_rows(fresh, cid)
    assert archived_rows(memory_store, cid) == update.replaced > 0  # kept, not deleted


def _shares() -> list[Path]:
    """The real ``/chat share`` files (bare Content arrays); skips when they are absent."""
    shares = [p for p in gemini_files() if not p.name.startswith("session-")]
    if not shares:
        pytest.skip("the real agents' files are absent")
    return shares


def test_the_share_export_comes_back_as_the_same_array(tmp_path: Path) -> None:
    with ContextStore.open(":memory:") as store:
        for path in _shares():
            cid = import_gemini(store, path).conversation_id
            out = tmp_path / f"{path.stem}-out.json"
            export_gemini(store, cid, out, checkpoint=True)
            assert load(out) == load(path)
            assert [r.kind for r in store.source_records(cid)] == [
                f"content:{c['role']}" for c in load(path)
            ]


def _responses(path: Path) -> int:
    """The ``functionResponse`` parts a file holds (a share's Contents, or a session's
    calls with a result)."""
    data = load(path)
    if isinstance(data, list):
        return sum(1 for c in data for p in c.get("parts", []) if "functionResponse" in p)
    return sum(1 for m in data["messages"] for call in m.get("toolCalls", []) if call.get("result"))


@pytest.mark.parametrize("path", FILES)
def test_every_response_answers_a_call_in_the_rendered_history(
    memory_store: ContextStore, path: Path
) -> None:
    """A share's calls have no ids and its responses ids of their own: they pair by name,
    so no call of the render is answered with "result missing"."""
    cid = import_gemini(memory_store, path).conversation_id
    rendered = memory_store.render(cid, format="anthropic")
    results = [
        b
        for m in rendered
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    missing = [b for b in results if "result missing" in str(b.get("content"))]
    assert missing == []
    assert len(results) >= _responses(path)


def test_a_share_exported_as_a_session_keeps_every_result(tmp_path: Path) -> None:
    with ContextStore.open(":memory:") as store:
        for path in _shares():
            cid = import_gemini(store, path).conversation_id
            out = tmp_path / f"{path.stem}-session.json"
            export_gemini(store, cid, out)
            calls = [c for m in load(out)["messages"] for c in m.get("toolCalls", [])]
            assert calls and all(c["result"] for c in calls)
            assert len(calls) == _responses(path)
