"""A block's fields are checked against what the providers accept, with the Anthropic SDK's
request types as the oracle: a field the Anthropic renderer sends (``is_error``,
``cache_control``, ``citations``, a document's ``title``...) of the wrong type is refused at
append, naming the block and the field, instead of a 400 from the API many turns later.
Fields the store does not know (Cline's ``call_id``, ``reasoning_details``, a thinking
block's ``summary``) are kept, whatever they hold: no renderer sends them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from contextstore.core.content import normalize_message, validate_block
from contextstore.core.errors import InvalidMessageError
from contextstore.core.validate import canonical_json
from contextstore.renderers.anthropic import render_messages

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
CHAR_CITATION = {
    "type": "char_location",
    "cited_text": "the sky is blue",
    "document_index": 0,
    "document_title": "Notes",
    "start_char_index": 0,
    "end_char_index": 15,
}
SEARCH_RESULT = {
    "type": "search_result",
    "source": "https://example.com/a",
    "title": "A",
    "content": [{"type": "text", "text": "found"}],
}


def _result(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", **fields}


def _call(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}, **fields}


def _text(**fields: Any) -> dict[str, Any]:
    return {"type": "text", "text": "x", **fields}


def _document(**fields: Any) -> dict[str, Any]:
    source = {"type": "text", "media_type": "text/plain", "data": "notes"}
    return {"type": "document", "source": source, **fields}


WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("user", _result(is_error="yes"), "is_error"),
    ("user", _result(is_error="false"), "is_error"),
    ("user", _result(is_error=1), "is_error"),
    ("user", _result(is_error=None), "is_error"),
    ("user", _result(content=None), "content"),
    ("user", _result(content=("x",)), "content"),
    ("user", _result(cache_control=5), "cache_control"),
    ("user", _text(cache_control=5), "cache_control"),
    ("user", _text(cache_control="ephemeral"), "cache_control"),
    ("user", _text(cache_control={"type": "persistent"}), "cache_control.type"),
    ("user", _text(cache_control={}), "cache_control.type"),
    ("user", _text(cache_control={"type": "ephemeral", "ttl": "10m"}), "cache_control.ttl"),
    ("user", _text(cache_control={"type": "ephemeral", "ttl": 300}), "cache_control.ttl"),
    ("user", _text(cache_control={"type": "ephemeral", "scope": "all"}), "cache_control"),
    ("assistant", _call(cache_control=True), "cache_control"),
    ("user", {"type": "image", "source": PNG, "cache_control": []}, "cache_control"),
    ("assistant", _text(citations="Notes"), "citations"),
    ("assistant", _text(citations=[{"type": "quote"}]), "citations[0]"),
    ("assistant", _text(citations=[{**CHAR_CITATION, "document_index": "0"}]), "document_index"),
    ("assistant", _text(citations=[{**CHAR_CITATION, "cited_text": None}]), "cited_text"),
    ("user", {"type": "image", "source": {"type": "text", "media_type": "text/plain"}}, "source"),
    ("user", _document(title=3), "title"),
    ("user", _document(context=["a"]), "context"),
    ("user", _document(citations=True), "citations"),
    ("user", _document(citations={"enabled": "yes"}), "citations.enabled"),
    ("user", _document(citations={"enabled": True, "mode": 1}), "citations"),
    (
        "user",
        {"type": "document", "source": {"type": "content", "content": [{"type": "text"}]}},
        "source.content[0].text",
    ),
    ("user", {"type": "document", "source": {"type": "content", "content": 5}}, "source.content"),
    ("user", _result(content=[{**SEARCH_RESULT, "title": 3}]), "title"),
    ("user", _result(content=[{**SEARCH_RESULT, "content": "found"}]), "content"),
    ("user", _result(content=[{**SEARCH_RESULT, "content": [{"type": "text"}]}]), "text"),
    ("user", _result(content=[{**SEARCH_RESULT, "citations": None}]), "citations"),
    ("user", _result(content=[{"type": "search_result", "title": "A"}]), "source"),
]


@pytest.mark.parametrize(("role", "block", "field"), WRONG_TYPES, ids=repr)
def test_a_field_of_the_wrong_type_is_refused_naming_the_block_and_the_field(
    role: str, block: dict[str, Any], field: str
) -> None:
    content = [{"type": "text", "text": "first"}, block]
    with pytest.raises(InvalidMessageError) as raised:
        normalize_message(role, content)
    message = str(raised.value)
    assert message.startswith("content[1]"), message
    assert field in message, message


CLINE_BLOCKS: list[tuple[str, dict[str, Any]]] = [
    ("assistant", _text(call_id="c1", reasoning_details=[{"type": "reasoning.text"}])),
    (
        "assistant",
        {"type": "thinking", "thinking": "hm", "signature": "s", "summary": [{"text": "t"}]},
    ),
    ("assistant", _call(reasoning_details=[{"k": 1}], call_id=5, signature=None)),
    ("user", _result(call_id=None, toolset_name=3)),
]


@pytest.mark.parametrize(("role", "block"), CLINE_BLOCKS, ids=repr)
def test_fields_no_renderer_sends_are_kept_whatever_they_hold(
    role: str, block: dict[str, Any]
) -> None:
    assert normalize_message(role, [block]).blocks == [block]


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("user", _result(is_error=True, cache_control={"type": "ephemeral"})),
    ("user", _result(is_error=False, content=[])),
    ("user", _text(cache_control={"type": "ephemeral", "ttl": "1h"})),
    ("user", _text(cache_control=None, citations=None)),
    ("assistant", _text(citations=[CHAR_CITATION, {**CHAR_CITATION, "document_title": None}])),
    ("assistant", _call(cache_control={"type": "ephemeral", "ttl": "5m"})),
    ("user", {"type": "image", "source": {"type": "file", "file_id": "file_1"}}),
    # Gemini CLI's inline images are not all of the four types Anthropic takes: they are
    # kept (each provider's renderer decides what it can send).
    ("user", {"type": "image", "source": {**PNG, "media_type": "image/heic"}}),
    ("user", _document(title="Notes", context="for the report", citations={"enabled": True})),
    ("user", {"type": "document", "source": {"type": "content", "content": "plain"}}),
    ("user", _result(content=[SEARCH_RESULT, {**SEARCH_RESULT, "citations": {"enabled": True}}])),
]


@pytest.mark.parametrize(("role", "block"), ACCEPTED, ids=repr)
def test_fields_of_the_types_the_provider_takes_are_accepted(
    role: str, block: dict[str, Any]
) -> None:
    assert normalize_message(role, [block]).blocks == [block]


# -- the Anthropic SDK as the oracle --------------------------------------------------------

anthropic_types = pytest.importorskip("anthropic.types")


def _plain(value: Any) -> Any:
    """``value`` with pydantic's lazily checked iterables read into lists (reading them is
    what checks their items)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | Iterator):
        return [_plain(item) for item in value]
    return value


