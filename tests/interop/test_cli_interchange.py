"""The import/export commands: reports, --json, the progress bar on a terminal, aliases."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from tests.interop.cline_factory import story
from tests.interop.real import (
    CLINE,
    GEMINI,
    continued_session,
    earlier_task,
    load,
    need,
    older_session,
)

DATA = Path(__file__).parent / "data"
TASK = DATA / "tasks" / "1732000000000"
SESSION = DATA / "gemini" / "session-2026-08-04T10-00-a1b2c3d4.jsonl"


def _run(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], obj={})
    return result.exit_code, result.stdout, result.stderr


def _storage(tmp_path: Path) -> Path:
    root = tmp_path / "globalStorage"
    shutil.copytree(DATA / "tasks", root / "tasks")
    shutil.copytree(DATA / "state", root / "state")
    story(3).write(root / "tasks" / "1760000000000")
    return root


def test_import_cline_json_reports_added_and_skipped_per_task(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    (root / "tasks" / "1760000000000" / "context_history.json").write_text("[[1,")
    code, out, err = _run(tmp_path / "a.db", "import", "cline", str(root), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [i["conversation_id"] for i in report["items"]] == ["1732000000000", "1760000000000"]
    assert report["items"][0]["added"]["source_records"] == 21
    (note,) = report["items"][1]["skipped"]
    assert note["file"].endswith("context_history.json")
    assert note["position"] == "line 1 column 5 (char 4)" and "breaks off" in note["reason"]
    assert report["added"]["messages"] == 17 + 7
    assert err == ""  # no progress bar under --json, no notes on stderr
    code, out, _ = _run(tmp_path / "a.db", "import", "cline", str(root), "--json")
    assert [i["status"] for i in json.loads(out)["items"]] == ["unchanged", "unchanged"]


def test_import_prints_one_line_per_item_and_notes_on_stderr(tmp_path: Path) -> None:
    code, out, err = _run(tmp_path / "a.db", "import", "gemini", str(SESSION))
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("imported   a1b2c3d4-0000-4000-8000-000000000001")
    assert "6 messages" in line and "1 api_requests" in line
    assert "skipped: " in err and "line 13" in err and "Traceback" not in err
    assert "\r" not in err  # not a terminal: no progress bar


def test_several_paths_import_in_one_transaction(tmp_path: Path) -> None:
    good = story(2).write(tmp_path / "good" / "1760000000001")
    bad = story(2).write(tmp_path / "bad" / "1760000000002")
    (bad / "ui_messages.json").write_text("[" * 500 + "]" * 500)
    code, _, err = _run(tmp_path / "a.db", "import", "cline", str(good), str(bad))
    assert code == 2 and "levels deep" in err and "Traceback" not in err
    with ContextStore.open(tmp_path / "a.db") as store:
        assert store.list_conversations() == []  # the good task did not land either


def test_a_conflict_exits_non_zero_after_importing_the_rest(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    db = tmp_path / "a.db"
    _run(db, "import", "cline", str(root))
    with ContextStore.open(db) as store:
        store.append("1732000000000", "user", "written in contextstore")
    ui_file = root / "tasks" / "1732000000000" / "ui_messages.json"
    ui = json.loads(ui_file.read_text())
    ui.append({"ts": ui[-1]["ts"] + 1000, "type": "ask", "ask": "resume_task"})
    ui_file.write_text(json.dumps(ui))
    story(5).write(root / "tasks" / "1760000000000")
    code, out, err = _run(db, "import", "cline", str(root))
    assert code == 2
    assert [line.split()[0] for line in out.splitlines()] == ["conflict", "updated"]
    assert "changed in contextstore" in err and "--replace" in err


def _counts(db: Path) -> dict[str, int]:
    with ContextStore.open(db, read_only=True) as store:
        return store.row_counts()


def test_an_older_copy_of_a_gemini_session_is_refused_and_replace_takes_it(
    tmp_path: Path,
) -> None:
    """A session continued in its .jsonl, then a shorter legacy .json of it from a backup of
    the chats folder: importing the copy deleted the session's newest rows as "updated"."""
    real = need(GEMINI / "m-gemini" / "session-2025-12-24T06-40-c330aea9.json")
    session = continued_session(real, tmp_path / "tmp" / "ab12" / "chats")
    backup = tmp_path / "backup" / "ab12"
    older = older_session(real, backup / "chats", load(real)["messages"][:-10])
    db = tmp_path / "a.db"
    code, _, err = _run(db, "import", "gemini", str(session))
    assert code == 0, err
    counts = _counts(db)
    code, out, err = _run(db, "import", "gemini", str(older))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {older}: holds less than was imported into conversation ")
    assert "(33 fewer, 15 fewer messages)" in err
    assert "import again with --replace to start the conversation over" in err
    assert "replace=True" not in err and "Traceback" not in err
    assert _counts(db) == counts
    code, out, err = _run(db, "import", "gemini", str(backup))  # the backup's folder
    assert code == 2 and out.startswith("conflict ")
    assert "holds less than was imported" in err and "--replace" in err
    assert _counts(db) == counts
    code, out, err = _run(db, "import", "gemini", str(session))
    assert code == 0 and out.startswith("unchanged "), err
    code, out, err = _run(db, "import", "gemini", str(older), "--replace")
    assert code == 0 and out.startswith("replaced "), err
    assert _counts(db)["messages"] == counts["messages"] - 15


