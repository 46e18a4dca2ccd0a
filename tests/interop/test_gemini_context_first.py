"""The environment context a ``/chat share`` file or ``/chat save`` checkpoint opens with.

Current Gemini CLI writes it as its own first user Content (``<session_context>...``), the
prompt as the next. The import merged the two into one message, and a session exported from
it held one user record starting with ``<session_context>``, which Gemini CLI's resume
(``isIgnoredUserContent``) drops whole: the first prompt was lost.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.interop import import_gemini
from tests.interop.real import GEMINI, need
from tests.interop.test_gemini_export_commands import resumed_history

CONTEXT = "<session_context>\nctx\n</session_context>"
SHARE = [
    {"role": "user", "parts": [{"text": CONTEXT}]},
    {"role": "user", "parts": [{"text": "read two files"}]},
    {"role": "model", "parts": [{"text": "Both read."}]},
]


def _run(db: Path, *args: str) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], obj={})
    assert result.exit_code == 0, result.output


def test_a_shared_chat_exported_as_a_session_keeps_its_first_prompt(tmp_path: Path) -> None:
    share = tmp_path / "share.json"
    share.write_text(json.dumps(SHARE))
    db, out = tmp_path / "a.db", tmp_path / "chats" / "session.jsonl"
    _run(db, "import", "gemini", str(share))
    with ContextStore.open(db) as store:
        (conversation,) = store.list_conversations()
        assert [m["content"] for m in store.messages(conversation.id)] == [
            [{"type": "text", "text": CONTEXT}],
            [{"type": "text", "text": "read two files"}],
            [{"type": "text", "text": "Both read."}],
        ]
    out.parent.mkdir()  # the folder of a file a command writes must exist
    _run(db, "export", "gemini", conversation.id, str(out))
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert resumed_history(records) == [
        {"role": "user", "parts": ["read two files"]},
        {"role": "model", "parts": ["Both read."]},
    ]


def test_the_real_checkpoint_keeps_its_context_and_prompt_apart(tmp_path: Path) -> None:
    source = need(GEMINI / "minwookhan-ksl" / "1215-15.json")
    copy = shutil.copy(source, tmp_path / "checkpoint.json")
    history = json.loads(source.read_text(encoding="utf-8"))
    history = history["history"] if isinstance(history, dict) else history
    with ContextStore.open(tmp_path / "a.db") as store:
        (item,) = import_gemini(store, copy).items
        messages = store.messages(item.conversation_id)
        assert messages[0]["content"] == [{"type": "text", "text": history[0]["parts"][0]["text"]}]
        assert messages[1]["content"][0]["text"] == history[1]["parts"][0]["text"]
        title = store.get_conversation(item.conversation_id).title
        assert title == history[1]["parts"][0]["text"].strip().splitlines()[0][: len(title or "")]
