"""Gemini renderer: parts per block, then hardening."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from aliasing import shares_containers
from conversations import Case, cases, png_image, search_result, text, tool_result, tool_use
from oracles import sdk_problems

from contextstore.core.errors import InvalidInputError
from contextstore.core.hardening import SKIP_SIGNATURE
from contextstore.renderers.gemini import (
    UNKNOWN_TOOL_NAME,
    build_request,
    render_contents,
    violations,
)


def _call_and_result(result: dict[str, object]) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [tool_use("t", "read", {"p": 1})]},
        {"role": "user", "content": [result]},
    ]


def test_roles_and_text() -> None:
    contents = render_contents(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [text("a")]},
            {"role": "user", "content": [text("b")]},
        ]
    )
    assert contents == [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"text": "a"}]},
        {"role": "user", "parts": [{"text": "b"}]},
    ]


def test_tool_use_and_result_become_call_and_response() -> None:
    contents = render_contents(_call_and_result(tool_result("t", "data")))
    assert contents[1]["parts"] == [
        {
            "functionCall": {"name": "read", "args": {"p": 1}, "id": "t"},
            "thoughtSignature": SKIP_SIGNATURE,
        }
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "read", "response": {"output": "data"}, "id": "t"}}
    ]


def test_error_result_uses_the_error_key() -> None:
    contents = render_contents(_call_and_result(tool_result("t", "bad", is_error=True)))
    assert contents[2]["parts"][0]["functionResponse"]["response"] == {"error": "bad"}


SEARCH_TEXT = "[Search result: Retries]\nSource: docs/retries.md\nSet max_retries.\n\nDefault 3."


def test_search_results_in_a_tool_result_are_sent_as_its_text() -> None:
    """A search result in a tool result was dropped from the response, its content lost."""
    found = search_result("docs/retries.md", "Retries", "Set max_retries.", "Default 3.")
    messages = _call_and_result(tool_result("t", [found, text("1 result.")]))
    contents = render_contents(messages)
    assert contents[2]["parts"] == [
        {
            "functionResponse": {
                "name": "read",
                "response": {"output": f"{SEARCH_TEXT}\n\n1 result."},
                "id": "t",
            }
        }
    ]
    assert sdk_problems("gemini", contents) == [] and violations(contents) == []
    # a request built by older view rules dropped it, and is rebuilt so
    old = render_contents(messages, rules=4)[2]["parts"][0]["functionResponse"]["response"]
    assert old == {"output": "1 result."}
    assert build_request(messages, rules=4)["contents"] == render_contents(messages, rules=4)


def test_a_search_result_in_a_user_message_is_a_text_part() -> None:
    found = search_result("docs/retries.md", "Retries", "Set max_retries.", "Default 3.")
    contents = render_contents([{"role": "user", "content": [text("See:"), found]}])
    assert contents == [{"role": "user", "parts": [{"text": "See:"}, {"text": SEARCH_TEXT}]}]
    assert sdk_problems("gemini", contents) == []


def test_result_images_follow_the_responses_in_the_same_turn() -> None:
    contents = render_contents(_call_and_result(tool_result("t", [text("shot"), png_image()])))
    assert [next(iter(part)) for part in contents[2]["parts"]] == ["functionResponse", "inlineData"]
    assert contents[2]["parts"][1]["inlineData"]["mimeType"] == "image/png"


def test_url_image_becomes_file_data() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.webp"}}
    contents = render_contents([{"role": "user", "content": [image]}])
    assert contents[0]["parts"] == [
        {"fileData": {"mimeType": "image/webp", "fileUri": "https://x.test/a.webp"}}
    ]


@pytest.mark.parametrize(
    "url",
    ["https://u:[REDACTED:url_password]@x.test/a.webp", "https://[not-an-ip]/a.webp"],
)
def test_a_url_with_brackets_around_no_ip_address_is_rendered_on_every_python(url: str) -> None:
    """Python 3.13's mimetypes refuses such a URL (ValueError); secret masking writes one
    whenever it masks a URL's password."""
    image = {"type": "image", "source": {"type": "url", "url": url}}
    contents = render_contents([{"role": "user", "content": [image]}])
    assert contents[0]["parts"] == [{"fileData": {"mimeType": "image/webp", "fileUri": url}}]


