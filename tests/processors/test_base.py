from __future__ import annotations

import json
from typing import Any

import pytest

from contextstore.core.overlays import UpdateMode
from contextstore.processors import readable_text
from contextstore.processors.base import block_count, message_blocks, tool_names


def image(data: str) -> dict[str, object]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def test_text_mode_reads_the_text_slot() -> None:
    assert readable_text({"type": "text", "text": "hi"}, UpdateMode.TEXT) == "hi"
    result = {"type": "tool_result", "content": [{"type": "text", "text": "out"}]}
    assert readable_text(result, UpdateMode.TEXT) == "out"
    assert readable_text(image("aGk="), UpdateMode.TEXT) is None


def test_tool_input_mode_reads_canonical_json() -> None:
    block = {"type": "tool_use", "id": "t", "name": "x", "input": {"b": "é", "a": 1}}
    assert readable_text(block, UpdateMode.TOOL_INPUT) == json.dumps(
        {"a": 1, "b": "é"}, ensure_ascii=False
    )
    assert readable_text({"type": "text", "text": "x"}, UpdateMode.TOOL_INPUT) is None


def test_block_mode_describes_media_stably() -> None:
    first = readable_text(image("aGk="), UpdateMode.BLOCK)
    assert first == readable_text(image("aGk="), UpdateMode.BLOCK)
    assert first is not None and first.startswith("image image/png 2 sha256:")
    assert first != readable_text(image("aG8="), UpdateMode.BLOCK)
    text_block = {"type": "text", "text": "x"}
    assert readable_text(text_block, UpdateMode.BLOCK) == '{"text": "x", "type": "text"}'
    assert readable_text(text_block, "sideways") is None


def test_string_content_is_block_zero_and_tool_names() -> None:
    assert message_blocks({"role": "user", "content": "hi"}) == [
        (0, {"type": "text", "text": "hi"})
    ]
    assert message_blocks({"role": "user", "content": ["junk", {"type": "text", "text": "a"}]}) == [
        (1, {"type": "text", "text": "a"})
    ]
    view = [(1, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls"}]})]
    assert tool_names(view) == {"t": "ls"}


@pytest.mark.parametrize(
    "content",
    ["hi", "", [], [{"type": "text", "text": "a"}], ["junk", {"type": "text"}, 3, {}], None, 7],
)
def test_block_count_is_the_number_of_blocks_message_blocks_gives(content: Any) -> None:
    message = {"role": "user", "content": content}
    assert block_count(message) == len(message_blocks(message))
