"""A Gemini CLI session's ``startTime`` and the conversation's ``created_ts``.

Gemini CLI stamps a session's first record with the session's ``startTime``, and the store's
clock starts before its first row, so ``created_ts`` is one millisecond before ``startTime``
on every real session while each record stays a row at its own ``timestamp``; the README
said ``created_ts`` *is* ``startTime``. The file's ``startTime`` is kept in the metadata and
written back unchanged by every export form.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.interop import export_gemini, import_gemini
from contextstore.interop.plan import parse_timestamp
from tests.interop.real import GEMINI

SESSIONS = sorted((GEMINI / "m-gemini").glob("session-*.json")) if GEMINI.is_dir() else []


@pytest.mark.parametrize("path", SESSIONS, ids=[p.name for p in SESSIONS])
def test_a_real_session_starts_its_clock_just_before_its_first_record(
    memory_store: ContextStore, path: Path, tmp_path: Path
) -> None:
    original = json.loads(path.read_text(encoding="utf-8"))
    start = parse_timestamp(original["startTime"])
    assert start == parse_timestamp(original["messages"][0]["timestamp"])  # as Gemini CLI writes
    cid = import_gemini(memory_store, path).conversation_id
    assert cid is not None
    assert memory_store.get_conversation(cid).created_ts == start - 1  # type: ignore[operator]
    first = memory_store.source_records(cid)[0]
    assert first.ts == first.source_ts == start
    export_gemini(memory_store, cid, tmp_path / "s.json")
    export_gemini(memory_store, cid, tmp_path / "s.jsonl")
    written = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    head = json.loads((tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert written["startTime"] == head["startTime"] == original["startTime"]


def test_a_session_whose_first_record_is_later_starts_at_its_start_time(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    path = tmp_path / "session-2026-08-04T10-00-a1b2c3d4.jsonl"
    lines = [
        {"sessionId": "s-1", "projectHash": "p", "startTime": "2026-08-04T10:00:00.000Z"},
        {
            "id": "u1",
            "timestamp": "2026-08-04T10:00:05.000Z",
            "type": "user",
            "content": [{"text": "hi"}],
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    import_gemini(memory_store, path)
    assert memory_store.get_conversation("s-1").created_ts == parse_timestamp(
        "2026-08-04T10:00:00.000Z"
    )
