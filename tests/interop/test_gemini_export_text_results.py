"""A Cline task's text-block tool results exported as a Gemini CLI session.

Cline 3.5x stores a tool's result as a user text block (``[read_file for 'a.py']
Result:...``); the store's view answers the call with it (view rules, difference 10). A
Gemini session written from such a task used to give every call an empty ``result`` with
``status: success`` and the real result as a user record's text, so Gemini CLI's resume
built no ``functionResponse`` and answered every call "result was lost".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.core.view import RESULT_MISSING
from contextstore.interop import export_gemini, import_cline
from tests.interop.cline_factory import story
from tests.interop.real import CLINE, need

LOST = "The tool execution result was lost due to context management truncation."


def _run(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], obj={})
    return result.exit_code, result.stdout + result.stderr


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def _calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for record in records for call in record.get("toolCalls", [])]


def _outputs(call: dict[str, Any]) -> list[Any]:
    return [part["functionResponse"]["response"].get("output") for part in call["result"]]


def test_exported_session_answers_each_call_with_its_text_result(tmp_path: Path) -> None:
    task = story(3).write(tmp_path / "tasks" / "1760000000000")
    db, out = tmp_path / "a.db", tmp_path / "xg" / "s.jsonl"
    code, text = _run(db, "import", "cline", str(task))
    assert code == 0, text
    out.parent.mkdir()  # the folder of a file a command writes must exist
    code, text = _run(db, "export", "gemini", "1760000000000", str(out))
    assert code == 0, text
    records = _records(out)
    calls = _calls(records)
    assert [c["status"] for c in calls] == ["success"] * 3
    assert [_outputs(c) for c in calls] == [
        [f"[read_file for 'src/f{turn % 2}.py'] Result:\nbody of src/f{turn % 2}.py #{turn}"]
        for turn in range(3)
    ]
    assert [c["result"][0]["functionResponse"]["name"] for c in calls] == ["read_file"] * 3
    user_texts = [p["text"] for r in records if r["type"] == "user" for p in r["content"]]
    assert not [t for t in user_texts if "] Result:" in t]
    # What the store's own Gemini render sends, the session gives back on import.
    code, text = _run(tmp_path / "b.db", "import", "gemini", str(out))
    assert code == 0, text
    with ContextStore.open(db) as a, ContextStore.open(tmp_path / "b.db") as b:
        (back,) = [c.id for c in b.list_conversations()]
        assert b.render(back, format="gemini") == a.render("1760000000000", format="gemini")


def test_a_call_with_no_result_is_not_written_as_a_success(tmp_path: Path) -> None:
    task = story(1).write(tmp_path / "tasks" / "1760000000000")
    with ContextStore.open(tmp_path / "a.db") as store:
        import_cline(store, task)
        call = {"type": "tool_use", "id": "toolu_last", "name": "read_file", "input": {}}
        store.append("1760000000000", "assistant", [call])
        export_gemini(store, "1760000000000", tmp_path / "s.jsonl")
    calls = _calls(_records(tmp_path / "s.jsonl"))
    assert [(c["id"], c["status"], c["result"]) for c in calls][-1] == (
        "toolu_last",
        "cancelled",
        [],
    )
    assert calls[0]["status"] == "success"


def test_a_real_cline_task_exports_every_result_the_view_pairs(tmp_path: Path) -> None:
    task = need(CLINE / "gmfstu-task-1769053680585")
    copy = shutil.copytree(task, tmp_path / "task")
    with ContextStore.open(tmp_path / "a.db") as store:
        (item,) = import_cline(store, copy).items
        cid = item.conversation_id
        export_gemini(store, cid, tmp_path / "s.jsonl")
        rendered = [
            part["functionResponse"]["response"]
            for content in store.render(cid, format="gemini")
            for part in content["parts"]
            if "functionResponse" in part
        ]
    calls = _calls(_records(tmp_path / "s.jsonl"))
    assert len(calls) == len(rendered) == 47
    real = [r["output"] for r in rendered if "output" in r]
    assert len(real) == 46
    assert [o for c in calls for o in _outputs(c)] == real
    assert {c["status"] for c in calls[:-1]} == {"success"}
    assert rendered[-1] in ({"error": LOST}, {"output": RESULT_MISSING})
    assert calls[-1]["status"] == "cancelled"  # attempt_completion: the task ends there
