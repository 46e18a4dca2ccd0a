"""Checks on caller values, done before anything is written.

Every public store method passes its arguments through these functions, so a malformed
value becomes an :class:`InvalidInputError` that says what was expected, never a
``TypeError``, an ``OverflowError`` or a database driver error after a partial write.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from functools import wraps
from typing import Any, Final, ParamSpec, TypeVar, cast

from contextstore.core.errors import ContentTooLargeError, InvalidInputError

MAX_MESSAGE_BYTES: Final = 32 * 1024 * 1024
"""Largest accepted message, in UTF-8 bytes of its JSON encoding (images included); a
context update's text has the same limit (the store's ``max_message_bytes``)."""
MAX_TEXT_BYTES: Final = 1024 * 1024
"""Largest free text beside messages, in UTF-8 bytes: a checkpoint note, a range's reason
and summary, a system prompt, a search text."""
MAX_JSON_BYTES: Final = 1024 * 1024
"""Largest JSON object beside messages, in UTF-8 bytes of its JSON: a conversation's or an
update's metadata, a request's tool definitions."""
MAX_JSON_DEPTH: Final = 100
"""Deepest nesting of arrays and objects in any JSON value: a message (its content, tool
inputs and extra fields), metadata, tool definitions, an imported file."""
MAX_PARSED_JSON_DEPTH: Final = 500
"""Deepest nesting of a JSON text the servers parse at all. Python's parser gives up
(``RecursionError``) near 1,000 levels on 3.10 and 3.11, near 1,500 on 3.12 and 10,000 on
3.13: a request nested past it was a parse error on one Python and an invalid value on
another. A text deeper than this is refused as unreadable before it is parsed, alike on
every Python; one up to it is parsed, and its values are refused past
:data:`MAX_JSON_DEPTH`."""
MAX_JSON_INT_DIGITS: Final = 300
"""Integers in JSON values have fewer digits than this (floats reach about 1e308)."""
NUL: Final = "\x00"
"""PostgreSQL text and ``jsonb`` cannot hold it: refused on every backend, except in
message and rewrite texts, which the storage codec keeps exactly."""
_INT_BOUND: Final = 10**MAX_JSON_INT_DIGITS
MAX_ID_LENGTH = 64
MAX_LABEL_LENGTH = 200
MAX_TITLE_LENGTH = 1_000
MAX_NAME_LENGTH = 200
TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""A tool name every provider accepts (Anthropic's and OpenAI's rule; Gemini's admits
more). OpenAI holds a message's ``tool_calls`` to it too ("string does not match pattern
'^[a-zA-Z0-9_-]+$'"), not only the tool definitions."""

MAX_SEARCH_LENGTH: Final = 4_096
"""Longest search text, in characters: SQLite refuses a ``LIKE`` pattern over 50,000 bytes,
and this one, escaped and in UTF-8, stays under it on every backend alike."""
"""Model ids, tool ids and names, update sources, failure reasons (``String(200)`` columns)."""
MAX_KEEP_LENGTH = 16
"""A range's keep strategy (``String(16)`` column)."""
MAX_HASH_LENGTH = 64
"""Git hashes and SHA-256 digests (``String(64)`` columns)."""
MAX_INT32 = 2**31 - 1
"""Largest value of an INTEGER column (indices, token counts) on every backend."""
MAX_TS = 2**53
"""Largest accepted timestamp in milliseconds (far beyond any real clock)."""


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60


def shown(value: Any, limit: int = 80) -> str:
    """A short ``repr`` of a caller's value for an error message: any depth, any size (a
    value 10,000 deep or an integer of 5,000 digits has no plain ``repr``)."""
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clipped_text(text: str, limit: int) -> str:
    """``text`` for a message: whole up to ``limit`` characters, else its first ``limit``
    and how long it was (a caller's 100,000-character text is not repeated back whole)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""One encoder for every canonical JSON (``json.dumps`` with options builds one per call)."""


def canonical_json(value: Any) -> str:
    """The canonical JSON of ``value``: sorted keys, compact separators, UTF-8 text."""
    return _CANONICAL.encode(value)


def _float_as_stored(text: str) -> float:
    # -0.0 + 0.0 is 0.0; every other float is itself.
    return float(text) + 0.0


