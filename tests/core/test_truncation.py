"""Deleted-range arithmetic (Cline's getNextTruncationRange, plus the range fixes) and the
truncation notices."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.core.errors import InvalidInputError
from contextstore.core.notices import (
    DUPLICATE_FILE_READ_NOTICE,
    FIRST_USER_REPLACEMENT,
    TRUNCATION_NOTICE,
    can_show_a_notice,
    can_show_a_summary,
    first_user_replacement_update,
    notice_text,
    truncation_notice_update,
)
from contextstore.core.overlays import BlockUpdate, UpdateKind, text_hash
from contextstore.core.truncation import (
    KEEP_STRATEGIES,
    NOTHING_HIDDEN,
    is_empty_range,
    next_truncation_range,
    normalize_keep,
    subagent_next_range,
    visible_start,
)
from tests.core.cline_reference import next_truncation_range as cline_range

Message = dict[str, Any]


def alternating(count: int) -> list[Message]:
    """User, assistant, user, ...: index i is a user message when i is even."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(count)
    ]


# --- Cline's arithmetic ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "keep", "expected"),
    [
        (10, "none", (2, 9)),
        (10, "last_two", (2, 7)),
        (10, "half", (2, 5)),
        (10, "quarter", (2, 7)),
        (11, "none", (2, 9)),
        (11, "half", (2, 5)),
        (20, "quarter", (2, 13)),
        (20, "half", (2, 9)),
        (4, "none", (2, 3)),
        (6, "last_two", (2, 3)),
    ],
)
def test_fresh_ranges_follow_cline(count: int, keep: str, expected: tuple[int, int]) -> None:
    assert next_truncation_range(alternating(count), None, keep) == expected


def test_none_on_history_ending_with_user_keeps_that_user_message() -> None:
    messages = alternating(11)
    assert messages[10]["role"] == "user"
    assert next_truncation_range(messages, None, "none") == (2, 9)


def test_ranges_accumulate_from_the_current_end() -> None:
    assert next_truncation_range(alternating(20), (2, 9), "half") == (2, 13)
    assert next_truncation_range(alternating(20), (2, 13), "quarter") == (2, 17)


def test_cline_spelling_last_two_is_an_alias() -> None:
    messages = alternating(10)
    assert next_truncation_range(messages, None, "lastTwo") == (2, 7)
    assert normalize_keep("lastTwo") == "last_two"


@pytest.mark.parametrize("keep", sorted(KEEP_STRATEGIES))
@pytest.mark.parametrize("count", range(0, 41))
def test_matches_cline_on_every_size_where_no_fix_applies(count: int, keep: str) -> None:
    messages = alternating(count)
    expected = cline_range(messages, None, keep)
    result = next_truncation_range(messages, None, keep)
    if expected[1] < 2:
        assert result == NOTHING_HIDDEN
    else:
        assert result == expected


@pytest.mark.parametrize("keep", ["half", "quarter", "last_two"])
def test_two_messages_left_make_no_progress(keep: str) -> None:
    assert next_truncation_range(alternating(12), (2, 9), keep) == (2, 9)


@pytest.mark.parametrize(("keep", "expected"), [("half", 9), ("last_two", 9), ("quarter", 11)])
def test_three_messages_left_only_quarter_progresses(keep: str, expected: int) -> None:
    # quarter removes floor(9 / 8) * 2 = 2 of the 3; the others remove 0 or step back.
    assert next_truncation_range(alternating(13), (2, 9), keep) == (2, expected)


@pytest.mark.parametrize(("count", "keep"), [(2, "none"), (3, "none"), (4, "half"), (3, "quarter")])
def test_nothing_to_remove_is_signalled_by_end_before_start(count: int, keep: str) -> None:
    result = next_truncation_range(alternating(count), None, keep)
    assert result == (2, 1)
    assert is_empty_range(result)


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="keep strategy"):
        next_truncation_range(alternating(10), None, "most")


@pytest.mark.parametrize("bad", [(2,), (2, "9"), (2, 9.0), "29", (2, True)])
def test_malformed_range_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="deleted range"):
        next_truncation_range(alternating(10), bad, "half")


# --- Bounds-checked adjustment ----------------------------------------------------------------


def test_adjustment_does_not_index_past_the_end() -> None:
    # Cline computes end = 5 == len here; indexing it would raise in Python.
    assert next_truncation_range(alternating(5), (2, 9), "half") == (2, 9)


@pytest.mark.parametrize("keep", ["half", "quarter"])
@pytest.mark.parametrize("count", [0, 1])
def test_negative_end_is_not_wrapped_to_the_last_message(count: int, keep: str) -> None:
    # Cline returns (2, -1); messages[-1] must not be consulted, and -1 is never returned.
    messages = [{"role": "assistant", "content": "x"}] * count
    assert cline_range(messages, None, keep) == (2, -1)
    assert next_truncation_range(messages, None, keep) == NOTHING_HIDDEN


