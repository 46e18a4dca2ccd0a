"""Values <-> column values: JSON columns, text columns, and a content block's row.

A block's row keeps each value once. Its columns hold what audits query (``type``,
``text``, ``tool_use_id``, ``tool_name``); ``data`` holds only what no column holds (a tool
call's ``input``, an image's source, ``cache_control``...), so a 2 KB tool result is stored
as 2 KB of ``text`` and a ``{}``. Rows written before revision 0006 kept the whole block in
``data``; they decode the same way (what ``data`` holds wins).

Text columns cannot hold NUL on PostgreSQL, and ``jsonb`` cannot hold ``\\u0000`` either: a
text with NUL is stored in its column with NUL as U+FFFD, and exactly in the JSON as the list
of its NUL-separated pieces under :data:`EXACT_KEY`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from contextstore.core.errors import CorruptRowError
from contextstore.core.overlays import result_items_text

NUL = "\x00"
EXACT_KEY = "_exact"
"""JSON key of a text containing NUL, as the list of its NUL-separated pieces."""
LEGACY_EXACT_TEXT_KEY = "_exact_text"
"""Where rows written before revision 0006 kept an update's exact text (a plain string)."""

_EMPTY_OBJECT = ("{}", "{}")
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner behind ``json.loads``, called directly (see :func:`loads`); typeshed does
not declare the attribute."""


def loads(text: str) -> Any:
    """``json.loads(text)``, without its Python layers for text that starts and ends with
    its value (all the store writes): a render decodes a value per tool call, and those
    layers cost more than the scan of a short value. Anything else (leading or trailing
    whitespace, a damaged value) goes through ``json.loads``, which raises its error."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def encode_json(value: Any) -> str:
    """``value`` as compact JSON text, as JSON columns store it.

    A float Python writes with an exponent (``1e+20``, ``1e-07``) is written out in digits
    with a decimal point (``100000000000000000000.0``): PostgreSQL's ``jsonb`` keeps a
    number's digits and scale, not its form, and would give ``1e+20`` back as the integer
    ``100000000000000000000`` (a 301-digit one for ``1e300``, which the store refuses).
    """
    if not value and isinstance(value, dict):
        return "{}"
    text = _encoder.encode(value)
    if _EXPONENT_NUMBER.search(text) is None:
        return text
    return _with_floats_in_digits(value)


def encode_rows(rows: list[dict[str, Any]]) -> str:
    """Rows of a table as one JSON parameter (a list of objects, for
    ``json_to_recordset``), compact.

    Their values are text, integers, booleans or None (JSON columns already encoded by
    :func:`encode_json`): there is no float to write out in digits, so the text is not
    searched for one (on a part's 335 KB of rows the search took 1.4 ms, the encoding
    1.8 ms)."""
    return _encoder.encode(rows)


_EXPONENT_NUMBER = re.compile(r"[:,\[]-?\d+(?:\.\d+)?e[+-]\d+[,}\]]")
"""A number written with an exponent, as a value (a string holding such text also matches:
the slow path then finds no float to change)."""


def _with_floats_in_digits(value: Any) -> str:
    marker = f"\x00{uuid.uuid4().hex}:"
    digits: list[str] = []

    def marked(item: Any) -> Any:
        if item.__class__ is float and "e" in repr(item):
            written = format(Decimal(repr(item)), "f")
            digits.append(written if "." in written else written + ".0")
            return f"{marker}{len(digits) - 1}"
        if isinstance(item, list | tuple):
            return [marked(member) for member in item]
        if isinstance(item, dict):
            return {key: marked(member) for key, member in item.items()}
        return item

    text = _encoder.encode(marked(value))
    if not digits:
        return text
    token = re.compile('"' + re.escape(_encoder.encode(marker)[1:-1]) + r'(\d+)"')
    return token.sub(lambda found: digits[int(found.group(1))], text)


def corrupt(what: str) -> CorruptRowError:
    """The error for a stored value that does not decode."""
    return CorruptRowError(
        f"{what} holds a value that is not valid JSON; the row is damaged. Run "
        "'contextstore check' and restore the database from a backup."
    )


def decode_json(value: Any, what: str) -> Any:
    """Decode a JSON column read as text; a damaged value is a :class:`CorruptRowError`.

    PostgreSQL's driver hands ``jsonb`` back already decoded; SQLite gives text.
    """
    if value.__class__ is not str:
        return value
    if value in _EMPTY_OBJECT:
        return {}
    try:
        return loads(value)
    except ValueError as exc:
        raise corrupt(what) from exc


def decode_object(value: Any, what: str) -> dict[str, Any]:
    """A JSON column that must hold an object."""
    decoded = decode_json(value, what)
    if not isinstance(decoded, dict):
        raise CorruptRowError(f"{what} does not hold a JSON object; the row is damaged.")
    return decoded


def column_text(text: str | None) -> str | None:
    """``text`` as a text column can hold it: NUL characters become U+FFFD."""
    if text is None or NUL not in text:
        return text
    return text.replace(NUL, "\ufffd")


def exact_pieces(text: str) -> list[str]:
    """A text with NUL as JSON can keep it everywhere (see :data:`EXACT_KEY`)."""
    return text.split(NUL)


