"""Anthropic takes at most four blocks with a cache_control in a request (view rules 12).

An agent that marks its newest user message every turn, as Anthropic's multi-turn caching
guide does, stores one breakpoint per turn; the API refused the fifth turn's request ("A
maximum of 4 blocks with cache_control may be provided. Found 5.") and every later one.
"""

from __future__ import annotations

from typing import Any

import pytest
from conversations import text, tool_result, tool_use
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import sdk_problems

from contextstore import ContextStore
from contextstore.core.errors import InvalidInputError
from contextstore.renderers.anthropic import build_request, render_messages
from contextstore.renderers.anthropic_cache import message_breakpoints
from contextstore.renderers.registry import validate_provider_payload

CACHED = {"type": "ephemeral"}
MARK = {"cache_control": CACHED}
SYSTEM = [{"type": "text", "text": "You are terse.", **MARK}]
TOOLS = [{"name": "read", "input_schema": {"type": "object"}, **MARK}]


def _turns(count: int) -> list[dict[str, Any]]:
    """``count`` turns, each user message marked as the newest one was when it was sent."""
    messages: list[dict[str, Any]] = []
    for turn in range(count):
        messages.append({"role": "user", "content": [{**text(f"question {turn}"), **MARK}]})
        messages.append({"role": "assistant", "content": [text(f"answer {turn}")]})
    return messages


def _marked_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if "cache_control" in block
    ]


def _total(body: dict[str, Any]) -> int:
    prompt = [*body.get("system", []), *body.get("tools", [])]
    return sum("cache_control" in block for block in prompt) + sum(
        message_breakpoints(message) for message in body["messages"]
    )


def test_the_newest_breakpoints_are_kept_within_four() -> None:
    messages = _turns(6)
    body = build_request(messages, system=SYSTEM, tools=TOOLS, model="m", max_tokens=8)
    assert _marked_texts(body["messages"]) == ["question 4", "question 5"]
    assert _total(body) == 4
    assert sdk_problems("anthropic", body) == []
    assert validate_provider_payload("anthropic", body) == []
    assert render_messages(messages)[0]["content"] == [text("question 0")]
    assert _marked_texts(render_messages(messages)) == [f"question {n}" for n in range(2, 6)]


def test_a_request_by_older_rules_sent_them_all_and_is_now_a_violation() -> None:
    body = build_request(_turns(6), system=SYSTEM, model="m", max_tokens=8, rules=11)
    assert _total(body) == 7
    assert validate_provider_payload("anthropic", body, rules=11) == []
    (problem,) = validate_provider_payload("anthropic", body)
    assert "7 blocks with cache_control" in problem


def test_breakpoints_inside_tool_results_count_and_are_left_out_first_when_old() -> None:
    marked_result = tool_result("t1", [{**text("old output"), **MARK}])
    messages = [
        {"role": "user", "content": [{**text("task"), **MARK}]},
        {"role": "assistant", "content": [tool_use("t1", "read", {})]},
        {"role": "user", "content": [marked_result]},
        *_turns(4)[1:],
        {"role": "user", "content": [{**text("now"), **MARK}]},
    ]
    sent = render_messages(messages)
    assert sent[2]["content"][0]["content"] == [text("old output")]
    assert _marked_texts(sent) == ["question 1", "question 2", "question 3", "now"]
    assert sum(message_breakpoints(message) for message in sent) == 4
    assert "cache_control" not in sent[0]["content"][0]


@settings(max_examples=100, deadline=None)
@given(
    marks=st.lists(st.booleans(), min_size=1, max_size=12),
    prompt=st.integers(min_value=0, max_value=4),
)
def test_no_render_holds_more_than_four(marks: list[bool], prompt: int) -> None:
    messages = [
        {
            "role": "user" if position % 2 == 0 else "assistant",
            "content": [{**text(f"m{position}"), **(MARK if marked else {})}],
        }
        for position, marked in enumerate(marks)
    ]
    system = [{"type": "text", "text": f"s{n}", **MARK} for n in range(prompt)] or None
    body = build_request(messages, system=system, model="m", max_tokens=8)
    kept = _marked_texts(body["messages"])
    stored = [f"m{position}" for position, marked in enumerate(marks) if marked]
    assert kept == stored[len(stored) - min(len(stored), 4 - prompt) :]
    assert validate_provider_payload("anthropic", body) == []


def test_prepare_request_keeps_four_turn_after_turn_and_rebuilds(store: ContextStore) -> None:
    conv = store.create_conversation()
    for turn in range(6):
        store.append(conv.id, "user", [{**text(f"question {turn}"), **MARK}])
        ctx = store.prepare_request(conv.id, system=SYSTEM, model="m", max_tokens=8)
        assert _total(ctx.payload) == min(turn + 2, 4)
        assert _marked_texts(ctx.payload["messages"])[-1] == f"question {turn}"
        assert sdk_problems("anthropic", ctx.payload) == []
        assert ctx.request_id is not None
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
        store.append(conv.id, "assistant", f"answer {turn}")
    assert _marked_texts(store.messages(conv.id)) == [f"question {n}" for n in range(6)]


@pytest.mark.parametrize("format", ["anthropic", "openai"])
def test_a_prompt_with_more_than_four_breakpoints_is_refused_for_anthropic(
    store: ContextStore, format: str
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    system = [{"type": "text", "text": f"part {n}", **MARK} for n in range(4)]
    if format == "anthropic":
        with pytest.raises(InvalidInputError, match="5 blocks with cache_control"):
            store.prepare_request(conv.id, system=system, tools=TOOLS, format=format)
        assert store.requests(conv.id) == []
    else:
        store.prepare_request(conv.id, system=system, tools=TOOLS, format=format)
