"""What every processor shares: the view it reads, its protocol, and how it reads a block.

A processor is pure: it receives the visible messages (with their original indices and the
overlays already in force) and returns :class:`~contextstore.core.overlays.BlockUpdate`
proposals. It never edits its input and never touches the database; the store decides what
to write, and uses each proposal's ``base_hash`` to recognise proposals made against text
that has since changed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from contextstore.core.overlays import (
    Block,
    BlockUpdate,
    Message,
    UpdateKind,
    UpdateMode,
    block_text,
    text_hash,
)
from contextstore.core.view import IndexedView

MEDIA_TYPES = frozenset({"image", "document"})
"""Block types that carry binary or file payloads rather than text."""


class Processor(Protocol):
    """A pure rewrite rule over the view: reads blocks, proposes replacements.

    Implementations may also define ``independent: bool``. ``True`` promises that the
    proposal for a block depends only on that block's own content and never on what the
    same pipeline changes elsewhere, which lets :class:`~contextstore.processors.pipeline.
    Pipeline` run the processor concurrently with its neighbours, and (for an incremental
    trigger) remember its proposals per message, reusing them for a message whose content
    hash is unchanged. ``memoize = False`` opts out of that memo, for a processor whose work
    on a message costs no more than hashing it (the secret masker). They may define
    ``rewrite_system(text: str) -> str`` too: a prepared request's system prompt is passed
    through it (the secret masker masks it), before it is stored and sent (a prompt given
    as text blocks, block by block: the text of each); and
    ``rewrite_tools(tools: list[dict]) -> list[dict]``, the same for its tool definitions.
    ``local = True`` promises that it runs only local code, no hook of the caller's and
    nothing that waits on a network, so that a prepare may run it while holding the
    conversation's write lock (see :attr:`~contextstore.processors.pipeline.Pipeline.local`).
    """

    @property
    def name(self) -> str:
        """Stable identifier, recorded as the ``source`` of every update the processor makes.

        Read only: a class attribute (``name = "mine"``), an instance attribute, a frozen
        dataclass field or a property all satisfy it.
        """
        ...

    def config(self) -> dict[str, Any]:
        """Return the settings that change the output, as JSON-serialisable values.

        The store folds them into its render-cache key, so two processors with equal
        configs must make equal proposals for equal views.
        """
        ...

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        """Return the updates this processor wants for ``view``, without modifying it."""
        ...


def canonical_json(value: Any) -> str:
    """Serialise ``value`` deterministically (sorted keys, real Unicode), for hashing."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def message_blocks(message: Message) -> list[tuple[int, Block]]:
    """Return ``(block_idx, block)`` for each dict block of ``message``.

    A string content counts as one text block at index 0, which is how the store
    addresses it. The returned blocks are the message's own objects (or, for a string
    content, a fresh wrapper): callers must treat them as read-only.
    """
    content = message.get("content")
    if isinstance(content, str):
        return [(0, {"type": "text", "text": content})]
    if not isinstance(content, list):
        return []
    return [(i, block) for i, block in enumerate(content) if isinstance(block, dict)]


def block_count(message: Message) -> int:
    """``len(message_blocks(message))``, counted without building the pairs: the pipeline
    counts the blocks it gives each processor on every run."""
    content = message.get("content")
    if isinstance(content, str):
        return 1
    if not isinstance(content, list):
        return 0
    count = len(content)
    for block in content:
        if not isinstance(block, dict):
            count -= 1
    return count


def iter_blocks(view: IndexedView) -> Iterator[tuple[int, Message, int, Block]]:
    """Yield ``(message_idx, message, block_idx, block)`` for every block of ``view``."""
    for message_idx, message in view:
        for block_idx, block in message_blocks(message):
            yield message_idx, message, block_idx, block


def media_digest(block: Block) -> tuple[str, int | None, str]:
    """Describe the payload of an image or document block.

    Returns ``(media_type_or_source, size_in_bytes_or_None, sha256_hex)``. Base64 data is
    hashed after decoding, so the digest matches the original file; data that does not
    decode is hashed as given. URL and file sources are hashed by their reference.
    """
    source = block.get("source")
    if not isinstance(source, Mapping):
        return ("unknown", None, text_hash(canonical_json(block)))
    source_type = source.get("type")
    media_type = str(source.get("media_type") or source_type or "unknown")
    data = source.get("data")
    if source_type == "base64" and isinstance(data, str):
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raw = data.encode("utf-8")
        return (media_type, len(raw), hashlib.sha256(raw).hexdigest())
    if isinstance(data, str):
        raw = data.encode("utf-8")
        return (media_type, len(raw), hashlib.sha256(raw).hexdigest())
    if source_type == "url" and isinstance(source.get("url"), str):
        return ("url " + str(source["url"]), None, text_hash(str(source["url"])))
    if source_type == "file" and isinstance(source.get("file_id"), str):
        return ("file " + str(source["file_id"]), None, text_hash(str(source["file_id"])))
    return (media_type, None, text_hash(canonical_json(source)))


