"""The checks every public method runs on caller values, on their own (the store's use of
them is tested through the store in ``tests/robustness/test_bad_input.py``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from contextstore.core.content import normalize_message, normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import check_json_object, check_number, json_copy


@pytest.mark.parametrize("value", [0, 0.0, 1, 2.5, 1e15, None])
def test_finite_non_negative_numbers_up_to_1e15_are_accepted(value: Any) -> None:
    check_number("cost", value)


@pytest.mark.parametrize(
    "value", [True, False, -0.01, -1, 1e15 + 1e3, math.nan, math.inf, -math.inf, "1", [1]]
)
def test_other_numbers_are_refused_naming_the_parameter(value: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"^cost must be a finite number >= 0, got "):
        check_number("cost", value)


def test_a_required_number_refuses_none() -> None:
    with pytest.raises(InvalidInputError, match="cost"):
        check_number("cost", None, optional=False)


@pytest.mark.parametrize(
    "value",
    [{}, {"a": 1}, {"a": {"b": [1, {"c": None}]}}, {"t": (1, 2)}],
)
def test_string_keyed_json_objects_are_accepted_as_copies(value: Any) -> None:
    copied = check_json_object("metadata", value)
    assert copied == json_copy(
        {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
    )
    assert copied is not value


@pytest.mark.parametrize(
    "value", [{1: "a"}, {"a": {2: "b"}}, {"a": [{3: "c"}]}, {"a": ({4: "d"},)}, [("a", 1)]]
)
def test_a_non_string_key_anywhere_is_refused(value: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"^metadata must be a mapping with string keys"):
        check_json_object("metadata", value)


def test_json_copy_copies_every_container() -> None:
    value = {"a": [{"b": [1]}], "c": "s"}
    copied = json_copy(value)
    assert copied == value
    assert copied["a"] is not value["a"] and copied["a"][0] is not value["a"][0]
    assert copied["a"][0]["b"] is not value["a"][0]["b"]


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": [{"type": "text", "text": "a"}], "id": "m1", "ts": 5},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {"x": [1]}}],
            "metrics": {"tokens": {"in": 1}},
        },
    ],
)
def test_a_normalized_message_gives_back_an_equal_independent_message(
    message: dict[str, Any],
) -> None:
    normalized = normalize_message_dict(message)
    first = normalized.to_message()
    assert first == message
    if isinstance(first["content"], list):
        first["content"][0]["changed"] = True
    for key in ("metrics",):
        if key in first:
            first[key]["tokens"]["in"] = 99
    assert normalized.to_message() == message
    again = normalize_message(message["role"], message["content"])
    assert again.to_message()["content"] == message["content"]
