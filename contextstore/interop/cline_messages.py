"""Cline API messages the store cannot hold as written, kept in their places.

An empty content list (``"content": []``) and a message the store refuses are kept as
stand-ins with an empty text as their content, which renders leave out, so that every later
message keeps the index Cline's files address it by; ``export cline`` writes them back as
Cline wrote them (:func:`as_written`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contextstore.interop.stand_in import (
    NO_ORIGINAL,
    REFUSED_KEY,
    left_out_text,
    refused_original,
    refused_reason,
)

EMPTY_CONTENT_KEY: Final = "contextstore_empty_content"
"""Marks an API message whose content was an empty list (``"content": []``), which the store
cannot hold (no provider takes an empty message): it is kept with an empty text as its
content (renders leave it out), so every later message keeps its index, and ``export cline``
writes ``[]`` back."""


def with_empty_content(message: Any) -> Any:
    """An API message whose content is ``[]`` as the store keeps it (see
    :data:`EMPTY_CONTENT_KEY`); any other value as it is."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    if message["content"]:
        return message
    kept = {key: ("" if key == "content" else value) for key, value in message.items()}
    kept[EMPTY_CONTENT_KEY] = True
    return kept


def is_stand_in(message: Mapping[str, Any]) -> bool:
    """True for a stored API message that stands in for one the store could not hold
    (empty content, or refused): it has no block of Cline's to address."""
    return message.get("content") == "" and (
        message.get(EMPTY_CONTENT_KEY) is True or isinstance(message.get(REFUSED_KEY), dict)
    )


def as_written(message: dict[str, Any]) -> Any:
    """A stored API message as Cline wrote it: one kept by :func:`with_empty_content` gets
    its ``[]`` back (while its content is still the empty text it was given), a refused
    one (:func:`~contextstore.interop.stand_in.refused_stand_in`) its original, or
    :data:`~contextstore.interop.stand_in.LEFT_OUT_TEXT` when the
    original was too large to keep."""
    if message.get("content") != "":
        return message
    reason = refused_reason(message)
    if reason is not None:
        original = refused_original(message)
        if original is not NO_ORIGINAL:
            return original
        text = left_out_text("task", reason)
        written = {key: value for key, value in message.items() if key != REFUSED_KEY}
        written["content"] = [{"type": "text", "text": text}]
        return written
    if message.get(EMPTY_CONTENT_KEY) is not True:
        return message
    return {
        key: ([] if key == "content" else value)
        for key, value in message.items()
        if key != EMPTY_CONTENT_KEY
    }
