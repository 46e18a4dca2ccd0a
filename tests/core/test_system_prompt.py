"""A prepared request's system prompt: a string or a list of text blocks, checked before
anything is written, and read as one text where a provider takes one."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore.core.errors import ContentTooLargeError, InvalidInputError
from contextstore.core.nodes import SYSTEM_PROMPT, prompt_nodes
from contextstore.core.system_prompt import check_system, rewrite_system_texts, system_text
from contextstore.core.validate import MAX_TEXT_BYTES

CACHED = {"type": "text", "text": "Long instructions.", "cache_control": {"type": "ephemeral"}}


def test_a_string_or_none_is_returned_as_given() -> None:
    assert check_system(None) is None
    assert check_system("Be brief.") == "Be brief."
    assert check_system("") == ""


def test_text_blocks_are_returned_as_plain_copies() -> None:
    given = [CACHED, {"type": "text", "text": "Be brief."}]
    checked = check_system(given)
    assert checked == given
    assert isinstance(checked, list) and checked[0] is not CACHED
    assert checked[0]["cache_control"] is not CACHED["cache_control"]
    # a tuple of blocks and a null cache_control (what the SDK's type allows) are accepted
    assert check_system(({"type": "text", "text": "a", "cache_control": None},)) == [
        {"type": "text", "text": "a", "cache_control": None}
    ]


@pytest.mark.parametrize(
    ("system", "message"),
    [
        (
            5,
            "system must be a string or a list of text blocks like {'type': 'text', 'text': "
            "'...'}, got int.",
        ),
        ({"type": "text", "text": "a"}, "system must be a string or a list of text blocks"),
        (b"bytes", "system must be a string or a list of text blocks"),
        ([], "system is an empty list; give it at least one text block"),
        (["a"], "system[0] is 'str', not a text block; a system prompt's blocks are text blocks"),
        (
            [CACHED, {"type": "image", "source": {}}],
            "system[1] is 'image', not a text block",
        ),
        ([{"text": "no type"}], "system[0] is None, not a text block"),
        (
            [{"type": "text", "text": "a", "citations": []}],
            "system[0] has the field(s) 'citations'; a system text block holds type, text and "
            "cache_control only.",
        ),
        ([{"type": "text"}], "system[0].text must be a string, got NoneType."),
        ([{"type": "text", "text": " \n"}], "system[0].text is blank, and Anthropic refuses"),
        ([{"type": "text", "text": "a\x00"}], "system[0].text must not contain a NUL"),
        (
            [{"type": "text", "text": "a", "cache_control": "ephemeral"}],
            "system[0].cache_control must be an object like {'type': 'ephemeral'}, got str.",
        ),
        (
            [{"type": "text", "text": "a", "cache_control": {"x": float("nan")}}],
            "system[0].cache_control.x",
        ),
    ],
)
def test_anything_else_is_refused_naming_the_block(system: Any, message: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_system(system)
    assert str(raised.value).startswith(message)


def test_the_texts_together_are_held_to_the_system_prompt_limit() -> None:
    half = {"type": "text", "text": "x" * (MAX_TEXT_BYTES // 2 + 1)}
    with pytest.raises(ContentTooLargeError, match=r"^system is 1,048,578 bytes of text"):
        check_system([half, half])
    with pytest.raises(ContentTooLargeError, match=r"^system\[0\]\.text is "):
        check_system([{"type": "text", "text": "x" * (MAX_TEXT_BYTES + 1)}])


def test_the_text_of_blocks_is_joined_by_a_blank_line() -> None:
    assert system_text([CACHED, {"type": "text", "text": "Be brief."}]) == (
        "Long instructions.\n\nBe brief."
    )
    assert system_text("as is") == "as is"


def test_a_rewrite_reaches_each_text_and_keeps_the_other_fields() -> None:
    system = [CACHED, {"type": "text", "text": "b"}]
    assert rewrite_system_texts(system, str.upper) == [
        {**CACHED, "text": "LONG INSTRUCTIONS."},
        {"type": "text", "text": "B"},
    ]
    assert system[0] == CACHED  # not changed in place
    assert rewrite_system_texts("a", str.upper) == "A"


def test_the_node_of_text_blocks_is_the_text_the_model_reads() -> None:
    """Hashed and counted as its joined text: the same node as that text given as a string."""
    blocks = [CACHED, {"type": "text", "text": "Be brief."}]
    node, _ = prompt_nodes(blocks, None)
    same, _ = prompt_nodes("Long instructions.\n\nBe brief.", None)
    assert node is not None and node == same
    assert (node.node_type, node.content) == (SYSTEM_PROMPT, "Long instructions.\n\nBe brief.")
