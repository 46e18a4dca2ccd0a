from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import text_hash
from contextstore.processors import OutputTrimmer, truncate_middle
from contextstore.processors.trimming import looks_like_tool_output, omission_marker


def numbered(lines: int) -> str:
    return "".join(f"line {i:05d}\n" for i in range(lines))


def test_short_text_is_unchanged() -> None:
    assert truncate_middle("abc", 10) == "abc"


def test_head_and_tail_kept_with_counts() -> None:
    text = numbered(1000)
    out = truncate_middle(text, 1000, 0.2)
    assert len(out) <= 1000
    head, _, tail = out.partition("... [")
    assert text.startswith(head) and head.endswith("\n")
    assert text.endswith(tail.split("] ...\n", 1)[1])
    omitted = len(text) - len(head) - len(tail.split("] ...\n", 1)[1])
    lines = omitted // len("line 00000\n")
    assert f"[{omitted:,} characters omitted ({lines} lines)] ..." in out
    kept_tail = len(tail.split("] ...\n", 1)[1])
    assert len(head) < kept_tail


def test_marker_wording() -> None:
    assert omission_marker(12345, 210) == "... [12,345 characters omitted (210 lines)] ...\n"
    assert omission_marker(5, 1) == "... [5 characters omitted (1 line)] ...\n"


def test_never_grows_when_the_limit_is_tiny() -> None:
    assert truncate_middle("x" * 30, 5) == "x" * 30


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab\n é"), max_size=3000),
    st.integers(min_value=1, max_value=2000),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_truncate_properties(text: str, limit: int, ratio: float) -> None:
    out = truncate_middle(text, limit, ratio)
    assert len(out) <= len(text)
    if out != text:
        assert len(out) <= limit
        head, _, rest = out.partition("... [")
        tail = rest.split("] ...\n", 1)[1]
        separator = "\n" if head and not text.startswith(head) else ""
        assert text.startswith(head[: len(head) - len(separator)])
        assert text.endswith(tail)


def _view(big: str) -> list[tuple[int, dict]]:  # type: ignore[type-arg]
    return [
        (0, {"role": "user", "content": big}),
        (
            1,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": big},
                    {"type": "text", "text": "[read_file for 'a.py'] Result:\n" + big},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"c": big}},
                ],
            },
        ),
        (
            2,
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": big},
                    {"type": "text", "text": big},
                    {"type": "text", "text": "short"},
                ],
            },
        ),
    ]


def test_trimmer_targets() -> None:
    big = numbered(500)
    view = _view(big)
    before = copy.deepcopy(view)
    updates = OutputTrimmer(max_chars=1000).propose(view)
    assert view == before
    assert [u.address for u in updates] == [(1, 1), (2, 0), (2, 1)]
    for update in updates:
        assert len(update.text) <= 1000
        assert update.source == "trim"
        assert update.metadata["original_chars"] == len(big) or update.address == (1, 1)
    assert updates[1].base_hash == text_hash(big)


def test_trimmer_config_and_validation() -> None:
    assert OutputTrimmer().config() == {"max_chars": 40_000, "head_ratio": 0.2}
    assert OutputTrimmer().propose(_view(numbered(10))) == []
    with pytest.raises(InvalidInputError):
        OutputTrimmer(max_chars=0)
    with pytest.raises(InvalidInputError):
        OutputTrimmer(head_ratio=1.5)


def test_tool_output_shapes() -> None:
    assert looks_like_tool_output("[execute_command for 'ls'] Result:\nfoo")
    assert looks_like_tool_output('<file_content path="a.py">x</file_content>')
    assert not looks_like_tool_output("I will now read the file.")


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"max_chars": "500"}, "max_chars"),
        ({"max_chars": 1.5}, "max_chars"),
        ({"max_chars": None}, "max_chars"),
        ({"max_chars": True}, "max_chars"),
        ({"head_ratio": "0.2"}, "head_ratio"),
        ({"head_ratio": None}, "head_ratio"),
    ],
)
def test_trimmer_settings_of_the_wrong_type_are_refused(options: dict[str, Any], name: str) -> None:
    # A string or None failed with TypeError; a float limit failed later, when slicing.
    with pytest.raises(InvalidInputError, match=name):
        OutputTrimmer(**options)
