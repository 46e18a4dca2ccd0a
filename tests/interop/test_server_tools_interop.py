"""Server tool blocks in the files other agents read: a Cline export keeps the Anthropic
messages as stored (and imports back unchanged); a Gemini export shows them as the Gemini
view does, as text, never their encrypted values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contextstore import ContextStore
from contextstore.interop import export_cline, export_gemini, import_cline
from contextstore.renderers.gemini import render_contents
from tests.conftest import assistant, text, user
from tests.server_tools import ENCRYPTED, container_upload, every_pair, search_use


def _history(store: ContextStore) -> tuple[str, list[dict[str, Any]]]:
    cid = store.create_conversation(id="c", model_id="claude-sonnet-4-5").id
    messages = [
        user(container_upload(), "analyse it, then search"),
        assistant(*every_pair()),
        user("and now?"),
        assistant(text("Searching again."), search_use("srvtoolu_20")),
    ]
    for message in messages:
        store.append(cid, message["role"], message["content"])
    return cid, messages


def test_a_cline_export_keeps_the_blocks_and_imports_back(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    cid, messages = _history(memory_store)
    export_cline(memory_store, cid, tmp_path / "task")
    written = json.loads((tmp_path / "task" / "api_conversation_history.json").read_text())
    assert [{"role": m["role"], "content": m["content"]} for m in written] == messages
    with ContextStore.open(":memory:") as other:
        again = import_cline(other, tmp_path / "task").conversation_id
        assert other.messages(again) == memory_store.messages(cid)
        assert other.render(again) == memory_store.render(cid)


def test_a_gemini_export_shows_them_as_the_gemini_view_does(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    cid, messages = _history(memory_store)
    session = tmp_path / "session.jsonl"
    export_gemini(memory_store, cid, session)
    records = [json.loads(line) for line in session.read_text().splitlines()]
    (answer,) = [r for r in records if r.get("type") == "gemini" and len(r["content"]) > 3]
    view = render_contents(messages)
    assert answer["content"] == view[1]["parts"]
    assert ENCRYPTED not in session.read_text()
    checkpoint = tmp_path / "checkpoint.json"
    export_gemini(memory_store, cid, checkpoint, checkpoint=True)
    history = json.loads(checkpoint.read_text())["history"]
    assert [c["parts"] for c in history[-3:]] == [c["parts"] for c in view[1:4]]
    assert ENCRYPTED not in checkpoint.read_text()