def test_an_older_copy_of_a_cline_task_put_back_is_refused(tmp_path: Path) -> None:
    real = need(CLINE / "gmfstu-task-1769064454592")
    task = tmp_path / "tasks" / real.name
    shutil.copytree(real, task)
    db = tmp_path / "a.db"
    code, _, err = _run(db, "import", "cline", str(task))
    assert code == 0, err
    counts = _counts(db)
    ui_count = len(load(real / "ui_messages.json")) - 10
    older = earlier_task(real, tmp_path / "backup" / real.name, ui_count)
    for file in older.iterdir():
        shutil.copyfile(file, task / file.name)
    code, out, err = _run(db, "import", "cline", str(task))
    assert code == 2 and out == ""
    assert "holds less than was imported" in err and "--replace" in err
    assert _counts(db) == counts
    for file in older.iterdir():
        shutil.copyfile(real / file.name, task / file.name)
    code, out, err = _run(db, "import", "cline", str(task))
    assert code == 0 and out.startswith("unchanged "), err


def test_export_commands_and_their_json(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _run(db, "import", "cline", str(TASK))
    code, out, err = _run(db, "export", "cline", "1732000000000", str(tmp_path / "t"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["counts"]["ui_messages"] == 21
    assert json.loads((tmp_path / "t" / "ui_messages.json").read_text()) == json.loads(
        (TASK / "ui_messages.json").read_text()
    )
    code, _, err = _run(db, "export", "cline", "1732000000000", str(tmp_path / "t"))
    assert code == 2 and "--force" in err
    _run(db, "import", "gemini", str(SESSION))
    cid = "a1b2c3d4-0000-4000-8000-000000000001"
    code, out, err = _run(db, "export", "gemini", cid, str(tmp_path / "s.jsonl"))
    assert code == 0 and out.strip() == str(tmp_path / "s.jsonl"), err
    code, out, _ = _run(db, "export", "gemini", cid, str(tmp_path / "c.json"), "--checkpoint")
    assert code == 0 and "history" in json.loads((tmp_path / "c.json").read_text())
    code, _, err = _run(db, "export", "gemini", "nope", str(tmp_path / "x.json"))
    assert code == 3 and "no conversation" in err


SEARCH_RESULT = {
    "type": "search_result",
    "source": "https://wiki.example.com/retries",
    "title": "Retries",
    "content": [{"type": "text", "text": "Set max_retries in client.toml."}],
}
SEARCH_RESULT_TEXT = (
    "[Search result: Retries]\nSource: https://wiki.example.com/retries\n"
    "Set max_retries in client.toml."
)


def _searched(db: Path) -> str:
    """A conversation whose tool result is a search result, written through the Python API."""
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "How are retries configured?")
        call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "retries"}}
        store.append(cid, "assistant", [call])
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [SEARCH_RESULT]}
        store.append(cid, "user", [result])
        store.append(cid, "assistant", "Set max_retries.")
    return cid


