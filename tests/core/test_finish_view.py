"""``finish_view`` (one scan, then the repair steps only where needed) gives exactly what
the steps give one by one, on well-formed and on broken views alike."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core import view as view_module
from contextstore.core.view import (
    ORPHANS_DROPPED,
    VIEW_RULES,
    finish_view,
    provider_safe,
    repair_indexed,
)

_IDS = st.sampled_from(["a", "b", "c", ""])
_BLOCKS = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.sampled_from(["hi", "", "x"])),
    st.builds(
        lambda i: {"type": "text", "text": f"[read_file for '{i}'] Result: body"},
        st.sampled_from(["read_file", "grep"]),
    ),
    st.builds(lambda i: {"type": "tool_use", "id": i, "name": "read_file", "input": {}}, _IDS),
    st.builds(lambda i: {"type": "tool_result", "tool_use_id": i, "content": "ok"}, _IDS),
    st.just("not a block"),
)
_MESSAGES = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant", "user", "assistant", "system"]),
    st.one_of(st.lists(_BLOCKS, max_size=4), st.sampled_from(["plain", ""])),
)


@st.composite
def _views(draw: st.DrawFn) -> list[tuple[int, dict[str, Any]]]:
    messages = draw(st.lists(_MESSAGES, max_size=8))
    indices = sorted(
        draw(st.sets(st.integers(0, 12), min_size=len(messages), max_size=len(messages)))
    )
    return list(zip(indices, messages, strict=True))


@settings(max_examples=400, deadline=None)
@given(_views(), st.sampled_from([1, 2, VIEW_RULES]))
def test_finish_view_equals_the_steps_one_by_one(view: list[Any], rules: int) -> None:
    before = copy.deepcopy(view)
    expected = provider_safe(repair_indexed(view, rules=rules), rules=rules)
    assert finish_view(view, rules=rules) == expected
    assert view == before


@settings(max_examples=200, deadline=None)
@given(_views(), st.sampled_from([10, VIEW_RULES]))
def test_finish_view_equals_the_steps_when_the_cut_hid_the_rest(
    view: list[Any], rules: int
) -> None:
    expected = provider_safe(repair_indexed(view, rules=rules), rules=rules, cut_off=True)
    assert finish_view(view, rules=rules, cut_off=True) == expected


def _exchange(n: int) -> list[tuple[int, dict[str, Any]]]:
    view: list[tuple[int, dict[str, Any]]] = [(0, {"role": "user", "content": "task"})]
    for i in range(n):
        call = {"type": "tool_use", "id": f"t{i}", "name": "read_file", "input": {}}
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}
        view.append((2 * i + 1, {"role": "assistant", "content": [call]}))
        view.append((2 * i + 2, {"role": "user", "content": [result]}))
    return view


def test_a_well_formed_view_is_returned_as_the_same_objects() -> None:
    view = _exchange(5)
    finished = finish_view(view)
    assert [id(m) for m in finished] == [id(m) for _, m in view]


def test_a_view_needing_a_repair_is_repaired() -> None:
    view = _exchange(2)
    view[2] = (2, {"role": "user", "content": "lost result"})
    finished = finish_view(view)
    assert finished == provider_safe(repair_indexed(view))
    assert finished[2]["content"][0]["content"] == "result missing"


def _no_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the repair steps ran one by one")

    monkeypatch.setattr(view_module, "repair_indexed", refuse)


def test_the_message_after_a_cut_is_repaired_on_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = _exchange(4)
    cut_view = [*view[:2], *view[4:]]  # message 4 answers a hidden call, not message 1's
    expected = provider_safe(repair_indexed(cut_view))
    _no_slow_path(monkeypatch)
    finished = finish_view(cut_view)
    assert finished == expected
    assert finished[2]["content"][0]["content"] == "result missing"
    assert [id(m) for m in finished[3:]] == [id(m) for _, m in cut_view[3:]]


def test_a_message_left_empty_gets_the_notice_on_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = [(0, {"role": "user", "content": "task"}), (1, {"role": "assistant", "content": []})]
    expected = provider_safe(repair_indexed(view))
    _no_slow_path(monkeypatch)
    finished = finish_view(view)
    assert finished == expected
    assert finished[1]["content"] == [{"type": "text", "text": ORPHANS_DROPPED}]


def _call(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {}}


def _result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


@pytest.mark.parametrize(
    "answer",
    [
        [_result("a")],
        [_result("b")],
        [_result("")],
        [_result("a"), _result("b")],
        [_result("a"), {"type": "text", "text": "and more"}],
        [{"type": "text", "text": "no result"}],
        ["not a block"],
        [],
        "a string answer",
    ],
    ids=[
        "paired",
        "other id",
        "empty id",
        "extra result",
        "result and text",
        "text",
        "junk",
        "empty",
        "string",
    ],
)
@pytest.mark.parametrize("calls", [["a"], ["a", "b"], ["", "a"]], ids=["one", "two", "blank id"])
@pytest.mark.parametrize("gap", [1, 3], ids=["adjacent", "after a cut"])
def test_one_call_and_its_answer_equal_the_steps(answer: Any, calls: list[str], gap: int) -> None:
    """The scan's shortcut for one call answered by one result (and its way of reading the
    calls) gives what the steps give, whatever the answer holds."""
    view = [
        (0, {"role": "user", "content": "task"}),
        (1, {"role": "assistant", "content": [_call(i) for i in calls]}),
        (1 + gap, {"role": "user", "content": answer}),
        (2 + gap, {"role": "assistant", "content": [{"type": "text", "text": "done"}]}),
    ]
    for rules in (1, 2, VIEW_RULES):
        steps = provider_safe(repair_indexed(view, rules=rules), rules=rules)
        assert finish_view(view, rules=rules) == steps


_TOOL_IDS = st.sampled_from(["a", "b", ""])


@st.composite
def _nearly_well_formed(draw: st.DrawFn) -> list[tuple[int, dict[str, Any]]]:
    """Exchanges as an agent writes them (calls answered first thing, in order), each
    perhaps broken in one place: an id changed, a result lost or added, text around it."""
    view: list[tuple[int, dict[str, Any]]] = [(0, {"role": "user", "content": "task"})]
    idx = 0
    for _ in range(draw(st.integers(1, 4))):
        calls = draw(st.lists(_TOOL_IDS, max_size=2))
        idx += draw(st.sampled_from([1, 1, 2]))
        said = [{"type": "text", "text": "reading"}] if draw(st.booleans()) else []
        view.append((idx, {"role": "assistant", "content": said + [_call(i) for i in calls]}))
        answer: list[Any] = [_result(i) for i in calls]
        change = draw(st.sampled_from(["none", "none", "id", "lose", "add", "text", "junk"]))
        if change == "id" and answer:
            answer[0] = _result(draw(_TOOL_IDS))
        elif change == "lose" and answer:
            answer.pop()
        elif change == "add":
            answer.append(_result(draw(_TOOL_IDS)))
        elif change == "text":
            answer.insert(draw(st.integers(0, len(answer))), {"type": "text", "text": "note"})
        elif change == "junk":
            answer.append("not a block")
        idx += draw(st.sampled_from([1, 1, 2]))
        view.append((idx, {"role": "user", "content": answer}))
    return view


@settings(max_examples=400, deadline=None)
@given(_nearly_well_formed(), st.sampled_from([1, 2, VIEW_RULES]))
def test_nearly_well_formed_views_equal_the_steps(view: list[Any], rules: int) -> None:
    before = copy.deepcopy(view)
    steps = provider_safe(repair_indexed(view, rules=rules), rules=rules)
    assert finish_view(view, rules=rules) == steps
    assert view == before
