"""Block rewrites ("context updates") as plain values, and how one is applied to a block.

A context update replaces the visible text of one content block, addressed by
``(message_idx, block_idx)``. The store keeps every update as a row; the view applies the
newest one per block with ``ts <= as_of``. Pure code receives the effective updates as an
:data:`OverlayMap` and proposes new ones as :class:`BlockUpdate` values.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
"""An Anthropic-style ``MessageParam``: ``{"role": ..., "content": str | list[block]}``."""

Block = dict[str, Any]
"""One Anthropic-style content block (``text``, ``image``, ``tool_use``, ``tool_result``...)."""

BlockAddress = tuple[int, int]
"""``(message_idx, block_idx)``: where an update applies."""


class UpdateKind:
    """The ``kind`` values a context update row can carry."""

    TRUNCATION_NOTICE = "truncation_notice"
    FIRST_USER_REPLACEMENT = "first_user_replacement"
    READ_FILE = "read_file"
    ALTER_FILE = "alter_file"
    FILE_MENTION = "file_mention"
    PROCESSOR = "processor"
    MANUAL = "manual"

    ALL = frozenset(
        {
            TRUNCATION_NOTICE,
            FIRST_USER_REPLACEMENT,
            READ_FILE,
            ALTER_FILE,
            FILE_MENTION,
            PROCESSOR,
            MANUAL,
        }
    )


@dataclass(frozen=True)
class UpdateMode:
    """How an update's ``text`` is applied to its block."""

    TEXT = "text"
    """Replace the block's text slot (a text block's text, a tool result's text)."""
    BLOCK = "block"
    """Replace the whole block by a text block (a tool result keeps its id, its content
    becomes the text). Used to degrade images and documents to a pointer."""
    TOOL_INPUT = "tool_input"
    """``text`` is the JSON of a new ``input`` object for a ``tool_use`` block."""

    ALL = frozenset({TEXT, BLOCK, TOOL_INPUT})


@dataclass(frozen=True)
class BlockUpdate:
    """A replacement of one block's visible text (or, by ``mode``, of the whole block).

    ``metadata`` belongs to this update alone (never shared with another update), and
    ``base_hash`` is :func:`text_hash` of the text the author read, so a proposal made
    against text that has since changed can be recognised as stale.
    """

    message_idx: int
    block_idx: int
    kind: str
    text: str
    source: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    base_hash: str | None = None
    mode: str = UpdateMode.TEXT

    @property
    def address(self) -> BlockAddress:
        """The ``(message_idx, block_idx)`` this update rewrites."""
        return (self.message_idx, self.block_idx)


OverlayMap = Mapping[BlockAddress, BlockUpdate]
"""The effective update per block at some moment (at most one per address)."""


