"""Errors say what happened and what to do: the texts of the pure layer's refusals.

Each message names the value's position or parameter, what was wrong, and the fix; a
caller (or an agent reading the error) acts on these words, so they are checked whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from contextstore import ContextStoreError, harden_history
from contextstore.core.content import normalize_message
from contextstore.core.validate import check_choice, check_ts

MESSAGES: list[tuple[Callable[[], Any], str]] = [
    (
        lambda: harden_history([5]),  # type: ignore[list-item]
        "contents[0] is a int, not a Content mapping; pass dicts with 'role' and 'parts'.",
    ),
    (
        lambda: harden_history([{"role": "user", "parts": []}, {"role": "system", "parts": []}]),
        "contents[1] has role 'system'; use 'user' or 'model'.",
    ),
    (
        lambda: normalize_message("user", [{"type": "text", "text": "ok"}, {"type": "text"}]),
        "content[1] (text) has no text; set it to a string.",
    ),
    (
        lambda: normalize_message("user", [{"type": "image", "source": {"type": "base64"}}]),
        "content[0] (image) has no source.media_type; set it to a string.",
    ),
    (
        lambda: check_choice("kind", "x", frozenset({"b", "a"})),
        "kind 'x' is not valid; use one of a, b.",
    ),
    (lambda: check_choice("mode", 3, ("text",)), "mode 3 is not valid; use one of text."),
    (
        lambda: check_ts("as_of", -1),
        "as_of must be an integer from 0 to 9,007,199,254,740,992, got -1.",
    ),
    (
        lambda: check_ts("as_of", None, optional=False),
        "as_of must be an integer from 0 to 9,007,199,254,740,992, got None.",
    ),
]


@pytest.mark.parametrize(("call", "message"), MESSAGES, ids=[m for _, m in MESSAGES])
def test_the_error_says_what_and_where(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ContextStoreError) as raised:
        call()
    assert str(raised.value) == message


@pytest.mark.parametrize("value", [None, 0, 2**53])
def test_check_ts_accepts_none_by_default_and_its_bounds(value: Any) -> None:
    check_ts("ts", value)
    if value is not None:
        check_ts("ts", value, optional=False)
