"""Details of the view rules and notices that only the store's tests used to reach.

Each test names the rule; the mutation run on ``core/`` (which uses the core tests alone)
showed these behaviours unchecked there.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import ensure_tool_results_follow_tool_use, text_hash
from contextstore.core.content import normalize_message
from contextstore.core.errors import InvalidMessageError
from contextstore.core.notices import (
    FIRST_USER_REPLACEMENT,
    NOTICE_SOURCE,
    first_user_replacement_update,
    truncation_notice_update,
)
from contextstore.core.overlays import BlockUpdate, UpdateKind, UpdateMode, apply_overlays
from contextstore.core.view import RESULT_MISSING, provider_safe
from tests.conftest import assistant, text, tool_result, tool_use, user


def test_calls_followed_by_an_assistant_message_get_a_user_turn_of_placeholders() -> None:
    messages = [user("task"), assistant(tool_use("a"), tool_use("b")), assistant("later")]
    out = provider_safe(messages)
    assert out[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": RESULT_MISSING},
            {"type": "tool_result", "tool_use_id": "b", "content": RESULT_MISSING},
        ],
    }
    assert out[3] is messages[2]


def test_results_already_in_call_order_are_left_as_they_are() -> None:
    answered = user(tool_result("a", "A"), tool_result("b", "B"), "note")
    messages = [assistant(tool_use("a"), tool_use("b")), answered]
    assert ensure_tool_results_follow_tool_use(messages)[1] is answered


def test_a_rebuilt_turn_keeps_the_results_themselves() -> None:
    messages = [
        assistant(tool_use("a"), tool_use("b")),
        user("x", tool_result("b", "B"), tool_result("a", "A")),
    ]
    out = ensure_tool_results_follow_tool_use(messages)
    assert out[1]["content"] == [tool_result("a", "A"), tool_result("b", "B"), text("x")]


def test_an_empty_string_answer_becomes_placeholders_only() -> None:
    messages = [assistant(tool_use("a")), {"role": "user", "content": ""}]
    out = ensure_tool_results_follow_tool_use(messages)
    assert out[1]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": RESULT_MISSING}
    ]


def test_a_string_content_takes_its_rewrite_unless_the_mode_is_tool_input() -> None:
    message = {"role": "user", "content": "original", "id": "m"}
    rewrite = {(4, 0): BlockUpdate(4, 0, UpdateKind.MANUAL, "new")}
    assert apply_overlays(message, 4, rewrite) == {"role": "user", "content": "new", "id": "m"}
    assert message["content"] == "original"
    other_block = {(4, 1): BlockUpdate(4, 1, UpdateKind.MANUAL, "new")}
    assert apply_overlays(message, 4, other_block) is message
    tool_input = {(4, 0): BlockUpdate(4, 0, UpdateKind.MANUAL, "{}", mode=UpdateMode.TOOL_INPUT)}
    assert apply_overlays(message, 4, tool_input) is message


def test_rewrites_after_a_block_they_cannot_apply_to_still_apply() -> None:
    message = user(text("a"), tool_use("t"), text("c"))
    overlays = {
        (2, 1): BlockUpdate(2, 1, UpdateKind.MANUAL, "no text slot"),
        (2, 2): BlockUpdate(2, 2, UpdateKind.MANUAL, "C"),
    }
    assert apply_overlays(message, 2, overlays)["content"] == [text("a"), tool_use("t"), text("C")]


def test_the_notices_record_their_source_and_the_text_they_replace() -> None:
    messages = [user("<task>t</task>"), assistant("Sure.")]
    overlays = {(0, 0): BlockUpdate(0, 0, UpdateKind.MANUAL, "edited task")}
    replacement = first_user_replacement_update(messages, overlays)
    assert replacement is not None
    assert (replacement.text, replacement.source) == (FIRST_USER_REPLACEMENT, NOTICE_SOURCE)
    assert replacement.base_hash == text_hash("edited task")
    notice = truncation_notice_update(messages, {})
    assert notice is not None and notice.source == NOTICE_SOURCE
    assert (notice.message_idx, notice.block_idx) == (1, 0)
    assert notice.base_hash == text_hash("Sure.")
    assert truncation_notice_update(messages[:1], {}) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (["just text"], "content[0] must be a dict content block, got str; pass blocks like "),
        ([{"type": "video"}], "content[0] has unknown type 'video'; use one of "),
        (
            [{"type": "tool_result", "content": "x"}],
            "content[0] is a tool_result without a tool_use_id; set tool_use_id to the id of "
            "the tool_use block it answers.",
        ),
        (
            [{"type": "tool_result", "tool_use_id": "t" * 201, "content": "x"}],
            "content[0].tool_use_id must be at most 200 characters without NUL characters.",
        ),
        (
            [{"type": "tool_result", "tool_use_id": "a\x00b", "content": "x"}],
            "content[0].tool_use_id must be at most 200 characters without NUL characters.",
        ),
    ],
)
def test_a_malformed_block_is_refused_saying_where_and_why(content: Any, message: str) -> None:
    with pytest.raises(InvalidMessageError) as raised:
        normalize_message("user", content)
    assert str(raised.value).startswith(message)


def test_ids_of_exactly_200_characters_are_accepted() -> None:
    normalize_message("user", [{"type": "tool_result", "tool_use_id": "t" * 200, "content": "x"}])
    normalize_message(
        "assistant", [{"type": "tool_use", "id": "i" * 200, "name": "n" * 200, "input": {}}]
    )


def test_a_notice_over_an_empty_text_block_is_based_on_the_empty_text() -> None:
    messages = [user("task"), assistant(text(""), tool_use("a")), user(tool_result("a"))]
    update = truncation_notice_update(messages, {})
    assert update is not None and (update.message_idx, update.block_idx) == (1, 0)
    assert update.base_hash == text_hash("")
    assert update.metadata == {}


def test_the_first_user_replacement_carries_no_metadata() -> None:
    update = first_user_replacement_update([user("the task"), assistant("ok")], {})
    assert update is not None and update.base_hash == text_hash("the task")
    assert update.metadata == {}


@pytest.mark.parametrize(
    "blocks",
    [[tool_use("a")], [text("x"), {"type": "thinking", "thinking": "t", "signature": "s"}]],
)
def test_a_user_message_with_calls_or_thinking_is_refused(blocks: list[Any]) -> None:
    with pytest.raises(InvalidMessageError, match=r"^a user message cannot contain tool_use"):
        normalize_message("user", blocks)


@pytest.mark.parametrize(
    "content",
    [[], [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]],
)
def test_a_result_list_without_a_leading_text_item_has_no_text_slot(content: Any) -> None:
    from contextstore.core.overlays import block_text, with_block_text

    block = {"type": "tool_result", "tool_use_id": "t", "content": content}
    assert block_text(block) is None
    assert with_block_text(block, "new text") is None
    assert block == {"type": "tool_result", "tool_use_id": "t", "content": content}
