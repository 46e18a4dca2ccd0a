"""The benchmark's conversation: an agent reading files, one 2 KB tool result per turn.

Every store in the benchmark is given these same message dicts (Anthropic format). Texts are
deterministic (a seeded generator), differ from message to message, and contain a few
credential-like strings so that the default secret masking has real work to do.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from contextstore.core.overlays import Message

RESULT_BYTES = 2_000
"""Size of each tool result's text, as in the issue's measurements (2 KB tool results)."""

_WORDS = (
    "def",
    "class",
    "return",
    "import",
    "self",
    "value",
    "index",
    "table",
    "block",
    "message",
    "render",
    "store",
    "commit",
    "token",
    "update",
    "range",
    "select",
    "insert",
    "where",
    "order",
    "limit",
    "cursor",
    "schema",
    "column",
    "offset",
    "append",
    "prepare",
    "result",
    "context",
    "window",
    "summary",
    "notice",
    "pipeline",
    "processor",
)


def _text(rng: random.Random, size: int, number: int) -> str:
    words: list[str] = [f"# file_{number}.py"]
    length = len(words[0])
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    if number % 50 == 7:
        words.insert(
            len(words) // 2,
            "AKIA" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ2345") for _ in range(16)),
        )
    return " ".join(words)[:size]


def conversation(
    count: int, *, seed: int = 1, start: int = 0, final_call: bool = False
) -> list[Message]:
    """``count`` messages of the workload, numbered from ``start`` (message 0 is the task).

    Odd positions are assistant turns (a short text and a ``read_file`` call), even ones
    after 0 are the user turns answering them with a ``RESULT_BYTES`` tool result. Messages
    in a list are pairs; a conversation whose length is even (``start + count``) ends on an
    assistant turn without a call, so it can be sent as it is.
    """
    rng = random.Random(seed * 1_000_003 + start)
    out: list[Message] = []
    for number in range(start, start + count):
        if number == 0:
            out.append(
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "<task>read the repository</task>"}],
                }
            )
        elif number % 2 == 1 and number == start + count - 1 and not final_call:
            out.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
        elif number % 2 == 1:
            out.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Reading file {number}."},
                        {
                            "type": "tool_use",
                            "id": f"toolu_{number:08d}",
                            "name": "read_file",
                            "input": {"path": f"src/file_{number}.py"},
                        },
                    ],
                }
            )
        else:
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{number - 1:08d}",
                            "content": _text(rng, RESULT_BYTES, number),
                        }
                    ],
                }
            )
    return out


def content_bytes(messages: list[Message]) -> int:
    """The content a store must keep: each message's compact JSON, in UTF-8."""
    return sum(len(json.dumps(m, separators=(",", ":")).encode()) for m in messages)


def mixed_sizes(count: int, *, seed: int = 1) -> list[Message]:
    """``count`` text messages whose sizes are log-uniform from 100 B to 20 KB, like an
    agent's mix of short replies, commands and file contents."""
    rng = random.Random(seed)
    out: list[Message] = []
    for number in range(count):
        size = int(math.exp(rng.uniform(math.log(100), math.log(20_000))))
        role = "user" if number % 2 == 0 else "assistant"
        out.append({"role": role, "content": [{"type": "text", "text": _text(rng, size, number)}]})
    return out


def cline_histories(folder: Path) -> list[list[Message]]:
    """The API histories (``api_conversation_history.json``) of the Cline task folders in
    ``folder``, read in place, in the order of the folders' names; tasks without one are
    left out."""
    histories = []
    for task in sorted(p for p in folder.iterdir() if p.is_dir()):
        history = task / "api_conversation_history.json"
        if history.is_file():
            histories.append(json.loads(history.read_text(encoding="utf-8")))
    return histories
