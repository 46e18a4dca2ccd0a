"""The checks every public method runs on caller values, on their own (the store's use of
them is tested through the store in ``tests/robustness/test_bad_input.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from contextstore import (
    ensure_tool_results_follow_tool_use,
    harden_history,
    next_truncation_range,
    optimize_file_reads,
    truncated_messages,
)
from contextstore.core.content import normalize_message, normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import check_json_object, check_number, json_as_stored, json_copy


@pytest.mark.parametrize("value", [0, 0.0, 1, 2.5, 1e15, None])
def test_finite_non_negative_numbers_up_to_1e15_are_accepted(value: Any) -> None:
    check_number("cost", value)


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        -0.01,
        -1,
        1e15 + 1,
        10**15 + 1,
        1e15 + 1e3,
        math.nan,
        math.inf,
        -math.inf,
        "1",
        [1],
    ],
)
def test_other_numbers_are_refused_naming_the_parameter(value: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"^cost must be a number from 0 to 1e\+15, got "):
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


NORMALIZE_ERRORS: list[tuple[Any, Any, Any, str]] = [
    (
        "system",
        "x",
        None,
        "role 'system' is not valid; messages have role 'user' or 'assistant' "
        "(pass a system prompt to prepare_request(system=...)).",
    ),
    (5, "x", None, "role 5 is not valid; messages have role 'user' or 'assistant' "),
    ("user", "x", {1: "a"}, "message metadata must be a dict with string keys."),
    ("user", "x", ["id"], "message metadata must be a dict with string keys."),
    ("user", "x", {"role": "a"}, "message metadata cannot contain 'role' or 'content'."),
    ("user", "x", {"content": "a"}, "message metadata cannot contain 'role' or 'content'."),
    ("user", 5, None, "content must be a string or a non-empty list of content blocks, got int."),
    (
        "user",
        [],
        None,
        "content must be a string or a non-empty list of content blocks, got an empty list.",
    ),
    (
        "user",
        [{"type": "thinking", "thinking": "t"}],
        None,
        "a user message cannot contain tool_use or thinking blocks; those belong to "
        "assistant messages.",
    ),
    (
        "assistant",
        [{"type": "tool_result", "tool_use_id": "t", "content": "x"}],
        None,
        "an assistant message cannot contain tool_result blocks; send results in the "
        "next user message.",
    ),
]


@pytest.mark.parametrize(("role", "content", "meta", "message"), NORMALIZE_ERRORS)
def test_a_malformed_message_is_refused_saying_why(
    role: Any, content: Any, meta: Any, message: str
) -> None:
    from contextstore.core.errors import InvalidMessageError

    with pytest.raises(InvalidMessageError) as raised:
        normalize_message(role, content, meta)
    assert str(raised.value).startswith(message)


def test_a_string_content_is_one_text_block_that_remembers_it_was_a_string() -> None:
    assert normalize_message("user", [{"type": "text", "text": "hi"}]).was_string is False
    assert normalize_message("user", "hi").was_string is True
    normalized = normalize_message("user", "hi", {"id": "m"})
    assert normalized.blocks == [{"type": "text", "text": "hi"}]
    assert normalized.to_message() == {"role": "user", "content": "hi", "id": "m"}


def test_content_is_any_iterable_of_block_mappings_as_append_is_typed() -> None:
    # append's content is typed as an iterable of mappings (the Anthropic SDK types content
    # as an Iterable of TypedDicts); a tuple, a generator or a read-only mapping was refused.
    from types import MappingProxyType

    from contextstore.core.errors import InvalidMessageError

    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    expected = normalize_message("user", blocks)
    assert normalize_message("user", tuple(blocks)) == expected
    assert normalize_message("user", (block for block in blocks)) == expected
    assert normalize_message("user", [MappingProxyType(b) for b in blocks]) == expected
    message = MappingProxyType({"role": "user", "content": tuple(blocks), "id": "m"})
    assert normalize_message_dict(message) == normalize_message("user", blocks, {"id": "m"})
    for refused, kind in ((b"ab", "bytes"), (blocks[0], "dict"), ((), "an empty list")):
        with pytest.raises(InvalidMessageError) as raised:
            normalize_message("user", refused)
        assert str(raised.value) == (
            f"content must be a string or a non-empty list of content blocks, got {kind}."
        )


@pytest.mark.parametrize(
    ("value", "limit", "ok"),
    [
        ("a" * 5, 5, True),
        ("a" * 6, 5, False),
        ("", 5, False),
        ("a\x00", 5, False),
        ("\ud800", 5, False),
        (5, 5, False),
        (None, 5, False),
    ],
)
def test_check_text_at_its_limit(value: Any, limit: int, ok: bool) -> None:
    from contextstore.core.validate import check_text

    if ok:
        check_text("label", value, limit, optional=False)
        return
    with pytest.raises(InvalidInputError, match=r"^label "):
        check_text("label", value, limit, optional=False)


def test_check_text_messages_and_check_id() -> None:
    from contextstore.core.validate import check_id, check_int, check_text

    check_text("title", None, 3)
    with pytest.raises(InvalidInputError) as raised:
        check_text("title", "abcd", 3)
    assert (
        str(raised.value) == "title must be a non-empty string of at most 3 characters, got 'abcd'."
    )
    with pytest.raises(InvalidInputError, match=r"^title must not contain a NUL character\.$"):
        check_text("title", "a\x00", 3)
    with pytest.raises(
        InvalidInputError, match=r"^title is not valid Unicode text: surrogates not allowed\.$"
    ):
        check_text("title", "\ud800", 3)
    assert check_id("c1") == "c1"
    with pytest.raises(
        InvalidInputError, match=r"^conversation id must be a non-empty string of at most 64"
    ):
        check_id("x" * 65)
    with pytest.raises(InvalidInputError, match=r"^parent_id must be"):
        check_id("", "parent_id")
    check_int("n", 0)
    check_int("n", 2**31 - 1)
    with pytest.raises(InvalidInputError) as raised:
        check_int("n", 2**31)
    assert str(raised.value) == "n must be an integer from 0 to 2,147,483,647, got 2147483648."
    with pytest.raises(InvalidInputError, match=r"^n must be an integer from 1 to 9, got 0\.$"):
        check_int("n", 0, minimum=1, maximum=9)


def test_canonical_json_and_the_payload_hash() -> None:
    from contextstore.core.validate import canonical_json, payload_sha256

    assert canonical_json({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'
    assert payload_sha256({"b": 1, "a": 2}) == payload_sha256({"a": 2, "b": 1})
    import hashlib

    expected = hashlib.sha256('{"a":"é"}'.encode()).hexdigest()
    assert payload_sha256({"a": "é"}) == expected


def test_check_int_and_check_ts_defaults_and_boundaries() -> None:
    from contextstore.core.validate import MAX_TS, check_int, check_ts

    check_int("n", None)  # optional unless told otherwise
    with pytest.raises(InvalidInputError, match=r"^n must be an integer from 0 to "):
        check_int("n", None, optional=False)
    check_ts("ts", 0)
    check_ts("ts", MAX_TS)
    check_ts("ts", None)
    for bad in (-1, MAX_TS + 1, True, 1.0):
        with pytest.raises(InvalidInputError, match=r"^ts must be an integer from 0 to "):
            check_ts("ts", bad)
    with pytest.raises(InvalidInputError, match=r"^as_of must be an integer"):
        check_ts("as_of", None, optional=False)


def test_check_id_refuses_none() -> None:
    from contextstore.core.validate import check_id

    with pytest.raises(InvalidInputError, match=r"^conversation id must be a non-empty string"):
        check_id(None)
    assert check_id("x" * 64) == "x" * 64


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_check_json_object_refuses_non_finite_numbers_saying_so(bad: float) -> None:
    with pytest.raises(
        InvalidInputError,
        match=r"^metadata\.score\[1\]\.x is -?(nan|inf), which JSON cannot hold; NaN and "
        r"Infinity are refused on every backend \(store None or a string instead\)\.$",
    ):
        check_json_object("metadata", {"score": [1, {"x": bad}]})


def test_check_json_object_refuses_values_json_cannot_hold_saying_so() -> None:
    with pytest.raises(
        InvalidInputError,
        match=r"^metadata\.when is a object, which JSON cannot hold; use strings, numbers, "
        r"booleans, None, lists and dicts \(base64-encode bytes, list a set\)\.$",
    ):
        check_json_object("metadata", {"when": object()})


def test_check_choice_accepts_a_choice_and_names_them_in_order_when_refusing() -> None:
    from contextstore.core.validate import check_choice

    assert check_choice("mode", "b", ("b", "a")) == "b"
    assert check_choice("mode", "a", frozenset({"a", "b"})) == "a"
    with pytest.raises(InvalidInputError) as raised:
        check_choice("mode", "z", ("b", "a"))
    assert str(raised.value) == "mode 'z' is not valid; use one of b, a."
    with pytest.raises(InvalidInputError) as raised:
        check_choice("mode", 3, frozenset({"delta", "alpha", "charlie", "bravo"}))
    assert str(raised.value) == "mode 3 is not valid; use one of alpha, bravo, charlie, delta."


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (5, "a message must be a dict with 'role' and 'content', got int."),
        (["user", "hi"], "a message must be a dict with 'role' and 'content', got list."),
        ({"role": "user"}, "a message needs both 'role' and 'content'."),
        ({"content": "hi"}, "a message needs both 'role' and 'content'."),
    ],
)
def test_a_message_that_is_not_a_role_and_content_dict_is_refused_saying_so(
    message: Any, text: str
) -> None:
    from contextstore.core.errors import InvalidMessageError

    with pytest.raises(InvalidMessageError) as raised:
        normalize_message_dict(message)
    assert str(raised.value) == text


RESULT_LIST_ERRORS: list[tuple[list[Any], str]] = [
    (
        [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "x", "name": "n", "input": {}}],
        "content[0].content[1] has type 'tool_use'; tool results hold text, image, document "
        "or search_result blocks.",
    ),
    (
        [{"type": ["text"]}],
        "content[0].content[0] has type ['text']; tool results hold text, image, document or "
        "search_result blocks.",
    ),
    (
        [{"type": "text"}],
        "content[0].content[0] (text) has no text; set it to a string.",
    ),
    (
        [{"type": "text", "text": "a"}, {"type": "image", "source": 5}],
        "content[0].content[1] (image): source must be an object with a 'type' of 'base64', "
        "'url' or 'file', got 5.",
    ),
    (
        [{"type": "document", "source": "x"}],
        "content[0].content[0] (document): source must be an object with a 'type' of 'base64', "
        "'url', 'text', 'file' or 'content', got 'x'.",
    ),
]


@pytest.mark.parametrize(("content", "message"), RESULT_LIST_ERRORS)
def test_a_tool_result_list_is_checked_block_by_block(content: list[Any], message: str) -> None:
    from contextstore.core.content import validate_block
    from contextstore.core.errors import InvalidMessageError

    block = {"type": "tool_result", "tool_use_id": "t", "content": content}
    with pytest.raises(InvalidMessageError) as raised:
        validate_block(block, "content[0]")
    assert str(raised.value) == message


def test_a_tool_result_list_of_every_allowed_kind_is_accepted_as_a_copy() -> None:
    from contextstore.core.content import validate_block

    content = [
        {"type": "text", "text": "ok"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
        {"type": "search_result", "source": "s", "title": "t", "content": []},
    ]
    block = {"type": "tool_result", "tool_use_id": "t", "content": content}
    copied = validate_block(block, "content[0]")
    assert copied == block and copied["content"] is not content


@pytest.mark.parametrize(
    ("block", "key"),
    [
        ({"type": "tool_use", "id": "x" * 201, "name": "n", "input": {}}, "id"),
        ({"type": "tool_use", "id": "x", "name": "n" * 201, "input": {}}, "name"),
        ({"type": "tool_use", "id": "x\x00", "name": "n", "input": {}}, "id"),
        ({"type": "tool_result", "tool_use_id": "t" * 201, "content": "x"}, "tool_use_id"),
        ({"type": "tool_result", "tool_use_id": "t\x00", "content": "x"}, "tool_use_id"),
    ],
)
def test_call_ids_and_names_are_limited_to_200_characters_without_nul(
    block: dict[str, Any], key: str
) -> None:
    from contextstore.core.content import validate_block
    from contextstore.core.errors import InvalidMessageError

    with pytest.raises(InvalidMessageError) as raised:
        validate_block(block, "content[2]")
    assert str(raised.value) == (
        f"content[2].{key} must be at most 200 characters without NUL characters."
    )
    at_limit = {k: (v[:200] if isinstance(v, str) else v) for k, v in block.items()}
    at_limit[key] = "x" * 200
    assert validate_block(at_limit, "content[2]") == at_limit


def test_an_unknown_block_type_is_refused_naming_every_type() -> None:
    from contextstore.core.content import validate_block
    from contextstore.core.errors import InvalidMessageError

    with pytest.raises(InvalidMessageError) as raised:
        validate_block({"type": "nope"}, "content[1]")
    assert str(raised.value) == (
        "content[1] has unknown type 'nope'; use one of bash_code_execution_tool_result, "
        "code_execution_tool_result, container_upload, document, image, redacted_thinking, "
        "server_tool_use, text, text_editor_code_execution_tool_result, thinking, "
        "tool_result, tool_search_tool_result, tool_use, web_fetch_tool_result, "
        "web_search_tool_result."
    )


def test_a_message_s_size_counts_its_blocks_and_its_fields() -> None:
    bare = normalize_message("user", "hi")
    with_fields = normalize_message("user", "hi", {"id": "m-1"})
    assert bare.json_size() == len('[{"text":"hi","type":"text"}]') + len("{}")
    assert with_fields.json_size() == bare.json_size() - len("{}") + len('{"id":"m-1"}')


def test_check_json_object_names_where_a_nul_or_a_lone_surrogate_sits() -> None:
    with pytest.raises(InvalidInputError, match=r"^metadata\.notes\[0\] contains a NUL"):
        check_json_object("metadata", {"notes": ["a\x00b"]})
    with pytest.raises(InvalidInputError, match=r"^metadata\.x is not valid Unicode text"):
        check_json_object("metadata", {"x": "\ud800"})


def _result(*items: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": "t1", "content": list(items)}]


def test_a_result_s_text_items_may_hold_nul_its_other_items_are_checked() -> None:
    kept = normalize_message("user", _result({"type": "text", "text": "a\x00b"}))
    assert kept.blocks[0]["content"][0]["text"] == "a\x00b"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    with pytest.raises(InvalidInputError, match=r"content\[1\]\.source\.width is nan"):
        normalize_message(
            "user",
            _result(
                {"type": "text", "text": "a"},
                {**image, "source": {**image["source"], "width": math.nan}},
            ),
        )
    with pytest.raises(InvalidInputError, match=r"^content\[0\]\.call_id contains a NUL"):
        normalize_message("user", [{"type": "text", "text": "x", "call_id": "a\x00"}])


def test_a_block_key_holding_a_nul_is_refused_by_name() -> None:
    with pytest.raises(InvalidInputError, match=r"key contains a NUL"):
        normalize_message("user", [{"type": "text", "text": "x", "bad\x00key": 1}])


_CALL_WITH_LIST_IDS = [
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": ["a"], "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": ["a"], "content": "r"}]},
]


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("ensure_tool_results_follow_tool_use", lambda: ensure_tool_results_follow_tool_use(None)),
        (
            "ensure_tool_results_follow_tool_use",
            lambda: ensure_tool_results_follow_tool_use(_CALL_WITH_LIST_IDS),
        ),
        ("truncated_messages", lambda: truncated_messages(None, None)),
        ("next_truncation_range", lambda: next_truncation_range(None, None, "half")),
        ("optimize_file_reads", lambda: optimize_file_reads(None)),
        ("harden_history", lambda: harden_history(None)),
    ],
)
def test_the_public_list_functions_refuse_malformed_input_by_name(
    name: str, call: Callable[[], object]
) -> None:
    with pytest.raises(InvalidInputError, match=rf"^{name} was given input it cannot read"):
        call()


_FUNCTIONS: dict[str, Callable[[Any], object]] = {
    "ensure_tool_results_follow_tool_use": ensure_tool_results_follow_tool_use,
    "truncated_messages": lambda messages: truncated_messages(messages, None),
    "next_truncation_range": lambda messages: next_truncation_range(messages, None, "half"),
    "optimize_file_reads": optimize_file_reads,
    "harden_history": harden_history,
}


@pytest.mark.parametrize("name", list(_FUNCTIONS))
@pytest.mark.parametrize(
    ("given", "said"),
    [("x", "a str where the list goes"), ({"role": "user"}, "a dict where the list goes")],
)
def test_the_public_list_functions_refuse_a_string_or_a_dict_for_the_list(
    name: str, given: object, said: str
) -> None:
    """A string came back as a list of its characters (``['x']``) from
    ``ensure_tool_results_follow_tool_use`` and ``truncated_messages``, and
    ``next_truncation_range("abc", None, "half")`` answered ``(2, 1)``."""
    with pytest.raises(InvalidInputError) as refused:
        _FUNCTIONS[name](given)
    assert str(refused.value).startswith(f"{name} was given input it cannot read ({said}); ")


@pytest.mark.parametrize(
    "name", [n for n in _FUNCTIONS if n not in ("harden_history", "next_truncation_range")]
)
def test_the_public_message_functions_refuse_an_item_that_is_no_message(name: str) -> None:
    """``[1]`` came back as ``[1]``."""
    with pytest.raises(InvalidInputError, match=rf"^{name} .*\(item 0 is a int, not a dict\)"):
        _FUNCTIONS[name]([1])


def _nested(depth: int) -> Any:
    """Lists and dicts ``depth`` levels deep around a string."""
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


_DEEP = _nested(10_000)
_DEEPLY_NESTED_INPUT: dict[str, Any] = {
    "optimize_file_reads": [
        {"role": "user", "content": "<task>t</task>"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": _DEEP}],
        },
    ],
    "harden_history": [
        {"role": "user", "parts": [{"text": "x"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": _DEEP}}}]},
    ],
}


@pytest.mark.parametrize("name", list(_DEEPLY_NESTED_INPUT))
def test_the_public_list_functions_refuse_a_value_nested_too_deep_to_copy(name: str) -> None:
    """A tool input 10,000 levels deep raised RecursionError from ``optimize_file_reads`` (its
    copy of the view) and ``harden_history`` (the others pass such a value through)."""
    with pytest.raises(InvalidInputError) as refused:
        _FUNCTIONS[name](_DEEPLY_NESTED_INPUT[name])
    assert str(refused.value).startswith(
        f"{name} was given input it cannot read (a value nests lists and dicts deeper than "
        "Python can copy; the store accepts 100 levels); "
    )


def test_json_as_stored_reads_negative_zero_as_zero_as_jsonb_keeps_it() -> None:
    value = json_as_stored('{"a": -0.0, "b": [-0.0, 1.5, -2.0, 1e+20], "c": 0, "d": "-0.0"}')
    assert value == {"a": 0.0, "b": [0.0, 1.5, -2.0, 1e20], "c": 0, "d": "-0.0"}
    assert math.copysign(1.0, value["a"]) == 1.0 and math.copysign(1.0, value["b"][0]) == 1.0
    assert isinstance(value["c"], int)