# --- Fixes: no shrink, no duplicated message 1 ------------------------------------------------


@pytest.mark.parametrize("keep", ["half", "quarter"])
def test_stale_range_never_shrinks(keep: str) -> None:
    messages = alternating(5)
    assert cline_range(messages, (2, 9), keep)[1] < 9
    assert next_truncation_range(messages, (2, 9), keep) == (2, 9)


@pytest.mark.parametrize("keep", ["none", "last_two", "half", "quarter"])
def test_a_range_hiding_only_message_two_is_kept(keep: str) -> None:
    assert next_truncation_range(alternating(3), (2, 2), keep) == (2, 2)


@pytest.mark.parametrize("keep", ["none", "last_two"])
def test_stale_range_is_returned_unchanged_by_none_and_last_two(keep: str) -> None:
    assert next_truncation_range(alternating(5), (2, 9), keep) == (2, 9)


def test_adjustment_never_steps_back_over_the_current_end() -> None:
    # The range ends on a user message (it was imported that way); nothing new is removable
    # and Cline would step back to 7, re-showing message 8.
    messages = alternating(11)
    assert cline_range(messages, (2, 8), "half") == (2, 7)
    assert next_truncation_range(messages, (2, 8), "half") == (2, 8)


def test_end_zero_is_never_returned_so_message_one_is_never_duplicated() -> None:
    two_users = [{"role": "user", "content": "task"}, {"role": "user", "content": "x"}]
    messages = [*two_users, *alternating(2)]
    assert cline_range(messages, None, "half") == (2, 0)
    assert next_truncation_range(messages, None, "half") == NOTHING_HIDDEN


@pytest.mark.parametrize("current", [(2, 1), (2, 0), (2, -1), None])
def test_current_range_hiding_nothing_counts_as_no_range(current: tuple[int, int] | None) -> None:
    assert next_truncation_range(alternating(10), current, "half") == (2, 5)


def test_iterated_truncations_grow_until_no_progress() -> None:
    messages = alternating(30)
    current: tuple[int, int] | None = None
    ends = []
    for _ in range(12):
        result = next_truncation_range(messages, current, "half")
        ends.append(result[1])
        current = result
        messages = messages + alternating(2)  # one more user/assistant turn
    assert ends == sorted(ends)
    assert all(end % 2 == 1 for end in ends)
    assert ends[0] == 15


def test_iterated_quarter_on_a_fixed_history_reaches_a_fixed_point() -> None:
    messages = alternating(40)
    current: tuple[int, int] | None = None
    seen = []
    for _ in range(10):
        current = next_truncation_range(messages, current, "quarter")
        seen.append(current[1])
    assert seen == sorted(seen)
    assert len(messages) - seen[-1] - 1 in (2, 3)


def test_arguments_are_not_mutated() -> None:
    messages = alternating(12)
    snapshot = copy.deepcopy(messages)
    current = [2, 5]
    next_truncation_range(messages, current, "half")
    assert messages == snapshot
    assert current == [2, 5]


# --- Helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("r", "empty", "start"),
    [
        (None, True, 2),
        ((2, 1), True, 2),
        ((2, -1), True, 2),
        ((2, 0), True, 2),
        ((2, 2), False, 3),
        ((2, 9), False, 10),
    ],
)
def test_is_empty_range_and_visible_start(
    r: tuple[int, int] | None, empty: bool, start: int
) -> None:
    assert is_empty_range(r) is empty
    assert visible_start(r) == start


# --- Subagent decision ------------------------------------------------------------------------


def test_subagent_truncates_a_quarter() -> None:
    assert subagent_next_range(alternating(20), None) == (2, 13)
    assert subagent_next_range(alternating(20), (2, 13)) == (2, 17)


def test_subagent_gives_up_when_nothing_is_removable() -> None:
    assert subagent_next_range(alternating(3), None) is None


def test_subagent_gives_up_when_the_range_would_not_change() -> None:
    assert subagent_next_range(alternating(12), (2, 9)) is None
    assert subagent_next_range(alternating(5), (2, 9)) is None


# --- Properties -------------------------------------------------------------------------------

roles = st.sampled_from(["user", "assistant"])
keeps = st.sampled_from([*sorted(KEEP_STRATEGIES), "lastTwo"])
histories = st.lists(roles, max_size=60).map(
    lambda rs: [{"role": role, "content": "x"} for role in rs]
)
ranges = st.none() | st.tuples(st.just(2), st.integers(min_value=-3, max_value=90))


