"""``shown_by_view``: what the view rules drop from and add to each visible message, found by
running the rules' own functions."""

from __future__ import annotations

from contextstore.core.overlays import BlockUpdate
from contextstore.core.shown import ShownMessage, shown_by_view
from contextstore.core.view import ORPHANS_DROPPED, RESULT_MISSING, build_view
from tests.conftest import assistant, text, tool_result, tool_use, user


def _placeholder(tool_id: str) -> dict[str, str]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": RESULT_MISSING}


def test_an_orphan_result_is_dropped_and_the_placeholder_added() -> None:
    messages = [
        user("task"),
        assistant(tool_use("t0")),
        user(tool_result("t0")),
        assistant(tool_use("t1")),
        user(tool_result("t1"), "go on"),
    ]
    changes = shown_by_view(messages, (2, 3), None)
    assert changes == {4: ShownMessage(frozenset({0}), [_placeholder("t0")])}
    assert build_view(messages, (2, 3), None)[2]["content"] == [_placeholder("t0"), text("go on")]


def test_a_message_left_empty_gets_the_note_and_an_inserted_message_is_named() -> None:
    messages = [user("task"), assistant("a"), user(tool_result("t9")), assistant(tool_use("t1"))]
    messages += [user(tool_result("t1")), assistant(tool_use("t2")), assistant("b")]
    changes = shown_by_view(messages, None, None)
    assert changes[2] == ShownMessage(frozenset({0}), [text(ORPHANS_DROPPED)])
    assert changes[5].followed_by == [_placeholder("t2")] and not changes[5].added
    assert set(changes) == {2, 5}


def test_the_placeholders_after_message_1_when_the_cut_hid_the_rest_are_named() -> None:
    messages = [user("task"), assistant("look", tool_use("t0")), user(tool_result("t0"))]
    messages += [assistant("done")]
    changes = shown_by_view(messages, (2, 3), None)
    assert changes == {1: ShownMessage(followed_by=[_placeholder("t0")])}
    assert build_view(messages, (2, 3), None)[-1]["content"] == [_placeholder("t0")]


def test_a_text_result_sent_as_its_tool_result_is_not_dropped() -> None:
    """Cline's text result becomes its call's tool_result: the stored block is sent."""
    messages = [
        user("task"),
        assistant(tool_use("t1", "read_file", path="a.py")),
        user("[read_file for 'a.py'] Result:\nbody"),
    ]
    assert shown_by_view(messages, None, None) == {}


def test_rewrites_are_those_the_view_applies() -> None:
    messages = [user("task"), assistant(tool_use("t0")), user(tool_result("t0", "x"))]
    update = BlockUpdate(2, 0, "manual", "rewritten")
    assert shown_by_view(messages, None, {(2, 0): update}) == {}
