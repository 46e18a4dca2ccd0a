"""File-read de-duplication: Cline's "context rewriting" before truncating.

When the same file's content appears several times in the visible history, every
occurrence but the newest is replaced by :data:`DUPLICATE_FILE_READ_NOTICE`. If that saves
at least 30 % of the characters, truncation can wait.

Occurrences are results of ``read_file``, ``write_to_file`` and ``replace_in_file`` (the
XML text form, the old form with the header alone in block 0, and native ``tool_result``
blocks) and ``<file_content path="...">`` mentions. :func:`plan_file_read_dedupe` works on
the original messages plus the effective overlay, as the store keeps them;
:func:`optimize_file_reads` runs one round on an empty overlay, for in-memory callers.

Deliberate differences from Cline: a ``tool_result`` with string content is read like one
with a text item; mention rewrites replace the first occurrence literally (JavaScript's
``String.replace`` interpreted ``$&`` and friends in paths); every update gets its own
metadata lists (Cline shared them between updates, so rollback saw rewritten history); an
occurrence whose target block has no text slot is counted but gets no (invisible) update;
malformed mention metadata raises instead of being trusted; and a block rewritten by a
processor or by hand is read as shown, where only Cline's own rewrites ever existed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from contextstore.core.errors import InvalidInputError, InvalidMessageError
from contextstore.core.notices import DUPLICATE_FILE_READ_NOTICE
from contextstore.core.overlays import (
    BlockUpdate,
    Message,
    OverlayMap,
    UpdateKind,
    apply_overlays,
    block_text,
    text_hash,
    with_block_text,
)
from contextstore.core.truncation import FIRST_HIDABLE, visible_start
from contextstore.core.validate import plain_lists_only, plain_messages
from contextstore.core.view import calls_hidden_before, repair_indexed

SAVINGS_THRESHOLD: Final = 0.3
"""Fraction of characters a de-duplication must save for truncation to be skipped."""

DEFAULT_SOURCE: Final = "file_read_dedupe"
"""The ``source`` recorded on the updates proposed here."""

REPLACED_PATHS: Final = "replaced_paths"
"""Metadata key of a mention update: the paths replaced in that block so far."""

ALL_PATHS: Final = "all_paths"
"""Metadata key of a mention update: every path mentioned in that block, duplicates kept."""

_HEADER_RE: Final = re.compile(r"^\[([^\s]+) for '([^']+)'\] Result:")
_FINAL_CONTENT_RE: Final = re.compile(
    r'(<final_file_content path="[^"]*">)[\s\S]*?(</final_file_content>)'
)
_MENTION_RE: Final = re.compile(r'<file_content path="([^"]*)">([\s\S]*?)</file_content>')
_WRITE_TOOLS: Final = frozenset({"write_to_file", "replace_in_file"})
_MENTION_BLOCKS: Final = 3
_OWN_REWRITES: Final = frozenset(
    {
        UpdateKind.READ_FILE,
        UpdateKind.ALTER_FILE,
        UpdateKind.TRUNCATION_NOTICE,
        UpdateKind.FIRST_USER_REPLACEMENT,
    }
)
"""Kinds of the context manager's rewrites that end a message's de-duplication."""


@dataclass(frozen=True)
class DedupePlan:
    """The updates one de-duplication round proposes, and whether they are enough.

    Attributes:
        updates: One update per rewritten block, ordered by address.
        touched: Sorted indices of the messages rewritten.
        fraction_saved: Characters saved over characters counted (may be negative).
        need_to_truncate: True when nothing changed or less than 30 % was saved.
    """

    updates: tuple[BlockUpdate, ...]
    touched: tuple[int, ...]
    fraction_saved: float
    need_to_truncate: bool


@dataclass(frozen=True)
class FileReadOptimization:
    """The result of :func:`optimize_file_reads`.

    Attributes:
        changed: Whether any block was rewritten.
        indices: Sorted indices (in the full history) of the messages rewritten.
        fraction_saved: Characters saved over characters counted.
        messages: The truncated view with the rewrites applied (new objects).
    """

    changed: bool
    indices: tuple[int, ...]
    fraction_saved: float
    messages: list[Message]

    @property
    def need_to_truncate(self) -> bool:
        """Whether the round left too much: nothing changed, or under 30 % saved."""
        return not self.changed or self.fraction_saved < SAVINGS_THRESHOLD


@dataclass(frozen=True)
class _Occurrence:
    message_idx: int
    block_idx: int
    kind: str
    search: str
    replacement: str


@dataclass
class _Scan:
    reads: dict[str, list[_Occurrence]] = field(default_factory=dict)
    mention_paths: dict[int, list[str]] = field(default_factory=dict)

    def record(self, path: str, occurrence: _Occurrence) -> None:
        self.reads.setdefault(path, []).append(occurrence)


@dataclass
class _MentionDraft:
    block_idx: int
    base: str
    text: str
    replaced: list[str]


def _content(messages: Sequence[Message], idx: int) -> Any:
    message = messages[idx]
    if not isinstance(message, dict):
        raise InvalidMessageError(
            f"message {idx} is a {type(message).__name__}, not a dict with role and content"
        )
    return message.get("content")


def _effective_block(
    messages: Sequence[Message], overlays: OverlayMap, idx: int, block_idx: int
) -> Any:
    """Block ``block_idx`` of list-content message ``idx`` as currently shown, or None."""
    content = _content(messages, idx)
    if not isinstance(content, list) or block_idx >= len(content):
        return None
    block = content[block_idx]
    update = overlays.get((idx, block_idx))
    if update is None or not isinstance(block, dict):
        return block
    applied = with_block_text(block, update.text, update.mode)
    return block if applied is None else applied


def _effective_text(
    messages: Sequence[Message], overlays: OverlayMap, idx: int, block_idx: int
) -> str | None:
    return block_text(_effective_block(messages, overlays, idx, block_idx))


def _path_list(update: BlockUpdate, key: str) -> list[str]:
    value = update.metadata.get(key)
    if not isinstance(value, (list, tuple)) or not all(isinstance(path, str) for path in value):
        raise InvalidInputError(
            f"the file-mention update at {update.address} needs metadata {key!r} as a list "
            f"of paths, got {value!r}; pass the metadata stored with the update"
        )
    return list(value)


def _updates_by_message(overlays: OverlayMap) -> dict[int, list[BlockUpdate]]:
    grouped: dict[int, list[BlockUpdate]] = {}
    for update in overlays.values():
        grouped.setdefault(update.message_idx, []).append(update)
    for updates in grouped.values():
        updates.sort(key=lambda update: update.block_idx)
    return grouped


def _mention_state(updates: Sequence[BlockUpdate]) -> tuple[bool, list[str]]:
    """Return (skip this message, paths already replaced in it) from its updates.

    Only the context manager's own rewrites stop a scan, as in Cline, whose overlay held
    nothing else; a block rewritten by a processor or by hand is read as it is shown.
    """
    if any(update.kind in _OWN_REWRITES for update in updates):
        return True, []
    mentions = [update for update in updates if update.kind == UpdateKind.FILE_MENTION]
    if not mentions:
        return False, []
    replaced = _path_list(mentions[0], REPLACED_PATHS)
    if len(replaced) == len(_path_list(mentions[0], ALL_PATHS)):
        return True, []
    return False, replaced


def _written_text(content: list[Any], first_text: str, content_idx: int) -> str | None:
    """Text of a write result that may hold ``<final_file_content>``."""
    first = content[0]
    if (isinstance(first, dict) and first.get("type") == "tool_result") or content_idx == 0:
        return first_text
    if len(content) > 1 and isinstance(content[1], dict) and content[1].get("type") == "text":
        text = content[1].get("text")
        return text if isinstance(text, str) else None
    return None


def _scan_tool_header(idx: int, content: list[Any], first_text: str, scan: _Scan) -> bool:
    """Record a file tool result in block 0; return whether the mention scan is skipped."""
    header = _HEADER_RE.match(first_text)
    if header is None:
        return False
    tool, path, header_text = header.group(1), header.group(2), header.group(0)
    content_idx = 0 if len(first_text) > len(header_text) else 1
    if tool == "read_file":
        if content_idx == 1:
            replacement = DUPLICATE_FILE_READ_NOTICE
        else:
            replacement = f"{header_text}\n{DUPLICATE_FILE_READ_NOTICE}"
        scan.record(path, _Occurrence(idx, content_idx, UpdateKind.READ_FILE, "", replacement))
        return True
    if tool not in _WRITE_TOOLS:
        return False
    written = _written_text(content, first_text, content_idx)
    if not written:
        return False
    final = _FINAL_CONTENT_RE.search(written)
    if final is not None:
        notice = f"{final.group(1)} {DUPLICATE_FILE_READ_NOTICE} {final.group(2)}"
        replacement = written[: final.start()] + notice + written[final.end() :]
        scan.record(path, _Occurrence(idx, content_idx, UpdateKind.ALTER_FILE, "", replacement))
    return True


def _scan_mentions(idx: int, content: list[Any], already: list[str], scan: _Scan) -> None:
    """Record the mentions of the first of blocks 0-2 that has any."""
    for block_idx, block in enumerate(content[:_MENTION_BLOCKS]):
        text = block_text(block)
        matches = list(_MENTION_RE.finditer(text)) if text else []
        if not matches:
            continue
        paths: list[str] = []
        for match in matches:
            path = match.group(1)
            paths.append(path)
            notice = f'<file_content path="{path}">{DUPLICATE_FILE_READ_NOTICE}</file_content>'
            if path not in already and match.group(0) != notice:
                occurrence = _Occurrence(
                    idx, block_idx, UpdateKind.FILE_MENTION, match.group(0), notice
                )
                scan.record(path, occurrence)
        scan.mention_paths[idx] = paths
        return


def _scan_message(idx: int, message: Message, already: list[str], scan: _Scan) -> None:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list) or not content:
        return
    first_text = block_text(content[0])
    if not first_text:
        return
    if not _scan_tool_header(idx, content, first_text, scan):
        _scan_mentions(idx, content, already, scan)


def _scan(messages: Sequence[Message], start: int, overlays: OverlayMap) -> _Scan:
    by_message = _updates_by_message(overlays)
    scan = _Scan()
    for idx in range(start, len(messages)):
        _content(messages, idx)
        updates = by_message.get(idx, [])
        skip, already = _mention_state(updates)
        if not skip:
            shown = apply_overlays(messages[idx], idx, overlays) if updates else messages[idx]
            _scan_message(idx, shown, already, scan)
    return scan


def _new_draft(
    messages: Sequence[Message], overlays: OverlayMap, occurrence: _Occurrence
) -> _MentionDraft:
    address = (occurrence.message_idx, occurrence.block_idx)
    base = _effective_text(messages, overlays, *address) or ""
    previous = overlays.get(address)
    replaced: list[str] = []
    if previous is not None and previous.kind == UpdateKind.FILE_MENTION:
        replaced = _path_list(previous, REPLACED_PATHS)
    return _MentionDraft(occurrence.block_idx, base, base, replaced)


def _build_updates(
    messages: Sequence[Message], overlays: OverlayMap, scan: _Scan, source: str
) -> list[BlockUpdate]:
    updates: list[BlockUpdate] = []
    drafts: dict[int, _MentionDraft] = {}
    for path, occurrences in scan.reads.items():
        for occ in occurrences[:-1]:
            if occ.kind == UpdateKind.FILE_MENTION:
                draft = drafts.get(occ.message_idx)
                if draft is None:
                    draft = drafts[occ.message_idx] = _new_draft(messages, overlays, occ)
                draft.text = draft.text.replace(occ.search, occ.replacement, 1)
                draft.replaced.append(path)
                continue
            base = _effective_text(messages, overlays, occ.message_idx, occ.block_idx)
            if base is None or base == occ.replacement:
                continue
            updates.append(
                BlockUpdate(
                    message_idx=occ.message_idx,
                    block_idx=occ.block_idx,
                    kind=occ.kind,
                    text=occ.replacement,
                    source=source,
                    metadata={},
                    base_hash=text_hash(base),
                )
            )
    for idx, draft in drafts.items():
        metadata = {
            REPLACED_PATHS: list(draft.replaced),
            ALL_PATHS: list(scan.mention_paths[idx]),
        }
        updates.append(
            BlockUpdate(
                message_idx=idx,
                block_idx=draft.block_idx,
                kind=UpdateKind.FILE_MENTION,
                text=draft.text,
                source=source,
                metadata=metadata,
                base_hash=text_hash(draft.base),
            )
        )
    updates.sort(key=lambda update: update.address)
    return updates


def _kept_indices(count: int, start: int) -> list[int]:
    """Indices of the truncated view: messages 0 and 1, then ``start`` onwards."""
    return [idx for idx in range(FIRST_HIDABLE) if idx < count] + list(range(start, count))


def _image_chars(block: Any) -> int:
    if not isinstance(block, dict) or block.get("type") != "image":
        return 0
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        return 0
    data = source.get("data")
    return len(data) if isinstance(data, str) else 0


def _fraction_saved(
    messages: Sequence[Message],
    start: int,
    overlays: OverlayMap,
    updates: Mapping[tuple[int, int], BlockUpdate],
) -> float:
    """Cline's character metric over the view; string contents count nothing, as there."""
    saved = 0
    total = 0
    for idx in _kept_indices(len(messages), start):
        content = _content(messages, idx)
        if not isinstance(content, list):
            continue
        for block_idx in range(len(content)):
            block = _effective_block(messages, overlays, idx, block_idx)
            text = block_text(block)
            if text is None:
                total += _image_chars(block)
                continue
            update = updates.get((idx, block_idx))
            if update is not None:
                saved += len(text) - len(update.text)
            total += len(text)
    return saved / total if total else 0.0


