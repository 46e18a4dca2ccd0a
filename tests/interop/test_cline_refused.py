"""An API message the store refuses, in the middle of a generated Cline task.

It used to end the imported history there (that message and every one after it were left
out). Now it is kept in its place as a stand-in that renders leave out: every later message
keeps its index (Cline's checkpoints, deleted ranges and ``context_history.json`` address
messages by position), renders break no provider rule, ``export cline`` writes the original
back, and importing the folder again changes nothing. Real tasks get the same edits in
``test_cline_real.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.view import RESULT_MISSING
from contextstore.interop import export_cline, import_cline
from contextstore.interop.cline_messages import as_written
from contextstore.renderers.registry import validate_provider_payload
from tests.interop.cline_factory import Task, story

LIMIT = 20_000
"""The stores' max_message_bytes: every generated message fits, ``oversized`` does not."""
FORMATS = ("anthropic", "openai", "gemini")
Edit = Callable[[dict[str, Any]], None]


def native(task: Task) -> Task:
    """``task`` with each tool's result as a ``tool_result`` block (native tool calling)
    instead of Cline 3.5x's text block."""
    for idx in range(2, len(task.api), 2):
        (call,) = [b for b in task.api[idx - 1]["content"] if b["type"] == "tool_use"]
        first = task.api[idx]["content"][0]
        task.api[idx]["content"][0] = {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "call_id": "",
            "content": first["text"],
        }
    return task


def unknown_block(message: dict[str, Any]) -> None:
    """A block type the store does not know (a server tool's call, say)."""
    message["content"].append({"type": "mcp_tool_use", "id": "mcptoolu_1", "input": {}})


def input_not_an_object(message: dict[str, Any]) -> None:
    """What Cline 3.5x writes when a model's tool arguments parse to an array: no provider
    takes a tool call whose input is not an object."""
    next(b for b in message["content"] if b["type"] == "tool_use")["input"] = ["src/f0.py"]


def image_without_data(message: dict[str, Any]) -> None:
    """What Cline's image blocks hold for a data URL without a comma: no ``data``."""
    message["content"].append(
        {"type": "image", "source": {"type": "base64", "media_type": "image/png"}}
    )


def oversized(message: dict[str, Any]) -> None:
    """A message over the store's max_message_bytes."""
    message["content"].append({"type": "text", "text": "x" * (LIMIT + 1)})


def refused_and_oversized(message: dict[str, Any]) -> None:
    """A message refused for its block, too large to keep with its original."""
    unknown_block(message)
    oversized(message)


TOO_LARGE = (oversized, refused_and_oversized)
CASES = {
    # an assistant message: its call's result, in the next message, loses its call
    "unknown block type, assistant": (3, unknown_block, "unknown type 'mcp_tool_use'"),
    "bad field type, assistant": (3, input_not_an_object, "input must be an object"),
    # a user message: the call before it loses its result
    "unknown block type, user": (4, unknown_block, "unknown type 'mcp_tool_use'"),
    "bad field type, user": (4, image_without_data, "has no source.data"),
    "oversized, user": (4, oversized, f"over the store's limit of {LIMIT:,}"),
    "oversized, assistant": (5, oversized, f"over the store's limit of {LIMIT:,}"),
    "refused and oversized": (4, refused_and_oversized, "unknown type 'mcp_tool_use'"),
}


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("idx", "edit", "reason"), list(CASES.values()), ids=list(CASES))
def test_a_refused_message_keeps_its_place_and_every_message_after_it(
    tmp_path: Path, idx: int, edit: Edit, reason: str
) -> None:
    unedited = native(story(5))
    task = native(story(5))
    edit(task.api[idx])
    folder = task.write(tmp_path / "tasks" / "1760000000000")
    with (
        ContextStore.open(":memory:", max_message_bytes=LIMIT) as store,
        ContextStore.open(":memory:", max_message_bytes=LIMIT) as whole,
    ):
        item = import_cline(store, folder).items[0]
        (note,) = item.skipped
        assert note.position == f"message {idx}" and reason in note.reason
        if edit in TOO_LARGE:
            assert f"over the store's limit of {LIMIT:,}" in note.reason
            assert "export cline writes a text saying it was left out" in note.reason
        cid = item.conversation_id
        stored = store.messages(cid)
        assert len(stored) == len(task.api)
        for position, (message, original) in enumerate(zip(stored, task.api, strict=True)):
            if position == idx:
                assert message["content"] == "" and message["role"] == original["role"]
            else:
                assert message == original
        # every checkpoint keeps the messages it kept before the edit (Cline's positions)
        base = import_cline(whole, unedited.write(tmp_path / "unedited" / "1760000000000"))
        assert base.conversation_id == cid
        checkpoints = list(zip(store.checkpoints(cid), whole.checkpoints(cid), strict=True))
        assert len(checkpoints) > 4
        for ours, theirs in checkpoints:
            kept = len(store.messages(cid, as_of=ours.ts))
            assert kept == len(whole.messages(cid, as_of=theirs.ts))
        for format in FORMATS:
            assert validate_provider_payload(format, whole.render(cid, format=format)) == []
            assert validate_provider_payload(format, store.render(cid, format=format)) == []
        view = store.render(cid, format="anthropic")
        if task.api[idx]["role"] == "user":  # the call before it is answered "result missing"
            missing = [
                b
                for m in view
                if isinstance(m["content"], list)
                for b in m["content"]
                if b.get("type") == "tool_result" and b.get("content") == RESULT_MISSING
            ]
            assert [b["tool_use_id"] for b in missing] == [f"toolu_{idx // 2 - 1:04d}"]
        store.check(cid)
        out = tmp_path / "out" / "1760000000000"
        export_cline(store, cid, out)
        written = _load(out / "api_conversation_history.json")
        if edit in TOO_LARGE:  # too large to keep: a text says so in its place
            (text,) = [b["text"] for b in written[idx]["content"]]
            assert text.startswith("[This message was left out when the task was imported")
            assert reason in text
            assert {**written[idx], "content": task.api[idx]["content"]} == task.api[idx]
            written[idx] = task.api[idx]
        assert written == task.api
        assert _load(out / "ui_messages.json") == task.ui
        assert import_cline(store, folder).items[0].status == "unchanged"


