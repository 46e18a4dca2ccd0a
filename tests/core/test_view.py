"""The view rules on plain message lists: cut, rewrites, orphan filter, pairing, safety."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore import ensure_tool_results_follow_tool_use, truncated_messages
from contextstore.core.overlays import BlockUpdate, UpdateMode, apply_overlays
from contextstore.core.view import (
    ORPHANS_DROPPED,
    RESULT_MISSING,
    build_view,
    calls_cut_off,
    calls_hidden_before,
    cut,
    provider_safe,
)
from tests.conftest import assistant, session, text, tool_result, tool_use, user


def _ids(message: dict[str, Any]) -> list[Any]:
    return [b.get("tool_use_id") for b in message["content"] if b.get("type") == "tool_result"]


class TestPairing:
    def test_missing_results_get_a_placeholder_in_call_order(self) -> None:
        messages = [assistant(tool_use("a"), tool_use("b")), user(tool_result("b", "B"))]
        out = ensure_tool_results_follow_tool_use(messages)
        assert _ids(out[1]) == ["a", "b"]
        assert out[1]["content"][0]["content"] == RESULT_MISSING

    def test_results_move_first_and_other_blocks_keep_their_order(self) -> None:
        messages = [
            assistant(tool_use("a"), tool_use("b")),
            user("note", tool_result("b"), "more", tool_result("a")),
        ]
        out = ensure_tool_results_follow_tool_use(messages)
        assert _ids(out[1]) == ["a", "b"]
        assert [b["text"] for b in out[1]["content"][2:]] == ["note", "more"]

    def test_results_for_unknown_ids_are_dropped_when_rebuilt(self) -> None:
        messages = [assistant(tool_use("a")), user(tool_result("zz"), tool_result("a"))]
        assert _ids(ensure_tool_results_follow_tool_use(messages)[1]) == ["a"]

    def test_duplicates_after_a_matching_prefix_are_left_in_place(self) -> None:
        messages = [assistant(tool_use("a")), user(tool_result("a"), tool_result("a"))]
        out = ensure_tool_results_follow_tool_use(messages)
        assert out[1] is messages[1]

    def test_string_user_content_keeps_its_text(self) -> None:
        """Cline replaced it with [] (and mutated the caller's message)."""
        messages = [assistant(tool_use("a")), {"role": "user", "content": "carry on"}]
        before = copy.deepcopy(messages)
        out = ensure_tool_results_follow_tool_use(messages)
        assert out[1]["content"] == [
            {"type": "tool_result", "tool_use_id": "a", "content": RESULT_MISSING},
            text("carry on"),
        ]
        assert messages == before

    def test_messages_needing_no_change_keep_their_identity(self) -> None:
        messages = session(3)
        out = ensure_tool_results_follow_tool_use(messages)
        assert all(a is b for a, b in zip(out, messages, strict=True))

    def test_results_after_a_message_without_calls_are_left_to_the_store(self) -> None:
        messages = [user("t"), assistant("no calls"), user(tool_result("x"))]
        assert ensure_tool_results_follow_tool_use(messages)[2] is messages[2]
        assert provider_safe(messages)[2]["content"] == [text(ORPHANS_DROPPED)]


class TestCut:
    def test_messages_zero_and_one_then_everything_after_the_range(self) -> None:
        messages = session(5)
        assert [i for i, _ in cut(messages, (2, 6))] == [0, 1, 7, 8, 9, 10]

    def test_a_range_ending_below_two_hides_nothing_and_never_repeats_message_one(self) -> None:
        messages = session(2)
        for end in (-1, 0, 1):
            assert [i for i, _ in cut(messages, (2, end))] == [0, 1, 2, 3, 4]

    def test_orphan_results_of_the_first_message_after_the_cut_are_dropped(self) -> None:
        messages = session(4)
        out = truncated_messages(messages, (2, 4))
        # message 5 is assistant t2; the view continues at it, so nothing is orphaned
        assert len(out) == 6
        out = truncated_messages(messages, (2, 5))
        # message 6 answers t2, whose call is hidden: the result goes, t0 gets a placeholder
        assert out[2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": "t0",
            "content": RESULT_MISSING,
        }
        assert len(out[2]["content"]) == 1

    def test_an_orphan_result_is_dropped_when_message_one_has_no_call(self) -> None:
        """Message 1 issues no call, so the pairing repair leaves the message alone: only the
        orphan filter removes the result of the hidden call (message 3's ``t1``)."""
        messages = [
            user("task"),
            assistant("a plan, no tool call"),
            user("go on"),
            assistant(tool_use("t1")),
            user(tool_result("t1", "hidden call's result"), "and a remark"),
            assistant("done"),
        ]
        out = truncated_messages(messages, (2, 3))
        assert out == [messages[0], messages[1], user("and a remark"), messages[5]]

    def test_a_message_left_with_only_orphans_keeps_an_empty_list(self) -> None:
        messages = [
            user("task"),
            assistant("no call"),
            assistant(tool_use("t1")),
            user(tool_result("t1")),
            assistant("done"),
        ]
        assert truncated_messages(messages, (2, 2))[2] == {"role": "user", "content": []}

    def test_without_a_cut_nothing_counts_as_an_orphan(self) -> None:
        """The filter applies to the first message after a cut only: message 2 is not one."""
        messages = [user("task"), assistant("no call"), user(tool_result("t9"), "x")]
        for no_cut in (None, (2, 1)):
            assert truncated_messages(messages, no_cut) == messages

    def test_only_the_first_message_after_the_cut_is_filtered(self) -> None:
        messages = [
            user("task"),
            assistant("no call"),
            assistant(tool_use("t1")),
            user(tool_result("t1"), "first after the cut"),
            assistant("reply"),
            user(tool_result("t1"), "later"),
        ]
        out = truncated_messages(messages, (2, 2))
        assert out[2] == user("first after the cut")
        assert out[4] == messages[5]

    def test_a_result_that_still_pairs_with_message_one_survives_the_cut(self) -> None:
        """Cline drops every result of that message, a summary included."""
        messages = [
            user("task"),
            assistant(tool_use("keep")),
            user(tool_result("keep", "old")),
            assistant("x"),
            user(tool_result("keep", "the summary")),
        ]
        out = truncated_messages(messages, (2, 3))
        assert out[2]["content"][0]["content"] == "the summary"

    def test_a_reused_id_answers_the_hidden_call_before_it_not_message_one(self) -> None:
        """Kimi numbers ids per tool: message 5 answers message 4's read of b.py, hidden by
        the cut, not message 1's read of a.py, whose id it shares."""
        same = "functions.read_file:0"
        messages = [
            user("task"),
            assistant(tool_use(same, path="a.py")),
            user(tool_result(same, "a.py's text")),
            assistant("next"),
            assistant(tool_use(same, path="b.py")),
            user(tool_result(same, "b.py's text"), "and a remark"),
        ]
        assert calls_hidden_before(messages, (2, 4)) == {same}
        for out in (truncated_messages(messages, (2, 4)), build_view(messages, (2, 4), None)):
            assert out[2]["content"] == [tool_result(same, RESULT_MISSING), text("and a remark")]
        # by the rules of version 10 the hidden call's result answered message 1
        older = build_view(messages, (2, 4), None, rules=10)
        assert older[2]["content"][0] == tool_result(same, "b.py's text")

    def test_no_call_is_hidden_before_the_view_without_a_cut(self) -> None:
        messages = session(3)
        for no_cut in (None, (2, 1), (2, 0)):
            assert calls_hidden_before(messages, no_cut) == frozenset()
        assert calls_hidden_before(messages, (2, 2)) == frozenset()  # message 2 is a user's
        assert calls_hidden_before(messages, (2, 3)) == {"t1"}
        assert calls_hidden_before(messages, (2, 5)) == {"t2"}
        assert calls_hidden_before(messages[:6], (2, 5)) == frozenset()  # nothing after it

    def test_calls_of_message_one_are_answered_when_the_cut_hides_all_after_it(self) -> None:
        """Their results are hidden, not pending: view rules 11 send placeholders for them
        (the view ended on calls, and a prepare refused it as waiting for results)."""
        messages = [*session(3), assistant("done")]
        assert calls_cut_off(messages, (2, 7))
        view = build_view(messages, (2, 7), None)
        assert [m["role"] for m in view] == ["user", "assistant", "user"]
        assert view[2]["content"] == [
            {"type": "tool_result", "tool_use_id": "t0", "content": RESULT_MISSING}
        ]
        assert build_view(messages, (2, 7), None, rules=10)[-1] == messages[1]
        assert build_view(messages[:2], None, None, rules=11)[-1] == messages[1]  # no cut

    def test_nothing_is_cut_off_without_a_cut_or_with_a_message_after_it(self) -> None:
        messages = session(3)
        for no_cut in (None, (2, 1), (2, -1)):
            assert not calls_cut_off(messages, no_cut)
        assert not calls_cut_off(messages, (2, 5))  # message 6 is shown
        assert not calls_cut_off(messages[:2], (2, 5))  # nothing was hidden
        assert calls_cut_off(messages, (2, 6))
        pending = [*messages, assistant(tool_use("t9"))]
        assert build_view(pending, (2, 5), None)[-1] == pending[-1]  # waits for its result
        assert not calls_cut_off([user("t"), assistant("plain"), user("u")], None)
        assert build_view([user("t"), assistant("plain"), user("u")], (2, 2), None)[-1] == (
            assistant("plain")
        )


class TestRewrites:
    def test_text_tool_result_and_string_content_take_the_rewrite(self) -> None:
        message = user(text("a"), tool_result("t", [text("inner")]), tool_result("u", "plain"))
        overlays = {
            (3, 0): BlockUpdate(3, 0, "manual", "A"),
            (3, 1): BlockUpdate(3, 1, "manual", "INNER"),
            (3, 2): BlockUpdate(3, 2, "manual", "PLAIN"),
        }
        out = apply_overlays(message, 3, overlays)
        assert out["content"][0]["text"] == "A"
        assert out["content"][1]["content"][0]["text"] == "INNER"
        assert out["content"][2]["content"] == "PLAIN"
        assert message["content"][0]["text"] == "a"

    def test_block_mode_degrades_media_and_tool_input_mode_rewrites_arguments(self) -> None:
        image = {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a"}}
        overlays = {
            (0, 0): BlockUpdate(0, 0, "processor", "[image omitted]", mode=UpdateMode.BLOCK),
            (1, 0): BlockUpdate(1, 0, "processor", '{"path": "b"}', mode=UpdateMode.TOOL_INPUT),
        }
        view = build_view([user(image), assistant(tool_use("t", path="a"))], None, overlays)
        assert view[0]["content"] == [text("[image omitted]")]
        assert view[1]["content"][0]["input"] == {"path": "b"}

    def test_a_rewrite_of_a_block_without_text_changes_nothing(self) -> None:
        message = assistant(tool_use("t"))
        assert apply_overlays(message, 1, {(1, 0): BlockUpdate(1, 0, "manual", "x")}) is message


@given(turns=st.integers(0, 12), end=st.integers(-2, 30))
def test_any_cut_view_pairs_every_call_and_never_mutates(turns: int, end: int) -> None:
    messages = session(turns)
    before = copy.deepcopy(messages)
    view = build_view(messages, (2, end), None)
    assert messages == before
    for current, following in itertools.pairwise(view):
        calls = [b["id"] for b in current["content"] if b.get("type") == "tool_use"]
        if calls:
            assert _ids(following)[: len(calls)] == calls
    assert all(m["content"] for m in view)


class TestTextResults:
    """Cline 3.5x's text-block tool results answer their calls in the store's view."""

    @staticmethod
    def _view(*messages: dict[str, Any]) -> list[dict[str, Any]]:
        return build_view(list(messages), None, None)

    def test_a_result_header_answers_the_call_with_the_same_text(self) -> None:
        result = "[read_file for 'a.py'] Result:\nprint(1)"
        messages = [user("t"), assistant(tool_use("a", "read_file")), user(result, "<env/>")]
        before = copy.deepcopy(messages)
        view = build_view(messages, None, None)
        assert view[2]["content"] == [
            tool_result("a", result),
            text("<env/>"),
        ]
        assert messages == before
        assert ensure_tool_results_follow_tool_use(messages)[2]["content"][0] == tool_result(
            "a", RESULT_MISSING
        )  # Cline's own function still shows what Cline sends

    def test_calls_are_answered_in_order_by_name_and_the_not_executed_notes(self) -> None:
        view = self._view(
            user("t"),
            assistant(tool_use("a", "read_file"), tool_use("b", "read_file"), tool_use("c", "ls")),
            user(
                "Tool [read_file] was not executed because a tool has already been used.",
                "[ls for '.'] Result:\nx",
                "[read_file for 'a.py'] Result:\ny",
            ),
        )
        contents = [(b.get("tool_use_id"), b.get("content")) for b in view[2]["content"]]
        assert contents == [
            ("a", "Tool [read_file] was not executed because a tool has already been used."),
            ("b", "[read_file for 'a.py'] Result:\ny"),
            ("c", "[ls for '.'] Result:\nx"),
        ]

    def test_a_call_id_answers_its_call(self) -> None:
        call = {**tool_use("a", "read_file"), "call_id": "call_1"}
        answer = {"type": "text", "text": "whatever it says", "call_id": "call_1"}
        view = self._view(user("t"), assistant(call), user(answer))
        assert view[2]["content"] == [
            {
                "type": "tool_result",
                "tool_use_id": "a",
                "content": "whatever it says",
                "call_id": "call_1",
            }
        ]

    @pytest.mark.parametrize(
        "answer",
        [
            "[write_to_file for 'a.py'] Result:\nok",  # another tool's name
            "Here: [read_file for 'a.py'] Result:\nok",  # not at the start
            "[read_file for 'a.py'] Result",  # no colon
        ],
    )
    def test_text_that_does_not_answer_stays_text(self, answer: str) -> None:
        view = self._view(user("t"), assistant(tool_use("a", "read_file")), user(answer))
        assert view[2]["content"] == [tool_result("a", RESULT_MISSING), text(answer)]

    def test_a_real_result_wins_over_text(self) -> None:
        header = "[read_file for 'a.py'] Result:\nold"
        view = self._view(
            user("t"), assistant(tool_use("a", "read_file")), user(tool_result("a", "new"), header)
        )
        assert view[2]["content"] == [tool_result("a", "new"), text(header)]

    def test_only_the_message_right_after_the_call_answers_it(self) -> None:
        """After a cut, the first visible user message answered a hidden call: its text
        must not become a result of message 1's call."""
        messages = [
            user("t"),
            assistant(tool_use("a", "read_file")),
            user("[read_file for 'a.py'] Result:\n1"),
            assistant(tool_use("b", "read_file")),
            user("[read_file for 'b.py'] Result:\n2"),
        ]
        view = build_view(messages, (2, 3), None)
        assert view[2]["content"] == [
            tool_result("a", RESULT_MISSING),
            text("[read_file for 'b.py'] Result:\n2"),
        ]


def test_messages_given_as_read_only_mappings_are_read_as_their_dicts() -> None:
    # The functions take mappings (the SDKs' TypedDict messages) and return dicts; a message
    # that was a mapping other than a dict came back as the caller's MappingProxyType.
    from types import MappingProxyType

    from contextstore import next_truncation_range, optimize_file_reads

    history = [
        user("the task"),
        assistant(tool_use("t1", path="a.py")),
        user(tool_result("t1", "a")),
        assistant("read"),
        user("go on"),
    ]
    proxies = [MappingProxyType(message) for message in history]
    assert truncated_messages(proxies, (2, 3)) == truncated_messages(history, (2, 3))
    assert truncated_messages(messages=proxies, deleted_range=(2, 3))[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "result missing",
    }
    assert ensure_tool_results_follow_tool_use(proxies) == history
    assert all(type(m) is dict for m in ensure_tool_results_follow_tool_use(proxies))
    assert next_truncation_range(proxies, None, "half") == next_truncation_range(
        history, None, "half"
    )
    assert optimize_file_reads(proxies).messages == optimize_file_reads(history).messages
