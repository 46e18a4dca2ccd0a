"""Cline 4 session folders generated the way Cline's SDK writes them (``sessions/<id>/``).

The shapes restate what the SDK's session store writes (checked by writing sessions with
Cline's own code): a manifest ``<id>.json`` (version 1, ``metadata.title`` and the
checkpoint history), a transcript ``<id>.messages.json`` (version 1, ``messages`` with
``id``, ``ts``, ``modelInfo`` and ``metrics`` on a model's turns) and, after a compaction,
``<id>.compaction.json``. The conversation is our own: a bug fix in three runs.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SESSION_ID = "1790000000000_abcde"
T0 = 1_793_527_200_000
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)
SONNET = {"id": "claude-sonnet-4-5", "provider": "anthropic"}
OPUS = {"id": "claude-opus-4-5", "provider": "anthropic"}


def _turn(
    ident: str, at: int, model: dict[str, str], blocks: list[Any], usage: tuple[int, ...] | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"id": ident, "role": "assistant", "content": blocks, "ts": T0 + at}
    message["modelInfo"] = dict(model)
    if usage is not None:
        tokens_in, tokens_out, reads, writes = usage[:4]
        message["metrics"] = {
            "inputTokens": tokens_in,
            "outputTokens": tokens_out,
            "cacheReadTokens": reads,
            "cacheWriteTokens": writes,
            "cost": usage[4] / 10_000,
        }
    return message


def _user(ident: str, at: int, content: Any, **fields: Any) -> dict[str, Any]:
    return {"id": ident, "role": "user", "content": content, "ts": T0 + at, **fields}


def conversation() -> list[dict[str, Any]]:
    """Thirteen messages over three runs: a file and an image attached, thinking, a tool's
    structured output, a failed command with a screenshot, an SDK notice, a turn without
    metrics."""
    return [
        _user(
            "u1",
            1_000,
            [
                {"type": "text", "text": "Fix the failing test in calc.py"},
                {
                    "type": "file",
                    "path": "/p/calc.py",
                    "content": "def add(a, b):\n    return a - b\n",
                },
                {"type": "image", "data": PNG, "mediaType": "image/png"},
            ],
        ),
        _turn(
            "a1",
            5_000,
            SONNET,
            [
                {"type": "thinking", "thinking": "The subtraction is wrong.", "signature": "s1"},
                {"type": "text", "text": "I'll read the test first."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_files",
                    "input": {"files": [{"path": "/p/test_calc.py"}]},
                },
            ],
            (1_500, 120, 1_000, 200, 123),
        ),
        _user(
            "u2",
            6_000,
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "name": "read_files",
                    "content": [
                        {
                            "query": "/p/test_calc.py",
                            "result": "assert add(1, 2) == 3",
                            "success": True,
                        }
                    ],
                }
            ],
        ),
        _turn(
            "a2",
            9_000,
            SONNET,
            [
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "editor",
                    "input": {"path": "/p/calc.py", "old": "a - b", "new": "a + b"},
                }
            ],
            (1_800, 60, 1_500, 0, 40),
        ),
        _user(
            "u3",
            9_500,
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "name": "editor",
                    "content": "edited",
                }
            ],
        ),
        _turn(
            "a3",
            12_000,
            SONNET,
            [{"type": "text", "text": "Fixed: add adds."}],
            (1_900, 40, 1_800, 0, 30),
        ),
        _user(
            "u4", 60_000, '<user_input mode="act">Now add a test for negative numbers</user_input>'
        ),
        _turn(
            "a4",
            63_000,
            OPUS,
            [
                {"type": "redacted_thinking", "data": "opaque"},
                {
                    "type": "tool_use",
                    "id": "toolu_3",
                    "name": "run_commands",
                    "input": {"commands": ["pytest"]},
                },
            ],
            (2_500, 300, 1_900, 100, 200),
        ),
        _user(
            "u5",
            64_000,
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_3",
                    "name": "run_commands",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "1 failed"},
                        {"type": "image", "data": PNG, "mediaType": "image/png"},
                    ],
                }
            ],
        ),
        _user(
            "u6",
            64_500,
            "The last command failed; try again.",
            metadata={"kind": "recovery_notice"},
        ),
        _turn(
            "a5",
            66_000,
            OPUS,
            [{"type": "text", "text": "All green now."}],
            (2_700, 20, 2_500, 0, 20),
        ),
        _user("u7", 120_000, "Thanks! One more: document add()."),
        _turn("a6", 121_000, OPUS, [{"type": "text", "text": "Done."}], None),
    ]


CHECKPOINTS = [
    {"ref": "1" * 40, "createdAt": T0 + 1_500, "runCount": 1, "kind": "stash"},
    {"ref": "2" * 40, "createdAt": T0 + 60_500, "runCount": 2, "kind": "commit"},
    {"ref": "3" * 40, "createdAt": T0 + 120_500, "runCount": 3, "kind": "stash"},
]
"""One per run; Cline's restore to run ``n`` keeps the messages up to the one starting it."""
KEPT_AT_CHECKPOINT = {1: 1, 2: 7, 3: 12}
"""How many messages Cline's restore to each run's checkpoint keeps (from Cline's own
``trimMessagesToCheckpoint`` on this conversation)."""