def test_the_original_is_kept_as_json_text_and_its_fields_beside_it(
    store: ContextStore, tmp_path: Path
) -> None:
    """A refused message whose text holds NUL (which a stored value holds only in a
    message's content; PostgreSQL nowhere else): the original, JSON text, escapes it; the
    stand-in keeps the message's fields; the export writes the original back."""
    task = native(story(3))
    task.api[3]["content"][0]["text"] = "a\x00b"
    unknown_block(task.api[3])
    folder = task.write(tmp_path / "t")
    item = import_cline(store, folder).items[0]
    assert [n.position for n in item.skipped] == ["message 3"]
    stand_in = store.messages(item.conversation_id)[3]
    assert stand_in["metrics"] == task.api[3]["metrics"]
    assert stand_in["modelInfo"] == task.api[3]["modelInfo"]
    assert "\x00" not in stand_in["contextstore_refused"]["message"]
    export_cline(store, item.conversation_id, tmp_path / "out")
    assert _load(tmp_path / "out" / "api_conversation_history.json") == task.api
    assert import_cline(store, folder).items[0].status == "unchanged"


def test_a_context_update_addressed_to_a_refused_message_is_left_out_with_a_note(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = native(story(3))
    image_without_data(task.api[4])
    task.context_history = [[4, [2, [[1, [[task.request_ts()[-1], "text", ["gone"], []]]]]]]]
    folder = task.write(tmp_path / "t")
    item = import_cline(memory_store, folder).items[0]
    (note,) = [n for n in item.skipped if n.position and n.position.startswith("update")]
    assert note.position.endswith("message 4 block 1")
    assert "the store could not hold the message" in note.reason
    assert memory_store.context_updates(item.conversation_id) == []
    view = memory_store.render(item.conversation_id, format="anthropic")
    assert "gone" not in json.dumps(view)


def test_a_stand_in_whose_original_cannot_be_read_exports_the_left_out_text() -> None:
    """A marker edited by hand (its original no longer JSON) does not stop an export."""
    stand_in = {
        "role": "user",
        "content": "",
        "ts": 1,
        "contextstore_refused": {"reason": "it was refused.", "message": "{not json"},
    }
    assert as_written(stand_in) == {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "[This message was left out when the task was imported into "
                "contextstore: it was refused.]",
            }
        ],
        "ts": 1,
    }
    original = {"role": "user", "content": [{"type": "mystery"}]}
    kept = {**stand_in, "contextstore_refused": {"reason": "r", "message": json.dumps(original)}}
    assert as_written(kept) == original


def test_a_task_imported_when_a_refused_message_ended_its_history_gets_the_rest(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    """Imported before the stand-in existed, the task held the messages before the refused
    one; imported again, it gets the stand-in and every message after it."""
    task = native(story(4))
    image_without_data(task.api[4])
    folder = tmp_path / "tasks" / "1760000000000"
    cut = Task(api=task.api[:4], ui=task.ui)
    cut.write(folder)  # what the import used to keep
    cid = import_cline(memory_store, folder).conversation_id
    assert len(memory_store.messages(cid)) == 4
    task.write(folder)
    item = import_cline(memory_store, folder).items[0]
    assert item.status == "updated"
    stored = memory_store.messages(cid)
    assert len(stored) == len(task.api) and stored[4]["content"] == ""
    assert stored[5:] == task.api[5:]
    for format in FORMATS:
        assert validate_provider_payload(format, memory_store.render(cid, format=format)) == []
    export_cline(memory_store, cid, tmp_path / "out")
    assert _load(tmp_path / "out" / "api_conversation_history.json") == task.api
    assert import_cline(memory_store, folder).items[0].status == "unchanged"
