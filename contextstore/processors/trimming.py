"""Trimming of oversized tool outputs and file contents: keep the head and the tail.

The beginning of an output usually says what ran and the end says how it finished (the
error, the summary line), so both are kept in proportion and the middle is replaced by a
marker that says how much was left out. The original stays in the database.
"""

from __future__ import annotations

import re
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import Block, BlockUpdate, Message
from contextstore.core.validate import shown
from contextstore.core.view import IndexedView
from contextstore.processors.base import shrink_texts
from contextstore.processors.triggers import Trigger

DEFAULT_MAX_CHARS = 40_000
"""Default size limit of one text, in characters (Gemini CLI's tool-output threshold)."""

_TOOL_HEADER = re.compile(r"^\s*\[[^\]\n]{1,200}\] Result:")
_FILE_TAGS = ("<file_content", "<final_file_content")
_SNAP_WINDOW = 0.25


def omission_marker(characters: int, lines: int) -> str:
    """Return the line that stands for ``characters`` omitted characters (``lines`` lines)."""
    unit = "line" if lines == 1 else "lines"
    return f"... [{characters:,} characters omitted ({lines:,} {unit})] ...\n"


def looks_like_tool_output(text: str) -> bool:
    """Return True for text shaped like a tool result or file contents.

    Recognises Cline's ``[tool for 'path'] Result:`` header and the ``<file_content``
    and ``<final_file_content`` tags that agents use to inline files.
    """
    return _TOOL_HEADER.match(text) is not None or any(tag in text for tag in _FILE_TAGS)


def _snap_head(text: str, length: int) -> int:
    """Move a head cut back to just after a line break if one is near."""
    cut = text.rfind("\n", max(0, length - int(length * _SNAP_WINDOW) - 1), length)
    return cut + 1 if cut >= 0 else length


def _snap_tail(text: str, length: int) -> int:
    """Return where a tail of about ``length`` characters starts, at a line start if near."""
    start = len(text) - length
    cut = text.find("\n", start - 1, start + int(length * _SNAP_WINDOW))
    return cut + 1 if cut >= 0 else start


def truncate_middle(text: str, max_chars: int, head_ratio: float = 0.2) -> str:
    """Return ``text`` cut to at most ``max_chars``, keeping head and tail in proportion.

    Args:
        text: The text to shorten.
        max_chars: Size limit of the result, marker included.
        head_ratio: Share of the kept characters taken from the beginning.

    Returns:
        ``text`` unchanged when it fits; otherwise its head, an :func:`omission_marker`
        and its tail. Cuts move to line boundaries when one is within a quarter of the
        kept length, so lines are seldom split. The result is never longer than ``text``
        (when even the marker would not fit, ``text`` is returned unchanged).
    """
    if len(text) <= max_chars:
        return text
    # The marker can only shrink as fewer characters are omitted, so sizing the budget
    # with the largest possible numbers guarantees the limit.
    budget = max_chars - len(omission_marker(len(text), text.count("\n") + 1)) - 1
    if budget <= 0:
        return text
    head_len = int(budget * head_ratio)
    head_end = _snap_head(text, head_len) if head_len else 0
    tail_start = _snap_tail(text, budget - head_len)
    tail_start = max(tail_start, head_end)
    omitted = text[head_end:tail_start]
    head = text[:head_end]
    separator = "" if not head or head.endswith("\n") else "\n"
    lines = omitted.count("\n") + (0 if omitted.endswith("\n") or not omitted else 1)
    result = head + separator + omission_marker(len(omitted), lines) + text[tail_start:]
    return result if len(result) < len(text) else text


class OutputTrimmer:
    """Processor that trims oversized tool outputs and file contents.

    What counts as tool output or file content:

    * the text of every ``tool_result`` block;
    * every text block of a ``user`` message (agents such as Cline carry tool results
      and inlined files as user text), except in message 0, which holds the task;
    * any text block, of any role, shaped like tool output (see
      :func:`looks_like_tool_output`).

    Assistant prose is never trimmed. Texts within ``max_chars`` are left alone.
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
        self,
        max_chars: int = DEFAULT_MAX_CHARS,
        head_ratio: float = 0.2,
        *,
        name: str = "trim",
    ) -> None:
        """Create a trimmer.

        Args:
            max_chars: Size limit of one text, marker included.
            head_ratio: Share of the kept characters taken from the beginning (0 to 1).
            name: The processor name recorded as each update's ``source``.

        Raises:
            InvalidInputError: ``max_chars`` is not a positive integer or ``head_ratio`` is
                not a number in ``[0, 1]``.
        """
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
            raise InvalidInputError(f"max_chars must be a positive integer, got {shown(max_chars)}")
        if (
            isinstance(head_ratio, bool)
            or not isinstance(head_ratio, int | float)
            or not 0.0 <= head_ratio <= 1.0
        ):
            raise InvalidInputError(f"head_ratio must be between 0 and 1, got {shown(head_ratio)}")
        self.name = name
        self.max_chars = max_chars
        self.head_ratio = head_ratio

    def config(self) -> dict[str, Any]:
        """Return the limit and head ratio."""
        return {"max_chars": self.max_chars, "head_ratio": self.head_ratio}

    def _applies(self, message_idx: int, message: Message, block: Block, text: str) -> bool:
        if block.get("type") == "tool_result" or looks_like_tool_output(text):
            return True
        return message.get("role") == "user" and message_idx != 0

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        """Return a trimming update for every oversized output in ``view``."""

        def rewrite(
            idx: int, message: Message, _block_idx: int, block: Block, text: str
        ) -> tuple[str, dict[str, Any]] | None:
            if len(text) <= self.max_chars or not self._applies(idx, message, block, text):
                return None
            trimmed = truncate_middle(text, self.max_chars, self.head_ratio)
            return trimmed, {"original_chars": len(text), "kept_chars": len(trimmed)}

        return shrink_texts(self.name, view, rewrite)