_SDK_BLOCKS: TypeAdapter[Any] = TypeAdapter(list[anthropic_types.ContentBlockParam])
"""The request's blocks (a message's content also takes response blocks, which are models
that keep unknown fields: only the request types are the oracle)."""


def sdk_problems(role: str, block: dict[str, Any]) -> list[str]:
    """How ``block``, as the renderer sends it, breaks the SDK's request types: an error, or
    a value the SDK had to convert or drop."""
    rendered = [
        item
        for message in render_messages([{"role": role, "content": [block]}])
        if isinstance(message["content"], list)
        for item in message["content"]
    ]
    try:
        validated = _plain(_SDK_BLOCKS.validate_python(rendered))
    except ValidationError as exc:
        return [f"{error['loc']}: {error['msg']}" for error in exc.errors()[:3]]
    if canonical_json(validated) != canonical_json(rendered):  # JSON: 1 is not True
        return [f"the SDK converts or drops a value: {validated}"]
    return []


def test_the_oracle_refuses_what_the_store_refuses() -> None:
    """Every wrong type above is one the provider would refuse too (or else the store
    refuses too much), but a tuple: its JSON is a list, yet the store wants a list, as
    for a message's content, so that what it checks is what it keeps."""
    for role, block, _ in WRONG_TYPES:
        if isinstance(block.get("content"), tuple):
            continue
        assert sdk_problems(role, block), block


def test_the_oracle_accepts_what_the_store_accepts() -> None:
    for role, block in ACCEPTED + CLINE_BLOCKS:
        if block.get("source", {}).get("media_type") == "image/heic":
            continue
        assert sdk_problems(role, block) == [], block


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from(["", "x", "yes", "ephemeral", "5m", "1h", "char_location", "text"]),
    st.lists(st.integers(0, 1), max_size=1),
    st.sampled_from(
        [
            {},
            {"type": "ephemeral"},
            {"type": "ephemeral", "ttl": "1h"},
            {"type": "ephemeral", "ttl": 5},
            {"type": "ephemeral", "x": 1},
            {"enabled": True},
            {"enabled": "yes"},
            {"type": "base64", "media_type": "image/png", "data": "AA"},
            {"type": "url", "url": 5},
            {"type": "text", "media_type": "text/plain", "data": "x"},
        ]
    ),
    st.just([CHAR_CITATION]),
    st.just([{**CHAR_CITATION, "end_char_index": "15"}]),
    st.just([{**CHAR_CITATION, "end_char_index": True}]),
    st.just([{"type": "text", "text": "a"}]),
    st.just([SEARCH_RESULT]),
)

_SENT_FIELDS = {
    "text": ["text", "cache_control", "citations"],
    "image": ["source", "cache_control"],
    "document": ["source", "title", "context", "citations", "cache_control"],
    "tool_use": ["id", "name", "input", "cache_control"],
    "tool_result": ["tool_use_id", "content", "is_error", "cache_control"],
    "thinking": ["thinking", "signature"],
    "redacted_thinking": ["data"],
}
_VALID: list[tuple[str, dict[str, Any]]] = [
    ("user", _text(cache_control={"type": "ephemeral"})),
    ("user", {"type": "image", "source": PNG}),
    ("user", _document(title="T")),
    ("assistant", _call()),
    ("user", _result(is_error=True)),
    ("assistant", {"type": "thinking", "thinking": "hm", "signature": "s"}),
    ("assistant", {"type": "redacted_thinking", "data": "opaque"}),
]


@st.composite
def _near_valid(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A valid block with one or two of the fields the renderer sends set to other values."""
    role, block = draw(st.sampled_from(_VALID))
    block = dict(block)
    for _ in range(draw(st.integers(1, 2))):
        block[draw(st.sampled_from(_SENT_FIELDS[block["type"]]))] = draw(_VALUES)
    return role, block


@given(_near_valid())
@settings(max_examples=600, deadline=None)
def test_what_the_store_accepts_the_anthropic_sdk_accepts(case: tuple[str, dict[str, Any]]) -> None:
    role, block = case
    try:
        validate_block(block, "content[0]")
    except InvalidMessageError:
        return
    assert sdk_problems(role, block) == []