def text_hash(text: str) -> str:
    """Return the SHA-256 hex digest of ``text`` (UTF-8), used as a ``base_hash``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def block_text(block: Any) -> str | None:
    """Return the text an update would replace in ``block``, or None if it has none.

    A ``text`` block yields its text; a ``tool_result`` yields its string content, or the
    text of its first content item when that is a text block. Anything else has no
    rewritable text.
    """
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and content:
            first = content[0]
            if isinstance(first, dict) and first.get("type") == "text":
                inner = first.get("text")
                return inner if isinstance(inner, str) else None
    return None


def result_items_text(content: list[Any]) -> str:
    """The texts of a tool result held as a list, a line break between them: what its
    ``text`` column holds (and so its node's text and ``effective_blocks.original_text``)."""
    return "\n".join(
        str(item.get("text", ""))
        for item in content
        if isinstance(item, dict) and item.get("type") == "text"
    )


def shown_text(block: Any, update: BlockUpdate) -> str:
    """The text ``block`` shows with ``update`` applied, spelled as its stored text is.

    The update's text, except for a ``text`` rewrite of a tool result held as a list: the
    rewrite replaces the first text item only, and the model is still sent the others, so
    the text is the rewrite followed by them (:func:`result_items_text`).
    """
    if (
        update.mode == UpdateMode.TEXT
        and isinstance(block, dict)
        and block.get("type") == "tool_result"
        and isinstance(block.get("content"), list)
    ):
        rewritten = with_block_text(block, update.text, update.mode)
        if rewritten is not None:
            return result_items_text(rewritten["content"])
    return update.text


def text_document_data(block: Any) -> str | None:
    """The text of a ``document`` block whose source is plain text (``{"type": "text",
    "data": ...}``), or None for any other block."""
    if not isinstance(block, dict) or block.get("type") != "document":
        return None
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "text":
        return None
    data = source.get("data")
    return data if isinstance(data, str) else None


def search_result_text(block: Mapping[str, Any]) -> str:
    """Return a ``search_result`` block as text: how the OpenAI and Gemini formats send it
    (they have no such block), and how the secret masker shows one that holds a secret, so
    a search result reads the same whether or not it was masked.

    A line ``[Search result: <title>]``, a line ``Source: <source>``, then the texts of its
    content blocks, separated by a blank line. A field that is missing or not a string is
    left out (without a title the first line is ``[Search result]``). Anthropic's own
    format sends the block as it is.
    """
    title = block.get("title")
    lines = [f"[Search result: {title}]" if isinstance(title, str) else "[Search result]"]
    source = block.get("source")
    if isinstance(source, str):
        lines.append(f"Source: {source}")
    content = block.get("content")
    texts: list[str] = []
    for item in content if isinstance(content, list) else []:
        if isinstance(item, dict) and item.get("type") == "text":
            text = item.get("text")
            if isinstance(text, str) and text:
                texts.append(text)
    if texts:
        lines.append("\n\n".join(texts))
    return "\n".join(lines)


def with_block_text(block: Block, text: str, mode: str = UpdateMode.TEXT) -> Block | None:
    """Return a copy of ``block`` showing ``text``, or None if the block has no text slot.

    The caller's block is never modified. A ``tool_result`` with string content gets the
    new string (Cline silently ignored this case); one with list content gets its first
    text item replaced.
    """
    kind = block.get("type")
    if mode == UpdateMode.BLOCK:
        if kind == "tool_result":
            new = dict(block)
            new["content"] = text
            return new
        return {"type": "text", "text": text}
    if mode == UpdateMode.TOOL_INPUT:
        if kind != "tool_use":
            return None
        try:
            new_input = json.loads(text)
        except ValueError:
            return None
        new = dict(block)
        new["input"] = new_input
        return new
    if kind == "text":
        new = dict(block)
        new["text"] = text
        return new
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            new = dict(block)
            new["content"] = text
            return new
        if isinstance(content, list) and content:
            first = content[0]
            if isinstance(first, dict) and first.get("type") == "text":
                new = copy.deepcopy(block)
                new["content"][0]["text"] = text
                return new
    return None


def apply_overlays(message: Message, idx: int, overlays: OverlayMap) -> Message:
    """Return ``message`` (index ``idx``) with its effective updates applied.

    Returns the same object when no update applies, and a new message otherwise. An
    update addressing a block that has no text slot leaves that block unchanged.
    """
    content = message.get("content")
    if not overlays:
        return message
    if isinstance(content, str):
        update = overlays.get((idx, 0))
        if update is None or update.mode == UpdateMode.TOOL_INPUT:
            return message
        new_message = dict(message)
        new_message["content"] = update.text
        return new_message
    if not isinstance(content, list):
        return message
    new_content: list[Any] | None = None
    for block_idx, block in enumerate(content):
        update = overlays.get((idx, block_idx))
        if update is None or not isinstance(block, dict):
            continue
        replaced = with_block_text(block, update.text, update.mode)
        if replaced is None:
            continue
        if new_content is None:
            new_content = list(content)
        new_content[block_idx] = replaced
    if new_content is None:
        return message
    new_message = dict(message)
    new_message["content"] = new_content
    return new_message
