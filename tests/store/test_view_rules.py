"""A prepared request is rebuilt by the view rules it was built with, after they change."""

from __future__ import annotations

import base64
import json
from functools import partial
from typing import Any

import pytest

from contextstore import (
    ContextStore,
    CorruptRowError,
    InvalidInputError,
    RequestNotFoundError,
)
from contextstore.core import view as view_rules
from contextstore.facade import requests as requests_facade
from contextstore.processors import runner
from contextstore.renderers.openai import tool_name
from tests.conftest import assistant, tool_result, tool_use, user


def _cline_text_result_history() -> list[dict[str, Any]]:
    """A call answered the way Cline 3.5x stores it: a user text block, no tool_result."""
    return [
        user("<task>read a.py</task>"),
        assistant("Reading.", tool_use("toolu_1", "read_file", path="a.py")),
        user("[read_file for 'a.py'] Result:\nprint('hi')"),
    ]


def _result_blocks(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in payload["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_new_requests_record_the_current_rules_and_rebuild_exactly(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, _cline_text_result_history())
    prepared = store.prepare_request(conv.id)
    assert prepared.request_id is not None
    (result,) = _result_blocks(prepared.payload)
    assert result["content"] == "[read_file for 'a.py'] Result:\nprint('hi')"
    assert store.request_payload(conv.id, prepared.request_id) == prepared.payload


def test_a_request_built_by_older_rules_is_rebuilt_by_them(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, _cline_text_result_history())
    with monkeypatch.context() as patched:
        # what a store running the version 1 rules prepared
        patched.setattr(requests_facade, "VIEW_RULES", 1)
        # (through the module attribute, not the function's defaults, which a mutation
        # run's wrapper functions do not carry)
        patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=1))
        old = store.prepare_request(conv.id)
    assert old.request_id is not None
    (placeholder,) = _result_blocks(old.payload)
    assert placeholder["content"] == "result missing"
    # the current rules build a different view, yet the old request still verifies
    assert store.request_payload(conv.id, old.request_id) == old.payload
    current = store.prepare_request(conv.id)
    assert current.payload != old.payload


def test_unknown_view_rules_in_a_stored_request_are_a_clear_error(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 99)
        future = store.prepare_request(conv.id)
    assert future.request_id is not None
    with pytest.raises(CorruptRowError, match="view rules 99"):
        store.request_payload(conv.id, future.request_id)


def test_a_request_whose_options_name_no_rules_was_built_by_the_first(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests prepared before the options recorded their view rules were built by rules 1."""
    conv = store.create_conversation()
    store.append(conv.id, _cline_text_result_history())
    original = requests_facade.RequestsMixin._request_options

    def without_rules(*args: Any, **kwargs: Any) -> dict[str, Any]:
        options = dict(original(*args, **kwargs))
        options.pop("view_rules")
        return options

    with monkeypatch.context() as patched:
        patched.setattr(
            requests_facade.RequestsMixin, "_request_options", staticmethod(without_rules)
        )
        patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=1))
        old = store.prepare_request(conv.id)
    assert old.request_id is not None
    assert _result_blocks(old.payload)[0]["content"] == "result missing"
    assert store.request_payload(conv.id, old.request_id) == old.payload


def test_a_request_prepared_before_tool_ids_were_rewritten_rebuilds_as_sent(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 4 gives Anthropic ids it refuses another form; a version 3 request kept them."""
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user("task"),
            assistant(tool_use("functions.read_file:0", "read_file", path="a.py")),
            user({"type": "tool_result", "tool_use_id": "functions.read_file:0", "content": "x"}),
        ],
    )
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 3)
        old = store.prepare_request(conv.id)
    assert old.request_id is not None
    assert _result_blocks(old.payload)[0]["tool_use_id"] == "functions.read_file:0"
    assert store.request_payload(conv.id, old.request_id) == old.payload
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id)
    assert current.request_id is not None
    assert _result_blocks(current.payload)[0]["tool_use_id"].startswith("functions_read_file_0_")
    assert store.request_payload(conv.id, current.request_id) == current.payload


