"""Every block shape Cline 3.x writes to ``api_conversation_history.json``, from its source.

Cline (``src/core/task/index.ts``, ``StreamResponseHandler.ts``, ``ToolResultUtils.ts``,
``responses.ts``, ``shared/messages/content.ts`` of 3.36 to 3.56) stores Anthropic blocks
with fields of its own: ``call_id`` on any block, ``reasoning_details`` and a Gemini
``signature`` on text and tool calls, ``summary`` on thinking. The store must take each
shape a provider would take (keeping Cline's fields), and the renders must send it without
breaking a provider's rule. The shapes no provider takes are refused, and the import keeps
a stand-in for their message (``test_cline_refused.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import InvalidMessageError
from contextstore.renderers.registry import validate_provider_payload

IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}
DETAILS = [
    {
        "type": "reasoning.text",
        "text": "thinking...",
        "signature": "sig",
        "format": "anthropic-claude-v1",
        "index": 0,
    }
]
CALL = {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "a.py"}}

ASSISTANT: dict[str, list[dict[str, Any]]] = {
    # index.ts: redacted thinking first, with the reasoning item's id as call_id
    "redacted_thinking with call_id": [
        {"type": "redacted_thinking", "data": "EmwKAhgB", "call_id": "rs_1"},
        {"type": "text", "text": "Reading."},
        CALL,
    ],
    # ReasoningHandler.getCurrentReasoning: signature "" until one arrives, summary list
    "thinking with summary, empty signature": [
        {"type": "thinking", "thinking": "", "signature": "", "summary": [], "call_id": "rs_1"},
        {"type": "text", "text": "Reading."},
        CALL,
    ],
    "thinking with signature and reasoning details": [
        {"type": "thinking", "thinking": "hm", "signature": "c2ln", "summary": DETAILS},
        {"type": "text", "text": "Reading."},
        CALL,
    ],
    # the text block: reasoning_details (cline/openrouter), Gemini's signature, call_id
    "text with reasoning_details, signature, call_id": [
        {
            "type": "text",
            "text": "Reading.",
            "reasoning_details": DETAILS,
            "signature": "gemini-thought",
            "call_id": "msg_1",
        },
        CALL,
    ],
    # Cline 3.5x as the real tasks hold it: reasoning_details as a string, empty call_id
    "text with reasoning_details as a string": [
        {"type": "text", "text": "Reading.", "reasoning_details": "[]", "call_id": ""},
        CALL,
    ],
    # ToolUseHandler.getAllFinalizedToolUses: signature, call_id, the summary as details
    "tool_use with signature, call_id, reasoning_details": [
        {**CALL, "signature": "gemini-thought", "call_id": "call_1", "reasoning_details": [{}]}
    ],
}

USER: dict[str, list[dict[str, Any]]] = {
    # ToolResultUtils.createToolResultBlock: a string result with call_id
    "tool_result string with call_id": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "call_id": "call_1", "content": "ok"}
    ],
    # formatResponse.toolResult with images and files; processContentBlock wraps strings
    "tool_result list of text and image": [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "call_id": "call_1",
            "content": [{"type": "text", "text": "ok"}, IMAGE, {"type": "text", "text": "file"}],
        }
    ],
    # the "cline" id fallback: the result as text, feedback images beside it
    "text result and image": [{"type": "text", "text": "[read_file] Result:\nok"}, IMAGE],
    # an MCP image whose mimeType was missing: "data:undefined;base64,..."
    "image with media_type 'undefined'": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok"},
        {"type": "image", "source": {"type": "base64", "media_type": "undefined", "data": "AA=="}},
    ],
}

REFUSED: dict[str, tuple[str, list[dict[str, Any]], str]] = {
    # JSON.parse of a model's arguments that are not an object: no provider takes it
    "tool_use input an array": ("assistant", [{**CALL, "input": ["a.py"]}], "input"),
    "tool_use input a string": ("assistant", [{**CALL, "input": "a.py"}], "input"),
    "tool_use input null": ("assistant", [{**CALL, "input": None}], "input"),
    # formatImagesIntoBlocks on a data URL without a comma: data is undefined, left out
    "image without data": (
        "user",
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}],
        "source.data",
    ),
}


@pytest.mark.parametrize("content", list(ASSISTANT.values()), ids=list(ASSISTANT))
def test_the_store_takes_each_assistant_shape_cline_writes_and_renders_it(
    content: list[dict[str, Any]],
) -> None:
    _check(
        [
            {"role": "user", "content": [{"type": "text", "text": "<task>go</task>"}]},
            {"role": "assistant", "content": content, "modelInfo": {"modelId": "m"}, "id": "r1"},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok"}],
            },
        ]
    )


@pytest.mark.parametrize("content", list(USER.values()), ids=list(USER))
def test_the_store_takes_each_user_shape_cline_writes_and_renders_it(
    content: list[dict[str, Any]],
) -> None:
    _check(
        [
            {"role": "user", "content": [{"type": "text", "text": "<task>go</task>"}]},
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": content, "ts": 1_760_000_000_000},
        ]
    )


def _check(messages: list[dict[str, Any]]) -> None:
    with ContextStore.open(":memory:") as store:
        cid = store.create_conversation(model_id="m").id
        for message in messages:
            normalize_message_dict(message)
            store.append(cid, [message])
        assert store.messages(cid) == messages  # Cline's fields kept as written
        for format in ("anthropic", "openai", "gemini"):
            assert validate_provider_payload(format, store.render(cid, format=format)) == []


@pytest.mark.parametrize(("role", "content", "field"), list(REFUSED.values()), ids=list(REFUSED))
def test_shapes_no_provider_takes_are_refused(
    role: str, content: list[dict[str, Any]], field: str
) -> None:
    with pytest.raises(InvalidMessageError, match=field):
        normalize_message_dict({"role": role, "content": content})