def compaction(messages: list[dict[str, Any]], count: int = 11) -> dict[str, Any]:
    """A compaction state: a summary and the newest two messages before ``count`` stand for
    the transcript's first ``count``."""
    summary = {
        "id": "c1",
        "role": "user",
        "metadata": {"kind": "compaction_summary", "summary": "Fixed add.", "tokensBefore": 4_200},
        "content": [{"type": "text", "text": "Context summary:\n\nFixed add."}],
    }
    return {
        "version": 1,
        "updated_at": "2026-11-01T10:01:07.000Z",
        "conversation_id": "conv_1",
        "source_message_count": count,
        "source_prefix_hash": "sha256:" + "0" * 64,
        "source_last_message_key": f"id:{messages[count - 1]['id']}",
        "messages": [summary, *copy.deepcopy(messages[count - 2 : count])],
    }


@dataclass
class Session:
    """A generated session's files, as values (None: the file is not written)."""

    session_id: str = SESSION_ID
    messages: list[dict[str, Any]] = field(default_factory=conversation)
    checkpoints: list[dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(CHECKPOINTS))
    compaction: dict[str, Any] | None = None
    manifest_version: Any = 1
    transcript_version: Any = 1
    write_manifest: bool = True
    subagents: tuple[str, ...] = ()

    def manifest(self, folder: Path) -> dict[str, Any]:
        """The manifest as the SDK writes it for this session in ``folder``."""
        metadata: dict[str, Any] = {
            "sessionHistoryOrigin": {"mode": "user"},
            "title": "Fix the failing test in calc.py",
        }
        if self.checkpoints:
            metadata["checkpoint"] = {"latest": self.checkpoints[-1], "history": self.checkpoints}
        return {
            "version": self.manifest_version,
            "session_id": self.session_id,
            "source": "vscode",
            "pid": 4242,
            "started_at": "2026-11-01T10:00:00.000Z",
            "status": "completed",
            "interactive": True,
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "cwd": "/p",
            "workspace_root": "/p",
            "enable_tools": True,
            "enable_spawn": False,
            "enable_teams": False,
            "prompt": "Fix the failing test in calc.py",
            "metadata": metadata,
            "messages_path": str(folder / f"{self.session_id}.messages.json"),
        }

    def transcript(self) -> dict[str, Any]:
        """The transcript as the SDK writes it."""
        return {
            "version": self.transcript_version,
            "updated_at": "2026-11-01T10:02:02.000Z",
            "agent": "lead",
            "sessionId": self.session_id,
            "origin": {"source": "vscode", "mode": "user", "sessionId": self.session_id},
            "messages": self.messages,
            "system_prompt": "You are Cline.",
        }

    def write(self, sessions: Path) -> Path:
        """Write the files (indented, as the SDK does) into ``sessions/<id>/``."""
        folder = sessions / self.session_id
        folder.mkdir(parents=True, exist_ok=True)
        if self.write_manifest:
            dump(folder / f"{self.session_id}.json", self.manifest(folder))
        dump(folder / f"{self.session_id}.messages.json", self.transcript())
        if self.compaction is not None:
            dump(folder / f"{self.session_id}.compaction.json", self.compaction)
        for agent in self.subagents:
            dump(folder / f"{agent}.messages.json", self.subagent_transcript(agent))
        return folder

    def subagent_transcript(self, agent: str) -> dict[str, Any]:
        """A subagent's transcript as the SDK writes it beside the session's own: a session
        ``<sessionId>__<agentId>`` with no manifest."""
        session_id = f"{self.session_id}__{agent}"
        return {
            "version": 1,
            "updated_at": "2026-11-01T10:00:20.000Z",
            "agent": "subagent",
            "sessionId": session_id,
            "taskType": "subagent_task",
            "origin": {
                "source": "vscode",
                "mode": "subagent",
                "sessionId": session_id,
                "parentThreadId": self.session_id,
                "subagent": agent,
            },
            "messages": [
                _user(f"{agent}-u1", 14_000, f"Find where add() is used ({agent})."),
                _turn(
                    f"{agent}-a1",
                    18_000,
                    SONNET,
                    [{"type": "text", "text": "calc.py and test_calc.py."}],
                    (900, 30, 0, 0, 50),
                ),
            ],
        }


def dump(path: Path, value: Any) -> None:
    """Write ``value`` as the SDK does: two-space JSON and a newline."""
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
