"""Validating a block consults its content model (pydantic) only when the block's declared
fields are not exactly of the types the model asks for; skipping the model changes no
outcome: the same copy, or the same error."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core import block_kinds, content
from contextstore.core.content import BLOCK_TYPES, model_needed, validate_block
from contextstore.core.errors import InvalidInputError


class _Text(str):
    """A string subclass: the model may accept it, the shortcut does not decide for it."""


_FIELDS = (
    "text",
    "thinking",
    "signature",
    "data",
    "id",
    "name",
    "input",
    "tool_use_id",
    "content",
    "is_error",
    "source",
    "cache_control",
    "citations",
    "title",
    "context",
)
_keys = st.text(max_size=3) | st.sampled_from(["\ud800", "\u00e9"]) | st.integers(0, 3)
values = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "a\x00b", "x" * 201, "\ud800", "\u00e9", "\U0001f600"]),
    st.text(max_size=3).map(_Text),
    st.integers(-2, 2),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.dictionaries(_keys, st.integers() | st.text(max_size=3), max_size=2),
    st.lists(
        st.dictionaries(_keys, st.integers() | st.text(max_size=3), max_size=2)
        | st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})
        | st.integers(),
        max_size=2,
    ),
    st.tuples(st.integers()),
    st.sampled_from(
        [
            {"type": "ephemeral"},
            {"type": "ephemeral", "ttl": "1h"},
            {"type": "ephemeral", "ttl": "5m"},
            {"type": "ephemeral", "ttl": "2h"},
            {"type": "ephemeral", "ttl": None},
            {"type": "ephemeral", "x": 1},
            {"type": _Text("ephemeral")},
            {"type": "ephemeral", "ttl": _Text("1h")},
            {"ttl": "1h"},
            {"enabled": True},
        ]
    ),
)


COMMON = [
    {"type": "text", "text": "Reading file 3.", "cache_control": {"type": "ephemeral"}},
    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x" * 2_000},
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x"}]},
    {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True},
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "", "is_error": False},
    {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "read_file",
        "input": {},
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    },
    {"type": "thinking", "thinking": "hm", "signature": "sig=="},
    {"type": "redacted_thinking", "data": "opaque"},
]


@st.composite
def blocks(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(BLOCK_TYPES)) | st.just(_Text("text")))
    block: dict[str, Any] = {"type": kind}
    for name in _FIELDS:
        if draw(st.booleans()):
            block[name] = draw(values)
    if draw(st.booleans()):
        block[draw(st.sampled_from(["\ud800", "caf\u00e9", "bad\x00key", "_x"]))] = 1
    return block


def _outcome(block: dict[str, Any]) -> tuple[Any, ...]:
    try:
        return ("copy", validate_block(block, "content[0]"))
    except InvalidInputError as exc:
        return ("refused", type(exc), str(exc))


@contextmanager
def _model_always() -> Iterator[None]:
    with mock.patch.object(content, "model_needed", lambda _block, _kind: True):
        yield


@st.composite
def near_valid_blocks(draw: st.DrawFn) -> dict[str, Any]:
    """A common block with one field (declared or not) set to another value."""
    block = dict(draw(st.sampled_from(COMMON)))
    block[draw(st.sampled_from(_FIELDS))] = draw(values)
    return block


@given(blocks() | near_valid_blocks())
@settings(max_examples=1_000, deadline=None)
def test_skipping_the_model_changes_no_outcome(block: dict[str, Any]) -> None:
    fast = _outcome(block)
    with _model_always():
        assert _outcome(block) == fast


@given(blocks() | near_valid_blocks())
@settings(max_examples=1_000, deadline=None)
def test_a_block_that_skips_the_model_is_one_the_model_accepts(block: dict[str, Any]) -> None:
    if not model_needed(block, block["type"]):
        block_kinds.BLOCK_ADAPTER.validate_python(block)


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
UNUSUAL = [
    IMAGE,
    {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
    {"type": "text", "text": _Text("x")},
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": ("x",)},
    {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": 0},
    {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": None},
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": None},
    {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}},
    {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "x": 1}},
    {"type": "text", "text": "x", "citations": []},
    {"type": "text", "text": "caf\u00e9"},
    {"type": "text", "text": "x", "caf\u00e9": 1},
    {"type": "tool_use", "id": "t", "name": "n", "input": {"caf\u00e9": 1}},
]


@pytest.fixture
def model_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every block (or inner block) the content model validates, in order."""
    seen: list[Any] = []
    model = block_kinds.BLOCK_ADAPTER

    class Counted:
        def validate_python(self, value: Any) -> Any:
            seen.append(value)
            return model.validate_python(value)

    monkeypatch.setattr(content, "BLOCK_ADAPTER", Counted())
    return seen


def test_common_blocks_are_not_given_to_the_model(model_calls: list[Any]) -> None:
    for block in COMMON:
        assert validate_block(block, "content[0]") == block
    assert model_calls == []


@pytest.mark.parametrize("block", UNUSUAL, ids=repr)
def test_other_blocks_are_given_to_the_model(block: dict[str, Any], model_calls: list[Any]) -> None:
    with contextlib.suppress(InvalidInputError):
        validate_block(block, "content[0]")
    assert model_calls == [block]


def test_an_image_inside_a_result_is_given_to_the_model(model_calls: list[Any]) -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": [IMAGE]}
    validate_block(result, "content[0]")
    assert model_calls == [IMAGE]
