"""OpenAI Chat Completions renderer: block-by-block conversion rules."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from aliasing import shares_containers
from conversations import Case, cases, png_image, search_result, text, tool_result, tool_use
from oracles import sdk_problems

from contextstore.core.errors import InvalidInputError
from contextstore.renderers.openai import (
    ATTACHMENT_NOTE,
    MAX_CALL_ID_LENGTH,
    build_request,
    call_id,
    render_messages,
    tool_arguments,
    tool_name,
    violations,
)
from contextstore.renderers.registry import validate_provider_payload


def _assistant_calls(*calls: dict[str, object]) -> dict[str, object]:
    return {"role": "assistant", "content": list(calls)}


def test_system_prompt_comes_first() -> None:
    rendered = render_messages([{"role": "user", "content": "q"}], system="S")
    assert rendered[0] == {"role": "system", "content": "S"}


def test_system_blocks_are_joined() -> None:
    system = [text("one"), text("two")]
    assert render_messages([], system=system)[0]["content"] == "one\n\ntwo"


def test_text_only_user_content_becomes_a_string() -> None:
    rendered = render_messages([{"role": "user", "content": [text("a"), text("b")]}])
    assert rendered == [{"role": "user", "content": "a\n\nb"}]


def test_assistant_with_only_tool_calls_has_null_content() -> None:
    rendered = render_messages(
        [
            {"role": "user", "content": "q"},
            _assistant_calls(tool_use("t", "f", {"k": "é", "n": [1, 2]})),
            {"role": "user", "content": [tool_result("t", "ok")]},
        ]
    )
    assistant = rendered[1]
    assert assistant["content"] is None
    assert assistant["tool_calls"] == [
        {
            "id": "t",
            "type": "function",
            "function": {"name": "f", "arguments": '{"k":"é","n":[1,2]}'},
        }
    ]


def test_arguments_are_compact_json_in_model_order() -> None:
    assert tool_arguments({"b": 1, "a": {"c": None}}) == '{"b":1,"a":{"c":null}}'
    assert json.loads(tool_arguments(None)) == {}


def test_tool_messages_precede_the_rest_of_the_user_message() -> None:
    rendered = render_messages(
        [
            {"role": "user", "content": "q"},
            _assistant_calls(tool_use("t1", "f", {}), tool_use("t2", "f", {})),
            {
                "role": "user",
                "content": [tool_result("t1", "one"), tool_result("t2", "two"), text("next")],
            },
        ]
    )
    assert rendered[2:] == [
        {"role": "tool", "tool_call_id": "t1", "content": "one"},
        {"role": "tool", "tool_call_id": "t2", "content": "two"},
        {"role": "user", "content": "next"},
    ]


def test_error_results_are_prefixed() -> None:
    rendered = render_messages(
        [
            {"role": "user", "content": "q"},
            _assistant_calls(tool_use("t", "f", {})),
            {"role": "user", "content": [tool_result("t", [text("boom")], is_error=True)]},
        ]
    )
    assert rendered[2]["content"] == "Error: boom"


def test_list_result_text_is_joined() -> None:
    rendered = render_messages(
        [
            {"role": "user", "content": "q"},
            _assistant_calls(tool_use("t", "f", {})),
            {"role": "user", "content": [tool_result("t", [text("a"), text("b")])]},
        ]
    )
    assert rendered[2]["content"] == "a\n\nb"


SEARCH_TEXT = "[Search result: Retries]\nSource: docs/retries.md\nSet max_retries.\n\nDefault 3."


def test_search_results_in_a_tool_result_are_sent_as_text() -> None:
    """Tool messages carry text: a search result there was dropped, its content lost."""
    found = search_result("docs/retries.md", "Retries", "Set max_retries.", "Default 3.")
    messages = [
        {"role": "user", "content": "q"},
        _assistant_calls(tool_use("t", "f", {})),
        {"role": "user", "content": [tool_result("t", [found, text("1 result.")])]},
    ]
    rendered = render_messages(messages)
    assert rendered[2] == {
        "role": "tool",
        "tool_call_id": "t",
        "content": f"{SEARCH_TEXT}\n\n1 result.",
    }
    assert sdk_problems("openai", rendered) == [] and violations(rendered) == []
    # a request built by older view rules dropped it, and is rebuilt so
    assert render_messages(messages, rules=4)[2]["content"] == "1 result."
    assert build_request(messages, rules=4)["messages"][2]["content"] == "1 result."


def test_a_search_result_in_a_user_message_is_sent_as_text() -> None:
    found = search_result("docs/retries.md", "Retries", "Set max_retries.", "Default 3.")
    rendered = render_messages([{"role": "user", "content": [text("See:"), found]}])
    assert rendered == [{"role": "user", "content": f"See:\n\n{SEARCH_TEXT}"}]
    assert sdk_problems("openai", rendered) == []


def test_a_search_result_without_title_or_source_keeps_its_text() -> None:
    bare = {"type": "search_result", "content": [text("only text")]}
    rendered = render_messages([{"role": "user", "content": [bare]}])
    assert rendered == [{"role": "user", "content": "[Search result]\nonly text"}]


def test_result_images_move_to_a_user_message_after_the_tool_messages() -> None:
    rendered = render_messages(
        [
            {"role": "user", "content": "q"},
            _assistant_calls(tool_use("t1", "f", {}), tool_use("t2", "f", {})),
            {
                "role": "user",
                "content": [
                    tool_result("t1", [png_image()]),
                    tool_result("t2", "plain"),
                    text("more"),
                ],
            },
        ]
    )
    note = ATTACHMENT_NOTE.format(count=1)
    assert [m["role"] for m in rendered[2:]] == ["tool", "tool", "user"]
    assert rendered[2]["content"] == note
    assert rendered[4]["content"][0]["type"] == "image_url"
    assert rendered[4]["content"][1] == {"type": "text", "text": "more"}


def test_images_and_documents_become_parts() -> None:
    url_image = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "QUJD"},
    }
    rendered = render_messages([{"role": "user", "content": [png_image(), url_image, pdf]}])
    parts = rendered[0]["content"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert parts[1] == {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
    assert parts[2] == {
        "type": "file",
        "file": {"filename": "document.pdf", "file_data": "data:application/pdf;base64,QUJD"},
    }


def test_thinking_only_assistant_message_is_left_out() -> None:
    rendered = render_messages(
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "x", "signature": "s"}],
            },
            {"role": "user", "content": "again"},
        ]
    )
    assert [m["role"] for m in rendered] == ["user", "user"]


def test_tools_become_functions() -> None:
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}, {"name": "g"}]
    body = build_request([{"role": "user", "content": "q"}], tools=tools, model="m", max_tokens=7)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        },
        {
            "type": "function",
            "function": {"name": "g", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert body["model"] == "m" and body["max_completion_tokens"] == 7


def test_build_request_omits_none_fields() -> None:
    assert build_request([{"role": "user", "content": "q"}]) == {
        "messages": [{"role": "user", "content": "q"}]
    }


@pytest.mark.parametrize(
    "tool", [{"type": "web_search_20250305", "name": "web_search"}, {"description": "no name"}]
)
def test_unusable_tools_are_refused(tool: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError):
        build_request([{"role": "user", "content": "q"}], tools=[tool])


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_input_is_neither_mutated_nor_shared(case: Case) -> None:
    before = copy.deepcopy(case.messages)
    rendered = render_messages(case.messages, system="S")
    assert case.messages == before
    assert not shares_containers(rendered, case.messages)


def test_violations_report_unanswered_and_stray_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "user", "content": "interrupt"},
        {"role": "tool", "tool_call_id": "b", "content": "late"},
        {"role": "assistant", "content": None},
    ]
    problems = violations(messages)
    assert any("['b'] are not answered" in p for p in problems)
    assert any("b answers no pending tool call" in p for p in problems)
    assert any("no content or tool calls" in p for p in problems)


RESPONSES_ID = "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"
"""A Responses API function call id (53 characters): Chat Completions refuses it."""


def _exchange(*call_ids: str) -> list[dict[str, object]]:
    """A task, an assistant message calling ``call_ids``, and their results in order."""
    return [
        {"role": "user", "content": "q"},
        _assistant_calls(*(tool_use(i, "f", {}) for i in call_ids)),
        {"role": "user", "content": [tool_result(i, f"out {n}") for n, i in enumerate(call_ids)]},
    ]


def _sent_ids(rendered: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The ids of the calls and those the tool messages answer, in order."""
    calls = [call["id"] for m in rendered for call in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in rendered if m["role"] == "tool"]
    return calls, results