def json_as_stored(encoded: str) -> Any:
    """The value of the JSON text ``encoded`` as both backends give it back: ``-0.0`` read as
    ``0.0``, which is how PostgreSQL's ``jsonb`` keeps it. A value built from this and stored
    rebuilds equal to itself (and to its hash) on SQLite and PostgreSQL alike."""
    return json.loads(encoded, parse_float=_float_as_stored)


_CHAR_BYTES: Final = 6
"""The most UTF-8 bytes one character of a string takes in JSON text: a control character
escaped as ``\\u001f`` (any other character takes at most 4)."""
_FLOAT_CHARS: Final = 24
"""The longest JSON of a finite float (its ``repr``): ``-2.2250738585072014e-308``."""
UNBOUNDED: Final = 2**63
"""What :func:`json_size_bound` gives for a value it does not bound."""


def json_size_bound(value: Any) -> int:
    """An upper bound on the UTF-8 bytes of ``value``'s JSON (canonical or compact), at a
    fraction of the cost of encoding it: each string counted at its worst-case escaping,
    each integer from its bit length, each float at the longest ``repr``.

    Only plain ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``, ``bool`` and None
    are bounded; a value holding anything else (a subclass, say) gives :data:`UNBOUNDED`,
    so that its caller measures it exactly. ``value`` must have passed
    :func:`check_json_value` (its nesting is bounded).
    """
    kind = value.__class__
    if kind is dict:
        total = 2
        for key, item in value.items():
            if key.__class__ is not str:
                return UNBOUNDED
            if item.__class__ is str:  # most values: counted here, without a call
                total += _CHAR_BYTES * (len(key) + len(item)) + 6  # 4 quotes, colon, comma
            else:
                total += _CHAR_BYTES * len(key) + 4 + json_size_bound(item)
        return total if total < UNBOUNDED else UNBOUNDED
    if kind is list or kind is tuple:
        total = 2
        for item in value:
            total += json_size_bound(item) + 1
        return total if total < UNBOUNDED else UNBOUNDED
    if kind is str:
        return _CHAR_BYTES * len(value) + 2
    if value is None or kind is bool:
        return 5
    if kind is int:
        # A number of b bits has at most b // 3 + 1 digits (log10(2) < 1/3), and a sign.
        return int(value.bit_length()) // 3 + 2
    if kind is float:
        return _FLOAT_CHARS
    return UNBOUNDED