SEARCH_RESULT = {
    "type": "search_result",
    "source": "docs/retries.md",
    "title": "Retries",
    "content": [{"type": "text", "text": "Set max_retries in client.toml."}],
}


def _rules_5_shapes() -> list[dict[str, Any]]:
    """What version 5 sends differently: a tool result holding a search result (OpenAI and
    Gemini dropped it), and a final assistant message ending with whitespace (Anthropic
    refuses it)."""
    return [
        user("How are retries configured?"),
        assistant(tool_use("toolu_1", "search_docs", query="retries")),
        user(tool_result("toolu_1", [SEARCH_RESULT, {"type": "text", "text": "1 result."}])),
        assistant("Here is what the docs say: \n"),
    ]


def _sent(format: str, payload: dict[str, Any]) -> tuple[str, str]:
    """The search result's place and the final assistant text, as ``format`` sends them."""
    if format == "anthropic":
        result = _result_blocks(payload)[0]["content"]
        return json.dumps(result), payload["messages"][-1]["content"][0]["text"]
    if format == "openai":
        (tool,) = [m for m in payload["messages"] if m["role"] == "tool"]
        return tool["content"], payload["messages"][-1]["content"]
    (response,) = [
        part["functionResponse"]["response"]["output"]
        for turn in payload["contents"]
        for part in turn["parts"]
        if "functionResponse" in part
    ]
    return response, payload["contents"][-2]["parts"][0]["text"]


@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_a_request_prepared_by_rules_4_rebuilds_as_sent_after_rules_5(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch, format: str
) -> None:
    """Version 5 strips a final assistant message's trailing whitespace for Anthropic and
    sends search results to OpenAI and Gemini as text; a version 4 request did neither."""
    conv = store.create_conversation()
    store.append(conv.id, _rules_5_shapes())
    tools = [{"name": "search_docs", "input_schema": {"type": "object"}}]
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 4)
        old = store.prepare_request(conv.id, format=format, tools=tools)
    result, final = _sent(format, old.payload)
    assert final == "Here is what the docs say: \n"
    if format == "anthropic":
        assert '"type": "search_result"' in result
    else:
        assert result == "1 result."
    assert store.request_payload(conv.id, old.request_id) == old.payload
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format=format, tools=tools)
    result, final = _sent(format, current.payload)
    if format == "anthropic":
        assert final == "Here is what the docs say:"
        assert '"type": "search_result"' in result
    else:
        assert final == "Here is what the docs say: \n"
        assert result == (
            "[Search result: Retries]\nSource: docs/retries.md\n"
            "Set max_retries in client.toml.\n\n1 result."
        )
    assert store.request_payload(conv.id, current.request_id) == current.payload
    assert store.request_payload(conv.id, old.request_id) == old.payload


LONG_ID = "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"
"""A Responses API call id: 53 characters, over Chat Completions' limit of 40."""


def _long_id_history() -> list[dict[str, Any]]:
    return [
        user("What is in the repo?"),
        assistant(tool_use(LONG_ID, "list_files", path=".")),
        user(tool_result(LONG_ID, "README.md")),
        assistant("A README."),
    ]


def _openai_ids(payload: dict[str, Any]) -> list[str]:
    """Every tool call id the OpenAI payload sends: the calls', then the results'."""
    messages = payload["messages"]
    calls = [call["id"] for m in messages for call in m.get("tool_calls") or []]
    return [*calls, *(m["tool_call_id"] for m in messages if m["role"] == "tool")]


