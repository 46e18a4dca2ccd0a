"""A malformed block is refused in the library's own words: which block, which field (its
path inside the block), what it must be and what it holds; never pydantic's ("Input should
be a valid string", "Field required", error type names, links to its documentation)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings

from contextstore import ContextStore
from contextstore.core.content import normalize_message, validate_block
from contextstore.core.errors import InvalidMessageError
from tests.core.test_block_model import blocks, near_valid_blocks

PYDANTIC_WORDS = re.compile(
    r"Input should|Field required|[Vv]alidation error|pydantic|Input tag|tagged-union|"
    r"\blist\[|\bdict\[|\b(string|bool|int|dict|list|model)_type\b|literal_error|"
    r"union_tag|string_too_short|extra_forbidden|is malformed"
)
"""What pydantic says, which the library does not."""

PNG = {"type": "base64", "media_type": "image/png", "data": "AA"}

WORDING: list[tuple[str, dict[str, Any], str]] = [
    ("user", {"type": "text"}, "content[1] (text) has no text; set it to a string."),
    ("user", {"type": "text", "text": 5}, "content[1] (text): text must be a string, got 5."),
    (
        "assistant",
        {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": "{}"},
        "content[1] (tool_use): input must be an object (a dict with string keys), got '{}'.",
    ),
    (
        "assistant",
        {"type": "tool_use", "id": "toolu_1", "input": {}},
        "content[1] (tool_use) has no name; set it to a string.",
    ),
    (
        "assistant",
        {"type": "tool_use", "id": "toolu_1", "name": "", "input": {}},
        "content[1] (tool_use): name must not be empty; set it to the name the provider gave.",
    ),
    (
        "user",
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": 5},
        "content[1] (tool_result): content must be a string or a list of content blocks, got 5.",
    ),
    (
        "user",
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text"}]},
        "content[1].content[0] (text) has no text; set it to a string.",
    ),
    (
        "user",
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": ["done"]},
        "content[1] (tool_result): content[0] must be an object (a dict with string keys), "
        "got 'done'.",
    ),
    (
        "user",
        {"type": "image", "source": {"type": "base64", "data": "AA"}},
        "content[1] (image) has no source.media_type; set it to a string.",
    ),
    (
        "user",
        {"type": "image", "source": {**PNG, "data": None}},
        "content[1] (image): source.data must be a string, got None.",
    ),
    (
        "user",
        {"type": "image", "source": {"type": "path", "path": "a.png"}},
        "content[1] (image): source must have a 'type' of 'base64', 'url' or 'file', got 'path'.",
    ),
    (
        "user",
        {"type": "image", "source": {"url": "https://example.com/a.png"}},
        "content[1] (image): source must have a 'type' of 'base64', 'url' or 'file', and it "
        "has none.",
    ),
    (
        "user",
        {"type": "document", "source": "a.pdf"},
        "content[1] (document): source must be an object with a 'type' of 'base64', 'url', "
        "'text', 'file' or 'content', got 'a.pdf'.",
    ),
    (
        "assistant",
        {"type": "thinking", "thinking": "hm", "signature": 3},
        "content[1] (thinking): signature must be a string, or None, got 3.",
    ),
    (
        "user",
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": "yes"},
        "content[1] (tool_result): is_error must be True or False, got 'yes'.",
    ),
    (
        "user",
        {"type": "text", "text": "x", "cache_control": 5},
        "content[1] (text): cache_control must be {'type': 'ephemeral'} (with an optional "
        "'ttl' of '5m' or '1h'), or None, got 5.",
    ),
    (
        "user",
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1d"}},
        "content[1] (text): cache_control.ttl must be '5m' or '1h', got '1d'.",
    ),
    (
        "user",
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "scope": "x"}},
        "content[1] (text): cache_control has the field 'scope', which the provider refuses "
        "there; cache_control holds only 'type' and 'ttl'.",
    ),
    (
        "assistant",
        {"type": "text", "text": "x", "citations": [{"type": "char_location", "cited_text": 1}]},
        "content[1] (text): citations[0].cited_text must be a string, got 1.",
    ),
    (
        "assistant",
        {"type": "text", "text": "x", "citations": [{"type": "quote"}]},
        "content[1] (text): citations[0] must have a 'type' of 'char_location', "
        "'page_location', 'content_block_location', 'search_result_location' or "
        "'web_search_result_location', got 'quote'.",
    ),
    (
        "user",
        {
            "type": "document",
            "source": {"type": "content", "content": [{"type": "text", "text": None}]},
        },
        "content[1] (document): source.content[0].text must be a string, got None.",
    ),
    (
        "user",
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [{"type": "search_result", "source": "s", "title": "t", "content": "x"}],
        },
        "content[1].content[0] (search_result): content must be a list of objects with a "
        "'type' of 'text', got 'x'.",
    ),
    (
        "assistant",
        {"type": "tool_use", "id": "toolu_\ud800", "name": "ls", "input": {}},
        "content[1] (tool_use): id is not valid Unicode text (a lone surrogate); pass "
        "well-formed text.",
    ),
    (
        "user",
        {"type": "text", "text": "x", "note\udc80": 1},
        "content[1] (text) has a field name that is not valid Unicode text (a lone "
        "surrogate); pass well-formed text.",
    ),
    (
        "assistant",
        {"type": "redacted_thinking", "data": ["x"]},
        "content[1] (redacted_thinking): data must be a string, got ['x'].",
    ),
]


@pytest.mark.parametrize(("role", "block", "message"), WORDING, ids=[w[2] for w in WORDING])
def test_the_error_names_the_block_the_field_and_what_it_must_be(
    role: str, block: dict[str, Any], message: str
) -> None:
    content = [{"type": "text", "text": "first"}, block]
    with pytest.raises(InvalidMessageError) as raised:
        normalize_message(role, content)
    assert str(raised.value) == message
    assert not PYDANTIC_WORDS.search(str(raised.value))


def test_append_many_adds_the_message_position(memory_store: ContextStore) -> None:
    conv = memory_store.create_conversation()
    good = {"role": "user", "content": "hi"}
    bad = {"role": "assistant", "content": [{"type": "text", "text": None}]}
    with pytest.raises(InvalidMessageError) as raised:
        memory_store.append(conv.id, [good, bad])
    assert str(raised.value) == "message 1: content[0] (text): text must be a string, got None."
    assert memory_store.messages(conv.id) == []


def test_the_pattern_finds_pydantic_s_words() -> None:
    """The check above means something: the wording the library used before matches."""
    for old in [
        "content[0] (text) is malformed: text.text: Field required.",
        "content[0] (tool_result) is malformed: tool_result.content.str: Input should be a "
        "valid string.",
        "1 validation error for tagged-union[TextBlock]",
        "For further information visit https://errors.pydantic.dev/2.11/v/missing",
        "content[0]: literal_error",
    ]:
        assert PYDANTIC_WORDS.search(old), old


@given(blocks() | near_valid_blocks())
@settings(max_examples=1_000, deadline=None)
def test_no_refusal_speaks_pydantic(block: dict[str, Any]) -> None:
    try:
        validate_block(block, "content[0]")
    except InvalidMessageError as exc:
        message = str(exc)
        assert message.startswith("content[0]"), message
        assert not PYDANTIC_WORDS.search(message), message