@given(histories, ranges, keeps)
def test_end_is_never_below_two_except_the_sentinel(
    messages: list[Message], current: tuple[int, int] | None, keep: str
) -> None:
    start, end = next_truncation_range(messages, current, keep)
    assert start == 2
    assert end >= 2 or (start, end) == NOTHING_HIDDEN


@given(histories, ranges, keeps)
def test_range_never_shrinks(
    messages: list[Message], current: tuple[int, int] | None, keep: str
) -> None:
    _, end = next_truncation_range(messages, current, keep)
    if current is not None and current[1] >= 2:
        assert end >= current[1]


@given(
    st.integers(min_value=0, max_value=80),
    st.lists(st.tuples(keeps, st.integers(min_value=0, max_value=6)), min_size=1, max_size=8),
)
def test_first_visible_message_after_a_range_is_a_user_message(
    start_count: int, steps: list[tuple[str, int]]
) -> None:
    messages = alternating(start_count)
    current: tuple[int, int] | None = None
    for keep, new_turns in steps:
        current = next_truncation_range(messages, current, keep)
        first_visible = visible_start(current)
        if not is_empty_range(current) and first_visible < len(messages):
            assert messages[first_visible]["role"] == "user"
        messages = messages + alternating(2 * new_turns)


# --- Notices --------------------------------------------------------------------------------


def test_notice_texts_are_clines_exactly() -> None:
    assert TRUNCATION_NOTICE == (
        "[NOTE] Some previous conversation history with the user has been removed to maintain"
        " optimal context window length. The initial user task has been retained for"
        " continuity, while intermediate conversation history has been removed. Keep this in"
        " mind as you continue assisting the user. Pay special attention to the user's latest"
        " messages."
    )
    assert FIRST_USER_REPLACEMENT == "[Continue assisting the user!]"
    assert DUPLICATE_FILE_READ_NOTICE == (
        "[[NOTE] This file read has been removed to save space in the context window. Refer"
        " to the latest file read for the most up to date version of this file.]"
    )
    assert len(DUPLICATE_FILE_READ_NOTICE) == 153


def block_history(*first_reply: dict[str, Any]) -> list[Message]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "<task>t</task>"}]},
        {"role": "assistant", "content": list(first_reply)},
        {"role": "user", "content": "next"},
    ]


TEXT = {"type": "text", "text": "I will start."}
THINKING = {"type": "thinking", "thinking": "hmm", "signature": "s"}
TOOL_USE = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}


def test_truncation_notice_replaces_block_zero_of_the_first_reply() -> None:
    update = truncation_notice_update(block_history(TEXT, TOOL_USE), {})
    assert update == BlockUpdate(
        message_idx=1,
        block_idx=0,
        kind=UpdateKind.TRUNCATION_NOTICE,
        text=TRUNCATION_NOTICE,
        source="context_manager",
        metadata={},
        base_hash=text_hash("I will start."),
    )


def test_truncation_notice_is_proposed_once() -> None:
    existing = BlockUpdate(1, 0, UpdateKind.TRUNCATION_NOTICE, TRUNCATION_NOTICE)
    assert truncation_notice_update(block_history(TEXT), {(1, 0): existing}) is None


def test_another_update_on_message_one_does_not_block_the_notice() -> None:
    masked = BlockUpdate(1, 0, UpdateKind.PROCESSOR, "I will [masked].")
    update = truncation_notice_update(block_history(TEXT), {(1, 0): masked})
    assert update is not None
    assert update.base_hash == text_hash("I will [masked].")


def test_truncation_notice_skips_blocks_without_text_to_stay_visible() -> None:
    update = truncation_notice_update(block_history(THINKING, TOOL_USE, TEXT), {})
    assert update is not None
    assert update.block_idx == 2


def test_truncation_notice_is_not_proposed_when_no_block_can_show_it() -> None:
    assert truncation_notice_update(block_history(THINKING, TOOL_USE), {}) is None
    assert truncation_notice_update(block_history(), {}) is None
    assert truncation_notice_update(block_history(TEXT)[:1], {}) is None


def test_truncation_notice_on_a_string_reply_targets_block_zero() -> None:
    messages = block_history()
    messages[1] = {"role": "assistant", "content": "Sure."}
    update = truncation_notice_update(messages, {})
    assert update is not None
    assert (update.block_idx, update.base_hash) == (0, text_hash("Sure."))


def test_truncation_notice_can_carry_a_summary() -> None:
    update = truncation_notice_update(block_history(TEXT), {}, summary="We fixed the parser.")
    assert update is not None
    assert update.text == (
        f"{TRUNCATION_NOTICE}\n\nSummary of the removed conversation:\nWe fixed the parser."
    )