@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_a_request_prepared_by_rules_5_rebuilds_as_sent_after_rules_6(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch, format: str
) -> None:
    """Version 6 shortens OpenAI tool call ids over 40 characters; a version 5 request sent
    them whole, and the other formats are sent as before."""
    conv = store.create_conversation()
    store.append(conv.id, _long_id_history())
    tools = [{"name": "list_files", "input_schema": {"type": "object"}}]
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 5)
        old = store.prepare_request(conv.id, format=format, tools=tools)
    assert store.request_payload(conv.id, old.request_id) == old.payload
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format=format, tools=tools)
    assert store.request_payload(conv.id, current.request_id) == current.payload
    assert store.request_payload(conv.id, old.request_id) == old.payload
    if format == "openai":
        assert _openai_ids(old.payload) == [LONG_ID, LONG_ID]
        short, answered = _openai_ids(current.payload)
        assert short == answered and len(short) <= 40 and short.startswith(LONG_ID[:20])
    elif format == "gemini":
        # (its tools are sent as parametersJsonSchema since version 12)
        assert current.payload["contents"] == old.payload["contents"]
    else:
        assert current.payload == old.payload


HEIC_DATA = base64.b64encode(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic").decode()
PNG_DATA = base64.b64encode(
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01"
).decode()


def _media_history() -> list[dict[str, Any]]:
    """A HEIC photo (Gemini CLI keeps them) and a PNG whose media_type says JPEG."""
    heic = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/heic", "data": HEIC_DATA},
    }
    png = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG_DATA},
    }
    return [
        user("What do these show?", heic),
        assistant(tool_use("toolu_1", "screenshot")),
        user(tool_result("toolu_1", [png])),
        assistant("A garden and a screen."),
    ]


@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_a_request_prepared_by_rules_6_rebuilds_as_sent_after_rules_7(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch, format: str
) -> None:
    """Version 7 leaves out images of types the provider refuses and sends an image with
    the type its data is; a version 6 request sent both as stored, and rebuilds so."""
    conv = store.create_conversation()
    store.append(conv.id, _media_history())
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 6)
        old = store.prepare_request(conv.id, format=format)
    assert store.request_payload(conv.id, old.request_id) == old.payload
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format=format)
    assert store.request_payload(conv.id, current.request_id) == current.payload
    assert store.request_payload(conv.id, old.request_id) == old.payload
    old_text, current_text = json.dumps(old.payload), json.dumps(current.payload)
    assert "image/heic" in old_text and "image/jpeg" in old_text
    assert "image/jpeg" not in current_text and "image/png" in current_text
    if format == "gemini":
        assert "omitted" not in current_text and "image/heic" in current_text
    else:
        assert "[image omitted: image/heic" in current_text


@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_a_request_prepared_by_rules_7_rebuilds_as_sent_after_rules_8(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch, format: str
) -> None:
    """Version 8 leaves out an image whose data the provider cannot read (here, not
    base64); a version 7 request sent it as stored, and rebuilds so."""
    broken = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "#not base64#"},
    }
    conv = store.create_conversation()
    store.append(conv.id, [user("What does this show?", broken)])
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 7)
        old = store.prepare_request(conv.id, format=format)
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format=format)
    assert store.request_payload(conv.id, current.request_id) == current.payload
    assert store.request_payload(conv.id, old.request_id) == old.payload
    old_text, current_text = json.dumps(old.payload), json.dumps(current.payload)
    assert "#not base64#" in old_text and "omitted" not in old_text
    assert "#not base64#" not in current_text
    assert "[image omitted: its data is not base64;" in current_text


