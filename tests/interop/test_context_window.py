"""The context window an imported conversation gets.

Gemini CLI sizes every chat against its ``tokenLimit(model)`` (1,048,576 tokens, 256,000 for
the two Gemma 4 models it names, matched by exact name); an imported chat gets that window,
so that its audit and the next prepare measure against what Gemini CLI measured against.
Cline's files do not record the window (Cline reads it from its provider's model table),
but Cline tells the model in its environment details (``# Context Window Usage`` /
``129,352 / 200K tokens used (65%)``) in older versions' every turn and, for Claude 4 and
GPT-5 models, in the turns near the window: an imported task gets the newest such figure,
and none without one. A window the user gives (``context_window=``) holds for every
conversation the import writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.errors import InvalidInputError
from contextstore.interop import gemini_plan, import_cline, import_gemini
from contextstore.interop.cline_window import stated_window
from tests.interop.cline_factory import story
from tests.interop.real import CLINE, need

SESSION = Path(__file__).parent / "data" / "gemini" / "session-2026-08-04T10-00-a1b2c3d4.jsonl"
SESSION_ID = "a1b2c3d4-0000-4000-8000-000000000001"


def _session(folder: Path, model: str | None, name: str = "session-1.jsonl") -> Path:
    """A two-record session whose answer came from ``model`` (no ``model`` field: None)."""
    answer: dict[str, Any] = {
        "id": "g1",
        "timestamp": "2026-08-04T10:00:02.000Z",
        "type": "gemini",
        "content": "Hello.",
    }
    if model is not None:
        answer["model"] = model
    records = [
        {
            "sessionId": f"5e55e55e-0000-4000-8000-{len(name):012d}",
            "projectHash": "ab12",
            "startTime": "2026-08-04T10:00:00.000Z",
            "lastUpdated": "2026-08-04T10:00:02.000Z",
            "kind": "main",
        },
        {
            "id": "u1",
            "timestamp": "2026-08-04T10:00:01.000Z",
            "type": "user",
            "content": [{"text": "Hi"}],
        },
        answer,
    ]
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _window(store: ContextStore, path: Path) -> int | None:
    (item,) = import_gemini(store, path).items
    assert item.conversation_id is not None
    return store.get_conversation(item.conversation_id).context_window


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gemini-2.5-pro", 1_048_576),
        ("gemini-3-pro-preview", 1_048_576),
        ("gemma-4-31b-it", 256_000),
        ("gemma-4-26b-a4b-it", 256_000),
        # Gemini CLI matches by exact name: any other model, Gemma's included, gets its default
        ("gemma-4-31b", 1_048_576),
        ("GEMMA-4-31B-IT", 1_048_576),
        (None, 1_048_576),
    ],
)
def test_a_gemini_chat_gets_the_window_gemini_cli_sized_it_against(
    memory_store: ContextStore, tmp_path: Path, model: str | None, window: int
) -> None:
    assert _window(memory_store, _session(tmp_path, model)) == window


def test_the_window_follows_the_model_of_the_last_answer(memory_store: ContextStore) -> None:
    (item,) = import_gemini(memory_store, SESSION).items
    conv = memory_store.get_conversation(SESSION_ID)
    assert item.status == "imported" and conv.model_id == "gemini-2.5-flash"
    assert conv.context_window == 1_048_576
    audit = memory_store.audit(SESSION_ID)
    assert (audit.context_window, audit.max_allowed_size) == (1_048_576, 1_008_576)


def test_a_window_given_overrides_gemini_clis_and_holds_on_later_imports(
    memory_store: ContextStore,
) -> None:
    import_gemini(memory_store, SESSION, context_window=32_000)
    assert memory_store.get_conversation(SESSION_ID).context_window == 32_000
    again = import_gemini(memory_store, SESSION).items[0]
    assert again.status == "unchanged"
    assert memory_store.get_conversation(SESSION_ID).context_window == 32_000


def test_a_window_set_here_is_kept_by_an_import_that_gives_none(
    memory_store: ContextStore,
) -> None:
    import_gemini(memory_store, SESSION)
    memory_store.set_conversation_model(SESSION_ID, context_window=500_000)
    import_gemini(memory_store, SESSION)
    assert memory_store.get_conversation(SESSION_ID).context_window == 500_000
    import_gemini(memory_store, SESSION, context_window=400_000)
    assert memory_store.get_conversation(SESSION_ID).context_window == 400_000


def test_a_chat_imported_without_a_window_gets_it_on_its_next_import_and_nothing_else(
    memory_store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:  # as contextstore imported chats before
        patched.setattr(gemini_plan, "token_limit", lambda _model: None)
        import_gemini(memory_store, SESSION)
    before = memory_store.get_conversation(SESSION_ID)
    counts = memory_store.row_counts(SESSION_ID)
    assert before.context_window is None
    item = import_gemini(memory_store, SESSION).items[0]
    after = memory_store.get_conversation(SESSION_ID)
    assert item.status == "unchanged" and after.context_window == 1_048_576
    assert after.last_ts == before.last_ts and memory_store.row_counts(SESSION_ID) == counts
    # the window is a setting: the next import still finds nothing new, and no conflict
    assert import_gemini(memory_store, SESSION).items[0].status == "unchanged"


def test_a_cline_task_has_no_window_unless_one_is_given(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(4).write(tmp_path / "tasks" / "1750000000000")
    (item,) = import_cline(memory_store, folder).items
    assert item.conversation_id is not None
    assert memory_store.get_conversation(item.conversation_id).context_window is None
    assert memory_store.audit(item.conversation_id).context_window == 128_000
    again = import_cline(memory_store, folder, context_window=200_000).items[0]
    assert again.status == "unchanged"
    assert memory_store.get_conversation(item.conversation_id).context_window == 200_000
    assert memory_store.audit(item.conversation_id).max_allowed_size == 160_000
    with ContextStore.open(":memory:") as fresh:
        import_cline(fresh, folder, context_window=64_000)
        assert fresh.get_conversation(item.conversation_id).context_window == 64_000


def test_a_window_given_reaches_every_task_of_a_folder(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    for name in ("1750000000000", "1750000000001"):
        story(2).write(tmp_path / "tasks" / name)
    report = import_cline(memory_store, tmp_path / "tasks", context_window=200_000)
    assert [i.status for i in report.items] == ["imported", "imported"]
    windows = {c.context_window for c in memory_store.list_conversations()}
    assert windows == {200_000}


@pytest.mark.parametrize("bad", [0, -1, True, "200000", 200_000.0, 2**31])
def test_a_bad_window_is_refused_before_anything_is_written(
    memory_store: ContextStore, tmp_path: Path, bad: Any
) -> None:
    folder = story(2).write(tmp_path / "tasks" / "1750000000000")
    with pytest.raises(InvalidInputError, match="context_window"):
        import_cline(memory_store, folder, context_window=bad)
    with pytest.raises(InvalidInputError, match="context_window"):
        import_gemini(memory_store, SESSION, context_window=bad)
    assert memory_store.list_conversations() == []


def test_the_largest_window_is_taken(memory_store: ContextStore) -> None:
    import_gemini(memory_store, SESSION, context_window=2**31 - 1)
    assert memory_store.get_conversation(SESSION_ID).context_window == 2**31 - 1


def test_a_conflict_leaves_the_window_as_it_was(memory_store: ContextStore, tmp_path: Path) -> None:
    path = tmp_path / SESSION.name
    path.write_bytes(SESSION.read_bytes())
    import_gemini(memory_store, path)
    memory_store.append(SESSION_ID, "user", "written here")
    with path.open("a", encoding="utf-8") as out:
        record = {"id": "u9", "timestamp": "2026-08-04T11:00:00.000Z", "type": "user"}
        out.write(json.dumps({**record, "content": [{"text": "and in Gemini CLI"}]}) + "\n")
    item = import_gemini(memory_store, tmp_path, context_window=64_000).items[0]
    assert item.status == "conflict"
    assert memory_store.get_conversation(SESSION_ID).context_window == 1_048_576


def _usage(window: str, used: str = "129,352", percent: int = 65) -> str:
    """Environment details as Cline ends them (``window`` as ``(cw / 1000).toLocaleString()``)."""
    return (
        "<environment_details>\n# Current Time\n1/22/2026\n\n# Context Window Usage\n"
        f"{used} / {window}K tokens used ({percent}%)\n\n# Current Mode\nACT MODE\n"
        "</environment_details>"
    )


def _user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


@pytest.mark.parametrize(
    ("written", "window"),
    [
        ("200", 200_000),
        ("128", 128_000),
        ("1,000", 1_000_000),
        ("1,048.576", 1_048_576),
        ("131.072", 131_072),
        ("8.192", 8_192),
        ("0.001", 1),
        ("2,147,483.647", 2**31 - 1),
        ("2,147,483.648", None),  # over what the store keeps: left alone
        ("0", None),
        ("1.048,576", None),  # another locale's digits: not read
        ("1048576", None),  # toLocaleString groups thousands
    ],
)
def test_the_window_cline_stated_is_read_in_its_en_us_form(
    written: str, window: int | None
) -> None:
    assert stated_window([_user("<task>x</task>", _usage(written))], []) == window


def test_the_newest_statement_of_a_user_turn_counts() -> None:
    messages = [
        _user("<task>x</task>", _usage("128")),
        {"role": "assistant", "content": [{"type": "text", "text": _usage("64")}]},
        _user("[read_file] Result:", _usage("200")),
        {"role": "assistant", "content": "Reading it."},
        _user("[read_file] Result:", "<environment_details>\n# Time\n</environment_details>"),
    ]
    assert stated_window(messages, []) == 200_000
    assert stated_window(messages[:2], []) == 128_000  # the assistant's words are not Cline's
    assert stated_window(messages[4:], []) is None
    # Cline ends the turn with its details: a line the user pasted above them is older
    pasted = f"The log said:\n{_usage('64')}\nwhy?\n\n{_usage('200')}"
    assert stated_window([_user(pasted)], []) == 200_000


def test_without_the_api_history_the_ui_requests_say_it() -> None:
    def started(request: str) -> dict[str, Any]:
        text = json.dumps({"request": request, "tokensIn": 10})
        return {"ts": 1, "type": "say", "say": "api_req_started", "text": text}

    ui = [started(_usage("200")), started(_usage("256")), {"type": "say", "say": "text"}]
    assert stated_window([], ui) == 256_000
    assert stated_window([_user(_usage("64"))], ui) == 64_000  # the API history first
    assert stated_window([], [{"type": "say", "say": "api_req_started", "text": "{"}]) is None


def test_an_imported_task_gets_the_window_cline_stated(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    task = story(3)
    task.api[-1]["content"][-1]["text"] = _usage("200")
    folder = task.write(tmp_path / "tasks" / "1750000000000")
    (item,) = import_cline(memory_store, folder).items
    assert item.conversation_id is not None
    assert memory_store.get_conversation(item.conversation_id).context_window == 200_000
    assert memory_store.audit(item.conversation_id).max_allowed_size == 160_000
    with ContextStore.open(":memory:") as fresh:
        import_cline(fresh, folder, context_window=1_000_000)
        assert fresh.get_conversation(item.conversation_id).context_window == 1_000_000


@pytest.mark.parametrize(
    ("task", "window"),
    [
        ("jeehunter-mcp-vscode-server", 128_000),  # an older Cline: every turn says it
        ("haram333-fineye", 256_000),  # grok-code-fast-1 through Cline's own provider
        ("coregems-task-sample", 200_000),  # claude-opus-4-6, said past 60 % of the window
        ("gmfstu-task-1769053680585", None),  # claude-sonnet-4-5, never past 34 %: unsaid
    ],
)
def test_real_tasks_get_the_window_cline_stated_for_them(
    memory_store: ContextStore, task: str, window: int | None
) -> None:
    (item,) = import_cline(memory_store, need(CLINE / task)).items
    assert item.conversation_id is not None
    assert memory_store.get_conversation(item.conversation_id).context_window == window
