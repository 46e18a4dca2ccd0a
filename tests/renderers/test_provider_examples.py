"""Each provider's documented request examples, rendered from equivalent stored messages.

The expected bodies below are written in the shape each provider's documentation shows
(a tool call and its result, several calls in one turn, images), not produced by our
renderers; the page each follows is cited above it. The conversation is stored in
Anthropic form, as an agent would append it, and the store's prepared payload must equal
the documented one. Where a render carries a documented optional field the example leaves
out, the test says which and removes exactly that field before comparing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from oracles import sdk_problems

from contextstore import ContextStore
from contextstore.processors import Pipeline

JPEG = (
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHR8eHR0fHhwc"
    "ICQuJyAiLCMcHCg3KSwwMTQ0NB8nOT04MjwuMzQy"
)
SYSTEM = "You are a helpful weather assistant."
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            }
        },
        "required": ["location"],
    },
}

# -- the stored conversations (Anthropic form, as an agent appends them) -------------------

ONE_CALL: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather like in San Francisco?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
            {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                "content": "15 degrees",
            }
        ],
    },
]

TWO_CALLS: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Paris and in Bogota?"},
    {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "call_12345xyz",
                "name": "get_weather",
                "input": {"location": "Paris, France"},
            },
            {
                "type": "tool_use",
                "id": "call_67890abc",
                "name": "get_weather",
                "input": {"location": "Bogota, Colombia"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_12345xyz", "content": "14°C"},
            {"type": "tool_result", "tool_use_id": "call_67890abc", "content": "18°C"},
        ],
    },
]

IMAGES: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG},
            },
            {"type": "text", "text": "Describe this image."},
        ],
    }
]

# -- Anthropic ------------------------------------------------------------------------------
# https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use
# (a tool_use, then a user turn whose tool_result names it by tool_use_id; parallel calls are
# several tool_use blocks answered by one user turn of tool_results, in call order)
# https://docs.anthropic.com/en/docs/build-with-claude/vision (base64 image source blocks)

ANTHROPIC_TOOLS = [WEATHER_TOOL]
ANTHROPIC_ONE_CALL = ONE_CALL
ANTHROPIC_TWO_CALLS = TWO_CALLS
ANTHROPIC_IMAGES = IMAGES

# -- OpenAI chat completions ------------------------------------------------------------------
# https://platform.openai.com/docs/guides/function-calling?api-mode=chat
# (the assistant message carries tool_calls with JSON-encoded arguments; each result is a
# role "tool" message with its tool_call_id; parallel calls are several tool_calls)
# https://platform.openai.com/docs/guides/images-vision?api-mode=chat (image_url data URLs)

OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "parameters": WEATHER_TOOL["input_schema"],
        },
    }
]
OPENAI_ONE_CALL = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
    {
        "role": "assistant",
        "content": "I'll check the current weather in San Francisco for you.",
        "tool_calls": [
            {
                "id": "toolu_01A09q90qw90lq917835lq9",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": '{"location":"San Francisco, CA"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
]
OPENAI_TWO_CALLS = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What's the weather in Paris and in Bogota?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_12345xyz",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location":"Paris, France"}'},
            },
            {
                "id": "call_67890abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location":"Bogota, Colombia"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_12345xyz", "content": "14°C"},
    {"role": "tool", "tool_call_id": "call_67890abc", "content": "18°C"},
]
OPENAI_IMAGES = [
    {"role": "system", "content": SYSTEM},
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
            {"type": "text", "text": "Describe this image."},
        ],
    },
]

# -- Gemini generateContent (REST, camelCase JSON as in the API reference) ---------------------
# https://ai.google.dev/gemini-api/docs/function-calling (a model turn of functionCall parts,
# then a user turn of functionResponse parts, one per call, parallel calls in one turn)
# https://ai.google.dev/api/caching#FunctionResponse ("response": use the "output" key for
# the function's output)
# https://ai.google.dev/api/caching#Part and #Blob (inlineData with mimeType and base64 data)
# https://ai.google.dev/api/generate-content (systemInstruction, tools.functionDeclarations)

GEMINI_TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "parameters": WEATHER_TOOL["input_schema"],
            }
        ]
    }
]
GEMINI_ONE_CALL = [
    {"role": "user", "parts": [{"text": "What's the weather like in San Francisco?"}]},
    {
        "role": "model",
        "parts": [
            {"text": "I'll check the current weather in San Francisco for you."},
            {"functionCall": {"name": "get_weather", "args": {"location": "San Francisco, CA"}}},
        ],
    },
    {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "15 degrees"}}}
        ],
    },
]
GEMINI_TWO_CALLS = [
    {"role": "user", "parts": [{"text": "What's the weather in Paris and in Bogota?"}]},
    {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "get_weather", "args": {"location": "Paris, France"}}},
            {"functionCall": {"name": "get_weather", "args": {"location": "Bogota, Colombia"}}},
        ],
    },
    {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "14°C"}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "18°C"}}},
        ],
    },
]
GEMINI_IMAGES = [
    {
        "role": "user",
        "parts": [
            {"inlineData": {"mimeType": "image/jpeg", "data": JPEG}},
            {"text": "Describe this image."},
        ],
    }
]


def _gemini_without_documented_extras(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gemini contents less two documented optional fields the examples leave out.

    ``functionCall.id`` / ``functionResponse.id`` pair a response with its call (the
    ``FunctionCall`` reference: "the client ... return[s] the response with the matching
    id"); ``thoughtSignature`` on the first call of a turn is the placeholder the Gemini
    docs give for calls that come with no signature (thought signatures page). Only
    these two are removed: anything else our render adds still fails the comparison.
    """
    stripped = json.loads(json.dumps(contents))
    for content in stripped:
        for part in content["parts"]:
            part.pop("thoughtSignature", None)
            for key in ("functionCall", "functionResponse"):
                if key in part:
                    part[key].pop("id", None)
    return stripped