def test_a_request_prepared_by_rules_8_rebuilds_as_sent_after_rules_9(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 9 gives an Anthropic tool call id an earlier message used another form; a
    version 8 request sent the id twice, and rebuilds so."""
    conv = store.create_conversation()
    store.append(conv.id, [user("go")])
    for turn in range(2):
        store.append(
            conv.id,
            [
                assistant(tool_use("functions.read_file:0", path=f"f{turn}")),
                user(tool_result("functions.read_file:0", f"body {turn}")),
            ],
        )
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 8)
        old = store.prepare_request(conv.id, format="anthropic")
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format="anthropic")
    assert store.request_payload(conv.id, old.request_id) == old.payload
    assert store.request_payload(conv.id, current.request_id) == current.payload

    def calls(payload: dict[str, Any]) -> list[str]:
        return [
            block["id"]
            for message in payload["messages"]
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_use"
        ]

    assert len(set(calls(old.payload))) == 1
    assert len(set(calls(current.payload))) == 2
    # a later prepare, reusing its renderings of the earlier messages, keeps them apart too
    store.append(conv.id, [assistant("done"), user("and now?")])
    again = store.prepare_request(conv.id, format="anthropic")
    assert calls(again.payload) == calls(current.payload)
    assert store.request_payload(conv.id, again.request_id) == again.payload


def test_a_request_prepared_by_rules_9_rebuilds_as_sent_after_rules_10(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 10 sends an OpenAI tool call's name in a form the API takes; a version 9
    request sent it as stored, and rebuilds so."""
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user("go"),
            assistant(tool_use("call_1", name="github.search_code", q="x")),
            user(tool_result("call_1", "found")),
        ],
    )
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 9)
        old = store.prepare_request(conv.id, format="openai")
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format="openai")

    def names(payload: dict[str, Any]) -> list[str]:
        return [
            call["function"]["name"]
            for message in payload["messages"]
            for call in message.get("tool_calls") or []
        ]

    assert names(old.payload) == ["github.search_code"]
    assert names(current.payload) == [tool_name("github.search_code")]
    assert store.request_payload(conv.id, old.request_id) == old.payload
    assert store.request_payload(conv.id, current.request_id) == current.payload
    assert store.messages(conv.id)[1]["content"][0]["name"] == "github.search_code"


def test_a_request_prepared_before_reused_ids_were_told_apart_rebuilds_as_sent(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 11 drops a result after the cut that answers the hidden call just before it,
    though message 1 issued the same id; a version 10 request sent it as message 1's."""
    same = "functions.read_file:0"
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user("task"),
            assistant(tool_use(same, path="a.py")),
            user(tool_result(same, "a.py's text")),
            assistant("next"),
            assistant(tool_use(same, path="b.py")),
            user(tool_result(same, "b.py's text")),
            assistant("done"),
        ],
    )
    store.set_deleted_range(conv.id, 4)
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 10)
        patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=10))
        old = store.prepare_request(conv.id)
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id)
    assert old.request_id is not None and current.request_id is not None
    assert [r["content"] for r in _result_blocks(old.payload)] == ["b.py's text"]
    assert [r["content"] for r in _result_blocks(current.payload)] == ["result missing"]
    assert store.request_payload(conv.id, old.request_id) == old.payload
    assert store.request_payload(conv.id, current.request_id) == current.payload


def test_a_gemini_request_by_rules_11_is_rebuilt_with_parameters(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 12 sends a tool's schema beyond Gemini's OpenAPI subset as
    parametersJsonSchema; a request prepared by version 11 sent it as parameters, and is
    rebuilt so."""
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    tools = [{"name": "read", "input_schema": schema}]
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 11)
        old = store.prepare_request(conv.id, format="gemini", tools=tools)
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id, format="gemini", tools=tools)
    assert old.request_id is not None and current.request_id is not None
    (old_declaration,) = old.payload["tools"][0]["functionDeclarations"]
    (declaration,) = current.payload["tools"][0]["functionDeclarations"]
    assert "parameters" in old_declaration and "parametersJsonSchema" in declaration
    assert store.request_payload(conv.id, old.request_id) == old.payload
    assert store.request_payload(conv.id, current.request_id) == current.payload


def test_an_empty_error_result_by_rules_11_is_rebuilt_empty(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 12 gives a tool result flagged is_error with no content a text (Anthropic
    refuses it empty); a request prepared by version 11 sent it empty, and is rebuilt so."""
    conv = store.create_conversation()
    failed = {"type": "tool_result", "tool_use_id": "t1", "content": "", "is_error": True}
    store.append(conv.id, [user("run"), assistant(tool_use("t1", cmd="false")), user(failed)])
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 11)
        old = store.prepare_request(conv.id)
    store.prepare_cache.clear()
    current = store.prepare_request(conv.id)
    assert old.request_id is not None and current.request_id is not None
    assert [r["content"] for r in _result_blocks(old.payload)] == [""]
    assert [r["content"] for r in _result_blocks(current.payload)] != [""]
    assert store.request_payload(conv.id, old.request_id) == old.payload
    assert store.request_payload(conv.id, current.request_id) == current.payload


