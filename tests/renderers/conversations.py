"""Conversations shared by the renderer tests, as a pairing step would hand them over.

Every function returns fresh objects, so a test may compare, copy or (by mistake)
mutate them without affecting another test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

SYSTEM = "You are a careful coding agent."
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1", "gemini": "gemini-2.5-pro"}
MAX_TOKENS = 1024
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
PDF = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK"

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a file from the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "screenshot",
        "description": "Capture the browser window.",
        "input_schema": {"type": "object", "properties": {}},
    },
]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def tool_result(call_id: str, content: Any, *, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def search_result(source: str, title: str, *texts: str) -> dict[str, Any]:
    """An Anthropic ``search_result`` block (a tool's search results, citable)."""
    return {
        "type": "search_result",
        "source": source,
        "title": title,
        "content": [text(value) for value in texts],
        "citations": {"enabled": True},
    }


def png_image() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


def plain_text() -> list[Message]:
    return [
        {"role": "user", "content": [text("<task>\nRename the helper.\n</task>")]},
        {"role": "assistant", "content": [text("Which helper do you mean?")]},
        {"role": "user", "content": [text("The one in utils.py."), text("Keep tests green.")]},
    ]


def parallel_tools() -> list[Message]:
    return [
        {"role": "user", "content": [text("Compare a.py and b.py.")]},
        {
            "role": "assistant",
            "content": [
                text("Reading both files."),
                tool_use("toolu_a", "read_file", {"path": "a.py"}),
                tool_use("toolu_b", "read_file", {"path": "b.py", "note": "naïve"}),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("toolu_a", "print('a')"),
                tool_result("toolu_b", [text("No such file: b.py")], is_error=True),
                text("Also check the imports."),
            ],
        },
        {"role": "assistant", "content": [text("a.py prints; b.py is missing.")]},
        {"role": "user", "content": [text("Thanks.")]},
    ]


def lost_result() -> list[Message]:
    return [
        {"role": "user", "content": [text("Read config.toml.")]},
        {"role": "assistant", "content": [tool_use("toolu_lost", "read_file", {"path": "x"})]},
        {"role": "user", "content": [tool_result("toolu_lost", "result missing")]},
    ]


def images() -> list[Message]:
    return [
        {
            "role": "user",
            "content": [
                text("What is wrong with this page?"),
                png_image(),
                {"type": "image", "source": {"type": "url", "url": "https://x.test/shot.jpg"}},
            ],
        },
        {"role": "assistant", "content": [tool_use("toolu_shot", "screenshot", {})]},
        {
            "role": "user",
            "content": [tool_result("toolu_shot", [text("Captured."), png_image()])],
        },
        {"role": "assistant", "content": [text("The header overlaps the menu.")]},
        {"role": "user", "content": [text("Fix it.")]},
    ]


def documents() -> list[Message]:
    return [
        {
            "role": "user",
            "content": [
                text("Summarise both."),
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"},
                },
            ],
        },
    ]


def thinking() -> list[Message]:
    return [
        {"role": "user", "content": [text("Plan the refactor.")]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Start with the tests.", "signature": "sig-1"},
                text("First, the tests."),
            ],
        },
        {"role": "user", "content": [text("Go on.")]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Unsigned reasoning."},
                {"type": "redacted_thinking", "data": "opaque"},
                tool_use("toolu_t", "read_file", {"path": "tests/test_a.py"}),
            ],
        },
        {"role": "user", "content": [tool_result("toolu_t", "def test_a(): ...")]},
    ]


def string_content() -> list[Message]:
    return [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again, in French."},
        {"role": "assistant", "content": "Bonjour."},
    ]


def message_fields() -> list[Message]:
    return [
        {
            "role": "user",
            "content": [{**text("Cached prompt."), "cache_control": {"type": "ephemeral"}}],
            "ts": 1_700_000_000_000,
        },
        {
            "role": "assistant",
            "content": [
                {**text("Reading."), "call_id": "call_1", "reasoning_details": [{"x": 1}]},
                {**tool_use("toolu_m", "read_file", {"path": "m.py"}), "call_id": "call_2"},
            ],
            "id": "resp_123",
            "ts": 1_700_000_000_500,
            "modelInfo": {"modelId": "m", "providerId": "p", "mode": "act"},
            "metrics": {"tokens": {"prompt": 10, "completion": 5, "cached": 0}, "cost": 0.01},
        },
        {
            "role": "user",
            "content": [{**tool_result("toolu_m", "x = 1"), "call_id": "call_2"}],
            "ts": 1_700_000_001_000,
        },
    ]


def search_results() -> list[Message]:
    """A tool returning Anthropic search results (with citations enabled), then the answer."""
    return [
        {"role": "user", "content": [text("How are retries configured?")]},
        {
            "role": "assistant",
            "content": [tool_use("toolu_s", "read_file", {"path": "docs/retries.md"})],
        },
        {
            "role": "user",
            "content": [
                tool_result(
                    "toolu_s",
                    [
                        search_result(
                            "docs/retries.md",
                            "Retries",
                            "Set max_retries in client.toml.",
                            "The default is 3.",
                        ),
                        text("1 result."),
                    ],
                )
            ],
        },
        {"role": "assistant", "content": [text("Set max_retries in client.toml.")]},
        {"role": "user", "content": [text("And the default?")]},
    ]


def prefill() -> list[Message]:
    """A request ending with the start of the model's answer (a prefill) that ends with
    whitespace, which Anthropic refuses as sent."""
    return [
        {"role": "user", "content": "Summarise the release notes as JSON."},
        {"role": "assistant", "content": [text("Here is the JSON:\n\n")]},
    ]


def gemini_orphan_contents() -> list[dict[str, Any]]:
    """Gemini contents (hardening input) where a response's call was cut away."""
    return [
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "call_gone",
                        "name": "read_file",
                        "response": {"output": "old"},
                    }
                }
            ],
        },
        {"role": "model", "parts": [{"text": "Noted."}]},
        {
            "role": "user",
            "parts": [
                {"text": "And this one?"},
                {"functionResponse": {"id": "call_x", "name": "grep", "response": {"output": "1"}}},
            ],
        },
    ]


@dataclass(frozen=True)
class Case:
    """One golden case: a conversation and whether its request declares tools."""

    name: str
    messages: list[Message]
    uses_tools: bool


def cases() -> list[Case]:
    """Every golden conversation, rendered for each provider."""
    return [
        Case("plain_text", plain_text(), False),
        Case("parallel_tools", parallel_tools(), True),
        Case("lost_result", lost_result(), True),
        Case("images", images(), True),
        Case("documents", documents(), False),
        Case("thinking", thinking(), True),
        Case("string_content", string_content(), False),
        Case("message_fields", message_fields(), True),
        Case("search_results", search_results(), True),
        Case("prefill", prefill(), False),
    ]
