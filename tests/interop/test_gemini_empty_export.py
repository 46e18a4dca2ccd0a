"""``export gemini`` of a conversation with no messages wrote a session of no records (or a
checkpoint of no Contents) that ``import gemini`` then refused ("holds no records"): an
export that could not be imported back. A session without records, named on its own, now
imports as a conversation without messages (a folder's are still skipped with a note), and
a checkpoint of nothing is refused before it is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.interop import GeminiChatError, export_gemini, import_gemini
from tests.cli.conftest import run
from tests.interop.real import GEMINI, need

REAL = GEMINI / "m-gemini" / "session-2025-12-12T21-46-7c761c30.json"


@pytest.mark.parametrize("name", ["s.jsonl", "s.json"])
def test_an_empty_conversation_exports_a_session_that_imports_back(
    tmp_path: Path, name: str
) -> None:
    db, other = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    with ContextStore.open(db) as store:
        made = store.create_conversation(title="nothing yet")
    out = tmp_path / name
    assert run("--db", db, "export", "gemini", made.id, str(out)).code == 0
    got = run("--db", other, "import", "gemini", str(out), "--json")
    assert got.code == 0, got.err
    (item,) = got.json()["items"]
    assert (item["conversation_id"], item["status"], item["skipped"]) == (made.id, "imported", [])
    assert (
        run("--db", other, "import", "gemini", str(out), "--json").json()["items"][0]["status"]
        == "unchanged"
    )
    with ContextStore.open(other) as again:
        assert again.messages(made.id) == []
        assert again.get_conversation(made.id).created_ts == made.created_ts
        export_gemini(again, made.id, tmp_path / f"back-{name}")
    assert json.loads(_as_json(tmp_path / f"back-{name}")) == json.loads(_as_json(out))


def _as_json(path: Path) -> str:
    """A legacy session's text, or a JSONL session's metadata line (it has no other)."""
    text = path.read_text(encoding="utf-8")
    return text if path.suffix == ".json" else text.splitlines()[0]


def test_a_real_session_rolled_back_to_its_start_round_trips(tmp_path: Path) -> None:
    """A real session rolled back to the moment before it began holds nothing; its export
    imports back (into another store), and it grows there as Gemini CLI records on."""
    session = need(REAL)
    with ContextStore.open(tmp_path / "a.db") as store:
        cid = import_gemini(store, session).conversation_id
        assert cid is not None
        store.rollback(cid, to=0)
        assert store.messages(cid) == [] and store.source_records(cid) == []
        out = tmp_path / "chats" / "session-2025-12-12T21-46-7c761c30.jsonl"
        export_gemini(store, cid, out)
    original = json.loads(session.read_text(encoding="utf-8"))
    with ContextStore.open(tmp_path / "b.db") as other:
        assert import_gemini(other, out).items[0].status == "imported"
        assert other.messages(cid) == []
        with out.open("a", encoding="utf-8") as file:
            file.write(json.dumps(original["messages"][0]) + "\n")
        assert import_gemini(other, out).items[0].status == "updated"
        assert len(other.source_records(cid)) == 1


def test_a_folder_still_skips_a_session_without_records(tmp_path: Path) -> None:
    need(REAL)
    chats = tmp_path / "chats"
    chats.mkdir()
    shutil.copy(REAL, chats / REAL.name)
    with ContextStore.open(tmp_path / "a.db") as store:
        made = store.create_conversation()
        export_gemini(store, made.id, chats / "session-2026-01-01T10-00-0123abcd.jsonl")
    with ContextStore.open(tmp_path / "b.db") as other:
        report = import_gemini(other, tmp_path)
        skipped = [item for item in report.items if item.conversation_id is None]
        assert [i.path.endswith("0123abcd.jsonl") for i in skipped] == [True]
        assert "holds no records" in skipped[0].skipped[0].reason
        assert [c.id for c in other.list_conversations()] == [
            json.loads(REAL.read_text())["sessionId"]
        ]


def test_a_session_with_nothing_readable_is_still_refused(tmp_path: Path) -> None:
    """Only a session that has no records is taken: one whose records could not be read
    (a metadata line, then a line that is not JSON) is refused as before."""
    with ContextStore.open(tmp_path / "a.db") as store:
        made = store.create_conversation()
        out = tmp_path / "s.jsonl"
        export_gemini(store, made.id, out)
        with out.open("a", encoding="utf-8") as file:
            file.write("{not json\n")
    with ContextStore.open(tmp_path / "b.db") as other:
        with pytest.raises(GeminiChatError, match="holds no records that could be read"):
            import_gemini(other, out)
        assert other.row_counts()["conversations"] == 0


def test_an_empty_checkpoint_is_not_written(tmp_path: Path) -> None:
    """A checkpoint holds only Contents; one of none is refused by the import, so the export
    refuses to write it."""
    db = str(tmp_path / "a.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
    out = tmp_path / "out" / "checkpoint-x.json"
    out.parent.mkdir()  # the folder of a file a command writes must exist
    got = run("--db", db, "export", "gemini", cid, str(out), "--checkpoint")
    assert got.code == 2, got.err
    assert f"conversation '{cid}' holds no messages, so a checkpoint of it" in got.err
    assert "Nothing was written." in got.err and "Traceback" not in got.err
    assert not out.exists() and list(out.parent.iterdir()) == []