def payload_sha256(payload: Mapping[str, Any]) -> str:
    """SHA-256 of a payload's canonical JSON."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def payload_sha256_of(fields: Mapping[str, Any], key: str, items: Sequence[bytes]) -> str:
    """:func:`payload_sha256` of ``{**fields, key: [...]}``, given the canonical JSON (UTF-8)
    of each item of the list under ``key``: a payload whose messages were encoded before
    (and kept) is hashed without encoding them again."""
    digest = hashlib.sha256(b"{")
    for position, name in enumerate(sorted({*fields, key})):
        if position:
            digest.update(b",")
        digest.update(canonical_json(name).encode("utf-8") + b":")
        if name == key:
            digest.update(b"[" + b",".join(items) + b"]")
        else:
            digest.update(canonical_json(fields[name]).encode("utf-8"))
    digest.update(b"}")
    return digest.hexdigest()


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times faster than
    :func:`copy.deepcopy`, which the render cache would otherwise spend most of its hit on."""
    if isinstance(value, dict):
        return {
            key: item if item.__class__ in _JSON_SCALARS else json_copy(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [item if item.__class__ in _JSON_SCALARS else json_copy(item) for item in value]
    return value


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int = 0,
    maximum: int = MAX_INT32,
    optional: bool = True,
) -> None:
    """Refuse anything but an int in ``[minimum, maximum]`` (None when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidInputError(
            f"{name} must be an integer from {minimum} to {maximum:,}, got {shown(value)}."
        )


TOKEN_COUNTS = ("tokens_in", "tokens_out", "cache_writes", "cache_reads")
"""A request's token counts; their sum is the total that truncation compares with the window."""


def check_token_total(counts: Mapping[str, int | None]) -> None:
    """Refuse token counts (each already checked) whose sum is over :data:`MAX_INT32`: a
    truncation stores the total in its range row, an INTEGER column on every backend."""
    total = sum(counts.get(name) or 0 for name in TOKEN_COUNTS)
    if total > MAX_INT32:
        raise InvalidInputError(
            f"{' + '.join(TOKEN_COUNTS)} of one request must total at most {MAX_INT32:,}, "
            f"got {total:,}; record the counts the provider reported for this request."
        )


def check_ts(name: str, value: Any, *, optional: bool = True) -> None:
    """Refuse anything but a timestamp in milliseconds (an int from 0 to 2**53)."""
    check_int(name, value, minimum=0, maximum=MAX_TS, optional=optional)


MAX_NUMBER = 1e15
"""The largest amount :func:`check_number` accepts (a cost far past any real request's)."""


def check_number(name: str, value: Any, *, optional: bool = True) -> None:
    """Refuse anything but a number from 0 to :data:`MAX_NUMBER`."""
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        # Compared before any float conversion: math.isfinite(10**400) raises OverflowError.
        or not 0 <= value <= MAX_NUMBER
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise InvalidInputError(
            f"{name} must be a number from 0 to {MAX_NUMBER:.0e}, got {shown(value)}."
        )


def check_text(name: str, value: Any, limit: int, *, optional: bool = True) -> None:
    """Refuse anything but a non-empty string of at most ``limit`` characters without NUL.

    Identifiers, labels and titles are stored in text columns, and PostgreSQL text cannot
    hold a NUL character, so they are refused on every backend alike.
    """
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidInputError(
            f"{name} must be a non-empty string of at most {limit} characters, got {shown(value)}."
        )
    if NUL in value:
        raise InvalidInputError(f"{name} must not contain a NUL character.")
    text_bytes(name, value)


def text_bytes(name: str, value: str) -> int:
    """The size of ``value`` in UTF-8 bytes; a lone surrogate (``"\\ud800"``, which no
    encoding can store) is refused."""
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{name} is not valid Unicode text: {exc.reason}.") from exc


def is_utf8(text: str) -> bool:
    """True unless ``text`` holds a lone surrogate (which no UTF-8 text can)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def readable_text(text: str) -> str:
    """``text`` with the bytes of a name in another encoding (Python reads them from the
    system as ``\\udc80``..``\\udcff``) shown as ``\\xff``, as a shell shows them, and other
    lone surrogates as ``\\ud800``."""
    return "".join(
        f"\\x{ord(c) - 0xDC00:02x}"
        if 0xDC80 <= ord(c) <= 0xDCFF
        else (f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c)
        for c in text
    )


MAX_PATH_BYTES: Final = 4096
"""Longest file path accepted (Linux's PATH_MAX), in bytes of its file-system encoding."""
MAX_PATH_COMPONENT_BYTES: Final = 255
"""Longest single file or directory name accepted (NAME_MAX on common file systems)."""


def check_flags(**flags: Any) -> None:
    """Refuse a flag that is not ``True`` or ``False`` (``"no"`` would read as true).

    Raises:
        InvalidInputError: one of them is anything else.
    """
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidInputError(f"{name} must be True or False, got {shown(value)}.")


def check_path(name: str, value: Any) -> str:
    """A caller's file path as text: a non-empty ``str`` or ``os.PathLike`` the file system
    can name (no NUL, encodable, within :data:`MAX_PATH_BYTES` and, per name,
    :data:`MAX_PATH_COMPONENT_BYTES`).

    Raises:
        InvalidInputError: the value is not such a path.
    """
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        raise InvalidInputError(f"{name} must be a file path, got {shown(value)}.")
    if NUL in text:
        raise InvalidInputError(f"{name} must not contain NUL characters.")
    try:
        encoded = os.fsencode(text)
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{name} cannot be named on this file system (it holds a lone surrogate)."
        ) from None
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if len(encoded) > MAX_PATH_BYTES or longest > MAX_PATH_COMPONENT_BYTES:
        raise InvalidInputError(
            f"{name} is too long for a file path ({len(encoded)} bytes, a name of {longest}; "
            f"at most {MAX_PATH_BYTES} and {MAX_PATH_COMPONENT_BYTES})."
        )
    return text


def check_free_text(
    name: str,
    value: Any,
    limit: int = MAX_TEXT_BYTES,
    *,
    optional: bool = True,
    allow_nul: bool = False,
) -> None:
    """Refuse anything but a string of at most ``limit`` UTF-8 bytes, valid Unicode, and
    without NUL unless ``allow_nul`` (message and rewrite texts, kept exactly by storage).

    Raises:
        ContentTooLargeError: the text is over ``limit`` bytes.
        InvalidInputError: not a string, a lone surrogate, or a NUL character.
    """
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}.")
    if not allow_nul and NUL in value:
        raise InvalidInputError(
            f"{name} must not contain a NUL character (PostgreSQL cannot store one, so no "
            "backend does); remove it or escape it."
        )
    size = text_bytes(name, value)
    if size > limit:
        raise ContentTooLargeError(
            f"{name} is {size:,} bytes (UTF-8), over the limit of {limit:,}; shorten it or "
            "store it outside the conversation."
        )


