"""A block's row decodes to the block appended: rows of every layout (revision 0006's, the
older whole-block ``data``, PostgreSQL's decoded ``jsonb``), texts with NUL, and damaged
rows, which are a :class:`CorruptRowError` naming the row, never a ``TypeError``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore import CorruptRowError
from contextstore.storage import history
from contextstore.storage.codec import (
    column_text,
    decode_block,
    decode_json,
    decode_object,
    encode_block,
    encode_json,
    encode_rows,
    loads,
)


def _round_trip(block: dict[str, Any]) -> dict[str, Any]:
    kind, column, tool_use_id, tool_name, data = encode_block(block)
    # PostgreSQL's text and jsonb cannot hold NUL: neither the column nor the JSON may
    assert column is None or "\x00" not in column
    assert "\x00" not in data and "\\u0000" not in data
    decoded = decode_block(kind, column, tool_use_id, tool_name, data, 1, 0)
    assert decode_block(kind, column, tool_use_id, tool_name, json.loads(data), 1, 0) == decoded
    return decoded


def test_json_columns_are_compact_utf8_and_refuse_nan() -> None:
    assert encode_json({}) == "{}"
    assert encode_json({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'
    assert encode_json([]) == "[]"
    with pytest.raises(ValueError):
        encode_json({"x": math.nan})


_ROW_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(),
    st.sampled_from(["1e+20", ":1e-07,", "[1e300]", '{"a":1e+20}']),  # exponent-like text
)


@given(st.lists(st.dictionaries(st.text(max_size=8), _ROW_VALUES, max_size=6), max_size=5))
def test_rows_encode_as_their_json_columns_would(rows: list[dict[str, Any]]) -> None:
    """The rows sent as one JSON parameter hold text, integers, booleans and None: the
    text encode_json gives them, without its search for floats, and their values back."""
    assert encode_rows(rows) == encode_json(rows)
    assert json.loads(encode_rows(rows)) == rows


def test_json_columns_decode_text_and_pass_decoded_values_through() -> None:
    assert decode_json("{}", "x") == {}
    assert decode_json('{"a":1}', "x") == {"a": 1}
    assert decode_json("[1,2]", "x") == [1, 2]
    assert decode_json("null", "x") is None
    decoded = {"a": 1}
    assert decode_json(decoded, "x") is decoded
    assert decode_object('{"a":1}', "x") == {"a": 1}


def test_a_damaged_json_column_names_the_row_and_what_to_do() -> None:
    with pytest.raises(CorruptRowError) as raised:
        decode_json("{not json", "request 7 details")
    assert str(raised.value) == (
        "request 7 details holds a value that is not valid JSON; the row is damaged. Run "
        "'contextstore check' and restore the database from a backup."
    )
    with pytest.raises(CorruptRowError) as raised:
        decode_object("[1]", "options of request 3")
    assert str(raised.value) == (
        "options of request 3 does not hold a JSON object; the row is damaged."
    )


@pytest.mark.parametrize("data", ["[1]", '"text"', "3", [1, 2]])
def test_a_block_row_whose_data_is_not_an_object_is_damaged(data: Any) -> None:
    with pytest.raises(CorruptRowError) as raised:
        decode_block("text", "hi", None, None, data, 4, 2)
    assert str(raised.value) == "block 4.2 does not hold a content block object."


def test_a_block_row_whose_data_is_not_json_is_damaged() -> None:
    with pytest.raises(CorruptRowError, match=r"^block 4\.2 holds a value that is not valid"):
        decode_block("text", "hi", None, None, "{oops", 4, 2)


def test_a_text_column_holds_nul_as_the_replacement_character() -> None:
    assert column_text(None) is None
    assert column_text("plain") == "plain"
    assert column_text("a\x00b\x00") == "a\ufffdb\ufffd"


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": ""},
        {"type": "text", "text": "a\x00b", "cache_control": {"type": "ephemeral"}},
        {"type": "thinking", "thinking": "\x00", "signature": "s"},
        {"type": "tool_use", "id": "t1", "name": "read", "input": {}},
        {"type": "tool_result", "tool_use_id": "t1"},
        {"type": "tool_result", "tool_use_id": "t1", "content": ""},
        {"type": "tool_result", "tool_use_id": "t1", "content": "a\x00b", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t1", "content": []},
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [{"type": "text", "text": "one\x00"}],
        },
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [
                {"type": "text", "text": "a\x00"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png"}},
                {"type": "text", "text": "b"},
            ],
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "redacted_thinking", "data": "opaque"},
    ],
)
def test_blocks_of_every_shape_decode_to_themselves(block: dict[str, Any]) -> None:
    assert _round_trip(block) == block


def test_a_result_list_keeps_its_texts_for_search_in_the_column() -> None:
    block = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [
            {"type": "text", "text": "first"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png"}},
            {"type": "text", "text": "second"},
        ],
    }
    kind, column, tool_use_id, _, data = encode_block(block)
    assert (kind, column, tool_use_id) == ("tool_result", "first\nsecond", "t1")
    assert json.loads(data)["content"] == block["content"]
    single = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "x"}],
    }
    _, column, _, _, data = encode_block(single)
    assert column == "x" and json.loads(data) == {"content": [{"type": "text"}]}


def test_the_columns_hold_what_audits_query() -> None:
    assert encode_block({"type": "tool_use", "id": "t9", "name": "grep", "input": {"q": 1}}) == (
        "tool_use",
        None,
        "t9",
        "grep",
        '{"input":{"q":1}}',
    )
    assert encode_block({"type": "thinking", "thinking": "hm", "signature": "s"}) == (
        "thinking",
        "hm",
        None,
        None,
        '{"signature":"s"}',
    )


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": "a\x00b"},
        {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
        {"type": "tool_result", "tool_use_id": "t1", "content": "out"},
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "o"}]},
        {"type": "thinking", "thinking": "hm", "signature": "s"},
    ],
)
def test_a_row_written_before_revision_0006_decodes_the_same(block: dict[str, Any]) -> None:
    """Such a row kept the whole block in ``data`` (what ``data`` holds wins)."""
    kind, column, tool_use_id, tool_name, _ = encode_block(block)
    legacy = json.dumps(block)
    assert decode_block(kind, column, tool_use_id, tool_name, legacy, 0, 0) == block
    assert decode_block(kind, column, None, None, json.loads(legacy), 0, 0) == block


def test_an_exact_text_written_before_revision_0006_is_read_back() -> None:
    data = json.dumps({"_exact_text": "a\x00b"})
    assert decode_block("text", "a\ufffdb", None, None, data, 0, 0) == {
        "type": "text",
        "text": "a\x00b",
    }
    result = decode_block("tool_result", "a\ufffdb", "t1", None, data, 0, 0)
    assert result == {"type": "tool_result", "tool_use_id": "t1", "content": "a\x00b"}
    thought = decode_block("thinking", "a\ufffdb", None, None, data, 0, 0)
    assert thought == {"type": "thinking", "thinking": "a\x00b"}


def test_a_malformed_exact_form_falls_back_to_the_column() -> None:
    for damaged in ({"_exact": "not a list"}, {"_exact": ["a", 1]}, {"_exact_text": 5}):
        block = decode_block("text", "a\ufffdb", None, None, json.dumps(damaged), 0, 0)
        assert block["text"] == "a\ufffdb"
        assert "_exact" not in block
    assert decode_block("text", None, None, None, "{}", 0, 0) == {"type": "text", "text": ""}


def _outcome(decode: Any, text: str) -> tuple[str, Any]:
    try:
        return ("value", decode(text))
    except ValueError as exc:
        return (type(exc).__name__, str(exc))


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    _JSON_VALUES,
    st.sampled_from(["", " ", "\n", "\ufeff"]),
    st.sampled_from(["", " ", "x", "}", "1"]),
    st.booleans(),
)
def test_loads_decodes_and_refuses_exactly_as_json_loads(
    value: Any, before: str, after: str, compact: bool
) -> None:
    """The scanner called directly gives json.loads's value or json.loads's error, whatever
    surrounds the value."""
    text = before + (encode_json(value) if compact else json.dumps(value)) + after
    assert _outcome(loads, text) == _outcome(json.loads, text)


@pytest.mark.parametrize("text", ["", "{", '{"a":', "[1,]", "nul", "{} {}", "\ufeff{}", "NaN"])
def test_loads_of_a_damaged_value_raises_json_loads_error(text: str) -> None:
    assert _outcome(loads, text) == _outcome(json.loads, text)


def _without(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v != "-"}


_EXTRA = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}, {"is_error": True}])
_ROW_BLOCKS = st.one_of(
    st.builds(
        lambda extra, **fields: {"type": "tool_use", **_without(fields)} | extra,
        _EXTRA,
        id=st.sampled_from(["toolu_1", "-", ""]),
        name=st.sampled_from(["read_file", "-"]),
        input=_JSON_VALUES | st.just("-"),
    ),
    st.builds(
        lambda extra, **fields: {"type": "tool_result", **_without(fields)} | extra,
        _EXTRA,
        tool_use_id=st.sampled_from(["toolu_1", "-", ""]),
        content=st.sampled_from(["out", "", "a\x00b", "-", []])
        | st.lists(st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5))),
    ),
    st.builds(
        lambda extra, text: {"type": "text", "text": text} | extra,
        _EXTRA,
        st.sampled_from(["hi", "", "a\x00b"]),
    ),
    st.sampled_from(
        [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ]
    ),
)


def _history_row(data: Any, kind: str = "tool_use", ids: tuple[Any, Any] = ("t", "n")) -> Any:
    return (0, 1, "assistant", False, "{}", 0, kind, None, ids[0], ids[1], data)


@given(_ROW_BLOCKS, st.booleans())
def test_a_block_row_decodes_on_the_render_path_as_decode_block_does(
    block: dict[str, Any], decoded_jsonb: bool
) -> None:
    """The history decoder's shortcuts (a text, a result's string, a call whose data holds
    only its input) give the block decode_block gives, from text (SQLite) or decoded jsonb
    (PostgreSQL), keys in the same order."""
    kind, column, tool_use_id, tool_name, data = encode_block(block)
    stored: Any = json.loads(data) if decoded_jsonb else data
    expected = decode_block(kind, column, tool_use_id, tool_name, stored, 0, 0)
    row = (0, 1, "assistant", False, "{}", 0, kind, column, tool_use_id, tool_name, stored)
    messages, _, _ = history._decoded("c", [row], None)
    assert messages[0]["content"] == [expected]
    assert list(messages[0]["content"][0]) == list(expected)


@pytest.mark.parametrize("data", ['{"input":', '{"input":1}x', '{"input":{}', "{"])
def test_a_damaged_tool_call_row_is_damaged_on_the_render_path(data: str) -> None:
    with pytest.raises(CorruptRowError, match=r"block 0\.0"):
        history._decoded("c", [_history_row(data)], None)


NUMBERS = {"big": 1e20, "huge": -1e300, "tiny": 1e-7, "least": 5e-324, "plain": 2.0, "n": 10**20}


def _kinds(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _kinds(member) for key, member in value.items()}
    if isinstance(value, list):
        return [_kinds(member) for member in value]
    return (type(value).__name__, value)


def test_floats_with_an_exponent_come_back_as_the_same_floats(store: Any) -> None:
    # PostgreSQL's jsonb keeps a number's digits, not its form: 1e+20 came back an integer,
    # and 1e300 as one of 301 digits, which the store then refused to write back.
    conv = store.create_conversation(metadata={"scale": NUMBERS})
    call = {"type": "tool_use", "id": "t1", "name": "calc", "input": {"args": NUMBERS}}
    store.append(conv.id, "user", "go")
    store.append(conv.id, "assistant", [call])
    stored = store.messages(conv.id)[1]["content"][0]["input"]["args"]
    assert _kinds(stored) == _kinds(NUMBERS)
    metadata = store.get_conversation(conv.id).metadata
    assert _kinds(metadata["scale"]) == _kinds(NUMBERS)
    store.set_conversation_metadata(conv.id, metadata)
    store.append(conv.id, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}])
    store.append(conv.id, "assistant", store.messages(conv.id)[1]["content"])


@given(st.recursive(st.floats(allow_nan=False, allow_infinity=False), st.lists, max_leaves=8))
def test_encoded_floats_decode_to_themselves(value: Any) -> None:
    encoded = encode_json({"v": value})
    assert _kinds(json.loads(encoded)) == _kinds({"v": value})
    assert "e" not in encoded.replace("\\u", "")
