"""Checks on caller values, done before anything is written.

Every public store method passes its arguments through these functions, so a malformed
value becomes an :class:`InvalidInputError` that says what was expected, never a
``TypeError``, an ``OverflowError`` or a database driver error after a partial write.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from contextstore.core.errors import InvalidInputError

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""Largest accepted message, measured as its JSON encoding (images included)."""
MAX_ID_LENGTH = 64
MAX_LABEL_LENGTH = 200
MAX_TITLE_LENGTH = 1_000
MAX_NAME_LENGTH = 200
"""Model ids, tool ids and names, update sources, failure reasons (``String(200)`` columns)."""
MAX_HASH_LENGTH = 64
"""Git hashes and SHA-256 digests (``String(64)`` columns)."""
MAX_INT32 = 2**31 - 1
"""Largest value of an INTEGER column (indices, token counts) on every backend."""
MAX_TS = 2**53
"""Largest accepted timestamp in milliseconds (far beyond any real clock)."""


def canonical_json(value: Any) -> str:
    """The canonical JSON of ``value``: sorted keys, compact separators, UTF-8 text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_sha256(payload: Mapping[str, Any]) -> str:
    """SHA-256 of a payload's canonical JSON."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


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
            f"{name} must be an integer from {minimum} to {maximum:,}, got {value!r:.80}."
        )


def check_ts(name: str, value: Any, *, optional: bool = True) -> None:
    """Refuse anything but a timestamp in milliseconds (an int from 0 to 2**53)."""
    check_int(name, value, minimum=0, maximum=MAX_TS, optional=optional)


def check_number(name: str, value: Any, *, optional: bool = True) -> None:
    """Refuse anything but a finite, non-negative number."""
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1e15
    ):
        raise InvalidInputError(f"{name} must be a finite number >= 0, got {value!r:.80}.")


def check_text(name: str, value: Any, limit: int, *, optional: bool = True) -> None:
    """Refuse anything but a non-empty string of at most ``limit`` characters without NUL.

    Identifiers, labels and titles are stored in text columns, and PostgreSQL text cannot
    hold a NUL character, so they are refused on every backend alike.
    """
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidInputError(
            f"{name} must be a non-empty string of at most {limit} characters, got {value!r:.80}."
        )
    if "\x00" in value:
        raise InvalidInputError(f"{name} must not contain a NUL character.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{name} is not valid Unicode text: {exc.reason}.") from exc


def check_id(value: Any, what: str = "conversation id") -> str:
    """Return ``value`` if it is a usable id, else refuse it."""
    check_text(what, value, MAX_ID_LENGTH, optional=False)
    return str(value)


def _has_only_string_keys(value: Any) -> bool:
    """Whether every mapping inside ``value`` (itself included) has string keys only.

    ``json.dumps`` would turn an int key into a string and a second key of the same text
    would overwrite the first: the caller's data would come back changed.
    """
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _has_only_string_keys(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_has_only_string_keys(item) for item in value)
    return True


def check_json_object(name: str, value: Any) -> dict[str, Any]:
    """Return a JSON-clean copy of a mapping with string keys (None gives ``{}``)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not _has_only_string_keys(value):
        raise InvalidInputError(
            f"{name} must be a mapping with string keys (nested ones too), got {value!r:.80}."
        )
    try:
        decoded = json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must be JSON-serialisable: {exc}.") from exc
    assert isinstance(decoded, dict)
    return decoded


def check_choice(name: str, value: Any, choices: frozenset[str] | tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else refuse it naming them (a tuple in
    its own order, a set sorted)."""
    if not isinstance(value, str) or value not in choices:
        listed = choices if isinstance(choices, tuple) else sorted(choices)
        raise InvalidInputError(
            f"{name} {value!r:.80} is not valid; use one of {', '.join(listed)}."
        )
    return value
