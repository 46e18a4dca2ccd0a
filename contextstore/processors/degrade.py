"""Media degradation: replace images and documents by a short text pointer (opt-in).

An image costs the model well over a thousand tokens every turn it stays in view. Once it
has been looked at, a pointer that names its type, size and digest is often enough, and
unlike Gemini CLI's blob degradation nothing is lost: the original stays in the database
and the pointer says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import Block, BlockUpdate
from contextstore.core.view import IndexedView
from contextstore.processors.base import (
    MEDIA_TYPES,
    iter_blocks,
    make_block_update,
    media_digest,
)
from contextstore.processors.triggers import Trigger


def format_size(size: int) -> str:
    """Return ``size`` bytes in a short human form: ``512 B``, ``48.2 KB``, ``3.1 MB``."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def media_pointer(block: Block) -> str:
    """Return the text that stands in for an image or document block.

    Example: ``[image omitted: image/png, 48.2 KB, sha256 3f2a9c1e0b7d; the original is
    kept in the database]``. A document's title is included when it has one.
    """
    kind = str(block.get("type", "media"))
    media, size, digest = media_digest(block)
    details = [media]
    title = block.get("title")
    if isinstance(title, str) and title:
        details.insert(0, repr(title))
    if size is not None:
        details.append(format_size(size))
    details.append(f"sha256 {digest[:12]}")
    return f"[{kind} omitted: {', '.join(details)}; the original is kept in the database]"


class MediaDegrader:
    """Processor that turns image and document blocks into text pointers.

    A top-level image or document becomes a text block holding its pointer (``BLOCK``
    mode). A ``tool_result`` whose list content holds media gets a ``BLOCK`` update on
    the result itself: its text items are kept and each medium in it (of any kind, since
    the result becomes text) becomes its pointer, joined by blank lines; the result keeps
    its id and error flag. Off by default: add it to
    a pipeline to use it.
    """

    independent = True
    local = True
    """Runs the store's own code only (no hook of the caller's): a prepare may run it while
    holding the conversation's write lock (see :attr:`Pipeline.local
    <contextstore.processors.pipeline.Pipeline.local>`)."""
    trigger: Trigger = Trigger.new_message()
    """Runs on each new message, given only the new messages (set another
    :class:`~contextstore.processors.triggers.Trigger` on the instance to change it)."""
    depends_on: tuple[str, ...] = ()

    def __init__(
        self, kinds: Iterable[str] = ("image", "document"), *, name: str = "degrade_media"
    ) -> None:
        """Create a degrader.

        Args:
            kinds: Which block types to degrade: ``"image"``, ``"document"`` or both.
            name: The processor name recorded as each update's ``source``.

        Raises:
            InvalidInputError: ``kinds`` names something other than image or document.
        """
        chosen = tuple(sorted(set(kinds)))
        unknown = set(chosen) - MEDIA_TYPES
        if unknown or not chosen:
            raise InvalidInputError(
                f"kinds must be a non-empty subset of {sorted(MEDIA_TYPES)}, got {list(kinds)}"
            )
        self.name = name
        self.kinds = chosen

    def config(self) -> dict[str, Any]:
        """Return the degraded block types."""
        return {"kinds": list(self.kinds)}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        """Return a pointer update for every selected medium in ``view``."""
        updates: list[BlockUpdate] = []
        for message_idx, _, block_idx, block in iter_blocks(view):
            text = self._replacement(block)
            if text is None:
                continue
            metadata = {"degraded": self._digests(block)}
            updates.append(
                make_block_update(self.name, message_idx, block_idx, block, text, metadata)
            )
        return updates

    def _selected(self, item: Any) -> bool:
        return isinstance(item, dict) and item.get("type") in self.kinds

    def _replacement(self, block: Block) -> str | None:
        if self._selected(block):
            return media_pointer(block)
        content = block.get("content")
        if block.get("type") != "tool_result" or not isinstance(content, list):
            return None
        if not any(self._selected(item) for item in content):
            return None
        parts: list[str] = []
        for item in content:
            # Any medium in a degraded result needs a pointer: BLOCK mode leaves text only.
            if isinstance(item, dict) and item.get("type") in MEDIA_TYPES:
                parts.append(media_pointer(item))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append(item["text"])
        return "\n\n".join(parts)

    def _digests(self, block: Block) -> list[str]:
        """Return the full SHA-256 of each degraded medium, for the audit trail."""
        items = [block] if self._selected(block) else block.get("content", [])
        return [
            media_digest(item)[2]
            for item in items
            if isinstance(item, dict) and item.get("type") in MEDIA_TYPES
        ]
