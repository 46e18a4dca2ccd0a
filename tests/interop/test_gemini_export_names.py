"""The name ``export gemini`` writes to picks the form: ``.jsonl`` a JSONL session, any other
name the single JSON object; a checkpoint, one JSON document, into a ``.jsonl`` name was
written and then refused by ``import gemini``, which reads such a name line by line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.interop import GeminiChatError, export_gemini, import_gemini
from tests.cli.conftest import run
from tests.interop.real import GEMINI, need

REAL = GEMINI / "m-gemini" / "session-2025-12-12T21-46-7c761c30.json"


@pytest.mark.parametrize("name", ["c.jsonl", "C.JSONL"])
def test_a_checkpoint_into_a_jsonl_name_is_refused(tmp_path: Path, name: str) -> None:
    session = need(REAL)
    db = str(tmp_path / "a.db")
    assert run("--db", db, "import", "gemini", str(session)).code == 0
    cid = json.loads(session.read_text(encoding="utf-8"))["sessionId"]
    out = tmp_path / "out" / name
    out.parent.mkdir()  # the folder of a file a command writes must exist
    got = run("--db", db, "export", "gemini", cid, str(out), "--checkpoint")
    assert got.code == 2, got.err
    assert "a checkpoint is one JSON document" in got.err and "Name it .json" in got.err
    assert "Nothing was written." in got.err and "Traceback" not in got.err
    assert list(out.parent.iterdir()) == []
    with ContextStore.open(db) as store, pytest.raises(GeminiChatError, match="read back as"):
        export_gemini(store, cid, out, checkpoint=True, overwrite=True)
    assert list(out.parent.iterdir()) == []


def test_a_checkpoint_and_a_session_under_other_names_import_back(tmp_path: Path) -> None:
    """What the rule writes, the import reads: a checkpoint into ``.json``, a session into a
    name of no Gemini CLI file (the single JSON object) and into ``.jsonl``."""
    session = need(REAL)
    with ContextStore.open(tmp_path / "a.db") as store:
        cid = import_gemini(store, session).conversation_id
        assert cid is not None
        export_gemini(store, cid, tmp_path / "checkpoint-x.json", checkpoint=True)
        export_gemini(store, cid, tmp_path / "out.txt")
        export_gemini(store, cid, tmp_path / "out.jsonl")
        expected = store.render(cid, format="gemini")
    assert json.loads((tmp_path / "out.txt").read_text(encoding="utf-8")) == json.loads(
        session.read_text(encoding="utf-8")
    )
    for name in ("checkpoint-x.json", "out.txt", "out.jsonl"):
        with ContextStore.open(tmp_path / f"{name}.db") as other:
            report = import_gemini(other, tmp_path / name)
            assert report.items[0].status == "imported", name
            got = report.items[0].conversation_id
            assert got is not None
            if name != "checkpoint-x.json":  # a checkpoint adds an environment context
                assert other.render(got, format="gemini") == expected, name
