"""A model id, wherever it comes in (the library's calls, the command line, JSON-RPC, the
importers), is held to one rule (``contextstore.core.validate.model_id_problem``): a blank
one (``" "``) was taken, set as the conversation's model, and named in every later request
(``"model": " "``), which no provider answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.errors import InvalidInputError
from contextstore.core.rows import RequestRow
from contextstore.core.validate import model_id_problem
from contextstore.interop import import_cline, import_gemini
from tests.interop.cline_factory import story

BAD = [" ", "\t", "\n", " gpt-4o", "gpt-4o ", "gpt\x004o", "m" * 201, 5, "", "m\ud800"]
"""Model ids refused everywhere: blank, surrounded by whitespace, with NUL, too long, not a
string, empty, not valid Unicode."""

GOOD = ["claude-sonnet-4-5", "anthropic/claude-3.5-sonnet", "gpt 4o", "m" * 200, "modèle", "m\x1b"]
"""Model ids kept as given: a control character inside one is the caller's data (the
command line shows it as a symbol)."""


@pytest.mark.parametrize("value", GOOD)
def test_a_model_id_is_text_without_whitespace_at_its_ends(value: str) -> None:
    assert model_id_problem(value) is None


@pytest.mark.parametrize("value", BAD)
def test_what_is_no_model_id_says_why(value: object) -> None:
    assert model_id_problem(value)


def _calls(store: ContextStore, cid: str) -> dict[str, Callable[[Any], object]]:
    return {
        "model_id": lambda v: store.create_conversation(model_id=v),
        "set_conversation_model": lambda v: store.set_conversation_model(cid, model_id=v),
        "create_subagent": lambda v: store.create_subagent(cid, model_id=v),
        "prepare_request": lambda v: store.prepare_request(cid, model=v),
        "record_request": lambda v: store.record_request(cid, tokens_in=1, model_id=v),
        "import_timeline": lambda v: store.import_timeline(
            cid, [RequestRow(ts=4_000_000_000_000, tokens_in=1, model_id=v)]
        ),
    }


@pytest.mark.parametrize("value", BAD)
def test_every_call_taking_a_model_id_refuses_a_bad_one_and_changes_nothing(
    memory_store: ContextStore, value: object
) -> None:
    cid = memory_store.create_conversation(model_id="m", context_window=1_000).id
    memory_store.append(cid, "user", "hi")
    before = memory_store.row_counts()
    for call, attempt in _calls(memory_store, cid).items():
        named = "model" if call == "prepare_request" else "model_id"
        with pytest.raises(InvalidInputError, match=rf"(^|: ){named} (is|must|starts|holds)"):
            attempt(value)
        assert memory_store.row_counts() == before, call
        assert len(memory_store.list_conversations()) == 1, call
        conv = memory_store.get_conversation(cid)
        assert (conv.model_id, conv.context_window) == ("m", 1_000), call


def test_a_blank_model_id_in_a_cline_task_is_read_as_none_recorded(
    tmp_path: Path, memory_store: ContextStore
) -> None:
    """Cline's files are another tool's: a blank ``modelId`` (task history item, a message's
    ``modelInfo``) is not refused, which would lose the task, but read as no model named, as
    a missing or non-string one is; the next candidate names the conversation's model."""
    task = story(2)
    for message in [*task.api, *task.ui]:
        if "modelInfo" in message:
            message["modelInfo"] = {**message["modelInfo"], "modelId": " "}
    folder = task.write(tmp_path / "tasks" / "1750000000000")
    (item,) = import_cline(memory_store, folder).items
    assert item.status == "imported" and item.conversation_id is not None
    assert memory_store.get_conversation(item.conversation_id).model_id is None
    assert {r.model_id for r in memory_store.requests(item.conversation_id)} == {None}

    task.api[-2]["modelInfo"] = {"modelId": "claude-opus-4-1"}
    other = task.write(tmp_path / "tasks" / "1750000000001")
    (item,) = import_cline(memory_store, other).items
    assert item.conversation_id is not None
    assert memory_store.get_conversation(item.conversation_id).model_id == "claude-opus-4-1"


def test_a_blank_model_in_a_gemini_chat_is_read_as_none_recorded(
    tmp_path: Path, memory_store: ContextStore
) -> None:
    records = [
        {"sessionId": "5e55e55e-0000-4000-8000-000000000001", "projectHash": "ab12",
         "startTime": "2026-08-04T10:00:00.000Z", "lastUpdated": "2026-08-04T10:00:02.000Z",
         "kind": "main"},
        {"id": "u1", "timestamp": "2026-08-04T10:00:01.000Z", "type": "user",
         "content": [{"text": "Hi"}]},
        {"id": "g1", "timestamp": "2026-08-04T10:00:02.000Z", "type": "gemini",
         "content": "Hello.", "model": "  ", "tokens": {"input": 5, "output": 2}},
    ]  # fmt: skip
    path = tmp_path / "session-1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (item,) = import_gemini(memory_store, path).items
    assert item.status == "imported" and item.conversation_id is not None
    assert memory_store.get_conversation(item.conversation_id).model_id is None
    assert {r.model_id for r in memory_store.requests(item.conversation_id)} == {None}
