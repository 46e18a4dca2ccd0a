"""Recovering the readable part of a damaged JSON file (a write cut short, a stray byte).

Cline writes its task files whole on every change, and a crash or a full disk leaves them
truncated or with garbage after the end (its issues #954, #335, #2321); Cline then cannot
open the task at all. Here the complete entries before the damage are kept: the file is
parsed as far as it is valid, and every container on the way to the damage keeps the
members that were complete. Only containers up to ``keep_depth`` keep a partial list; a
deeper value cut in the middle (half a message) is dropped whole.

Complete values are parsed by the standard library's C decoder; only the containers on
the path to the damage are walked here, so recovery costs about one parse of the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final

from contextstore.core.validate import MAX_JSON_INT_DIGITS

MAX_INT_DIGITS: Final = MAX_JSON_INT_DIGITS
"""Longest integer kept as one: a longer one (no JavaScript number is written so) is read
as infinity, which the importers replace by null with a note. Python refuses to convert
one over 4,300 digits at all, and no backend stores one over 300."""


def _integer(text: str) -> int | float:
    negative = text.startswith("-")
    if len(text) - negative <= MAX_INT_DIGITS:
        return int(text)
    return -math.inf if negative else math.inf


_DECODER = json.JSONDecoder(parse_int=_integer)
_WHITESPACE = " \t\n\r"


def loads(text: str) -> Any:
    """Parse a JSON text as :func:`json.loads` does, but with an integer longer than
    :data:`MAX_INT_DIGITS` digits read as infinity.

    Raises:
        json.JSONDecodeError: the text is not JSON.
    """
    return _DECODER.decode(text)


@dataclass(frozen=True)
class Damage:
    """Where a JSON text stops being valid, and what was kept before it.

    Attributes:
        position: the character offset of the first invalid character.
        line: its line (1-based).
        column: its column (1-based).
        problem: the decoder's message (``"Expecting ',' delimiter"``...).
        kept: how many entries of the outermost list (or object) were kept.
        dropped_chars: how many characters from the damaged entry on were left out.
    """

    position: int
    line: int
    column: int
    problem: str
    kept: int
    dropped_chars: int

    def describe(self) -> str:
        """``line L column C (char P)``, the position as editors show it."""
        return f"line {self.line} column {self.column} (char {self.position})"


class _Broken(Exception):
    def __init__(self, error: json.JSONDecodeError) -> None:
        self.error = error


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _error(text: str, pos: int, message: str) -> json.JSONDecodeError:
    return json.JSONDecodeError(message, text, min(pos, len(text)))


class _Recovery:
    def __init__(self, text: str, keep_depth: int) -> None:
        self.text = text
        self.keep_depth = keep_depth
        self.error: json.JSONDecodeError | None = None
        self.kept = 0
        self.damaged_at = len(text)

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        """Parse a value at ``pos``; raise :class:`_Broken` if it is damaged and cannot be
        kept partially at this depth."""
        try:
            return _DECODER.raw_decode(self.text, pos)
        except json.JSONDecodeError as exc:
            if depth > self.keep_depth or pos >= len(self.text) or self.text[pos] not in "[{":
                raise _Broken(exc) from exc
        return self.container(pos, depth)

    def container(self, pos: int, depth: int) -> tuple[Any, int]:
        """Parse an array or object at ``pos`` keeping its complete members; record the
        damage and return what was complete (the end is where the damage starts)."""
        text = self.text
        closing = "]" if text[pos] == "[" else "}"
        items: list[Any] = []
        members: dict[str, Any] = {}
        pos = _skip(text, pos + 1)
        if pos < len(text) and text[pos] == closing:
            return ([] if closing == "]" else {}), pos + 1
        while True:
            start = pos
            try:
                if closing == "]":
                    item, pos = self.value(pos, depth + 1)
                else:
                    key, pos = self._key(pos)
                    item, pos = self.value(pos, depth + 1)
                if self.error is not None:
                    # the member itself was damaged and kept partially: stop here
                    self._append(items, members, closing, item, key if closing == "}" else None)
                    return self._result(items, members, closing, depth), pos
                self._append(items, members, closing, item, key if closing == "}" else None)
                pos = start = _skip(text, pos)
                if pos < len(text) and text[pos] == ",":
                    pos = _skip(text, pos + 1)
                    continue
                if pos < len(text) and text[pos] == closing:
                    return self._result(items, members, closing, depth), pos + 1
                raise _Broken(_error(text, pos, f"Expecting ',' or '{closing}'"))
            except _Broken as broken:
                self.error = broken.error
                self.damaged_at = start
                return self._result(items, members, closing, depth), start

    def _key(self, pos: int) -> tuple[str, int]:
        text = self.text
        if pos >= len(text) or text[pos] != '"':
            raise _Broken(_error(text, pos, "Expecting property name enclosed in double quotes"))
        try:
            key, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise _Broken(exc) from exc
        pos = _skip(text, pos)
        if pos >= len(text) or text[pos] != ":":
            raise _Broken(_error(text, pos, "Expecting ':' delimiter"))
        return key, _skip(text, pos + 1)

    @staticmethod
    def _append(
        items: list[Any], members: dict[str, Any], closing: str, item: Any, key: str | None
    ) -> None:
        if closing == "]":
            items.append(item)
        else:
            assert key is not None
            members[key] = item

    def _result(self, items: list[Any], members: dict[str, Any], closing: str, depth: int) -> Any:
        found: Any = items if closing == "]" else members
        if depth == 0:
            self.kept = len(found)
        return found


def recover(text: str, *, keep_depth: int = 0) -> tuple[Any, Damage | None]:
    """Parse ``text``, keeping what is readable when it is damaged.

    Args:
        text: the file's text.
        keep_depth: the deepest container that keeps a partial list of members (0: only
            the outermost array or object; 1: also the lists it holds, such as a session's
            ``messages``).

    Returns:
        The value and None when the text is valid JSON; otherwise what was recovered (None
        when nothing was) and where the damage is.
    """
    try:
        return loads(text), None
    except json.JSONDecodeError as exc:
        first = exc
    start = _skip(text, 0)
    if start < len(text) and text[start] in "[{":
        try:
            value, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            # a complete value followed by garbage (a stray "]", a second write)
            tail = _skip(text, end)
            return value, _damage(
                text, tail, "Extra data after the JSON value", len(value), text[tail:]
            )
        recovery = _Recovery(text, keep_depth)
        value, _ = recovery.container(start, 0)
        error = recovery.error or first
        kept = len(value)
        return value, _damage(text, error.pos, error.msg, kept, text[recovery.damaged_at :])
    return None, _damage(text, first.pos, first.msg, 0, text)


def _damage(text: str, pos: int, problem: str, kept: int, dropped: str) -> Damage:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return Damage(pos, line, column, problem, kept, len(dropped))
