"""The notices Cline shows in place of removed history, proposed as block updates.

The texts are Cline's, character for character, because agents and prompts built around
Cline recognise them. The helpers only propose :class:`BlockUpdate` values; the store
decides whether to write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from contextstore.core.overlays import (
    BlockUpdate,
    Message,
    OverlayMap,
    UpdateKind,
    apply_overlays,
    block_text,
    text_hash,
)

TRUNCATION_NOTICE: Final = (
    "[NOTE] Some previous conversation history with the user has been removed to maintain "
    "optimal context window length. The initial user task has been retained for continuity, "
    "while intermediate conversation history has been removed. Keep this in mind as you "
    "continue assisting the user. Pay special attention to the user's latest messages."
)
"""Cline's ``contextTruncationNotice()``: shown in place of the first assistant reply."""

FIRST_USER_REPLACEMENT: Final = "[Continue assisting the user!]"
"""Cline's ``processFirstUserMessageForTruncation()``: replaces the task text."""

DUPLICATE_FILE_READ_NOTICE: Final = (
    "[[NOTE] This file read has been removed to save space in the context window. "
    "Refer to the latest file read for the most up to date version of this file.]"
)
"""Cline's ``duplicateFileReadNotice()``: replaces all but the newest read of a file."""

SUMMARY_HEADING: Final = "Summary of the removed conversation:"
"""Heading of the optional summary appended to the truncation notice (our extension)."""

NOTICE_SOURCE: Final = "context_manager"
"""The ``source`` recorded on the notices proposed here."""


def _has_update_of_kind(overlays: OverlayMap, message_idx: int, kind: str) -> bool:
    return _update_of_kind(overlays, message_idx, kind) is not None


def _update_of_kind(overlays: OverlayMap, message_idx: int, kind: str) -> BlockUpdate | None:
    for update in overlays.values():
        if update.message_idx == message_idx and update.kind == kind:
            return update
    return None


def _visible_text(message: Message, idx: int, block_idx: int, overlays: OverlayMap) -> str:
    """Text of block ``block_idx`` as the model currently sees it."""
    shown = apply_overlays(message, idx, overlays).get("content")
    if isinstance(shown, str):
        return shown
    if isinstance(shown, list) and block_idx < len(shown):
        return block_text(shown[block_idx]) or ""
    return ""


def _first_text_slot(message: Message) -> int | None:
    """Index of the first block whose text an update can replace, or None."""
    content = message.get("content")
    if isinstance(content, str):
        return 0
    if not isinstance(content, list):
        return None
    for block_idx, block in enumerate(content):
        if block_text(block) is not None:
            return block_idx
    return None


def notice_text(summary: str | None = None) -> str:
    """Return the truncation notice, followed by ``summary`` when one is given."""
    if not summary:
        return TRUNCATION_NOTICE
    return f"{TRUNCATION_NOTICE}\n\n{SUMMARY_HEADING}\n{summary}"


def truncation_notice_update(
    messages: Sequence[Message], overlays: OverlayMap, summary: str | None = None
) -> BlockUpdate | None:
    """Propose the truncation notice for the first assistant reply (message 1), once.

    As in Cline the notice replaces the block's text rather than prefixing it, and it is
    proposed only while message 1 carries no effective notice. Deliberate difference:
    Cline always targeted block 0, so the notice was silently invisible when that block
    was thinking, a tool use or an image; here the first block of message 1 that has a
    text slot is targeted, and None is returned when there is none, or when message 1 is
    not the assistant's (a history may open with two user messages). A string content is
    block 0. A non-empty ``summary`` is appended after a blank line under
    :data:`SUMMARY_HEADING` (an extension: Cline had no place for it).

    Args:
        messages: The original, unmodified history.
        overlays: The effective update per block.
        summary: Optional summary of the hidden messages.

    Returns:
        The proposed update, or None when it exists already or cannot be shown.
    """
    if not can_show_a_notice(messages):
        return None  # the notice replaces text: never a user's words
    if _has_update_of_kind(overlays, 1, UpdateKind.TRUNCATION_NOTICE):
        return None
    block_idx = _first_text_slot(messages[1])
    assert block_idx is not None  # can_show_a_notice found it
    return BlockUpdate(
        message_idx=1,
        block_idx=block_idx,
        kind=UpdateKind.TRUNCATION_NOTICE,
        text=notice_text(summary),
        source=NOTICE_SOURCE,
        metadata={},
        base_hash=text_hash(_visible_text(messages[1], 1, block_idx, overlays)),
    )


