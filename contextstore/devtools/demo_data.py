"""A realistic coding-agent session used by ``contextstore demo`` (no I/O, no printing)."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

TASK = (
    "<task>\nThe CSV export in src/report.py drops the header row when the data set is "
    "empty. Fix it and add a test.\n</task>"
)

REPORT_PY = '''import csv
import io


def export(rows: list[dict[str, str]], columns: list[str]) -> str:
    """Render rows as CSV text."""
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
'''

TEST_PY = """from src.report import export


def test_export_rows() -> None:
    assert export([{"a": "1"}], ["a"]) == "a\\r\\n1\\r\\n"
"""

FIXED_REPORT_PY = REPORT_PY.replace('    if not rows:\n        return ""\n', "")


def tiny_png(width: int = 64, height: int = 48) -> str:
    """A valid, solid-colour PNG of the given size, base64-encoded."""
    raw = b"".join(b"\x00" + b"\x33\x66\x99" * width for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(png).decode("ascii")


def _read(tool_id: str, path: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": path}}


def _result(tool_id: str, path: str, body: str) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_id,
        "content": [{"type": "text", "text": f"[read_file for '{path}'] Result:\n{body}"}],
    }


def opening_turns() -> list[dict[str, Any]]:
    """The task, two file reads and a screenshot from the user."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": TASK},
                {
                    "type": "text",
                    "text": "<environment_details>\ncwd: ~/src/report\n</environment_details>",
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll start by reading the exporter."},
                _read("toolu_01", "src/report.py"),
            ],
            "id": "msg_01",
            "modelInfo": {"modelId": "claude-sonnet-4-5", "providerId": "anthropic"},
        },
        {"role": "user", "content": [_result("toolu_01", "src/report.py", REPORT_PY)]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": "The early return skips the header. Let me see the tests.",
                },
                _read("toolu_02", "tests/test_report.py"),
            ],
        },
        {
            "role": "user",
            "content": [
                _result("toolu_02", "tests/test_report.py", TEST_PY),
                {"type": "text", "text": "Here is what the empty export looks like in the app:"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": tiny_png()},
                },
            ],
        },
    ]


def risky_turns() -> list[dict[str, Any]]:
    """An edit that goes wrong: the turns a rollback removes."""
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll rewrite the whole module."},
                {
                    "type": "tool_use",
                    "id": "toolu_03",
                    "name": "write_to_file",
                    "input": {"path": "src/report.py", "content": "# TODO\n"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_03",
                    "content": "The user denied this operation: that deletes the module.",
                    "is_error": True,
                }
            ],
        },
    ]


def _test_result(tool_id: str, round_number: int) -> dict[str, Any]:
    if round_number % 5 == 3:
        return {
            "type": "tool_result",
            "tool_use_id": tool_id,
            "content": "1 failed: tests/test_report.py::test_empty_export - AssertionError",
            "is_error": True,
        }
    return {
        "type": "tool_result",
        "tool_use_id": tool_id,
        "content": f"{round_number + 1} passed in 0.{round_number}1s",
    }


def long_session(rounds: int, *, first: int = 0, new_files: bool = False) -> list[dict[str, Any]]:
    """Edit-and-test rounds: a session that outgrows its window.

    With ``new_files`` every round reads a different file (nothing to de-duplicate);
    otherwise every round re-reads ``src/report.py``.
    """
    turns: list[dict[str, Any]] = []
    for i in range(first, first + rounds):
        path = f"src/module_{i}.py" if new_files else "src/report.py"
        turns.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Round {i}: reading {path} before the next edit."},
                    _read(f"toolu_r{i}", path),
                ],
            }
        )
        turns.append({"role": "user", "content": [_result(f"toolu_r{i}", path, REPORT_PY * 6)]})
        turns.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Round {i}: running the tests."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_t{i}",
                        "name": "execute_command",
                        "input": {"command": "pytest -q"},
                    },
                ],
            }
        )
        turns.append(
            {
                "role": "user",
                "content": [_test_result(f"toolu_t{i}", i)],
            }
        )
    return turns


ENV_FILE = (
    "# local settings, not for the repository\n"
    "GITHUB_TOKEN=ghp_Zq8Lm2Vx7Rt4Yw1Kp9Nd3Hs6Jc5Bf0Ga2Ue7\n"
    "AWS_ACCESS_KEY_ID=AKIAQ7RZ4TBN2WXL5KPE\n"
    "DATABASE_URL=postgres://report:Hx9vTq2mLw7s@db.internal:5432/reports\n"
)
"""A settings file with secrets in real formats (made up): the masking processor's food."""


def secret_turns() -> list[dict[str, Any]]:
    """The agent reads a settings file holding secrets, then answers."""
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check how the exporter is configured."},
                _read("toolu_04", ".env"),
            ],
        },
        {"role": "user", "content": [_result("toolu_04", ".env", ENV_FILE)]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "The settings do not affect the header."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Good. Apply the fix."}]},
    ]
