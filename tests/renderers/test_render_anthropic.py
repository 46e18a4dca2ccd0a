"""Anthropic renderer: only the fields the Messages API takes, nothing else changed."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from aliasing import shares_containers
from conversations import Case, cases, message_fields, text, tool_result, tool_use

from contextstore.core.errors import InvalidMessageError
from contextstore.core.hardening import DEFAULT_CONTINUATION
from contextstore.renderers.anthropic import build_request, render_messages, violations


def test_message_level_fields_are_dropped() -> None:
    rendered = render_messages(message_fields())
    assert all(set(message) == {"role", "content"} for message in rendered)


def test_block_extras_are_dropped_and_api_fields_kept() -> None:
    cited = {**text("quoted"), "citations": [{"type": "char_location"}], "signature": "g"}
    messages = [
        {"role": "user", "content": [{**text("a"), "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [cited, {**tool_use("t", "f", {}), "call_id": "c"}]},
        {"role": "user", "content": [{**tool_result("t", [{**text("r"), "call_id": "c"}])}]},
    ]
    rendered = render_messages(messages)
    assert rendered[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert rendered[1]["content"][0] == {
        "type": "text",
        "text": "quoted",
        "citations": [{"type": "char_location"}],
    }
    assert "call_id" not in rendered[1]["content"][1]
    assert rendered[2]["content"][0]["content"] == [text("r")]


def test_string_content_stays_a_string() -> None:
    rendered = render_messages([{"role": "user", "content": "hello"}])
    assert rendered == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("signature", [None, ""])
def test_unsigned_thinking_is_dropped(signature: str | None) -> None:
    thinking = {"type": "thinking", "thinking": "hmm"}
    if signature is not None:
        thinking["signature"] = signature
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [thinking, text("a")]},
    ]
    assert render_messages(messages)[1]["content"] == [text("a")]


def test_signed_thinking_keeps_its_signature_only() -> None:
    block = {"type": "thinking", "thinking": "hmm", "signature": "s", "summary": "x"}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [block]}]
    assert render_messages(messages)[1]["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "s"}
    ]


def test_message_emptied_by_dropping_is_removed_and_neighbours_merged() -> None:
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "unsigned"}]},
        {"role": "user", "content": [text("second")]},
    ]
    assert render_messages(messages) == [
        {"role": "user", "content": [text("first"), text("second")]}
    ]


def test_unknown_block_type_passes_through_without_agent_fields() -> None:
    block = {"type": "mcp_tool_use", "id": "s", "name": "web_search", "call_id": "c"}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [block]}]
    assert render_messages(messages)[1]["content"] == [
        {"type": "mcp_tool_use", "id": "s", "name": "web_search"}
    ]


def test_build_request_omits_none_fields() -> None:
    assert build_request([{"role": "user", "content": "q"}]) == {
        "messages": [{"role": "user", "content": "q"}]
    }


def test_build_request_orders_and_copies_fields() -> None:
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
    body = build_request(
        [{"role": "user", "content": "q"}], system=system, tools=tools, model="m", max_tokens=9
    )
    assert list(body) == ["model", "max_tokens", "system", "tools", "messages"]
    assert body["tools"] == tools and body["system"] == system
    assert not shares_containers(body, [tools, system])


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "system", "content": "x"}],
        [{"role": "user", "content": None}],
        ["not a message"],
    ],
)
def test_malformed_messages_are_refused(bad: list[object]) -> None:
    with pytest.raises(InvalidMessageError):
        render_messages(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_input_is_neither_mutated_nor_shared(case: Case) -> None:
    messages = case.messages
    before = copy.deepcopy(messages)
    rendered = render_messages(messages)
    assert messages == before
    assert not shares_containers(rendered, messages)


def test_violations_report_role_and_pairing_errors() -> None:
    messages = [
        {"role": "assistant", "content": [tool_use("t1", "f", {}), tool_use("t2", "f", {})]},
        {"role": "user", "content": [text("late"), tool_result("t1", "x"), tool_result("zz", "")]},
    ]
    problems = violations(messages)
    assert any("expected 'user'" in p for p in problems)
    assert any("follows other content" in p for p in problems)
    assert any("zz answers no tool_use" in p for p in problems)
    assert any("['t2'] have no tool_result" in p for p in problems)


def test_violations_report_unanswered_calls_at_the_end() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [tool_use("t", "f", {})]},
    ]
    assert violations(messages) == ["end of messages: tool_use ids ['t'] are not answered"]


def test_blank_text_is_dropped() -> None:
    messages = [
        {"role": "user", "content": [text("q"), text("  ")]},
        {"role": "assistant", "content": [text("")]},
        {"role": "user", "content": "\n"},
        {"role": "assistant", "content": "a"},
    ]
    assert render_messages(messages) == [
        {"role": "user", "content": [text("q")]},
        {"role": "assistant", "content": "a"},
    ]


@pytest.mark.parametrize("blank", ["", "  ", [text("")], [text("\n")]])
def test_a_first_user_message_left_blank_is_opened_by_a_continuation(blank: object) -> None:
    messages = [
        {"role": "user", "content": blank},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    rendered = render_messages(messages)
    assert rendered[0] == {"role": "user", "content": DEFAULT_CONTINUATION}
    assert [m["role"] for m in rendered] == ["user", "assistant", "user"]
    assert violations(rendered) == []


FOREIGN_IDS = ["functions.read_file:0", "functions.read_file_0", "srv/tool 1", "call|é"]
"""Tool call ids other providers and MCP servers issue (Kimi's ``functions.<name>:<n>``);
the Messages API refuses every character outside ``[a-zA-Z0-9_-]``."""


def test_tool_call_ids_the_api_refuses_are_rewritten_in_pairs() -> None:
    messages = [{"role": "user", "content": "go"}]
    for call_id in FOREIGN_IDS:
        messages += [
            {"role": "assistant", "content": [tool_use(call_id, "f", {})]},
            {"role": "user", "content": [tool_result(call_id, "r")]},
        ]
    original = copy.deepcopy(messages)
    rendered = render_messages(messages)
    calls = [m["content"][0]["id"] for m in rendered if m["role"] == "assistant"]
    results = [m["content"][0]["tool_use_id"] for m in rendered[2::2]]
    assert calls == results
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", call_id) for call_id in calls)
    # the first two differ only in characters that become "_": they stay apart
    assert len(set(calls)) == len(calls)
    assert violations(rendered) == []
    assert messages == original


def test_an_id_the_api_accepts_is_sent_as_stored() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [tool_use("toolu_01-A_b", "f", {})]},
        {"role": "user", "content": [tool_result("toolu_01-A_b", "r")]},
    ]
    assert render_messages(messages)[1]["content"][0]["id"] == "toolu_01-A_b"


def test_a_refused_tool_call_id_is_a_violation() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [tool_use("a.b", "f", {})]},
        {"role": "user", "content": [tool_result("a.b", "r")]},
    ]
    assert violations(messages) == [
        "messages[1] has tool call ids the API refuses: ['a.b']",
        "messages[2] has tool call ids the API refuses: ['a.b']",
    ]


def _turns_reusing(call_id: str, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(turns):
        messages += [
            {"role": "assistant", "content": [tool_use(call_id, "f", {"n": turn})]},
            {"role": "user", "content": [tool_result(call_id, f"r{turn}")]},
        ]
    return messages


@pytest.mark.parametrize("call_id", ["functions.read_file:0", "toolu_1"])
def test_a_tool_call_id_used_in_an_earlier_message_is_sent_in_another_form(call_id: str) -> None:
    # Kimi's ids restart every turn; the API refuses a request holding one id twice
    # ("tool_use ids must be unique"), and the same history was sent so.
    messages = _turns_reusing(call_id, 3)
    original = copy.deepcopy(messages)
    rendered = render_messages(messages)
    calls = [m["content"][0]["id"] for m in rendered if m["role"] == "assistant"]
    results = [m["content"][0]["tool_use_id"] for m in rendered[2::2]]
    assert calls == results
    assert len(set(calls)) == 3
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", c) for c in calls)
    assert calls[1].startswith(calls[0] + "_")
    assert violations(rendered) == []
    assert messages == original
    assert render_messages(messages) == rendered


def test_a_repeated_tool_call_id_is_a_violation_from_rules_9() -> None:
    messages = _turns_reusing("toolu_1", 2)
    assert violations(messages) == [
        "messages[3]: tool_use ids ['toolu_1'] were already used (first in messages[1]); "
        "the API wants every id once"
    ]
    assert violations(messages, rules=8) == []
    assert render_messages(messages, rules=8) == messages


def _prefill(content: object) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": "Answer in JSON."},
        {"role": "assistant", "content": content},
    ]


@pytest.mark.parametrize(
    ("content", "sent"),
    [
        ("Here is the JSON: \n\t", "Here is the JSON:"),
        (
            [text("Thinking out loud."), text("  Here:  \n")],
            [text("Thinking out loud."), text("  Here:")],
        ),
        (
            [{**text("Sure, "), "cache_control": {"type": "ephemeral"}}],
            [{**text("Sure,"), "cache_control": {"type": "ephemeral"}}],
        ),
    ],
)
def test_a_final_assistant_message_loses_its_trailing_whitespace(
    content: object, sent: object
) -> None:
    """The Messages API refuses "final assistant content cannot end with trailing whitespace"."""
    messages = _prefill(content)
    original = copy.deepcopy(messages)
    rendered = render_messages(messages)
    assert rendered[-1] == {"role": "assistant", "content": sent}
    assert violations(rendered) == []
    assert messages == original
    assert not shares_containers(rendered, messages)


def test_only_the_end_of_a_final_assistant_message_is_stripped() -> None:
    messages = [
        {"role": "user", "content": "task "},
        {"role": "assistant", "content": [text("earlier answer \n")]},
        {"role": "user", "content": [text("go on\n")]},
    ]
    # a final user message, and an assistant message that is not last, keep their whitespace
    assert render_messages(messages) == [
        {"role": "user", "content": "task "},
        {"role": "assistant", "content": [text("earlier answer \n")]},
        {"role": "user", "content": [text("go on\n")]},
    ]
    # a final assistant message ending with a tool call keeps the text before it
    calls = _prefill([text("Reading. "), tool_use("t", "f", {})])
    assert render_messages(calls)[-1]["content"][0] == text("Reading. ")


def test_the_message_left_last_by_merging_is_the_one_stripped() -> None:
    """A final message left empty (a blank text, an unsigned thinking block) is dropped: the
    assistant message before it becomes the final one."""
    for empty in ([text("  \n")], [{"type": "thinking", "thinking": "unsigned"}], "   "):
        messages = [*_prefill([text("Sure, ")]), {"role": "assistant", "content": empty}]
        assert render_messages(messages)[-1] == {"role": "assistant", "content": [text("Sure,")]}


def test_requests_built_by_older_view_rules_keep_the_trailing_whitespace() -> None:
    messages = _prefill("Sure, ")
    assert render_messages(messages, rules=4)[-1]["content"] == "Sure, "
    assert build_request(messages, rules=4)["messages"][-1]["content"] == "Sure, "
    assert build_request(messages)["messages"][-1]["content"] == "Sure,"


def test_a_final_assistant_message_ending_with_whitespace_is_a_violation() -> None:
    from contextstore.renderers.registry import validate_provider_payload

    problem = "messages[1] is the final assistant message and its content ends with whitespace"
    for content in ("Sure, ", [text("Sure,\n")]):
        payload = {"messages": _prefill(content)}
        assert violations(payload["messages"]) == [problem]
        assert validate_provider_payload("anthropic", payload) == [problem]
        # a payload built by rules 4 sent it so: not what its rules promise
        assert validate_provider_payload("anthropic", payload, rules=4) == []
    assert violations(_prefill("Sure,")) == []
    assert violations([*_prefill("Sure, "), {"role": "user", "content": "more"}]) == []


@pytest.mark.parametrize(
    "content",
    [None, "", "  \n", [], [text("")], [text(" ")]],
    ids=["missing", "empty", "blank", "no-blocks", "empty-block", "blank-block"],
)
def test_an_error_result_without_content_is_sent_with_a_text(content: Any) -> None:
    """The API refuses "content cannot be empty if `is_error` is true": a command failing
    without output, or a denied call, made every later request of the conversation fail."""
    from oracles import sdk_problems

    from contextstore.renderers.anthropic_blocks import EMPTY_ERROR_RESULT
    from contextstore.renderers.registry import validate_provider_payload

    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": "t1", "is_error": True}
    if content is not None:
        result["content"] = content
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [tool_use("t1", "bash", {"cmd": "false"})]},
        {"role": "user", "content": [result]},
    ]
    body = build_request(messages, model="m", max_tokens=8)
    assert body["messages"][2]["content"] == [{**result, "content": EMPTY_ERROR_RESULT}]
    assert validate_provider_payload("anthropic", body) == []
    assert sdk_problems("anthropic", body) == []
    old = build_request(messages, model="m", max_tokens=8, rules=11)
    assert validate_provider_payload("anthropic", old, rules=11) == []
    (problem,) = validate_provider_payload("anthropic", old)
    assert "flagged is_error with no content" in problem
    # a result that is not an error may be empty: no text is added to it
    not_error = {**result, "is_error": False}
    sent = build_request([*messages[:2], {"role": "user", "content": [not_error]}])
    assert EMPTY_ERROR_RESULT not in str(sent)