def test_result_for_an_unknown_call_gets_a_placeholder_name_and_call() -> None:
    contents = render_contents(
        [{"role": "user", "content": [tool_result("gone", "old"), text("now")]}]
    )
    model_turn = contents[1]
    assert model_turn["parts"][0]["functionCall"] == {
        "name": UNKNOWN_TOOL_NAME,
        "args": {},
        "id": "gone",
    }
    assert violations(contents) == []


def test_a_reused_id_names_each_result_after_the_call_it_answers() -> None:
    """Kimi numbers ids per tool, so one id is issued by calls of two tools; each response
    takes the name of the call just before it, and nothing is invented."""
    same = "functions.read_file:0"
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [tool_use(same, "read_file", {"path": "a.py"})]},
        {"role": "user", "content": [tool_result(same, "A")]},
        {"role": "assistant", "content": [tool_use(same, "list_files", {"path": "."})]},
        {"role": "user", "content": [tool_result(same, "B")]},
    ]
    contents = render_contents(messages)
    calls = [[p["functionCall"]["name"] for p in c["parts"]] for c in contents[1::2]]
    responses = [[p["functionResponse"] for p in c["parts"]] for c in contents[2::2]]
    assert calls == [["read_file"], ["list_files"]]
    assert [[(r["name"], r["response"]) for r in turn] for turn in responses] == [
        [("read_file", {"output": "A"})],
        [("list_files", {"output": "B"})],
    ]
    assert violations(contents) == []
    # by the rules of version 10 the last call's name named both results, so the first
    # model turn got an invented list_files call and read_file a "lost" response
    older = render_contents(messages, rules=10)
    assert [p["functionCall"]["name"] for p in older[1]["parts"]] == ["read_file", "list_files"]


def test_thinking_is_stripped_and_gemini_signatures_are_sent_back() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {**tool_use("t", "read", {}), "signature": "gemini-sig"},
            ],
        },
        {"role": "user", "content": [tool_result("t", "x")]},
    ]
    parts = render_contents(messages)[1]["parts"]
    assert parts == [
        {"functionCall": {"name": "read", "args": {}, "id": "t"}, "thoughtSignature": "gemini-sig"}
    ]


def test_sentinel_texts_can_be_replaced() -> None:
    messages = [{"role": "assistant", "content": [tool_use("t", "f", {})]}]
    contents = render_contents(
        messages, lost_response="LOST", continuation="START", final_user_text="END"
    )
    assert contents[0]["parts"] == [{"text": "START"}]
    assert contents[2]["parts"][0]["functionResponse"]["response"] == {"error": "LOST"}


def test_build_request_shape() -> None:
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    body = build_request(
        [{"role": "user", "content": "q"}],
        system="S",
        tools=tools,
        model="gemini-2.5-pro",
        max_tokens=11,
    )
    assert body == {
        "model": "models/gemini-2.5-pro",
        "contents": [{"role": "user", "parts": [{"text": "q"}]}],
        "systemInstruction": {"parts": [{"text": "S"}]},
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "f", "description": "d", "parameters": {"type": "object"}}
                ]
            }
        ],
        "generationConfig": {"maxOutputTokens": 11},
    }


MCP_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "path": {"type": ["string", "null"]},
        "depth": {"type": "integer", "exclusiveMinimum": 0},
        "mode": {"const": "read"},
        "target": {"oneOf": [{"type": "string"}, {"type": "number"}]},
    },
    "required": ["path"],
    "additionalProperties": False,
}
"""A tool schema as MCP servers write it: JSON Schema keywords Gemini's ``parameters`` (an
OpenAPI subset) refuses with "Unknown name"."""