def test_first_user_replacement_replaces_the_task_text() -> None:
    update = first_user_replacement_update(block_history(TEXT), {})
    assert update is not None
    assert update.address == (0, 0)
    assert update.kind == UpdateKind.FIRST_USER_REPLACEMENT
    assert update.text == FIRST_USER_REPLACEMENT
    assert update.base_hash == text_hash("<task>t</task>")


def test_first_user_replacement_is_proposed_once() -> None:
    existing = BlockUpdate(0, 0, UpdateKind.FIRST_USER_REPLACEMENT, FIRST_USER_REPLACEMENT)
    assert first_user_replacement_update(block_history(TEXT), {(0, 0): existing}) is None


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}],
        [{"type": "text", "text": ""}],
        [],
        "",
    ],
)
def test_first_user_replacement_needs_non_empty_text_in_block_zero(content: Any) -> None:
    messages = block_history(TEXT)
    messages[0] = {"role": "user", "content": content}
    assert first_user_replacement_update(messages, {}) is None


def test_first_user_replacement_treats_string_content_as_block_zero() -> None:
    messages = block_history(TEXT)
    messages[0] = {"role": "user", "content": "<task>t</task>"}
    update = first_user_replacement_update(messages, {})
    assert update is not None
    assert update.address == (0, 0)


def test_a_summary_can_be_shown_where_message_1_or_message_0_shows_text() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    call = {"type": "tool_use", "id": "t", "name": "ls", "input": {}}
    reply = {"role": "assistant", "content": [call]}
    assert can_show_a_summary(block_history(TEXT))
    assert can_show_a_summary(
        [{"role": "user", "content": [image, {"type": "text", "text": ""}]}, reply]
    )
    assert not can_show_a_summary([{"role": "user", "content": [image]}, reply])
    assert not can_show_a_summary(
        [{"role": "user", "content": [image]}, {"role": "user", "content": "x"}]
    )
    assert not can_show_a_summary([])


def test_message_1_shows_the_notice_only_as_the_assistant_s_with_a_text_slot() -> None:
    assert can_show_a_notice(block_history(TOOL_USE, TEXT))
    assert can_show_a_notice([block_history()[0], {"role": "assistant", "content": "ok"}])
    assert not can_show_a_notice(block_history(THINKING, TOOL_USE))
    assert not can_show_a_notice([block_history()[0], {"role": "user", "content": "words"}])
    assert not can_show_a_notice(block_history()[:1])


def test_a_cue_that_shows_the_notice_is_not_proposed_again() -> None:
    """A plain notice over a cue that shows one already (with a summary or not) proposes
    nothing, so no identical row is written and an earlier summary stays; a summary
    replaces it, and a cue written without a notice gets one."""
    messages = block_history(TOOL_USE)
    with_notice = f"{FIRST_USER_REPLACEMENT}\n\n{TRUNCATION_NOTICE}"
    for text in (with_notice, f"{with_notice}\n\nSummary of the removed conversation:\nS"):
        earlier = {(0, 0): BlockUpdate(0, 0, UpdateKind.FIRST_USER_REPLACEMENT, text)}
        assert first_user_replacement_update(messages, earlier, TRUNCATION_NOTICE) is None
        summary = notice_text("S2")
        update = first_user_replacement_update(messages, earlier, summary)
        assert update is not None and update.text == f"{FIRST_USER_REPLACEMENT}\n\n{summary}"
        assert first_user_replacement_update(messages, {(0, 0): update}, summary) is None
    bare = {(0, 0): BlockUpdate(0, 0, UpdateKind.FIRST_USER_REPLACEMENT, FIRST_USER_REPLACEMENT)}
    update = first_user_replacement_update(messages, bare, TRUNCATION_NOTICE)
    assert update is not None and update.text == with_notice


def test_notice_helpers_do_not_mutate_their_arguments() -> None:
    messages = block_history(THINKING, TEXT)
    overlays = {(1, 1): BlockUpdate(1, 1, UpdateKind.PROCESSOR, "x")}
    snapshot = copy.deepcopy(messages), copy.deepcopy(overlays)
    truncation_notice_update(messages, overlays, summary="s")
    first_user_replacement_update(messages, overlays)
    assert (messages, overlays) == snapshot


@pytest.mark.parametrize(("keep", "shown"), [("bogus", "'bogus'"), (5, "5"), ("HALF", "'HALF'")])
def test_an_unknown_keep_strategy_is_refused_naming_the_known_ones(keep: Any, shown: str) -> None:
    from contextstore.core.truncation import normalize_keep

    with pytest.raises(InvalidInputError) as raised:
        normalize_keep(keep)
    assert str(raised.value) == (
        f"unknown keep strategy {shown}; use one of: half, last_two, none, quarter"
    )
