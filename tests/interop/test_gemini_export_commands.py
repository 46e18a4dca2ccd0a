"""User prompts that start with ``/`` or ``?``, exported as a Gemini CLI session.

Gemini CLI's resume (``convertSessionToClientHistory`` in ``packages/core/src/utils/
sessionUtils.ts``) leaves out of the model history every user record whose content, read by
``partListUnionToString`` (``partToString(value, {verbose: true})`` in ``partUtils.ts``)
and trimmed, ``isIgnoredUserContent``: empty, or starting with ``/``, ``?``,
``<session_context>`` or ``<hook_context>``. Such a prompt written here vanished on resume.
The functions below follow that source, for the parts a generated record holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.interop import export_gemini, import_gemini


def part_to_string(part: Any) -> str:
    """``partToString(part, {verbose: true})`` for text and the labelled parts."""
    if isinstance(part, str):
        return part
    if isinstance(part, list):
        return "".join(part_to_string(p) for p in part)
    if part.get("videoMetadata") is not None:
        return "[Video Metadata]"
    if "thought" in part and part["thought"] is not None:  # `part.thought !== undefined`
        return f"[Thought: {json.dumps(part['thought'])}]"
    for key, label in (("fileData", "[File Data]"), ("inlineData", "[Media]")):
        if key in part:
            return label
    return str(part.get("text") or "")


def is_ignored_user_content(trimmed: str) -> bool:
    """``isIgnoredUserContent``."""
    return not trimmed or trimmed.startswith(("/", "?", "<session_context>", "<hook_context>"))


def resumed_history(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model history Gemini CLI rebuilds from text-only records on resume, as it sends
    it: parts whose ``thought`` is true are stripped (``historyHardening``), others kept."""
    history = []
    for record in records:
        if record["type"] == "user":
            if is_ignored_user_content(part_to_string(record["content"]).strip()):
                continue
            history.append({"role": "user", "parts": record["content"]})
        elif record["type"] == "gemini":
            history.append({"role": "model", "parts": record["content"]})
    return [
        {"role": c["role"], "parts": [p["text"] for p in c["parts"] if not p.get("thought")]}
        for c in history
    ]


PROMPTS = ["/etc/hosts has a wrong line; fix it", "  ? is this right", "?"]


def _conversation(store: ContextStore) -> str:
    conversation = store.create_conversation()
    for prompt in PROMPTS:
        store.append(conversation.id, "user", prompt)
        store.append(conversation.id, "assistant", f"answer to {prompt.strip()}")
    return conversation.id


def test_a_prompt_starting_with_a_slash_or_question_mark_survives_resume(
    tmp_path: Path,
) -> None:
    with ContextStore.open(tmp_path / "a.db") as store:
        cid = _conversation(store)
    out = tmp_path / "chats" / "session.jsonl"
    out.parent.mkdir()  # the folder of a file a command writes must exist
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "a.db"), "export", "gemini", cid, str(out)], obj={}
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    expected = []
    for prompt in PROMPTS:
        expected += [
            {"role": "user", "parts": [prompt]},
            {"role": "model", "parts": [f"answer to {prompt.strip()}"]},
        ]
    assert resumed_history(records) == expected
    users = [r for r in records if r["type"] == "user"]
    assert [r["displayContent"] for r in users] == [[{"text": p}] for p in PROMPTS]
    # contextstore's own import reads them back as the prompts they are.
    with ContextStore.open(tmp_path / "b.db") as store:
        (item,) = import_gemini(store, out).items
        assert [m["content"] for m in store.messages(item.conversation_id)][::2] == [
            [{"type": "text", "text": p}] for p in PROMPTS
        ]


def test_ordinary_prompts_and_injected_context_are_written_as_they_are(tmp_path: Path) -> None:
    context = "<session_context>\nctx\n</session_context>"
    with ContextStore.open(tmp_path / "a.db") as store:
        conversation = store.create_conversation()
        for text in (context, "a/b", "plain"):
            store.append(conversation.id, "user", text)
            store.append(conversation.id, "assistant", "ok")
        export_gemini(store, conversation.id, tmp_path / "s.json")
    records = json.loads((tmp_path / "s.json").read_text())["messages"]
    users = [r for r in records if r["type"] == "user"]
    assert [r["content"] for r in users] == [[{"text": t}] for t in (context, "a/b", "plain")]
    assert not [r for r in users if "displayContent" in r]
