"""A Cline 4 session message in the store's (Anthropic) shape, and back where it differs.

Cline's SDK writes messages in its own provider-neutral shape. Most of it is the store's
already (``text``, ``thinking``, ``redacted_thinking``, ``tool_use``, ``tool_result``; the
SDK's extra fields such as ``call_id``, ``signature``, a result's ``name``, stay on the
block, where every renderer leaves them out). Three block types differ:

* ``image`` (``data``, ``mediaType``) becomes an Anthropic image with a base64 ``source``;
* ``file`` (``path``, ``content``) becomes the text the SDK sends for it,
  ``<file_content path="...">`` and the content, with :data:`FILE_KEY` keeping the path;
* ``media`` (what a model generated) becomes a short text naming it, with
  :data:`MEDIA_KEY` keeping the block as written;

and a tool result whose content is a list of anything but text, image and file blocks (the
SDK keeps a tool's structured output as it came, ``[{"query", "result", "success"}]``)
holds it as the JSON text the SDK sends the model for it, marked :data:`JSON_KEY`.

Nothing here touches a database or a file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

FILE_KEY: Final = "cline_file"
"""On a text block converted from an SDK ``file`` block: ``{"path", "source"?}``."""
MEDIA_KEY: Final = "cline_media"
"""On a text block converted from an SDK ``media`` block: that block's ``media``."""


JSON_KEY: Final = "cline_json"
"""True on a tool result whose content is the JSON text of the structured output written."""
_RESULT_BLOCKS: Final = frozenset({"text", "image", "file"})


def file_text(path: str, content: str) -> str:
    """The text Cline's SDK sends a model for a ``file`` block."""
    return f'<file_content path="{path}">\n{content}\n</file_content>'


def _image(block: Mapping[str, Any]) -> dict[str, Any]:
    source = {"type": "base64", "media_type": block.get("mediaType"), "data": block.get("data")}
    rest = {k: v for k, v in block.items() if k not in ("type", "data", "mediaType")}
    return {"type": "image", "source": source, **rest}


def _file(block: Mapping[str, Any]) -> dict[str, Any]:
    path, content = block.get("path"), block.get("content")
    if not isinstance(path, str) or not isinstance(content, str):
        raise ValueError("a file block needs a string path and content")
    kept = {k: v for k, v in block.items() if k not in ("type", "content")}
    return {"type": "text", "text": file_text(path, content), FILE_KEY: kept}


def _media(block: Mapping[str, Any]) -> dict[str, Any]:
    media = block.get("media")
    described = media if isinstance(media, Mapping) else {}
    kind = described.get("modality") or "media"
    media_type = described.get("mediaType")
    named = f"{kind} ({media_type})" if isinstance(media_type, str) else str(kind)
    return {"type": "text", "text": f"[generated {named}]", MEDIA_KEY: media}


def _converted(block: Any, inner: bool) -> Any:
    if not isinstance(block, Mapping):
        return block
    kind = block.get("type")
    if kind == "image" and "source" not in block:
        return _image(block)
    if kind == "file":
        return _file(block)
    if kind == "media" and not inner:
        return _media(block)
    if kind == "tool_result" and not inner and isinstance(block.get("content"), list):
        content = block["content"]
        if all(isinstance(i, Mapping) and i.get("type") in _RESULT_BLOCKS for i in content):
            return {**block, "content": [_converted(item, True) for item in content]}
        text = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
        return {**block, "content": text, JSON_KEY: True}
    return dict(block)


def store_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """``message`` with its content blocks in the store's shape (see the module docstring);
    every other field as written. Blocks it cannot convert are left for the store to
    refuse.

    Raises:
        ValueError: a ``file`` block without a string ``path`` or ``content``.
    """
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    return {**message, "content": [_converted(block, False) for block in content]}
