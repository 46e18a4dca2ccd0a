"""``mask_block``: one block masked as ``mask_message`` masks a message's blocks, and a
thinking block's text too when the copy is only read (the HTML report)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contextstore.core.errors import InvalidInputError
from contextstore.processors import mask_block, mask_message

TOKEN = "ghp_" + "Q7r8A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": f"token {TOKEN}"},
    {"type": "tool_use", "id": "t1", "name": "login", "input": {"password": "Tr0ub4dor-3x"}},
    {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": TOKEN}],
    },
    {"type": "image", "source": {"type": "url", "url": "https://u:hunter2secret@h/a.png"}},
    {"type": "document", "title": TOKEN, "source": {"type": "text", "data": TOKEN}},
]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: str(b["type"]))
def test_a_block_is_masked_as_mask_message_masks_it(block: dict[str, Any]) -> None:
    kept = copy.deepcopy(block)
    masked = mask_block(block)
    assert block == kept
    assert masked == mask_message({"role": "user", "content": [block]})["content"][0]
    assert TOKEN not in str(masked) and "hunter2secret" not in str(masked)
    assert "Tr0ub4dor-3x" not in str(masked)


def test_thinking_is_masked_only_when_asked() -> None:
    thinking = {"type": "thinking", "thinking": f"use {TOKEN}", "signature": "c2ln"}
    assert mask_block(thinking) == thinking
    read = mask_block(thinking, thinking=True)
    assert read == {
        "type": "thinking",
        "thinking": "use [REDACTED:github_token]",
        "signature": "c2ln",
    }
    assert thinking["thinking"] == f"use {TOKEN}"
    redacted = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}
    assert mask_block(redacted, thinking=True) == redacted


def test_a_block_that_is_no_dict_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="mask_block takes a content block dict"):
        mask_block("text")  # type: ignore[arg-type]
