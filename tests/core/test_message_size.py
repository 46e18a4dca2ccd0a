"""The size check of a message against ``max_message_bytes``: a cheap upper bound settles
messages well under the limit; the exact canonical JSON is measured only near or over it, and
the decision is always the exact one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from contextstore.core import content
from contextstore.core.content import NormalizedMessage, normalize_message
from contextstore.core.errors import InvalidMessageError
from contextstore.core.validate import (
    MAX_JSON_INT_DIGITS,
    MAX_MESSAGE_BYTES,
    UNBOUNDED,
    canonical_json,
    json_size_bound,
)

# Characters whose JSON is longest (escaped controls, quotes, backslashes, 2-4 byte UTF-8),
# mixed with every other character hypothesis draws.
_WORST = '\x00\x01\x1f\x7f"\\\n\t\u00e9\u20ac\u2028\U0001f600a'
texts = st.text(st.sampled_from(_WORST)) | st.text()
plain_texts = texts.map(lambda s: s.replace("\x00", ""))
_BIG = 10 ** (MAX_JSON_INT_DIGITS - 1)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-_BIG, max_value=_BIG)
    | st.floats(allow_nan=False, allow_infinity=False)
    | plain_texts
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(plain_texts, inner, max_size=4)
    ),
    max_leaves=24,
)


def _exact_bytes(value: Any) -> int:
    return len(canonical_json(value).encode("utf-8"))


@given(json_values)
@settings(max_examples=400, deadline=None)
def test_the_bound_is_never_under_the_exact_size(value: Any) -> None:
    assert json_size_bound(value) >= _exact_bytes(value)


_LONGEST = [
    -2.2250738585072014e-308,
    -1.7976931348623157e308,
    -0.00012345678901234567,
    -1234567890123456.7,
    5e-324,
    -(10**MAX_JSON_INT_DIGITS - 1),
    10**MAX_JSON_INT_DIGITS - 1,
    -(2**63),
    2**64 - 1,
    *range(-20, 21),
    True,
    False,
    None,
    "\x00" * 7,
    "\U0001f600" * 7,
]


@pytest.mark.parametrize("value", _LONGEST, ids=repr)
def test_the_bound_covers_the_longest_numbers_and_characters(value: Any) -> None:
    assert json_size_bound(value) >= _exact_bytes(value)


@pytest.mark.parametrize("value", [{}, [], (), ""], ids=repr)
def test_the_bound_of_an_empty_container_or_text_is_its_exact_size(value: Any) -> None:
    """Two bytes: the bound adds nothing of its own to what a value holds."""
    assert json_size_bound(value) == _exact_bytes(value) == 2


@pytest.mark.parametrize("value", [{"": ""}, {"": []}, [""], [[]]], ids=repr)
def test_the_bound_of_one_empty_item_is_its_exact_size_and_a_comma(value: Any) -> None:
    """Each item is counted with the comma that would follow it, and nothing else."""
    assert json_size_bound(value) == _exact_bytes(value) + 1


@st.composite
def messages(draw: st.DrawFn) -> NormalizedMessage:
    extra = draw(st.dictionaries(plain_texts, json_values, max_size=3))
    extra = {k: v for k, v in extra.items() if k not in ("type", "text")}
    blocks = [
        {"type": "text", "text": draw(texts), **extra},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "run",
            "input": draw(st.dictionaries(plain_texts, json_values, max_size=3)),
        },
    ]
    meta = draw(st.dictionaries(plain_texts, json_values, max_size=3))
    meta = {k: v for k, v in meta.items() if k not in ("role", "content")}
    try:
        return normalize_message("assistant", blocks, meta)
    except InvalidMessageError:
        assume(False)
        raise


@given(messages(), st.integers(min_value=-3, max_value=3))
@settings(max_examples=300, deadline=None)
def test_the_decision_is_the_exact_one_at_every_limit(
    message: NormalizedMessage, shift: int
) -> None:
    exact = message.json_size()
    bound = json_size_bound(message.blocks) + json_size_bound(message.meta)
    for limit in (0, exact + shift, bound + shift, MAX_MESSAGE_BYTES):
        assert message.size_over(limit) == (exact if exact > limit else None), limit


@pytest.fixture
def encodings(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every value the size check encodes as canonical JSON, in order."""
    seen: list[Any] = []

    def counted(value: Any) -> str:
        seen.append(value)
        return canonical_json(value)

    monkeypatch.setattr(content, "canonical_json", counted)
    return seen


def test_a_message_well_under_the_limit_is_not_encoded(encodings: list[Any]) -> None:
    message = normalize_message("user", "\x01" * 1_000, {"id": "m-1"})
    assert message.size_over(MAX_MESSAGE_BYTES) is None
    assert message.size_over(6_200) is None  # over the bound (6,127)
    assert encodings == []


def test_a_message_near_or_over_the_limit_is_measured_exactly(encodings: list[Any]) -> None:
    message = normalize_message("user", "\x01" * 1_000, {"id": "m-1"})
    exact = len('[{"text":"","type":"text"}]') + 6 * 1_000 + len('{"id":"m-1"}')
    assert message.size_over(exact) is None
    assert message.size_over(exact - 1) == exact
    assert len(encodings) == 4  # blocks and fields, twice


class _Text(str):
    """A string subclass: JSON holds it as a string, but the bound does not guess at it."""


def test_a_value_the_bound_does_not_know_is_measured_exactly(encodings: list[Any]) -> None:
    assert json_size_bound({"a": [_Text("x")]}) == UNBOUNDED
    assert json_size_bound({_Text("k"): 1}) == UNBOUNDED
    message = normalize_message("user", "hi", {"note": _Text("x")})
    assert message.size_over(MAX_MESSAGE_BYTES) is None
    assert len(encodings) == 2
