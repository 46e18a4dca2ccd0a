"""Cline task folders generated the way Cline 3.5x writes them, for what no real file shows.

The UI timeline follows the real tasks in ``../shared/real/cline``: each turn says
``reasoning`` and ``tool`` while the model streams (``conversationHistoryIndex`` still the
user message), the assistant message is appended, a ``checkpoint_created`` and the next
``api_req_started`` follow (index now the assistant message), then the user message with
the tool's result as a text block. On top of that: ``context_history.json`` updates stamped
with an ``api_req_started``'s ts as Cline's de-duplication stamps them (in Cline's Map
order, not sorted), and deleted ranges on the UI messages and in the ``HistoryItem``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START = 1_760_000_000_000
NOTE = (
    "[[NOTE] This file read has been removed to save space in the context window. Refer to "
    "the latest file read for the most up to date version of this file.]"
)
MODEL = {"providerId": "anthropic", "modelId": "claude-sonnet-4-5-20250929", "mode": "act"}


@dataclass
class Task:
    """A generated task's files, as values."""

    api: list[dict[str, Any]] = field(default_factory=list)
    ui: list[dict[str, Any]] = field(default_factory=list)
    context_history: list[Any] | None = None
    item: dict[str, Any] | None = None
    task_metadata: dict[str, Any] | None = None

    def write(self, folder: Path) -> Path:
        """Write the files (compact JSON, as Cline does) into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        _dump(folder / "api_conversation_history.json", self.api)
        _dump(folder / "ui_messages.json", self.ui)
        if self.context_history is not None:
            _dump(folder / "context_history.json", self.context_history)
        if self.task_metadata is not None:
            (folder / "task_metadata.json").write_text(json.dumps(self.task_metadata, indent=2))
        return folder

    def request_ts(self) -> list[int]:
        """The ``ts`` of every ``api_req_started``."""
        return [m["ts"] for m in self.ui if m.get("say") == "api_req_started"]


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, separators=(",", ":")), encoding="utf-8")


def story(turns: int, *, files: int = 2, deleted: tuple[int, int] | None = None) -> Task:
    """A task of ``turns`` read_file calls over ``files`` files, each turn one request.

    With ``deleted = (turn, end)``, every UI message from that turn's request on carries
    ``conversationHistoryDeletedRange: [2, end]``.
    """
    task = Task()
    clock = iter(range(START + 100, START + 10_000_000, 100))
    current: list[int] | None = None

    def say(kind: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"ts": next(clock), "type": "say", "say": kind}
        if text is not None:
            message["text"] = text
        message["modelInfo"] = MODEL
        message["conversationHistoryIndex"] = len(task.api) - 1
        if current is not None:
            message["conversationHistoryDeletedRange"] = list(current)
        message.update(extra)
        task.ui.append(message)
        return message

    def request(tokens_in: int) -> None:
        info = {
            "request": "...",
            "tokensIn": tokens_in,
            "tokensOut": 20,
            "cacheWrites": 100,
            "cacheReads": 1000,
            "cost": 0.01,
        }
        say("api_req_started", json.dumps(info, separators=(",", ":")))

    say("text", "Fix the report.", images=[], files=[])
    say("checkpoint_created", lastCheckpointHash="0" * 40, isCheckpointCheckedOut=False)
    request(10)
    task.api.append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<task>\nFix the report.\n</task>"},
                {"type": "text", "text": "<environment_details>\n# Time\n</environment_details>"},
            ],
        }
    )
    for turn in range(turns):
        path = f"src/f{turn % files}.py"
        say("reasoning", f"reading {path}", partial=False)
        say("tool", json.dumps({"tool": "readFile", "path": path}), partial=False)
        task.api.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": f"Reading {path}.",
                        "reasoning_details": "[]",
                        "call_id": "",
                    },
                    {
                        "type": "tool_use",
                        "id": f"toolu_{turn:04d}",
                        "name": "read_file",
                        "input": {"path": path},
                    },
                ],
                "modelInfo": MODEL,
                "metrics": {"tokens": {"prompt": 10, "completion": 20, "cached": 1000}},
            }
        )
        say(
            "checkpoint_created",
            lastCheckpointHash=f"{turn + 1:040x}",
            isCheckpointCheckedOut=False,
        )
        if deleted is not None and turn == deleted[0]:
            request(50_000 + turn)
            current = [2, deleted[1]]
        else:
            request(100 + turn)
        task.api.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": f"[read_file for '{path}'] Result:\nbody of {path} #{turn}",
                    },
                    {
                        "type": "text",
                        "text": "<environment_details>\n# Time\n</environment_details>",
                    },
                ],
            }
        )
    say("completion_result", "Done.")
    return task


def dedupe_history(task: Task, *, at_request: int) -> list[Any]:
    """``context_history.json`` as Cline's de-duplication writes it at a request: every
    earlier result of a file read again later becomes the notice; the truncation notice
    goes on message 1 first. Entries in Cline's Map order (message 1, then newest first)."""
    stamp = task.request_ts()[at_request]
    seen: dict[str, int] = {}
    for idx, message in enumerate(task.api):
        if message["role"] != "user" or idx == 0:
            continue
        text = message["content"][0]["text"]
        seen.setdefault(text.split("'")[1], idx)
    entries: list[Any] = [
        [1, [0, [[0, [[stamp, "text", ["[NOTE] Some history was removed."], []]]]]]]
    ]
    reads: dict[str, list[int]] = {}
    for idx, message in enumerate(task.api):
        text = message["content"][0].get("text", "") if message["role"] == "user" else ""
        if idx and text.startswith("[read_file for '"):
            reads.setdefault(text.split("'")[1], []).append(idx)
    for path, indices in reads.items():
        for idx in reversed(indices[:-1]):
            notice = f"[read_file for '{path}'] Result:\n{NOTE}"
            entries.append([idx, [2, [[0, [[stamp, "text", [notice], []]]]]]])
    return entries


def write_storage(root: Path, tasks: dict[str, Task], extra_items: Sequence[Any] = ()) -> Path:
    """A Cline storage folder: ``tasks/<id>/`` for each task, and ``state/taskHistory.json``
    with each task's ``item`` (and ``extra_items``), newest first as Cline keeps them."""
    items = [*extra_items]
    for task_id, task in tasks.items():
        task.write(root / "tasks" / task_id)
        if task.item is not None:
            items.insert(0, {"id": task_id, **task.item})
    (root / "state").mkdir(parents=True, exist_ok=True)
    _dump(root / "state" / "taskHistory.json", items)
    return root
