"""A prepared request's system prompt: a string, or a list of Anthropic text blocks.

Anthropic's ``system`` may be a list of ``{"type": "text", "text": ...}`` blocks, each with an
optional ``cache_control`` (a prompt-caching breakpoint). The list is sent to Anthropic as
given; the other providers, which take one system text, get the blocks' texts joined by a
blank line (:func:`system_text`), and that text is what the store hashes and counts as the
request's system prompt node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextstore.core.errors import ContentTooLargeError, InvalidInputError
from contextstore.core.validate import (
    MAX_TEXT_BYTES,
    check_free_text,
    check_json_value,
    json_copy,
    shown,
    text_bytes,
)

SystemPrompt = str | Sequence[Mapping[str, Any]]
"""A system prompt: a string, or Anthropic text blocks (which may carry ``cache_control``)."""

SYSTEM_BLOCK_FIELDS = frozenset({"type", "text", "cache_control"})
"""The fields a text block of a system prompt may have."""

TEXT_SEPARATOR = "\n\n"
"""Between the texts of a system prompt's blocks, where a provider takes one text."""

_EXAMPLE = "{'type': 'text', 'text': '...'}"


def check_system(system: Any) -> str | list[dict[str, Any]] | None:
    """Refuse a system prompt the providers would not take; return it as stored.

    A system prompt is None, a string (at most ``MAX_TEXT_BYTES`` of UTF-8, without NUL),
    or a non-empty list of text blocks: dicts with ``"type": "text"``, a ``text`` that is
    not blank (Anthropic refuses empty text blocks) and, optionally, a ``cache_control``
    object, nothing else; their texts together at most ``MAX_TEXT_BYTES``.

    Returns:
        ``system`` itself when it is None or a string; a list of plain dict copies of its
        blocks when it is a list.

    Raises:
        InvalidInputError: naming the block and what is wrong with it.
        ContentTooLargeError: the text is over the limit.
    """
    if system is None or isinstance(system, str):
        check_free_text("system", system)
        return system
    if isinstance(system, bytes | bytearray | Mapping) or not isinstance(system, Sequence):
        raise InvalidInputError(
            f"system must be a string or a list of text blocks like {_EXAMPLE}, got "
            f"{type(system).__name__}."
        )
    if not system:
        raise InvalidInputError(
            f"system is an empty list; give it at least one text block like {_EXAMPLE}, or "
            "leave system out for no system prompt."
        )
    total = 0
    blocks: list[dict[str, Any]] = []
    for position, block in enumerate(system):
        where = f"system[{position}]"
        if not isinstance(block, Mapping) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            raise InvalidInputError(
                f"{where} is {shown(kind)}, not a text block; a system prompt's blocks are "
                f"text blocks like {_EXAMPLE}."
            )
        unknown = [key for key in block if key not in SYSTEM_BLOCK_FIELDS]
        if unknown:
            raise InvalidInputError(
                f"{where} has the field(s) {', '.join(map(shown, unknown))}; a system text "
                "block holds type, text and cache_control only."
            )
        text = block.get("text")
        check_free_text(f"{where}.text", text, optional=False)
        assert isinstance(text, str)
        if not text.strip():
            raise InvalidInputError(
                f"{where}.text is blank, and Anthropic refuses blank text blocks; give it "
                "text or leave the block out."
            )
        if "cache_control" in block:
            cache_control = block["cache_control"]
            if cache_control is not None and not isinstance(cache_control, dict):
                raise InvalidInputError(
                    f"{where}.cache_control must be an object like {{'type': 'ephemeral'}}, "
                    f"got {type(cache_control).__name__}."
                )
            check_json_value(f"{where}.cache_control", cache_control)
        total += text_bytes(f"{where}.text", text)
        blocks.append(json_copy(dict(block)))
    if total > MAX_TEXT_BYTES:
        raise ContentTooLargeError(
            f"system is {total:,} bytes of text (UTF-8), over the limit of {MAX_TEXT_BYTES:,}; "
            "shorten it."
        )
    return blocks


def system_text(system: SystemPrompt) -> str:
    """Return a system prompt as one string (the texts of its text blocks joined by a
    blank line)."""
    if isinstance(system, str):
        return system
    return TEXT_SEPARATOR.join(
        str(block.get("text", ""))
        for block in system
        if isinstance(block, Mapping) and block.get("type", "text") == "text"
    )


def rewrite_system_texts(
    system: str | list[dict[str, Any]], rewrite: Callable[[str], Any]
) -> str | list[dict[str, Any]]:
    """``system`` with ``rewrite`` applied to its text: to the string, or to the ``text``
    of each block (a new block, its other fields kept, such as ``cache_control``).

    The result holds whatever ``rewrite`` returned: check it (:func:`check_system`).
    """
    if isinstance(system, str):
        rewritten: str | list[dict[str, Any]] = rewrite(system)
        return rewritten
    return [{**block, "text": rewrite(block["text"])} for block in system]
