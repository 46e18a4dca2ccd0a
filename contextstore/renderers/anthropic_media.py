"""Images and documents as the Anthropic Messages API takes them (view rules 7 and later).

The API refuses a base64 image whose ``media_type`` is not one of four, or whose data is of
another type than it says, and a base64 document that is not a PDF. A render sends such a
block as a text block saying what was left out (:func:`sendable_media`); the provider check
reports a payload built elsewhere that holds one (:func:`media_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contextstore.core.media import image_type, left_out, sniffed_image_type
from contextstore.core.overlays import Block

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The ``media_type`` values the Messages API takes for a base64 image (the ``Literal`` of
``anthropic.types.Base64ImageSourceParam``); any other is refused with a 400."""

DOCUMENT_TYPES = frozenset({"application/pdf"})
"""The ``media_type`` values the Messages API takes for a base64 document
(``anthropic.types.Base64PDFSourceParam``); plain text is a ``text`` source instead."""

PROVIDER = "Anthropic"
"""The provider's name in :func:`~contextstore.core.media.left_out`'s text."""


def sendable_media(block: Block) -> Block:
    """An image or document block as the Messages API takes it (view rules 7 and later).

    A base64 image is sent with the type its data clearly is
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
            if media_type == source.get("media_type"):
                return block
            return {**block, "source": {**source, "media_type": media_type}}
    else:
        media_type = source.get("media_type")
        if media_type in DOCUMENT_TYPES:
            return block
    text: Block = {"type": "text", "text": left_out(kind, media_type, PROVIDER)}
    if "cache_control" in block:
        text["cache_control"] = block["cache_control"]
    return text


def media_problems(position: int, blocks: Sequence[Block]) -> list[str]:
    """The base64 images and documents of one message (and of its tool results) whose
    media type the API refuses, or whose data is of another type than it says."""
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
        sniffed = sniffed_image_type(source.get("data")) if kind == "image" else None
        if sniffed is not None and sniffed != claimed:
            problems.append(
                f"messages[{position}] has an image whose data is {sniffed} but whose "
                f"media_type says {claimed}, which the API refuses"
            )
    return problems