def _require_start(start: int) -> int:
    if isinstance(start, bool) or not isinstance(start, int) or start < FIRST_HIDABLE:
        raise InvalidInputError(
            f"start must be an int >= {FIRST_HIDABLE} (messages 0 and 1 are never "
            f"de-duplicated), got {start!r}; use visible_start(deleted_range)"
        )
    return start


def plan_file_read_dedupe(
    messages: Sequence[Message],
    start: int,
    overlays: OverlayMap,
    *,
    source: str = DEFAULT_SOURCE,
) -> DedupePlan:
    """Plan one de-duplication round over the visible messages from ``start``.

    Only user messages with list content from ``start`` on are scanned, as they are shown
    (with their effective updates); a message the context manager already rewrote (a read
    or write replaced, a notice) is never rescanned, a mention message whose paths are all
    replaced is skipped, and a block that already shows the notice gets no update. Per
    path, every occurrence of this round but the newest is replaced. A mention update is
    built on the block's current text and records ``replaced_paths`` (cumulative) and
    ``all_paths`` as new lists.

    The savings metric is Cline's: characters over messages 0, 1 and ``start`` onwards;
    rewritten blocks count their current text and save the difference to the new text,
    other text blocks count their current text, base64 images count their data, and
    string contents count nothing. Savings can be negative for small files.

    Args:
        messages: The original messages (no overlay applied), indexed by position.
        start: Index of the first visible message after 0 and 1 (see ``visible_start``).
        overlays: The effective update per block.
        source: The ``source`` to record on the proposed updates.

    Returns:
        The proposed updates and whether truncation is still needed.

    Raises:
        InvalidInputError: If ``start`` is below 2, a message is not a dict, or a mention
            update's metadata is malformed.
    """
    _require_start(start)
    scan = _scan(messages, start, overlays)
    updates = _build_updates(messages, overlays, scan, source)
    by_address = {update.address: update for update in updates}
    fraction = _fraction_saved(messages, start, overlays, by_address)
    return DedupePlan(
        updates=tuple(updates),
        touched=tuple(sorted({update.message_idx for update in updates})),
        fraction_saved=fraction,
        need_to_truncate=not updates or fraction < SAVINGS_THRESHOLD,
    )