def test_a_json_schema_tool_is_sent_as_parameters_json_schema() -> None:
    tools = [{"name": "read", "description": "Read.", "input_schema": MCP_SCHEMA}]
    body = build_request([{"role": "user", "content": "q"}], tools=tools, model="gemini-2.5-pro")
    (declaration,) = body["tools"][0]["functionDeclarations"]
    assert declaration == {
        "name": "read",
        "description": "Read.",
        "parametersJsonSchema": MCP_SCHEMA,
    }
    assert sdk_problems("gemini", body) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"path": {"type": "string", "description": "A file."}}},
        {
            "type": "OBJECT",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "mode": {"type": "string", "enum": ["r", "w"], "nullable": True},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
            },
            "required": ["paths"],
            "propertyOrdering": ["paths", "mode", "either"],
        },
    ],
)
def test_a_schema_in_gemini_s_openapi_subset_is_still_sent_as_parameters(
    schema: dict[str, Any],
) -> None:
    tools = [{"name": "read", "input_schema": schema}]
    body = build_request([{"role": "user", "content": "q"}], tools=tools)
    assert body["tools"] == [{"functionDeclarations": [{"name": "read", "parameters": schema}]}]
    assert sdk_problems("gemini", body) == []


@pytest.mark.parametrize(
    "keyword",
    [
        {"$schema": "http://json-schema.org/draft-07/schema#"},
        {"additionalProperties": False},
        {"properties": {"n": {"type": ["integer", "null"]}}},
        {"properties": {"n": {"const": 1}}},
        {"properties": {"n": {"type": "integer", "enum": [1, 2]}}},
        {"properties": {"l": {"type": "array", "items": {"oneOf": [{"type": "string"}]}}}},
        {"properties": {"n": {"type": "integer", "exclusiveMinimum": 0}}},
    ],
)
def test_one_keyword_outside_the_subset_sends_the_whole_schema_as_json_schema(
    keyword: dict[str, Any],
) -> None:
    schema = {"type": "object", **keyword}
    tools = [{"name": "read", "input_schema": schema}]
    body = build_request([{"role": "user", "content": "q"}], tools=tools)
    declaration = body["tools"][0]["functionDeclarations"][0]
    assert declaration == {"name": "read", "parametersJsonSchema": schema}


def test_by_older_view_rules_the_schema_was_sent_as_parameters() -> None:
    tools = [{"name": "read", "input_schema": MCP_SCHEMA}]
    body = build_request([{"role": "user", "content": "q"}], tools=tools, rules=11)
    assert body["tools"] == [{"functionDeclarations": [{"name": "read", "parameters": MCP_SCHEMA}]}]


def test_build_request_omits_none_fields() -> None:
    assert build_request([{"role": "user", "content": "q"}]) == {
        "contents": [{"role": "user", "parts": [{"text": "q"}]}]
    }


def test_server_tools_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        build_request(
            [{"role": "user", "content": "q"}], tools=[{"type": "bash_20250124", "name": "bash"}]
        )


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_input_is_neither_mutated_nor_shared(case: Case) -> None:
    before = copy.deepcopy(case.messages)
    contents = render_contents(case.messages)
    assert case.messages == before
    assert not shares_containers(contents, case.messages)


def test_violations_report_role_and_count_errors() -> None:
    contents = [
        {
            "role": "model",
            "parts": [
                {"functionCall": {"id": "a", "name": "f", "args": {}}},
                {"functionCall": {"id": "b", "name": "f", "args": {}}},
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"id": "a", "name": "f", "response": {}}}]},
        {"role": "model", "parts": []},
    ]
    problems = violations(contents)
    assert any("expected 'user'" in p for p in problems)
    assert any("1 function responses for 2 function calls" in p for p in problems)
    assert any("no parts" in p for p in problems)
    assert any("last turn but not a user turn" in p for p in problems)