def test_a_long_tool_call_id_is_shortened_alike_in_the_call_and_its_result() -> None:
    """The API refuses "string too long. Expected a string with maximum length 40"."""
    messages = _exchange(RESPONSES_ID)
    before = copy.deepcopy(messages)
    rendered = render_messages(messages)
    assert messages == before  # the stored id is kept
    (sent,), results = _sent_ids(rendered)
    assert results == [sent]
    assert len(sent) <= MAX_CALL_ID_LENGTH
    assert sent.startswith("fc_0f0e50a1476a6c350069")
    assert sent == call_id(RESPONSES_ID)  # the same every time the request is built
    assert violations(rendered) == [] and sdk_problems("openai", rendered) == []
    assert build_request(messages)["messages"] == rendered


def test_long_ids_sharing_their_first_40_characters_stay_apart() -> None:
    first, second = RESPONSES_ID + "a", RESPONSES_ID + "b"
    assert first[:MAX_CALL_ID_LENGTH] == second[:MAX_CALL_ID_LENGTH]
    rendered = render_messages(_exchange(first, second))
    calls, results = _sent_ids(rendered)
    assert calls == results == [call_id(first), call_id(second)]
    assert len(set(calls)) == 2 and all(len(i) <= MAX_CALL_ID_LENGTH for i in calls)
    # each result still answers its own call
    assert [m["content"] for m in rendered if m["role"] == "tool"] == ["out 0", "out 1"]
    assert violations(rendered) == []