def test_the_view_of_a_request_is_by_the_rules_it_was_prepared_with(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's view of a request's moment applied the current rules: a request
    prepared by rules 1 sent a ``result missing`` placeholder beside Cline's text result,
    and ``viewed_messages`` showed that message sent as stored."""
    conv = store.create_conversation()
    store.append(conv.id, _cline_text_result_history())
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 1)
        patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=1))
        old = store.prepare_request(conv.id)
    assert old.request_id is not None
    (sent,) = [b for b in old.payload["messages"][2]["content"] if b["type"] == "tool_result"]
    (request,) = store.requests(conv.id)

    by_now = store.viewed_messages(conv.id, as_of=request.ts)[2]
    by_request = store.viewed_messages(conv.id, request_id=old.request_id)[2]

    assert by_now.added == [] and by_now.followed_by == []
    assert by_request.added == [sent]
    assert sent["content"] == "result missing"
    assert [b.block for b in by_request.blocks] == [b.block for b in by_now.blocks]


def test_the_view_of_a_rules_10_request_keeps_the_result_it_sent(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rules 11 drop a result after the cut answering the hidden call just before it; a
    rules 10 request sent it, and its view says so (not "not sent")."""
    same = "functions.read_file:0"
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user("task"),
            assistant(tool_use(same, path="a.py")),
            user(tool_result(same, "a.py's text")),
            assistant("next"),
            assistant(tool_use(same, path="b.py")),
            user(tool_result(same, "b.py's text")),
            assistant("done"),
        ],
    )
    store.set_deleted_range(conv.id, 4)
    with monkeypatch.context() as patched:
        patched.setattr(requests_facade, "VIEW_RULES", 10)
        patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=10))
        old = store.prepare_request(conv.id)
    assert old.request_id is not None
    assert [r["content"] for r in _result_blocks(old.payload)] == ["b.py's text"]
    (request,) = store.requests(conv.id)

    by_now = store.viewed_messages(conv.id, as_of=request.ts)[5]
    by_request = store.viewed_messages(conv.id, request_id=old.request_id)[5]

    assert [b.dropped for b in by_now.blocks] == [True]
    assert [b.dropped for b in by_request.blocks] == [False] and by_request.added == []


def test_the_view_of_a_request_needs_one_prepared_here(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    recorded = store.record_request(conv.id, tokens_in=5, tokens_out=1)
    prepared = store.prepare_request(conv.id)
    assert prepared.request_id is not None
    with pytest.raises(RequestNotFoundError, match="recorded without being prepared here"):
        store.viewed_messages(conv.id, request_id=recorded.id)
    with pytest.raises(RequestNotFoundError, match="has no request 99"):
        store.viewed_messages(conv.id, request_id=99)
    with pytest.raises(InvalidInputError, match="as_of or request_id, not both"):
        store.viewed_messages(conv.id, as_of=recorded.ts, request_id=prepared.request_id)
    # a request prepared by the current rules: the same view as at its moment
    moment = store.requests(conv.id)[-1].ts
    assert store.viewed_messages(conv.id, request_id=prepared.request_id) == (
        store.viewed_messages(conv.id, as_of=moment)
    )
