"""Media types of stored images and documents, as a provider will judge them.

A stored image carries the ``media_type`` its source agent gave it, which is not always
one a provider takes (a HEIC photo from Gemini CLI, ``"undefined"`` from a Cline MCP
tool) nor always the type of its data (a PNG labelled ``image/jpeg``). The renderers ask
this module what the data really is (:func:`sniffed_image_type`, from the first bytes)
and, for a type their provider refuses, send :func:`left_out`'s text in the block's
place; from view rules 8, an image whose data no provider can read (not base64, empty, or
for a provider of the four signed types only, beginning as none of them:
:func:`unreadable_image`) is sent as :func:`unreadable`'s text instead, since one such
image in the history made every later request fail. The sets of accepted types live with
each renderer. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

_HEAD_CHARACTERS = 32
"""Base64 characters decoded to sniff a type: 24 bytes, enough for every header below."""


def sniffed_image_type(data: Any) -> str | None:
    """The image type the first bytes of base64 ``data`` clearly name, or None.

    Recognised: PNG (its 8-byte signature), JPEG (``FF D8 FF``), GIF (``GIF87a`` or
    ``GIF89a``) and WebP (``RIFF``, a size, ``WEBP``): the four types Anthropic and OpenAI
    take (Gemini all but GIF). Anything else (HEIC, SVG, a damaged header, data that is
    not base64) is None: the stored ``media_type`` is then all there is to go by.
    """
    if not isinstance(data, str):
        return None
    try:
        head = base64.b64decode(data[:_HEAD_CHARACTERS], validate=True)
    except (binascii.Error, ValueError):
        return None
    return _signed_type(head)


SIGNED_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types :func:`sniffed_image_type` tells by their first bytes. Every file of
these types begins with its signature, so data that begins with none of them is no image
of these types, whatever its ``media_type`` says."""


def _signed_type(head: bytes) -> str | None:
    """The type of :data:`SIGNED_TYPES` whose signature ``head`` begins with, or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


_BASE64_HEAD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
"""The standard base64 alphabet, as the providers decode it, with its padding."""


def _base64_head(data: Any) -> bytes | None:
    """The first bytes of base64 ``data``, or None when it does not begin as base64. Line
    breaks and spaces are skipped (base64 from mail and PEM files is wrapped)."""
    if not isinstance(data, str):
        return None
    compact = "".join(data[: 2 * _HEAD_CHARACTERS].split())[:_HEAD_CHARACTERS]
    if not _BASE64_HEAD.fullmatch(compact):
        return None
    whole = compact if len(compact) == len(data) else compact[: len(compact) - len(compact) % 4]
    try:
        return base64.b64decode(whole, validate=True)
    except (binascii.Error, ValueError):
        return None


def unreadable_image(source: Mapping[str, Any], *, signed_only: bool) -> str | None:
    """Why the base64 image ``source`` holds no image its provider can read, or None.

    Its data must begin as base64 and hold at least one byte; for a provider that reads
    only :data:`SIGNED_TYPES` (``signed_only``: Anthropic, OpenAI) it must also begin with
    one of their signatures. Only the first bytes are read, so a file damaged further on
    is not found here. The reason completes :func:`unreadable`'s text.
    """
    head = _base64_head(source.get("data"))
    if head is None:
        return "its data is not base64"
    if not head:
        return "it holds no data"
    if signed_only and _signed_type(head) is None:
        return "its data is not a PNG, JPEG, GIF or WebP image"
    return None


def unreadable(kind: str, reason: str) -> str:
    """The text sent in place of an image whose data no provider can read, given why
    (:func:`unreadable_image`).

    Example: ``[image omitted: its data is not base64; the original is kept in the
    database]``, in the form of :func:`left_out`'s.
    """
    return f"[{kind} omitted: {reason}; the original is kept in the database]"


def image_type(source: Mapping[str, Any], default: str | None = None) -> Any:
    """The media type to send a base64 image ``source`` with: the type its data clearly is
    (:func:`sniffed_image_type`) when that can be told, else its ``media_type`` (``default``
    when that is missing or empty)."""
    sniffed = sniffed_image_type(source.get("data"))
    if sniffed is not None:
        return sniffed
    return source.get("media_type") or default


def left_out(kind: str, media_type: Any, provider: str) -> str:
    """The text sent in place of an image or document whose type ``provider`` refuses.

    Example: ``[image omitted: image/heic, a type the Anthropic API does not accept; the
    original is kept in the database]``, in the form of the media degrader's pointers.
    """
    if isinstance(media_type, str) and media_type:
        shown = repr(media_type[:60]) if not _plain(media_type) else media_type[:60]
    else:
        shown = "no media type"
    return (
        f"[{kind} omitted: {shown}, a type the {provider} API does not accept; "
        "the original is kept in the database]"
    )


def _plain(text: str) -> bool:
    """True for text that reads as a media type (shown bare), else it is quoted."""
    return all(c.isalnum() or c in "/.+-_" for c in text)