def test_an_id_of_40_characters_is_sent_as_stored_and_one_of_41_is_shortened() -> None:
    at_limit, over = "c" * MAX_CALL_ID_LENGTH, "c" * (MAX_CALL_ID_LENGTH + 1)
    assert call_id(at_limit) == at_limit
    rendered = render_messages(_exchange(at_limit, over))
    calls, results = _sent_ids(rendered)
    assert calls == results
    assert calls[0] == at_limit
    assert calls[1] != over and len(calls[1]) == MAX_CALL_ID_LENGTH
    assert calls[1] != at_limit


def test_requests_built_by_older_view_rules_keep_long_ids_and_pass_their_check() -> None:
    messages = _exchange(RESPONSES_ID)
    old = render_messages(messages, rules=5)
    assert _sent_ids(old) == ([RESPONSES_ID], [RESPONSES_ID])
    assert build_request(messages, rules=5)["messages"] == old
    assert violations(old, rules=5) == []
    problems = violations(old)
    assert len(problems) == 2
    assert all(f"longer than {MAX_CALL_ID_LENGTH} characters" in p for p in problems)
    assert validate_provider_payload("openai", {"messages": old}, rules=5) == []
    assert validate_provider_payload("openai", {"messages": old}) == problems


def _named_exchange(*names: str) -> list[dict[str, object]]:
    """A task, an assistant message calling a tool of each name, and their results."""
    return [
        {"role": "user", "content": "q"},
        _assistant_calls(*(tool_use(f"call_{n}", name, {}) for n, name in enumerate(names))),
        {"role": "user", "content": [tool_result(f"call_{n}", "out") for n in range(len(names))]},
    ]


def _sent_names(rendered: list[dict[str, Any]]) -> list[str]:
    return [call["function"]["name"] for m in rendered for call in m.get("tool_calls") or []]


API_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The pattern OpenAI's error quotes for a name in a message's tool_calls: "Invalid
'messages[9].tool_calls[0].function.name': string does not match pattern
'^[a-zA-Z0-9_-]+$'" (mcp-use/mcp-use#90), at most 64 characters."""


def test_tool_names_the_api_refuses_are_sent_in_a_form_it_takes() -> None:
    """An MCP server's dotted name, or a name over 64 characters, was sent as stored and
    the whole request refused; names it takes are sent as they are."""
    names = ["github.search_code", "github:search_code", "n" * 65, "n" * 64, "ls", "read_file"]
    messages = _named_exchange(*names)
    before = copy.deepcopy(messages)
    rendered = render_messages(messages)
    assert messages == before  # the stored names are kept
    sent = _sent_names(rendered)
    assert all(API_NAME.match(name) for name in sent), sent
    assert sent[3:] == names[3:]
    assert sent[0].startswith("github_search_code_") and sent[1].startswith("github_search_code_")
    assert len(set(sent)) == len(names)  # names differing only in a refused character stay apart
    assert sent == [tool_name(name) for name in names]  # the same every time it is built
    assert violations(rendered) == [] and sdk_problems("openai", rendered) == []


@pytest.mark.parametrize("name", ["x" * 65, "a.b", "", "ünïcode", "a b"])
def test_every_rewritten_tool_name_is_one_the_api_takes(name: str) -> None:
    assert API_NAME.match(tool_name(name))
    assert tool_name(tool_name(name)) == tool_name(name)


def test_requests_built_before_rules_10_keep_names_and_pass_their_check() -> None:
    messages = _named_exchange("github.search_code")
    old = render_messages(messages, rules=9)
    assert _sent_names(old) == ["github.search_code"]
    assert violations(old, rules=9) == []
    (problem,) = violations(old)
    assert "tool call names the API refuses" in problem and "github.search_code" in problem