JsonPath = tuple[Any, str | int] | None
"""Where a value sits inside the one checked: ``(parent path, key or index)``."""


def _where(path: JsonPath) -> str:
    """``path`` as text: the name checked, then ``.key`` and ``[index]`` steps (keys that are
    not plain ASCII quoted, so a message never carries a lone surrogate)."""
    parts: list[str] = []
    while path is not None:
        path, key = path
        if path is None:
            parts.append(str(key))
        elif isinstance(key, int):
            parts.append(f"[{key}]")
        elif key.isprintable() and key.isascii():
            parts.append(f".{key:.40}")
        else:
            parts.append(f"[{shown(key, 40)}]")
    return "".join(reversed(parts))


def check_json_value(
    name: str,
    value: Any,
    *,
    level: int = 0,
    allow_nul: bool = False,
    error: type[InvalidInputError] = InvalidInputError,
) -> None:
    """Refuse a value that is not plain JSON, on every backend alike.

    Walks ``value`` without recursion (a value nested 10,000 deep is refused, never a
    ``RecursionError``): dicts with string keys, lists and tuples at most
    :data:`MAX_JSON_DEPTH` deep (``level`` containers already enclose ``value``), strings
    of valid Unicode without NUL (unless ``allow_nul``), finite floats (no NaN or
    Infinity), integers of fewer than :data:`MAX_JSON_INT_DIGITS` digits, booleans and
    None. Bytes, sets and other objects are refused.

    Raises:
        InvalidInputError (or ``error``): naming where in ``value`` the problem is.
    """
    stack: list[tuple[Any, int, JsonPath]] = [(value, level, (None, name))]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if (not allow_nul and NUL in item) or not item.isascii():
                _check_json_string(item, path, allow_nul, error)
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise error(
                    f"{name} nests arrays and objects more than {MAX_JSON_DEPTH} levels "
                    "deep; flatten the value."
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise error(
                            f"{name} must be a mapping with string keys (nested ones too): "
                            f"{_where(path)} has the key {shown(key, 40)}."
                        )
                    child_path = (path, key)
                    if (not allow_nul and NUL in key) or not key.isascii():
                        _check_json_string(key, child_path, allow_nul, error)
                    stack.append((child, depth + 1, child_path))
            else:
                stack.extend((child, depth + 1, (path, n)) for n, child in enumerate(item))
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -_INT_BOUND < item < _INT_BOUND:
                raise error(
                    f"{_where(path)} is an integer of more than {MAX_JSON_INT_DIGITS} digits "
                    "(MAX_JSON_INT_DIGITS); store it as a string."
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise error(
                    f"{_where(path)} is {item!r}, which JSON cannot hold; NaN and Infinity are "
                    "refused on every backend (store None or a string instead)."
                )
        else:
            raise error(
                f"{_where(path)} is a {type(item).__name__}, which JSON cannot hold; use "
                "strings, numbers, booleans, None, lists and dicts (base64-encode bytes, "
                "list a set)."
            )


def _check_json_string(
    value: str, path: JsonPath, allow_nul: bool, error: type[InvalidInputError]
) -> None:
    if not allow_nul and NUL in value:
        raise error(
            f"{_where(path)} contains a NUL character, which PostgreSQL cannot store (so no "
            "backend does); remove it or escape it."
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{_where(path)} is not valid Unicode text ({exc.reason}, character {exc.start}); "
            "pass well-formed text."
        ) from exc


def check_id(value: Any, what: str = "conversation id") -> str:
    """Return ``value`` if it is a usable id, else refuse it."""
    check_text(what, value, MAX_ID_LENGTH, optional=False)
    return str(value)


def model_id_problem(value: Any) -> str | None:
    """Why ``value`` is not a model id (a phrase that follows the argument's name, ``must
    ...``), or None when it is one.

    A model id is the name a provider gives a model (``claude-sonnet-4-5``,
    ``anthropic/claude-3.5-sonnet``): what :func:`check_text` takes for any name (1 to
    :data:`MAX_NAME_LENGTH` characters of valid Unicode text without NUL), and neither blank
    nor with whitespace at either end: a blank one would be sent to the provider as the
    model's name (``"model": " "``), which no provider has. Other text is kept as given (a
    caller's string is data: any letters, symbols and format characters round-trip, and
    the command line shows control characters as symbols). The one rule behind every way a
    model id comes in (the library, the command line, JSON-RPC, the importers).
    """
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        return (
            f"must be a non-empty string of at most {MAX_NAME_LENGTH} characters, "
            f"got {shown(value)}"
        )
    if not value.strip():
        return f"must not be blank, got {shown(value)}"
    if value != value.strip():
        return f"must not start or end with whitespace, got {shown(value)}"
    if NUL in value:
        return "must not contain a NUL character"
    if not is_utf8(value):
        return "must be valid Unicode text (it holds a lone surrogate)"
    return None


def is_model_id(value: Any) -> bool:
    """True when :func:`check_model_id` takes ``value`` (an importer reading another tool's
    file keeps only such a model id, and reads a blank one as none recorded)."""
    return model_id_problem(value) is None


def check_model_id(name: str, value: Any, *, optional: bool = True) -> None:
    """Refuse anything but a model id (see :func:`model_id_problem`); None when ``optional``.

    Raises:
        InvalidInputError: the value is not a model id; the message names ``name``.
    """
    if value is None and optional:
        return
    problem = model_id_problem(value)
    if problem is not None:
        raise InvalidInputError(
            f"{name} {problem}; give the model's id as its provider names it "
            "(e.g. 'claude-sonnet-4-5')."
        )


def check_json_object(
    name: str, value: Any, *, max_bytes: int | None = MAX_JSON_BYTES
) -> dict[str, Any]:
    """Return a JSON-clean copy of a mapping with string keys (None gives ``{}``).

    The value passes :func:`check_json_value`; its JSON is at most ``max_bytes`` UTF-8
    bytes (None: no limit of its own, for a message's fields, counted in the message).

    Raises:
        ContentTooLargeError: the JSON is over ``max_bytes``.
        InvalidInputError: anything :func:`check_json_value` refuses.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{name} must be a mapping with string keys (nested ones too), got {shown(value)}."
        )
    plain = dict(value)
    check_json_value(name, plain)
    encoded = json.dumps(plain, allow_nan=False, ensure_ascii=False)
    if max_bytes is not None:
        size = text_bytes(name, encoded)
        if size > max_bytes:
            raise ContentTooLargeError(
                f"{name} is {size:,} bytes as JSON, over the limit of {max_bytes:,} "
                "(MAX_JSON_BYTES); keep large data outside the store."
            )
    decoded = json.loads(encoded)
    assert isinstance(decoded, dict)
    return decoded


def check_choice(name: str, value: Any, choices: frozenset[str] | tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else refuse it naming them (a tuple in
    its own order, a set sorted)."""
    if not isinstance(value, str) or value not in choices:
        listed = choices if isinstance(choices, tuple) else sorted(choices)
        raise InvalidInputError(
            f"{name} {shown(value)} is not valid; use one of {', '.join(listed)}."
        )
    return value


def check_tool_input_json(text: str) -> None:
    """Refuse a ``tool_input`` update whose text is not the JSON of an object (what a
    ``tool_use`` block's ``input`` is), NaN and Infinity included.

    Raises:
        InvalidInputError: the text is not such JSON.
    """

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not a JSON number")

    try:
        value = json.loads(text, parse_constant=refuse)
    except RecursionError as exc:
        raise InvalidInputError(
            "a tool_input update's text must be the JSON of the call's new input object (it "
            f"nests arrays and objects more than {MAX_JSON_DEPTH} levels deep)."
        ) from exc
    except ValueError as exc:
        raise InvalidInputError(
            "a tool_input update's text must be the JSON of the call's new input object (it "
            f"is not JSON: {exc})."
        ) from exc
    if not isinstance(value, dict):
        raise InvalidInputError(
            "a tool_input update's text must be the JSON of an object (a tool call's input), "
            f"got {type(value).__name__}."
        )
    check_json_object("the tool_input update's object", value, max_bytes=None)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def plain_lists_only(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """For the public functions on plain message lists (they take what the caller built,
    unchecked): an input of the wrong shape (None, a string, a block id that is a list...)
    raises :class:`InvalidInputError` naming the function, not the Python error it would
    cause somewhere inside; the list must be a list or tuple of mappings (a string or a list
    of numbers went through, and came back as a list of its characters or numbers), and a
    message that is a mapping but not a dict (a ``MappingProxyType``) is read as a dict copy
    of it (it came back as itself where the functions promise dicts). A value
    nested too deep to copy is refused the same way, not with Python's ``RecursionError``."""
    return _list_function(function, items=True)


def plain_messages(messages: Sequence[Mapping[str, Any]]) -> Sequence[dict[str, Any]]:
    """The messages a :func:`plain_lists_only` function was given, typed as the dicts they
    are by then (it takes any mappings, the SDKs' ``TypedDict`` messages among them, and
    gives the function a dict copy of one that is not a dict)."""
    return cast("Sequence[dict[str, Any]]", messages)


def plain_contents_only(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """:func:`plain_lists_only` for a function that names an item of the wrong kind itself
    (in its own terms: Gemini's ``Content``)."""
    return _list_function(function, items=False)


def _list_function(function: Callable[_P, _R], *, items: bool) -> Callable[_P, _R]:
    name = function.__name__

    def refused(problem: str) -> InvalidInputError:
        return InvalidInputError(
            f"{name} was given input it cannot read ({problem}); pass a list of message "
            "dicts, each with 'role' and 'content', and string ids."
        )

    @wraps(function)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        given = args[0] if args else kwargs.get("messages", kwargs.get("contents", []))
        if not isinstance(given, (list, tuple)):
            kind = "None" if given is None else f"a {type(given).__name__}"
            raise refused(f"{kind} where the list goes")
        call: Callable[..., _R] = function
        if items:
            plain = True
            for index, item in enumerate(given):
                if not isinstance(item, dict):
                    if not isinstance(item, Mapping):
                        raise refused(f"item {index} is a {type(item).__name__}, not a dict")
                    plain = False
            if not plain:
                # The functions read and return dicts: a message that is another mapping
                # (a read-only MappingProxyType) is given to them as a dict copy of it.
                copied = [item if isinstance(item, dict) else dict(item) for item in given]
                if args:
                    return _refusing(refused, call, copied, *args[1:], **kwargs)
                return _refusing(refused, call, **{**kwargs, "messages": copied})
        return _refusing(refused, call, *args, **kwargs)

    return checked


def _refusing(
    refused: Callable[[str], InvalidInputError],
    function: Callable[..., _R],
    *args: Any,
    **kwargs: Any,
) -> _R:
    """Call a plain-list function, its input's Python errors raised as ``refused``."""
    try:
        return function(*args, **kwargs)
    except (TypeError, AttributeError, KeyError, OverflowError) as exc:
        raise refused(f"{type(exc).__name__}: {exc}") from exc
    except RecursionError as exc:
        # A value nested past Python's recursion limit (the copy of a view, Gemini's
        # hardening) raised RecursionError with a traceback thousands of frames long.
        raise refused(
            "a value nests lists and dicts deeper than Python can copy; the store "
            f"accepts {MAX_JSON_DEPTH} levels"
        ) from exc


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings ignored)."""
    depth = deepest = 0
    for bracket in _JSON_BRACKETS.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def nests_deeper_than(text: str, value: Any, limit: int) -> bool:
    """True when ``value``, parsed from the JSON text ``text``, nests arrays and objects
    deeper than ``limit``. Walks without recursion, and only a value whose text has more
    brackets than ``limit`` (counting those inside strings: a quick bound)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False
