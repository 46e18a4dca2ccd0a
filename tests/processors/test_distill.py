from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.errors import InvalidInputError
from contextstore.processors import Distiller, distill_text
from contextstore.processors.distill import repeat_marker


def test_trailing_whitespace_and_blank_runs() -> None:
    assert distill_text("a  \nb\t\n\n\n\n\nc\n\nd") == "a\nb\n\nc\n\nd"


def test_repeated_lines_collapse() -> None:
    text = "start\n" + "Downloading package...\n" * 5 + "done"
    assert distill_text(text) == (
        "start\nDownloading package...\n[previous line repeated 4 more times]\ndone"
    )


def test_short_repeats_are_kept_when_the_marker_would_be_longer() -> None:
    assert distill_text("a\na\na\nb") == "a\na\na\nb"


def test_two_repeats_are_kept() -> None:
    line = "x" * 80
    assert distill_text(f"{line}\n{line}") == f"{line}\n{line}"


def test_fenced_code_keeps_repeats_and_blank_lines() -> None:
    line = "assert f(1) == 1"
    text = "```python\n" + f"{line}\n" * 5 + "\n\n\n\nend  \n```\n" + f"{line}\n" * 5
    out = distill_text(text)
    assert out.startswith("```python\n" + f"{line}\n" * 5 + "\n\n\n\nend\n```\n")
    assert out.endswith(f"{line}\n{repeat_marker(4)}\n")


def test_unclosed_fence_protects_the_rest() -> None:
    text = "~~~\n" + "same line here\n" * 4
    assert distill_text(text) == text


FENCE_LINES = st.lists(
    st.sampled_from(["x = 1", "x = 1   ", "", "  ", "return x", "\t", "# comment  "]),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(FENCE_LINES)
def test_fenced_content_only_loses_trailing_whitespace(lines: list[str]) -> None:
    text = "\n".join(["```", *lines, "```"])
    assert distill_text(text) == "\n".join(["```", *(line.rstrip() for line in lines), "```"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["abc", "abc  ", "", " ", "```", "a longer line of text", "z"]), max_size=40
    )
)
def test_distill_is_idempotent_and_never_grows(lines: list[str]) -> None:
    text = "\n".join(lines)
    once = distill_text(text)
    assert distill_text(once) == once
    assert len(once) <= len(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n`"), max_size=200))
def test_distill_is_idempotent_on_arbitrary_text(text: str) -> None:
    once = distill_text(text)
    assert distill_text(once) == once
    assert len(once) <= len(text)


def test_distiller_proposes_only_shrinking_updates() -> None:
    noisy = "log line that repeats\n" * 10
    view: list[tuple[int, dict[str, Any]]] = [
        (0, {"role": "user", "content": "clean"}),
        (
            4,
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": noisy},
                    {"type": "text", "text": "tidy text"},
                ],
            },
        ),
    ]
    before = copy.deepcopy(view)
    updates = Distiller().propose(view)
    assert view == before
    assert [(u.address, u.source) for u in updates] == [((4, 0), "distill")]
    assert updates[0].text == "log line that repeats\n[previous line repeated 9 more times]\n"
    assert Distiller().config() == {"min_repeats": 3}
    with pytest.raises(InvalidInputError):
        Distiller(min_repeats=1)


@pytest.mark.parametrize("bad", ["3", 2.5, None, True])
def test_a_repeat_threshold_that_is_not_an_integer_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="min_repeats"):
        Distiller(min_repeats=bad)