@plain_lists_only
def optimize_file_reads(
    messages: Sequence[Mapping[str, Any]], deleted_range: Sequence[int] | None = None
) -> FileReadOptimization:
    """Run one de-duplication round on a fresh overlay and return the resulting view.

    This is Cline's in-memory variant, used for subagents whose history is not stored.
    The view is messages 0 and 1 plus those after ``deleted_range``, with the rewrites
    applied, the orphan filter and the tool-result pairing repair. Every message of the
    view is a new object, so the caller's messages are never shared or changed.

    Args:
        messages: The full history.
        deleted_range: The effective deleted range, or None.

    Returns:
        What changed, the fraction saved and the rewritten view.
    """
    history = plain_messages(messages)
    start = visible_start(deleted_range)
    plan = plan_file_read_dedupe(history, start, {})
    overlay = {update.address: update for update in plan.updates}
    view = repair_indexed(
        [
            (idx, copy.deepcopy(apply_overlays(history[idx], idx, overlay)))
            for idx in _kept_indices(len(history), start)
        ],
        hidden_calls=calls_hidden_before(history, deleted_range),
    )
    return FileReadOptimization(
        changed=bool(plan.updates),
        indices=plan.touched,
        fraction_saved=plan.fraction_saved,
        messages=view,
    )