def _tool_result(db: Path, cid: str) -> Any:
    with ContextStore.open(db) as store:
        (result,) = [
            block["content"]
            for message in store.messages(cid)
            if isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
    return result


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_export_gemini_writes_a_search_result_as_its_text(tmp_path: Path, suffix: str) -> None:
    """The session record of a search result held an empty output, so its content was lost;
    it now holds the text the Gemini format sends, and imports back as that text."""
    cid = _searched(tmp_path / "a.db")
    out = tmp_path / f"session{suffix}"
    code, _, err = _run(tmp_path / "a.db", "export", "gemini", cid, str(out))
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    records = (
        [json.loads(line) for line in text.splitlines()[1:]]
        if suffix == ".jsonl"
        else json.loads(text)["messages"]
    )
    (call,) = [c for r in records for c in r.get("toolCalls", [])]
    response = call["result"][0]["functionResponse"]["response"]
    assert response == {"output": SEARCH_RESULT_TEXT}
    code, _, err = _run(tmp_path / "b.db", "import", "gemini", str(out))
    assert code == 0, err
    assert _tool_result(tmp_path / "b.db", cid) == SEARCH_RESULT_TEXT
    checkpoint = tmp_path / "checkpoint.json"
    code, _, err = _run(tmp_path / "a.db", "export", "gemini", cid, str(checkpoint), "--checkpoint")
    assert code == 0, err
    assert SEARCH_RESULT_TEXT in {
        part["functionResponse"]["response"].get("output")
        for content in json.loads(checkpoint.read_text())["history"]
        for part in content["parts"]
        if "functionResponse" in part
    }


def test_export_cline_keeps_a_search_result_as_its_block(tmp_path: Path) -> None:
    """Cline's history is Anthropic's format: the block goes out and comes back as it was."""
    cid = _searched(tmp_path / "a.db")
    task = tmp_path / "tasks" / cid
    task.parent.mkdir()  # export cline makes OUT_DIR, not the folders above it
    code, _, err = _run(tmp_path / "a.db", "export", "cline", cid, str(task))
    assert code == 0, err
    history = json.loads((task / "api_conversation_history.json").read_text())
    assert history[2]["content"][0]["content"] == [SEARCH_RESULT]
    code, _, err = _run(tmp_path / "b.db", "import", "cline", str(task))
    assert code == 0, err
    assert _tool_result(tmp_path / "b.db", cid) == [SEARCH_RESULT]


def test_export_cline_of_a_conversation_without_messages_is_refused_writing_nothing(
    tmp_path: Path,
) -> None:
    """A Cline task holds at least its first message: an empty task folder is one that
    neither Cline nor ``import cline`` can open, so none is written."""
    db = tmp_path / "a.db"
    with ContextStore.open(db) as store:
        empty = store.create_conversation().id
        started = store.create_conversation()
        store.append(started.id, "user", "the task")
        before = store.fork(started.id, at=0).id  # the moment before the task began
    (tmp_path / "tasks").mkdir()  # export cline makes OUT_DIR, not the folders above it
    for cid in (empty, before):
        task = tmp_path / "tasks" / cid
        code, out, err = _run(db, "export", "cline", cid, str(task))
        assert (code, out) == (2, "")
        assert f"conversation {cid} has no messages" in err and "nothing was written" in err
        assert list((tmp_path / "tasks").iterdir()) == []
    code, _, err = _run(db, "export", "cline", started.id, str(tmp_path / "tasks" / started.id))
    assert code == 0, err
    assert _run(tmp_path / "b.db", "import", "cline", str(tmp_path / "tasks" / started.id))[0] == 0


def test_the_old_command_names_are_hidden_aliases(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    for name in ("import-cline", "export-cline", "import-gemini"):
        assert cli.commands[name].hidden
    help_text = CliRunner().invoke(cli, ["--help"], obj={}).stdout
    assert "import-cline" not in help_text and "import " in help_text
    assert _run(db, "import-cline", str(TASK))[0] == 0
    assert _run(db, "export-cline", "1732000000000", str(tmp_path / "out"))[0] == 0
    assert _run(db, "import-gemini", str(SESSION))[0] == 0


def _on_a_terminal(args: list[str], cwd: Path) -> str:
    """Run the CLI with a pseudo-terminal as stdin, stdout and stderr; return its output."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", "from contextstore.cli import main; main()", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        close_fds=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=60)
    os.close(leader)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_none_under_json(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    shown = _on_a_terminal(["--db", str(tmp_path / "a.db"), "import", "cline", str(root)], tmp_path)
    assert "Cline tasks" in shown and "4/4" in shown
    quiet = _on_a_terminal(
        ["--db", str(tmp_path / "b.db"), "import", "cline", str(root), "--json"], tmp_path
    )
    assert "Cline tasks" not in quiet and "4/4" not in quiet
    assert json.loads(quiet)["items"][0]["status"] == "imported"


def test_a_refused_import_into_a_new_database_leaves_nothing_behind(tmp_path: Path) -> None:
    not_a_chat = tmp_path / "object.json"
    not_a_chat.write_text("{}", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    before = sorted(tmp_path.rglob("*"))
    db = tmp_path / "new" / "sub" / "agent.db"
    code, _, err = _run(db, "import", "gemini", str(not_a_chat))
    assert code == 2 and "got an object with neither history nor messages" in err
    code, _, err = _run(db, "import", "cline", str(empty))
    assert code == 2 and "is neither a Cline task folder" in err
    code, _, err = _run(db, "import", "gemini", str(SESSION), str(not_a_chat))  # all or none
    assert code == 2
    assert sorted(tmp_path.rglob("*")) == before


def test_a_refused_import_into_an_existing_database_keeps_it(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    assert _run(db, "import", "gemini", str(SESSION))[0] == 0
    with ContextStore.open(db) as store:
        counts = store.row_counts()
    not_a_chat = tmp_path / "null.json"
    not_a_chat.write_text("null", encoding="utf-8")
    code, _, err = _run(db, "import", "gemini", str(not_a_chat))
    assert code == 2 and "holds null" in err
    with ContextStore.open(db) as store:
        assert store.row_counts() == counts


def _with_bom(source: Path, target: Path) -> None:
    target.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())


def test_files_an_editor_saved_with_a_byte_order_mark_import_as_without_it(
    tmp_path: Path,
) -> None:
    task = need(CLINE / "gmfstu-task-1769064454592")
    chat = need(GEMINI / "m-gemini" / "session-2025-12-12T21-46-7c761c30.json")
    marked = tmp_path / "marked"
    shutil.copytree(task, marked / task.name)
    for name in ("api_conversation_history.json", "ui_messages.json", "task_metadata.json"):
        _with_bom(task / name, marked / task.name / name)
    _with_bom(chat, marked / chat.name)
    lines = [json.dumps(m) for m in load(chat)["messages"]]
    plain = tmp_path / "plain" / "session.jsonl"  # the marked copy's name
    plain.parent.mkdir()
    plain.write_text("\n".join(lines) + "\n")
    _with_bom(plain, marked / "session.jsonl")
    reports: dict[str, list[object]] = {}
    for name, paths in {
        "plain": (task, chat, plain),
        "marked": (marked / task.name, marked / chat.name, marked / "session.jsonl"),
    }.items():
        db = tmp_path / f"{name}.db"
        code, out, err = _run(db, "import", "cline", str(paths[0]), "--json")
        assert code == 0, err
        items = json.loads(out)["items"]
        for path in paths[1:]:
            code, out, err = _run(db, "import", "gemini", str(path), "--json", "--replace")
            assert code == 0, err
            items += json.loads(out)["items"]
        reports[name] = [(i["status"], i["added"], i["skipped"]) for i in items]
        with ContextStore.open(db, read_only=True) as store:
            # a JSONL file without its session line is named by its path: compare contents
            views = sorted(json.dumps(store.messages(c.id)) for c in store.list_conversations())
        reports[name].append(views)
    assert reports["marked"] == reports["plain"]
    assert reports["plain"][0][2] == []  # the real task imports whole


@pytest.mark.parametrize("absent", ["api_conversation_history.json", "ui_messages.json"])
@pytest.mark.parametrize("as_folder", [False, True], ids=["missing", "folder"])
def test_a_task_file_missing_or_a_folder_is_named_in_the_report(
    tmp_path: Path, absent: str, as_folder: bool
) -> None:
    task = need(CLINE / "gmfstu-task-1769064454592")
    copy = tmp_path / task.name
    shutil.copytree(task, copy)
    (copy / absent).unlink()
    if as_folder:
        (copy / absent).mkdir()
    code, out, err = _run(tmp_path / "a.db", "import", "cline", str(copy), "--json")
    assert code == 0, err
    (item,) = json.loads(out)["items"]
    (note,) = item["skipped"]
    assert note["file"] == str(copy / absent)
    why = "is a folder, not a file: " if as_folder else "is missing: "
    assert note["reason"].startswith(why), note["reason"]
    kept = "messages" if absent == "ui_messages.json" else "source_records"
    assert set(item["added"]) >= {kept} and (
        ("source_records" in item["added"]) == (absent != "ui_messages.json")
    )


def test_a_task_metadata_file_that_is_no_object_is_noted_and_exported_back(
    tmp_path: Path,
) -> None:
    task = tmp_path / "cl" / "t_meta"
    task.mkdir(parents=True)
    (task / "task_metadata.json").write_text("[1]\n")
    (task / "api_conversation_history.json").write_text('[{"role":"user","content":"hi"}]')
    db = tmp_path / "c.db"
    code, out, err = _run(db, "import", "cline", str(task), "--json")
    assert code == 0, err
    skipped = {Path(n["file"]).name: n for n in json.loads(out)["items"][0]["skipped"]}
    assert set(skipped) == {"ui_messages.json", "task_metadata.json"}
    assert skipped["task_metadata.json"]["position"] is None
    assert skipped["task_metadata.json"]["reason"].startswith("holds an array, not the object")
    (tmp_path / "out").mkdir()  # export cline makes OUT_DIR, not the folders above it
    code, _, err = _run(db, "export", "cline", "t_meta", str(tmp_path / "out" / "t_meta"))
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "t_meta" / "task_metadata.json").read_text()) == [1]


def test_a_task_file_named_instead_of_its_folder_points_to_the_folder(tmp_path: Path) -> None:
    task = need(CLINE / "gmfstu-task-1769064454592")
    file = task / "api_conversation_history.json"
    code, out, err = _run(tmp_path / "a.db", "import", "cline", str(file))
    assert code == 2 and out == ""
    assert err == (
        f"error: {file}: is one of a Cline task's files; import the task folder that holds it "
        f"({task}), which is read whole.\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("agent", ["gemini", "cline"])
def test_a_link_that_cannot_be_followed_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """A link whose target the system will not resolve (``/proc/1/cwd`` for a process without
    the right to read it) ends the import with its path and reason, not an internal error."""
    folder = tmp_path / "histories"
    if agent == "gemini":
        (folder / "chats").mkdir(parents=True)
        shutil.copy(SESSION, folder / "chats" / SESSION.name)
        blocked = folder / "chats" / "blocked"
    else:
        shutil.copytree(TASK, folder / "tasks" / TASK.name)
        blocked = folder / "tasks" / "1760000000000"  # a task folder, as a link
    target = tmp_path / "elsewhere"
    shutil.copytree(TASK, target)  # a task folder (a link to anything else is never read)
    blocked.symlink_to(target)
    real_path = os.path.realpath

    def refusing(path: Any, *args: Any, **kwargs: Any) -> str:
        if os.fspath(path) == str(blocked):
            raise PermissionError(13, "Permission denied", str(blocked))
        return real_path(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", refusing)
    code, _out, err = _run(tmp_path / "s.db", "import", agent, str(folder))
    assert code == 2, err
    assert err.startswith(f"error: {blocked}: is a link that cannot be followed (Permission ")
    assert "Nothing was imported." in err
    with ContextStore.open(tmp_path / "s.db") as store:
        assert store.list_conversations() == []


def test_an_export_path_too_long_for_the_file_system_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _run(db, "import", "cline", str(TASK))
    too_long = tmp_path / ("n" * 300) / "taskHistory.json"
    before = sorted(tmp_path.iterdir())
    code, _, err = _run(
        db, "export", "cline", "1732000000000", str(tmp_path / "t"), "--history", str(too_long)
    )
    assert code == 2
    assert err == f"error: could not write the file: File name too long ({too_long}).\n"
    assert sorted(tmp_path.iterdir()) == before


def test_rows_an_import_replaced_are_archived_listed_and_restored(tmp_path: Path) -> None:
    """Cline rewrote its newest rows (a resumed task): importing again replaces them, and
    the report names the rollback that archived them; the audit lists it as an import's,
    'show --as-of' a moment among them says how to get them back, and that works."""
    db = tmp_path / "r.db"
    folder = tmp_path / "tasks" / "1760000000000"
    earlier = story(4)
    earlier.api = earlier.api[:6]
    earlier.ui = [m for m in earlier.ui if m["conversationHistoryIndex"] <= 5]
    earlier.ui[-1] = {**earlier.ui[-1], "text": "streaming..."}
    earlier.write(folder)
    code, out, err = _run(db, "import", "cline", str(folder))
    assert code == 0, err
    with ContextStore.open(db) as store:
        before = store.source_records("1760000000000")
    story(4).write(folder)
    code, out, err = _run(db, "import", "cline", str(folder))
    assert code == 0, err
    assert "rows replaced (archived by rollback 1))" in out
    code, out, err = _run(db, "import", "cline", str(folder), "--json")
    assert json.loads(out)["items"][0]["status"] == "unchanged"
    code, out, err = _run(db, "audit", "1760000000000")
    assert code == 0 and "(import)" in out, err
    with ContextStore.open(db) as store:
        (event,) = store.audit("1760000000000").rollbacks
    cutoff = event.cutoff_ts
    code, out, err = _run(db, "show", "1760000000000", "--as-of", str(cutoff + 1))
    assert code == 0 and "an import (rollback 1" in err
    assert f"'contextstore --db {db} rollback 1760000000000 --to {cutoff}', then" in err
    code, out, err = _run(db, "rollback", "1760000000000", "--to", str(cutoff), "--yes")
    assert code == 0, err
    code, out, err = _run(db, "restore", "1760000000000", "1")
    assert code == 0, err
    with ContextStore.open(db) as store:
        assert store.source_records("1760000000000") == before


HISTORY_CASES = {
    "bad JSON": ("{broken", 0),
    "a range that is no range": (
        '[{"id": "1760000000000", "conversationHistoryDeletedRange": "x"}]',
        0,
    ),
    "a range past the history": (
        '[{"id": "1760000000000", "conversationHistoryDeletedRange": [2, 999]}]',
        0,
    ),
    "missing": (None, 2),
    "a folder": ("folder", 2),
    "unreadable": ("unreadable", 2),
}


@pytest.mark.parametrize("case", HISTORY_CASES)
def test_import_cline_history_problems_name_the_file_the_user_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A HistoryItem's range that could not be used was noted under Cline's own place for
    the file (``<storage>/state/taskHistory.json``, next to the task folder's parent),
    which the user never named and which need not exist, instead of --history's FILE."""
    story(3).write(tmp_path / "copy" / "tasks" / "1760000000000")
    history = tmp_path / "elsewhere" / "history-copy.json"
    history.parent.mkdir()
    content, code = HISTORY_CASES[case]
    if content == "folder":
        history.mkdir()
    elif content == "unreadable":
        history.write_text("[]", encoding="utf-8")
        real_read = Path.read_bytes

        def refused(path: Path) -> bytes:
            if path == history:
                raise PermissionError(13, "Permission denied", str(path))
            return real_read(path)

        monkeypatch.setattr(Path, "read_bytes", refused)
    elif content is not None:
        history.write_text(content, encoding="utf-8")
    got_code, out, err = _run(
        tmp_path / "a.db",
        "import",
        "cline",
        str(tmp_path / "copy" / "tasks" / "1760000000000"),
        "--history",
        str(history),
    )
    assert got_code == code, err
    said = out + err
    assert str(history) in said, said
    assert "state/taskHistory.json" not in said and ".tmp" not in said, said


def test_a_range_read_from_history_is_the_same_row_whichever_copy_of_the_file_was_read(
    tmp_path: Path,
) -> None:
    """Notes name the file read; the range row's reason names Cline's file, so that a task
    imported with --history from a copy and later from Cline's storage is unchanged."""
    task = story(4).write(tmp_path / "storage" / "tasks" / "1760000000000")
    item = '[{"id": "1760000000000", "conversationHistoryDeletedRange": [2, 3]}]'
    copy = tmp_path / "history-copy.json"
    copy.write_text(item, encoding="utf-8")
    (tmp_path / "storage" / "state").mkdir()
    (tmp_path / "storage" / "state" / "taskHistory.json").write_text(item, encoding="utf-8")
    db = tmp_path / "a.db"
    assert _run(db, "import", "cline", str(task), "--history", str(copy))[0] == 0
    with contextlib.closing(sqlite3.connect(db)) as connection:
        reasons = connection.execute("SELECT reason FROM deleted_ranges").fetchall()
    assert reasons == [("imported from Cline's taskHistory.json (HistoryItem 1760000000000)",)]
    code, out, err = _run(db, "import", "cline", str(task))
    assert code == 0 and out.startswith("unchanged"), out + err


def test_the_last_line_of_an_import_counts_the_items_by_status(tmp_path: Path) -> None:
    """It said only '5 item(s) in 0.41 s': of 300 tasks, which were new, updated, left
    as they were, skipped or in conflict took reading every line above it."""
    tasks = tmp_path / "storage" / "tasks"
    story(2).write(tasks / "1760000000001")  # unchanged
    story(2).write(tasks / "1760000000002")  # grows: updated
    story(2).write(tasks / "1760000000003")  # rewritten after contextstore wrote to it
    db = tmp_path / "a.db"
    assert _run(db, "import", "cline", str(tasks))[0] == 0
    story(4).write(tasks / "1760000000002")
    with ContextStore.open(db) as store:
        store.append("1760000000003", "user", "written in contextstore")
    story(3).write(tasks / "1760000000003")
    story(2).write(tasks / "1760000000004")  # new
    (tasks / "1760000000005" / "api_conversation_history.json").mkdir(parents=True)  # skipped
    code, out, err = _run(db, "import", "cline", str(tasks))
    assert code == 2, err
    statuses = [line.split()[0] for line in out.splitlines()]
    assert sorted(statuses) == ["conflict", "imported", "skipped", "unchanged", "updated"]
    (last,) = [line for line in err.splitlines() if " item(s) in " in line]
    assert last.endswith(
        ": 1 imported, 1 updated, 1 unchanged, 0 replaced, 1 skipped, 1 conflict"
    ), last
    assert last.startswith("5 item(s) in ")
    assert err.splitlines()[-1].startswith("error: 1 item(s) no longer continue")