def exact_text(stored: dict[str, Any], fallback: str | None) -> str | None:
    """The exact text kept in ``stored`` (popping it), else ``fallback`` (the column)."""
    pieces = stored.pop(EXACT_KEY, None)
    if isinstance(pieces, list) and all(isinstance(p, str) for p in pieces):
        return NUL.join(pieces)
    legacy = stored.pop(LEGACY_EXACT_TEXT_KEY, None)
    if isinstance(legacy, str):
        return legacy
    return fallback


BlockColumns = tuple[str, str | None, str | None, str | None, str]
"""``(type, text, tool_use_id, tool_name, data)`` of a ``blocks`` row."""


def encode_block(block: dict[str, Any]) -> BlockColumns:
    """A validated content block as its row's columns, each value stored once."""
    kind = block["type"]
    rest = dict(block)
    del rest["type"]
    text: str | None = None
    if kind == "text":
        text = rest.pop("text")
    elif kind == "thinking":
        if isinstance(rest.get("thinking"), str):
            text = rest.pop("thinking")
    elif kind == "tool_result":
        text = _result_text(rest)
    tool_use_id: str | None = None
    tool_name: str | None = None
    if kind == "tool_use":
        if isinstance(rest.get("id"), str):
            tool_use_id = rest.pop("id")
        if isinstance(rest.get("name"), str):
            tool_name = rest.pop("name")
    elif kind == "tool_result" and isinstance(rest.get("tool_use_id"), str):
        tool_use_id = rest.pop("tool_use_id")
    if text is not None and NUL in text:
        if kind == "tool_result" and "content" in rest:
            _keep_inner_exact(rest)
        else:
            rest[EXACT_KEY] = exact_pieces(text)
    return kind, column_text(text), tool_use_id, tool_name, encode_json(rest)


def _result_text(rest: dict[str, Any]) -> str | None:
    """A tool result's text for its column; moved out of ``rest`` when it can be put back.

    String content moves to the column. A list whose only item is a text block keeps the
    item without its ``text`` (the column fills it in again). Other lists stay whole in
    ``data`` and the column holds their texts joined, for search.
    """
    content = rest.get("content")
    if isinstance(content, str):
        return str(rest.pop("content"))
    if not isinstance(content, list):
        return None
    if (
        len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("type") == "text"
        and isinstance(content[0].get("text"), str)
    ):
        inner = dict(content[0])
        text = str(inner.pop("text"))
        if NUL not in text:
            rest["content"] = [inner]
        return text
    return result_items_text(content)


def _keep_inner_exact(rest: dict[str, Any]) -> None:
    """Texts with NUL inside a result's list take the exact form (see :data:`EXACT_KEY`)."""
    content = rest.get("content")
    if not isinstance(content, list):
        return
    encoded: list[Any] = []
    for item in content:
        if isinstance(item, dict) and isinstance(item.get("text"), str) and NUL in item["text"]:
            item = dict(item)
            item[EXACT_KEY] = exact_pieces(item.pop("text"))
        encoded.append(item)
    rest["content"] = encoded


def decode_block(
    kind: str,
    text: str | None,
    tool_use_id: str | None,
    tool_name: str | None,
    data: Any,
    message_idx: int,
    block_idx: int,
) -> dict[str, Any]:
    """A ``blocks`` row as the content block that was appended."""
    if data.__class__ is str and data in _EMPTY_OBJECT:
        stored: dict[str, Any] = {}
    else:
        if data.__class__ is str:
            # The label is formatted only for a damaged row, never per block read.
            try:
                decoded = loads(data)
            except ValueError as exc:
                raise corrupt(f"block {message_idx}.{block_idx}") from exc
        else:
            decoded = data
        if not isinstance(decoded, dict):
            raise CorruptRowError(
                f"block {message_idx}.{block_idx} does not hold a content block object."
            )
        stored = dict(decoded) if data.__class__ is not str else decoded
    stored.pop("type", None)
    if kind == "text":
        exact = exact_text(stored, text)
        if "text" in stored:
            return {"type": "text", **stored}
        return {"type": "text", "text": exact or "", **stored}
    block: dict[str, Any] = {"type": kind}
    if kind == "tool_use":
        if tool_use_id is not None and "id" not in stored:
            block["id"] = tool_use_id
        if tool_name is not None and "name" not in stored:
            block["name"] = tool_name
    elif kind == "tool_result":
        if tool_use_id is not None and "tool_use_id" not in stored:
            block["tool_use_id"] = tool_use_id
        exact = exact_text(stored, text)
        content = stored.get("content")
        if "content" not in stored:
            if exact is not None:
                block["content"] = exact
        elif isinstance(content, list):
            stored["content"] = _filled_items(content, text)
    elif kind == "thinking" and "thinking" not in stored:
        exact = exact_text(stored, text)
        if exact is not None:
            block["thinking"] = exact
    block.update(stored)
    return block


def _filled_items(content: list[Any], column: str | None) -> list[Any]:
    """A result's list with the texts :func:`encode_block` moved out put back."""
    filled: list[Any] = []
    for position, item in enumerate(content):
        if isinstance(item, dict) and item.get("type") == "text" and "text" not in item:
            item = dict(item)
            exact = exact_text(item, column if position == 0 else None)
            item["text"] = exact or ""
        filled.append(item)
    return filled
