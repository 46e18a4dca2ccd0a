"""Cline's exact rules, checked against independent transcriptions of its pseudo-code.

The oracle is ``reference/cline-context-manager.md`` (transcribed in
``tests/core/cline_reference.py``); each test names the section it pins, and applies on
top of the oracle only the deliberate differences the README lists (by number).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore import ensure_tool_results_follow_tool_use, next_truncation_range
from contextstore.core.file_reads import plan_file_read_dedupe
from contextstore.core.overlays import BlockUpdate
from contextstore.core.planning import Policy, plan_request
from contextstore.core.state import ConversationState
from contextstore.core.truncation import NOTHING_HIDDEN
from tests.conftest import assistant, tool_result, tool_use, user
from tests.core import cline_reference as cline

Message = dict[str, Any]

# --- Section 4: getNextTruncationRange on any history and any current range ------------

_roles = st.lists(st.sampled_from(["user", "assistant"]), max_size=40)
_ranges = st.none() | st.tuples(st.just(2), st.integers(min_value=-2, max_value=45))
_keeps = st.sampled_from(["none", "last_two", "half", "quarter"])


@given(_roles, _ranges, _keeps)
def test_truncation_ranges_are_clines_but_for_the_documented_fixes(
    roles: list[str], current: tuple[int, int] | None, keep: str
) -> None:
    """Section 4 on histories of any role order (not only alternating) and any range,
    stale ones included. Cline's result, then difference 4: a current range ending below
    2 hides nothing (Cline would still start the rest after its end), the end never
    shrinks below the current one, and an end below 2 is reported as ``(2, 1)``."""
    messages = [{"role": role, "content": "x"} for role in roles]
    hides = current is not None and current[1] >= 2
    expected_end = cline.next_truncation_range(messages, current if hides else None, keep)[1]
    if hides:
        assert current is not None
        expected_end = max(expected_end, current[1])
    expected = NOTHING_HIDDEN if expected_end < 2 else (2, expected_end)
    assert next_truncation_range(messages, current, keep) == expected


# --- Section 5.2: ensureToolResultsFollowToolUse -----------------------------------------


def test_a_call_id_repeated_in_one_message_is_answered_as_cline_answers_it() -> None:
    """Section 5.2: the results are rebuilt only when the prefix does not match the call
    ids in order, an id has no result, or ``k`` (ids matched) is below the number of
    distinct result ids. A message calling ``a`` twice answered once matches a prefix of
    one (``k`` = 1 = one distinct result), so it is left as it is; it was rebuilt with the
    same result twice."""
    messages = [assistant(tool_use("a"), tool_use("a")), user(tool_result("a", "A"))]
    assert ensure_tool_results_follow_tool_use(messages)[1] is messages[1]
    answered_twice_and_more = [
        assistant(tool_use("a"), tool_use("a")),
        user(tool_result("a", "first"), tool_result("a", "second"), tool_result("b", "B")),
    ]
    # k = 2 matched ids, two distinct result ids (a, b): nothing needs a rebuild, so the
    # result for b stays (it was dropped, and the first result of a with it).
    out = ensure_tool_results_follow_tool_use(answered_twice_and_more)
    assert out[1] is answered_twice_and_more[1]
    assert cline.ensure_tool_results_follow_tool_use(answered_twice_and_more) == out


_ids = st.sampled_from(["a", "b", "c", ""])
_assistant_blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.sampled_from(["t", "u"])),
    st.builds(lambda i: {"type": "tool_use", "id": i, "name": "f", "input": {}}, _ids),
)
_user_blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.sampled_from(["t", "u"])),
    st.builds(
        lambda i, c: {"type": "tool_result", "tool_use_id": i, "content": c},
        _ids,
        st.sampled_from(["1", "2"]),
    ),
)
_assistants = st.builds(
    lambda blocks: {"role": "assistant", "content": blocks},
    st.lists(_assistant_blocks, max_size=4),
)
_users = st.builds(
    lambda blocks: {"role": "user", "content": blocks}, st.lists(_user_blocks, max_size=5)
)
# Mostly an assistant message and the user message after it, the pairs the rule rebuilds.
_messages = st.lists(
    st.one_of(st.tuples(_assistants, _users), st.tuples(_assistants), st.tuples(_users)),
    max_size=4,
).map(lambda groups: [message for group in groups for message in group])


@settings(max_examples=500)
@given(_messages)
def test_pairing_is_clines_on_list_contents(messages: list[Message]) -> None:
    """Section 5.2 exactly, repeated call ids and duplicate results included, on list
    contents (a string content keeps its text: difference 3); the input is not mutated."""
    before = copy.deepcopy(messages)
    assert ensure_tool_results_follow_tool_use(messages) == (
        cline.ensure_tool_results_follow_tool_use(messages)
    )
    assert messages == before


# --- Section 8: file-read de-duplication, round after round ------------------------------

_paths = st.sampled_from(["a.py", "b.py", "c.py"])
_bodies = st.sampled_from(["line\n", "line\n" * 5, "line\n" * 60, "line\n" * 400])


def _read(path: str, body: str, form: int) -> list[Any]:
    header = f"[read_file for '{path}'] Result:"
    if form == 0:
        return [{"type": "text", "text": f"{header}\n{body}"}]
    if form == 1:  # the old format: the header alone, the content in block 1
        return [{"type": "text", "text": header}, {"type": "text", "text": body}]
    return [tool_result("r", [{"type": "text", "text": f"{header}\n{body}"}])]


def _write(path: str, body: str, tool: str, final: bool, split: bool) -> list[Any]:
    written = f'<final_file_content path="{path}">\n{body}</final_file_content>\n\nok'
    result = written if final else "The user denied this operation."
    header = f"[{tool} for '{path}'] Result:"
    if split:
        return [{"type": "text", "text": header}, {"type": "text", "text": result}]
    return [{"type": "text", "text": f"{header}\n{result}"}]


def _mentions(paths: list[str], body: str, task_first: bool) -> list[Any]:
    text = "see " + " ".join(f'<file_content path="{p}">\n{body}</file_content>' for p in paths)
    blocks: list[Any] = [{"type": "text", "text": text}]
    return [{"type": "text", "text": "<task>x</task>"}, *blocks] if task_first else blocks


_user_contents = st.one_of(
    st.builds(_read, _paths, _bodies, st.integers(0, 2)),
    st.builds(
        _write,
        _paths,
        _bodies,
        st.sampled_from(["write_to_file", "replace_in_file"]),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(_mentions, st.lists(_paths, min_size=1, max_size=3), _bodies, st.booleans()),
    st.builds(
        lambda path, body: [
            {"type": "text", "text": f"[execute_command for 'ls'] Result:\n{body}"},
            {"type": "text", "text": f'<file_content path="{path}">\n{body}</file_content>'},
        ],
        _paths,
        _bodies,
    ),
    st.builds(
        lambda path, size: [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "A" * size},
            },
            {"type": "text", "text": f'<file_content path="{path}">\nz\n</file_content>'},
        ],
        _paths,
        st.sampled_from([4, 4_000]),
    ),
    st.builds(lambda body: "a string " + body, _bodies),
    st.builds(lambda body: [{"type": "text", "text": "plain " + body}], _bodies),
)
_turns = st.lists(st.tuples(_user_contents, st.integers(min_value=1, max_value=60)), max_size=10)


def _turn(content: Any, reply: int) -> list[Message]:
    return [{"role": "user", "content": content}, assistant("r" * reply)]


@settings(max_examples=150, deadline=None)
@given(_turns, st.lists(st.tuples(_turns, st.integers(0, 30)), min_size=1, max_size=3))
def test_file_read_deduplication_is_clines_round_after_round(
    first: list[tuple[Any, int]], rounds: list[tuple[list[tuple[Any, int]], int]]
) -> None:
    """Section 8, round after round on the same overlay, with messages arriving between
    rounds and the visible start moving forward: the same messages are rewritten to the
    same texts, and the same fraction is saved (so the 30 % decision is the same).
    Cline's metadata lists are fresh per update here, as section 14 item 2 asks."""
    messages: list[Message] = [user("<task>t</task>"), assistant("ok")]
    for content, reply in first:
        messages += _turn(content, reply)
    cline_overlay: cline.Overlay = {}
    overlays: dict[tuple[int, int], BlockUpdate] = {}
    start = 2
    for ts, (arriving, advance) in enumerate(rounds):
        start = min(start + advance, max(2, len(messages) - 1))
        changed, need, touched, fraction = cline.file_read_round(messages, start, cline_overlay, ts)
        plan = plan_file_read_dedupe(messages, start, overlays)
        overlays.update((update.address, update) for update in plan.updates)
        assert (bool(plan.updates), set(plan.touched)) == (changed, touched)
        if changed:
            assert plan.fraction_saved == fraction
            assert plan.need_to_truncate is need
        shown = {
            (i, b): updates[-1][1]
            for i, (_, blocks) in cline_overlay.items()
            for b, updates in blocks.items()
        }
        assert {address: update.text for address, update in overlays.items()} == shown
        for content, reply in arriving:
            messages += _turn(content, reply)


# --- Section 9.2: the auto-condense guard against summarising a summary ------------------


@pytest.mark.parametrize(("left", "action"), [(2, "none"), (3, "truncate")])
def test_auto_condense_is_skipped_only_when_two_messages_or_fewer_are_left(
    left: int, action: str
) -> None:
    """Section 9.2: with a range ``[s, e]``, ``len(api) - e - 1 <= 2`` turns compaction
    off; three messages left after the range compact. Without a summarizer the keep is
    ``quarter`` here (half the total is over the maximum), which hides two of the three."""
    messages = [user("<task>t</task>"), assistant("ok")]
    messages += [user(f"u{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(2, 12)]
    end = len(messages) - 1 - left
    if left == 3:
        messages.append(user("one more"))
        end = len(messages) - 1 - left
    state = ConversationState(messages, (2, end))
    plan = plan_request(Policy(200_000, auto_condense=0.5), state, 320_001)
    assert plan.decision.action == action
    if action == "none":
        assert "summarising a summary" in plan.decision.reason
        assert plan.new_range is None
    else:
        assert plan.decision.keep == "quarter"
        assert plan.new_range == (2, end + 2)