EXAMPLES: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "a tool call and its result": (
        ONE_CALL,
        {"anthropic": ANTHROPIC_ONE_CALL, "openai": OPENAI_ONE_CALL, "gemini": GEMINI_ONE_CALL},
    ),
    "two calls in one turn": (
        TWO_CALLS,
        {"anthropic": ANTHROPIC_TWO_CALLS, "openai": OPENAI_TWO_CALLS, "gemini": GEMINI_TWO_CALLS},
    ),
    "an image": (
        IMAGES,
        {"anthropic": ANTHROPIC_IMAGES, "openai": OPENAI_IMAGES, "gemini": GEMINI_IMAGES},
    ),
}
TOOLS_FOR = {"anthropic": ANTHROPIC_TOOLS, "openai": OPENAI_TOOLS, "gemini": GEMINI_TOOLS}


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "gemini"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_documented_example_is_what_the_store_sends(
    store: ContextStore, example: str, fmt: str
) -> None:
    stored, documented = EXAMPLES[example]
    expected = documented[fmt]
    conv = store.create_conversation(model_id="m")
    store.append(conv.id, stored)
    ctx = store.prepare_request(
        conv.id,
        system=SYSTEM,
        tools=[WEATHER_TOOL],
        format=fmt,
        model="m",
        max_tokens=1024,
        pipeline=Pipeline([]),
    )
    body = ctx.payload
    assert sdk_problems(fmt, body) == []
    if fmt == "anthropic":
        assert body["messages"] == expected
        assert (body["system"], body["tools"]) == (SYSTEM, ANTHROPIC_TOOLS)
    elif fmt == "openai":
        assert body["messages"] == expected
        assert body["tools"] == OPENAI_TOOLS
    else:
        assert _gemini_without_documented_extras(body["contents"]) == expected
        assert body["systemInstruction"] == {"parts": [{"text": SYSTEM}]}
        assert body["tools"] == GEMINI_TOOLS


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "gemini"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_documented_examples_satisfy_the_sdk_types(example: str, fmt: str) -> None:
    """The transcriptions above are themselves valid requests (a check on this file)."""
    assert sdk_problems(fmt, EXAMPLES[example][1][fmt]) == []


def test_gemini_pairs_each_response_with_its_call_by_id(store: ContextStore) -> None:
    """The one field stripped above is checked here: ids match call for call."""
    conv = store.create_conversation()
    store.append(conv.id, TWO_CALLS)
    contents = store.render(conv.id, format="gemini")
    calls = [p["functionCall"]["id"] for p in contents[1]["parts"]]
    answers = [p["functionResponse"]["id"] for p in contents[2]["parts"]]
    assert calls == answers == ["call_12345xyz", "call_67890abc"]
