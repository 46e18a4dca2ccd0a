"""One call answered twice in one user message: the rows keep both results as written, the
view keeps one (the last written), so every provider format can be sent.

Anthropic rejects a second ``tool_result`` for one ``tool_use_id``; OpenAI rejects a second
tool message for one call; Gemini CLI's hardening invents a call with empty ``args`` for
the extra response. The SDK types cannot see any of that (they check shapes), so the
payloads are checked against them and against the store's own provider rules.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from conversations import MAX_TOKENS, MODELS
from oracles import sdk_problems

from contextstore import ContextStore, ensure_tool_results_follow_tool_use
from contextstore.core import view as view_rules
from contextstore.facade import requests as requests_facade
from contextstore.processors import runner
from contextstore.renderers.registry import FORMATS, validate_provider_payload

CALLS = {
    "role": "assistant",
    "content": [
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "b.py"}},
    ],
}
ANSWERED_TWICE = {
    "role": "user",
    "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "first try"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "b"},
        {"type": "text", "text": "note"},
        {"type": "tool_result", "tool_use_id": "t1", "content": "retried"},
    ],
}
HISTORY = [{"role": "user", "content": "<task>t</task>"}, CALLS, ANSWERED_TWICE]


def _answers(fmt: str, payload: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every (call id, result) the payload sends, in order."""
    if fmt == "anthropic":
        return [
            (b["tool_use_id"], b["content"])
            for m in payload["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
    if fmt == "openai":
        return [
            (m["tool_call_id"], m["content"]) for m in payload["messages"] if m["role"] == "tool"
        ]
    return [
        (p["functionResponse"]["id"], p["functionResponse"]["response"]["output"])
        for c in payload["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]


def _calls(fmt: str, payload: dict[str, Any]) -> int:
    if fmt == "anthropic":
        return sum(
            b["type"] == "tool_use"
            for m in payload["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
        )
    if fmt == "openai":
        return sum(len(m.get("tool_calls") or []) for m in payload["messages"])
    return sum("functionCall" in p for c in payload["contents"] for p in c["parts"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_sends_one_result_per_call_and_the_rows_keep_both(
    store: ContextStore, fmt: str
) -> None:
    cid = store.create_conversation().id
    store.append(cid, HISTORY)
    ctx = store.prepare_request(cid, format=fmt, model=MODELS[fmt], max_tokens=MAX_TOKENS)
    assert sdk_problems(fmt, ctx.payload) == []
    assert validate_provider_payload(fmt, ctx.payload) == []
    assert _answers(fmt, ctx.payload) == [("t1", "retried"), ("t2", "b")]
    assert _calls(fmt, ctx.payload) == 2  # no call invented for the extra result
    assert store.request_payload(cid, ctx.request_id) == ctx.payload
    assert (
        store.render(cid, format=fmt) == ctx.payload["contents" if fmt == "gemini" else "messages"]
    )
    assert store.messages(cid)[2]["content"] == ANSWERED_TWICE["content"]
    (lossless,) = [m for m in store.render(cid) if m is not None][2:]
    assert [b.get("text") or b.get("content") for b in lossless["content"]] == [
        "retried",
        "b",
        "note",
    ]


def test_cline_s_public_repair_still_leaves_them_in_place() -> None:
    out = ensure_tool_results_follow_tool_use(HISTORY)
    assert out[2] is ANSWERED_TWICE


def test_a_gemini_request_prepared_by_older_rules_is_rebuilt_by_them(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = store.create_conversation().id
    store.append(cid, HISTORY)
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 2)
        patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=2))
        old = store.prepare_request(cid, format="gemini")
    assert _calls("gemini", old.payload) == 3  # what hardening made of both results then
    assert store.request_payload(cid, old.request_id) == old.payload
    assert store.prepare_request(cid, format="gemini").payload != old.payload