def readable_text(block: Block, mode: str) -> str | None:
    """Return the text a proposal of ``mode`` reads from ``block``, or None if it reads none.

    * ``TEXT``: the block's text slot (:func:`~contextstore.core.overlays.block_text`).
    * ``TOOL_INPUT``: the canonical JSON of a ``tool_use`` block's ``input``.
    * ``BLOCK``: for an image or document, its media type, size and SHA-256 (hashing the
      whole base64 payload again on every check would be wasteful and says nothing more);
      for any other block, the canonical JSON of the whole block.

    The result is what a proposal's ``base_hash`` is computed over, so it must be stable:
    equal blocks always give equal text.
    """
    if mode == UpdateMode.TEXT:
        return block_text(block)
    if mode == UpdateMode.TOOL_INPUT:
        if block.get("type") != "tool_use":
            return None
        return canonical_json(block.get("input"))
    if mode == UpdateMode.BLOCK:
        if block.get("type") in MEDIA_TYPES:
            kind, size, digest = media_digest(block)
            return f"{block.get('type')} {kind} {size} sha256:{digest}"
        return canonical_json(block)
    return None


def make_update(
    processor: str,
    message_idx: int,
    block_idx: int,
    *,
    read: str,
    text: str,
    mode: str = UpdateMode.TEXT,
    metadata: Mapping[str, Any] | None = None,
) -> BlockUpdate:
    """Build a processor proposal that replaces ``read`` (what was read) by ``text``."""
    return BlockUpdate(
        message_idx=message_idx,
        block_idx=block_idx,
        kind=UpdateKind.PROCESSOR,
        text=text,
        source=processor,
        metadata=dict(metadata or {}),
        base_hash=text_hash(read),
        mode=mode,
    )


def make_block_update(
    processor: str,
    message_idx: int,
    block_idx: int,
    block: Block,
    text: str,
    metadata: Mapping[str, Any] | None = None,
) -> BlockUpdate:
    """A proposal that shows ``text`` in place of the whole ``block`` (``BLOCK`` mode),
    made against what :func:`readable_text` reads of it."""
    read = readable_text(block, UpdateMode.BLOCK)
    assert read is not None  # BLOCK mode reads every block
    return make_update(
        processor,
        message_idx,
        block_idx,
        read=read,
        text=text,
        mode=UpdateMode.BLOCK,
        metadata=metadata,
    )


def tool_names(view: IndexedView) -> dict[str, str]:
    """Map each ``tool_use`` id in ``view`` to its tool name."""
    names: dict[str, str] = {}
    for _, _, _, block in iter_blocks(view):
        if block.get("type") == "tool_use":
            use_id, name = block.get("id"), block.get("name")
            if isinstance(use_id, str) and isinstance(name, str):
                names[use_id] = name
    return names


TextRewrite = Callable[[int, Message, int, Block, str], "tuple[str, dict[str, Any]] | None"]
"""Given ``(message_idx, message, block_idx, block, text)``: a shorter text and its
metadata, or None to leave the block alone."""


def shrink_texts(name: str, view: IndexedView, rewrite: TextRewrite) -> list[BlockUpdate]:
    """Propose a TEXT update for every text slot in ``view`` that ``rewrite`` shortens.

    The common loop of the text processors: only a result strictly shorter than the text
    it read becomes a proposal, so a processor can never grow the context.
    """
    updates: list[BlockUpdate] = []
    for message_idx, message, block_idx, block in iter_blocks(view):
        text = block_text(block)
        if text is None:
            continue
        result = rewrite(message_idx, message, block_idx, block, text)
        if result is None or len(result[0]) >= len(text):
            continue
        new_text, metadata = result
        updates.append(
            make_update(name, message_idx, block_idx, read=text, text=new_text, metadata=metadata)
        )
    return updates