def _first_block_is_nonempty_text(message: Message) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content)
    if not isinstance(content, list) or not content:
        return False
    first = content[0]
    return isinstance(first, dict) and first.get("type") == "text" and bool(first.get("text"))


def first_user_replacement_update(
    messages: Sequence[Message], overlays: OverlayMap, notice: str | None = None
) -> BlockUpdate | None:
    """Propose replacing the task text (block 0 of message 0) by a short continuation cue.

    Cline does this after summarising, condensing or recovering from a context-window
    error, so the model continues from the summary rather than restarting the task. It is
    proposed only while message 0 has no such effective update and its block 0 is a text
    block with non-empty text; other blocks (images, environment details) stay. The
    original stays in the store, so a rollback restores the task text. Deliberate
    difference: a string content counts as block 0 (Cline skipped it).

    With a ``notice`` (message 1 cannot show one), the cue must carry it, so it is
    proposed whenever message 0 can show it at all: over an earlier cue (whose notice and
    summary it replaces), else in block 0, else in the first block of message 0 that has
    a text slot (a task that opens with an image). The plain notice (no summary) over a
    cue that shows a notice already is not proposed, so an earlier summary is kept; nor is
    a text equal to the earlier cue's.

    Args:
        messages: The original, unmodified history.
        overlays: The effective update per block.
        notice: The truncation notice (with its summary) to show after the cue, when
            message 1 has no block that can show it.

    Returns:
        The proposed update, or None.
    """
    if not messages:
        return None
    earlier = _update_of_kind(overlays, 0, UpdateKind.FIRST_USER_REPLACEMENT)
    if notice is None:
        if earlier is not None or not _first_block_is_nonempty_text(messages[0]):
            return None
        block_idx: int | None = 0
    elif earlier is not None:
        if notice == TRUNCATION_NOTICE and earlier.text.startswith(
            f"{FIRST_USER_REPLACEMENT}\n\n{TRUNCATION_NOTICE}"
        ):
            return None  # the cue shows the notice already (and any earlier summary: kept)
        block_idx = earlier.block_idx
    elif _first_block_is_nonempty_text(messages[0]):
        block_idx = 0
    else:
        block_idx = _first_text_slot(messages[0])
    text = FIRST_USER_REPLACEMENT if notice is None else f"{FIRST_USER_REPLACEMENT}\n\n{notice}"
    if block_idx is None or (earlier is not None and earlier.text == text):
        return None
    return BlockUpdate(
        message_idx=0,
        block_idx=block_idx,
        kind=UpdateKind.FIRST_USER_REPLACEMENT,
        text=text,
        source=NOTICE_SOURCE,
        metadata={},
        base_hash=text_hash(_visible_text(messages[0], 0, block_idx, overlays)),
    )


def can_show_a_notice(messages: Sequence[Message]) -> bool:
    """Whether message 1 can show the truncation notice: it is the assistant's (the notice
    never replaces a user's words) and holds a block with a text slot (not only tool calls,
    thinking or images). When it cannot, the notice goes with the cue that replaces the
    task, if the truncation writes one."""
    return (
        len(messages) >= 2
        and messages[1].get("role") == "assistant"
        and _first_text_slot(messages[1]) is not None
    )


def can_show_a_summary(messages: Sequence[Message]) -> bool:
    """Whether a truncation's summary has a place the model reads: a text slot in message
    1 (the assistant's, for the notice) or in message 0 (after the cue)."""
    if can_show_a_notice(messages):
        return True
    return bool(messages) and _first_text_slot(messages[0]) is not None
