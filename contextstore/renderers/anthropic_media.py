"""Images and documents as the Anthropic Messages API takes them (view rules 7 and later).

The API refuses a base64 image whose ``media_type`` is not one of four, whose data is of
another type than it says or is no image it can read (view rules 8), and a base64 document
that is not a PDF. A render sends such a
block as a text block saying what was left out (:func:`sendable_media`); the provider check
reports a payload built elsewhere that holds one (:func:`media_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contextstore.core.media import (
    image_type,
    left_out,
    sniffed_image_type,
    unreadable,
    unreadable_image,
)
from contextstore.core.overlays import Block

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The ``media_type`` values the Messages API takes for a base64 image (the ``Literal`` of
``anthropic.types.Base64ImageSourceParam``); any other is refused with a 400."""

DOCUMENT_TYPES = frozenset({"application/pdf"})
"""The ``media_type`` values the Messages API takes for a base64 document
(``anthropic.types.Base64PDFSourceParam``); plain text is a ``text`` source instead."""

PROVIDER = "Anthropic"
"""The provider's name in :func:`~contextstore.core.media.left_out`'s text."""


def sendable_media(block: Block, rules: int) -> Block:
    """An image or document block as the Messages API takes it, by version ``rules`` (7 or
    later) of the view rules.

    From version 8, a base64 image of a type the API takes whose data it cannot read (not
    base64, empty, or beginning as none of the four image types it takes:
    :func:`~contextstore.core.media.unreadable_image`) becomes a text block saying so
    (:func:`~contextstore.core.media.unreadable`): the API refuses such an image, and the
    request with it, on every later turn. A base64 image is sent with the type its data clearly is
    (:func:`~contextstore.core.media.sniffed_image_type`), since the API refuses an image
    whose data does not match its ``media_type``; one whose type is still not in
    :data:`IMAGE_TYPES` (HEIC, SVG, ``"undefined"``), like a base64 document not in
    :data:`DOCUMENT_TYPES`, becomes a text block saying what was left out
    (:func:`~contextstore.core.media.left_out`), keeping the block's ``cache_control``.
    URL and file sources are sent as they are. ``block`` is not modified.
    """
    source = block.get("source")
    if not isinstance(source, Mapping) or source.get("type") != "base64":
        return block
    kind = str(block.get("type"))
    if kind == "image":
        media_type = image_type(source)
        if media_type in IMAGE_TYPES:
            reason = unreadable_image(source, signed_only=True) if rules >= 8 else None
            if reason is not None:
                return _in_place(block, unreadable(kind, reason))
            if media_type == source.get("media_type"):
                return block
            return {**block, "source": {**source, "media_type": media_type}}
    else:
        media_type = source.get("media_type")
        if media_type in DOCUMENT_TYPES:
            return block
    return _in_place(block, left_out(kind, media_type, PROVIDER))


TEXT_DOCUMENT_TYPE = "text/plain"
"""The one ``media_type`` of a plain-text document source the Messages API takes, and
requires (``anthropic.types.PlainTextSourceParam``)."""


def plain_text_typed(block: Block) -> Block:
    """A document block with a ``text`` source as the Messages API takes it (view rules 12
    and later): its source's ``media_type`` is ``text/plain``, which the API requires. The
    store takes such a source without it (its model defaults to ``text/plain``) or with
    another text type (``text/markdown``); the API refused both, on every later turn.
    ``block`` itself when nothing changes; it is not modified."""
    source = block.get("source")
    if (
        block.get("type") != "document"
        or not isinstance(source, Mapping)
        or source.get("type") != "text"
        or source.get("media_type") == TEXT_DOCUMENT_TYPE
    ):
        return block
    return {**block, "source": {**source, "media_type": TEXT_DOCUMENT_TYPE}}


def _in_place(block: Block, text: str) -> Block:
    """The text block sent in ``block``'s place, keeping its cache breakpoint."""
    sent: Block = {"type": "text", "text": text}
    if "cache_control" in block:
        sent["cache_control"] = block["cache_control"]
    return sent


def media_problems(position: int, blocks: Sequence[Block], rules: int) -> list[str]:
    """The base64 images and documents of one message (and of its tool results) whose
    media type the API refuses, or whose data is of another type than it says; from
    version 8 of the view rules (``rules``), also the images whose data it cannot read;
    from version 12, the plain-text documents whose ``media_type`` is not ``text/plain``."""
    problems: list[str] = []
    media = [
        *blocks,
        *(
            item
            for block in blocks
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list)
            for item in block["content"]
            if isinstance(item, dict)
        ),
    ]
    for block in media:
        kind = block.get("type")
        source = block.get("source")
        if kind not in ("image", "document") or not isinstance(source, Mapping):
            continue
        if source.get("type") == "text" and kind == "document" and rules >= 12:
            if source.get("media_type") != TEXT_DOCUMENT_TYPE:
                problems.append(
                    f"messages[{position}] has a text document whose media_type is not "
                    f"{TEXT_DOCUMENT_TYPE!r}, which the API refuses"
                )
            continue
        if source.get("type") != "base64":
            continue
        claimed = source.get("media_type")
        accepted = IMAGE_TYPES if kind == "image" else DOCUMENT_TYPES
        if claimed not in accepted:
            problems.append(
                f"messages[{position}] has a base64 {kind} of type {claimed!r:.60}, "
                "which the API refuses"
            )
            continue
        readable = kind != "image" or rules < 8
        reason = None if readable else unreadable_image(source, signed_only=True)
        if reason is not None:
            problems.append(
                f"messages[{position}] has an image the API cannot read ({reason}), which "
                "it refuses"
            )
            continue
        sniffed = sniffed_image_type(source.get("data")) if kind == "image" else None
        if sniffed is not None and sniffed != claimed:
            problems.append(
                f"messages[{position}] has an image whose data is {sniffed} but whose "
                f"media_type says {claimed}, which the API refuses"
            )
    return problems
