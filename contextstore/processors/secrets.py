"""Secret masking of messages, tool definitions and the view: the write-time maskers and
the :class:`SecretMasker` processor.

They apply :mod:`contextstore.processors.secret_text` (finding and masking secrets in a
string or a JSON value) to the fields of each block the model is shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import (
    BlockUpdate,
    Message,
    UpdateMode,
    block_text,
    search_result_text,
    text_document_data,
)
from contextstore.core.validate import json_copy, shown
from contextstore.core.view import IndexedView
from contextstore.processors.base import (
    canonical_json,
    iter_blocks,
    make_block_update,
    make_update,
    media_digest,
)
from contextstore.processors.secret_hints import (
    BATCH_CHARS,
    OPAQUE_SOURCE_FIELDS,
    SIDE_TEXT_TYPES,
    TEXT_SLOTS,
    UNMASKED_BLOCK_FIELDS,
    HintBatch,
    enabled_patterns,
    hint_filter,
    json_strings,
    scanned_texts,
    side_texts,
)
from contextstore.processors.secret_patterns import (
    HIGH,
    MEDIUM,
    PASSWORD_KEY_NAME,
    PATTERNS,
    SECRET_KEY_WORD,
    SecretPattern,
)
from contextstore.processors.secret_text import (
    ENCODE_JSON,
    Finding,
    confidence_levels,
    find_secrets,
    marker,
    mask_text,
    mask_value,
)
from contextstore.processors.triggers import Trigger

__all__ = [
    "Finding",
    "SecretMasker",
    "find_secrets",
    "marker",
    "mask_block",
    "mask_message",
    "mask_text",
    "mask_tools",
    "mask_value",
]


_SIGNED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_MAIN_FIELDS: dict[Any, frozenset[str]] = {
    "text": frozenset({"text"}),
    "tool_use": frozenset({"input"}),
    "tool_result": frozenset({"content"}),
    "document": frozenset({"source"}),
    "image": frozenset({"source"}),
}
"""Per block type, the fields masked by their own rule."""


def mask_message(
    message: Message,
    *,
    confidence: str = HIGH,
    patterns: Sequence[SecretPattern] = PATTERNS,
) -> Message:
    """Return a deep copy of ``message`` with every secret masked; the input is untouched.

    Meant for callers who must never store a secret: the store can mask a message before
    writing it. Masked: a string content, ``text`` blocks, ``tool_result`` content (a
    string, or the items of a list, each masked as a block), string values anywhere in a
    ``tool_use`` input, the sources of images and documents (a URL, plain-text data, the
    blocks of a content source), the message's extra fields (Cline's ``metrics``, any
    ``meta``, nested strings included) and the extra fields of blocks (a text's
    ``citations``, a document's ``title`` and ``context``: all but ids, names, signatures and
    :data:`UNMASKED_BLOCK_FIELDS`). ``thinking`` and ``redacted_thinking`` blocks are left as
    they are: their text is covered by a signature the provider verifies when the block is
    sent back, so an edited thinking block would make the next request fail. Base64 data,
    media types and file ids are never scanned.

    Raises:
        InvalidInputError: ``message`` is not a dict.
    """
    if not isinstance(message, dict):
        raise InvalidInputError(
            f"mask_message takes a message dict ({{'role': ..., 'content': ...}}), got "
            f"{shown(message)}; mask a text with mask_text."
        )
    result: Message = json_copy(message)

    def mask(text: str) -> str:
        return mask_text(text, confidence=confidence, patterns=patterns)[0]

    extras = {k: v for k, v in result.items() if k not in ("role", "content")}
    if extras:
        result.update(mask_value(extras, confidence=confidence, patterns=patterns))
    content = result.get("content")
    if isinstance(content, str):
        result["content"] = mask(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                _mask_block_in_place(block, mask, confidence, patterns)
    return result


def mask_block(
    block: dict[str, Any],
    *,
    confidence: str = HIGH,
    patterns: Sequence[SecretPattern] = PATTERNS,
    thinking: bool = False,
) -> dict[str, Any]:
    """Return a deep copy of one content block with every secret masked, as
    :func:`mask_message` masks the blocks of a message; the input is untouched.

    ``thinking=True`` also masks a ``thinking`` block's text, which :func:`mask_message`
    leaves alone because the provider verifies its signature when it is sent back: for a
    copy that is only read (the HTML report), never sent. ``redacted_thinking`` holds only
    the provider's encrypted data and is kept either way.

    Raises:
        InvalidInputError: ``block`` is not a dict.
    """
    if not isinstance(block, dict):
        raise InvalidInputError(
            f"mask_block takes a content block dict ({{'type': ...}}), got {shown(block)}; "
            "mask a message with mask_message and a text with mask_text."
        )
    result: dict[str, Any] = json_copy(block)

    def mask(text: str) -> str:
        return mask_text(text, confidence=confidence, patterns=patterns)[0]

    if thinking and result.get("type") == "thinking":
        if isinstance(result.get("thinking"), str):
            result["thinking"] = mask(result["thinking"])
        for key in result.keys() - UNMASKED_BLOCK_FIELDS - {"thinking"}:
            result[key] = mask_value({key: result[key]}, confidence=confidence, patterns=patterns)[
                key
            ]
        return result
    _mask_block_in_place(result, mask, confidence, patterns)
    return result


TOOL_IDENTITY_FIELDS = frozenset({"name", "type", "cache_control"})
"""Tool definition fields never masked: what the model calls a tool by, and markers."""


def mask_tools(
    tools: Sequence[dict[str, Any]],
    *,
    confidence: str = HIGH,
    patterns: Sequence[SecretPattern] = PATTERNS,
    findings: list[Finding] | None = None,
) -> list[dict[str, Any]]:
    """Return masked copies of tool definitions (Anthropic's schema): every string of a
    tool but its name, type and cache marker (``description``, the descriptions, defaults
    and examples of its ``input_schema``...) masked as :func:`mask_value` masks a value.
    ``findings``, when given, collects the findings."""
    masked = []
    for tool in tools:
        copied = dict(tool)
        for key in copied.keys() - TOOL_IDENTITY_FIELDS:
            value = {key: copied[key]}
            copied[key] = mask_value(
                value, confidence=confidence, patterns=patterns, findings=findings
            )[key]
        masked.append(copied)
    return masked


def _mask_block_in_place(
    block: dict[str, Any],
    mask: Callable[[str], str],
    confidence: str,
    patterns: Sequence[SecretPattern],
) -> None:
    """Mask one block of a private deep copy (see :func:`mask_message`); a tool result's
    list items are masked as blocks."""
    kind = block.get("type")
    if kind in _SIGNED_BLOCKS:
        return
    for key in block.keys() - UNMASKED_BLOCK_FIELDS - _MAIN_FIELDS.get(kind, frozenset()):
        block[key] = mask_value({key: block[key]}, confidence=confidence, patterns=patterns)[key]
    if kind == "text" and isinstance(block.get("text"), str):
        block["text"] = mask(block["text"])
    elif kind == "tool_use" and "input" in block:
        block["input"] = mask_value(block["input"], confidence=confidence, patterns=patterns)
    elif kind == "tool_result" and isinstance(block.get("content"), str):
        block["content"] = mask(block["content"])
    elif kind == "tool_result" and isinstance(block.get("content"), list):
        for item in block["content"]:
            if isinstance(item, dict):
                _mask_block_in_place(item, mask, confidence, patterns)
    elif kind in ("image", "document") and isinstance(block.get("source"), dict):
        _mask_source_in_place(block["source"], mask, confidence, patterns)


def _mask_source_in_place(
    source: dict[str, Any],
    mask: Callable[[str], str],
    confidence: str,
    patterns: Sequence[SecretPattern],
) -> None:
    """Mask an image's or document's source: its URL, a plain-text document's data and the
    blocks of a content source; base64 data, media types and file ids are left alone."""
    source_type = source.get("type")
    for key in source.keys() - OPAQUE_SOURCE_FIELDS:
        value = source[key]
        if key == "data" and source_type == "base64":
            continue
        if key == "content" and source_type == "content" and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _mask_block_in_place(item, mask, confidence, patterns)
        elif isinstance(value, str):
            source[key] = mask(value)
        else:
            source[key] = mask_value(value, confidence=confidence, patterns=patterns)


def _search_result_shown(item: dict[str, Any]) -> tuple[str, list[str]]:
    """A ``search_result`` block as the text shown in its place, the text the OpenAI and
    Gemini formats send for one (:func:`search_result_text`: its title, source and texts),
    and the strings that text leaves out (a text item's ``citations``, an item of another
    kind), whose secrets count too."""
    dropped: list[str] = []
    for key, value in item.items():
        if key in UNMASKED_BLOCK_FIELDS or (key in ("title", "source") and isinstance(value, str)):
            continue
        if key != "content" or not isinstance(value, list):
            json_strings(value, dropped)
            continue
        for part in value:
            if (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                dropped.extend(side_texts(part))
            else:
                json_strings(part, dropped)
    return search_result_text(item), dropped


def _search_result_texts(item: dict[str, Any]) -> list[str]:
    """Every text of a ``search_result`` block a secret may sit in: the text it is shown
    as and the strings that text leaves out."""
    shown, dropped = _search_result_shown(item)
    return [shown, *dropped]


_SHOWN_FIELDS = frozenset({"text", "title", "context", "source"})
"""The fields :func:`_shown` puts in the text it shows."""


def _shown(item: dict[str, Any]) -> tuple[str, list[str]]:
    """A text, image, document or ``search_result`` block as the text shown in its place
    when a field that text cannot mask in place holds a secret: a text block's text; a
    document's title, context and text (plain or of a content source), or a pointer to its
    file; an image's pointer (a URL source shows its URL, masked with the rest). Also
    returns the strings of the fields that text leaves out (a text's ``citations``)."""
    kind = item.get("type")
    if kind == "search_result":
        return _search_result_shown(item)
    dropped: list[str] = []
    for key, value in item.items():
        if key not in UNMASKED_BLOCK_FIELDS and key not in _SHOWN_FIELDS:
            json_strings(value, dropped)
    if kind == "text":
        text = item.get("text")
        return (text if isinstance(text, str) else ""), dropped
    lines = [item[key] for key in ("title", "context") if isinstance(item.get(key), str)]
    source = item.get("source")
    source = source if isinstance(source, dict) else {}
    body = text_document_data(item)
    is_content = kind == "document" and source.get("type") == "content"
    inner = source.get("content") if is_content else None
    if isinstance(inner, str):
        body = inner
    elif isinstance(inner, list):
        shown = []
        for block in inner:
            if isinstance(block, dict):
                text, left_out = _shown(block)
                shown.append(text)
                dropped.extend(left_out)
        body = "\n\n".join(shown)
    if body is None:
        media, _, digest = media_digest(item)
        body = f"[{kind} omitted: {media}, sha256 {digest[:12]}]"
    lines.append(body)
    return "\n".join(lines), dropped


def _counts(findings: Iterable[Finding]) -> dict[str, int]:
    return dict(sorted(Counter(f.kind for f in findings).items()))


class SecretMasker:
    """Processor that masks secrets in the view the model sees.

    Proposes a ``TEXT`` update for a text block or a tool result's text, and a
    ``TOOL_INPUT`` update for a ``tool_use`` whose input holds a secret. A tool result
    whose secret sits in a list item other than the first (which a ``TEXT`` update cannot
    reach) gets a ``BLOCK`` update: its text items, masked and joined by blank lines, with
    a search result as the text the OpenAI and Gemini formats send for one and any image or
    document replaced by a pointer, because leaking the credential would be
    worse than hiding the image (the original stays in the database). Thinking blocks are
    never touched (see :func:`mask_message`).
    """

    independent = True
    local = True
    """Runs the store's own code only (no hook of the caller's): a prepare may run it while
    holding the conversation's write lock (see :attr:`Pipeline.local
    <contextstore.processors.pipeline.Pipeline.local>`)."""
    memoize = False
    """Scanning a message costs about what the pipeline's hash of it would: no memo."""
    trigger: Trigger = Trigger.new_message()
    """Runs on each new message, given only the new messages (set another
    :class:`~contextstore.processors.triggers.Trigger` on the instance to change it)."""
    depends_on: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        confidence: str = HIGH,
        patterns: Sequence[SecretPattern] | None = None,
        name: str = "secret_mask",
    ) -> None:
        """Create a masker.

        Args:
            confidence: ``"high"`` (default) or ``"medium"`` (adds opt-in patterns).
            patterns: A custom pattern set; defaults to :data:`PATTERNS`.
            name: The processor name recorded as each update's ``source``.
        """
        confidence_levels(confidence)
        self.name = name
        self.confidence = confidence
        self.patterns: tuple[SecretPattern, ...] = tuple(patterns or PATTERNS)

    def config(self) -> dict[str, Any]:
        """Return the confidence and the enabled patterns (kind, level and regex)."""
        levels = confidence_levels(self.confidence)
        return {
            "confidence": self.confidence,
            "patterns": [
                [p.kind, p.confidence, p.regex.pattern]
                for p in self.patterns
                if p.confidence in levels
            ],
        }

    def _may_hold_secret(self, value: Any) -> bool:
        """False when :func:`mask_value` would find nothing in ``value`` (a tool input):
        no pattern's hint in its JSON, and no key named like a password (or, at medium
        confidence, like a secret). The walk over the value is then skipped."""
        try:
            dumped = ENCODE_JSON(value)
        except (TypeError, ValueError):
            return True
        levels = confidence_levels(self.confidence)
        if enabled_patterns(dumped, self.patterns, levels) or PASSWORD_KEY_NAME.search(dumped):
            return True
        return MEDIUM in levels and SECRET_KEY_WORD.search(dumped) is not None

    def rewrite_system(self, text: str) -> str:
        """The system prompt with its secrets masked: a prepared request stores and sends
        it this way."""
        return self._mask(text)[0]

    def rewrite_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tool definitions with their secrets masked (see :func:`mask_tools`): a
        prepared request stores and sends them this way, as it does the system prompt.
        Tools whose JSON holds no pattern's hint (nearly all) are returned as given."""
        if not self._may_hold_secret(tools):
            return tools
        return mask_tools(tools, confidence=self.confidence, patterns=self.patterns)

    def _may_match(self, text: str) -> bool:
        """False when no pattern can match ``text`` (none of their hints is in it): most
        texts are settled by this one scan, without the steps of :func:`mask_text`."""
        prefilter = hint_filter(self.patterns, confidence_levels(self.confidence))
        if prefilter.always:
            return True
        if prefilter.automaton is None:
            return False
        return bool(prefilter.automaton.find_matches_as_strings(text.lower()))

    def _mask(self, text: str) -> tuple[str, list[Finding]]:
        return mask_text(text, confidence=self.confidence, patterns=self.patterns)

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        """Return masking updates for every block of ``view`` that holds a secret.

        The texts of many blocks are scanned for the patterns' hints together, in one
        Aho-Corasick pass over them joined; only a block where a hint turns up (or whose
        tool input is not a flat object of strings) goes through the masking steps. The
        proposals are those of :meth:`_propose_each`.
        """
        prefilter = hint_filter(self.patterns, confidence_levels(self.confidence))
        if prefilter.always or prefilter.anywhere is None:
            return self._propose_each(view)
        medium = MEDIUM in confidence_levels(self.confidence)
        updates: list[BlockUpdate] = []
        batch = HintBatch(prefilter.anywhere)
        texts, owners = batch.texts, batch.owners
        for message_idx, message in view:
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
                owners.append((message_idx, 0, {"type": "text", "text": content}))
                batch.chars += len(content)
            elif isinstance(content, list):
                for block_idx, block in enumerate(content):
                    if not isinstance(block, dict):
                        continue
                    # The commonest blocks, a text and a tool result's string, inline.
                    kind = block.get("type")
                    text = block.get("text" if kind == "text" else "content")
                    if (
                        kind in TEXT_SLOTS
                        and isinstance(text, str)
                        and (kind == "tool_result" or len(block) == 2)
                    ):
                        texts.append(text)
                        owners.append((message_idx, block_idx, block))
                        batch.chars += len(text)
                        continue
                    owner = (message_idx, block_idx, block)
                    scanned = scanned_texts(block, medium)
                    if scanned is None:
                        batch.forced.append((len(texts), owner))
                        continue
                    for text in scanned:
                        texts.append(text)
                        owners.append(owner)
                        batch.chars += len(text)
            if batch.chars >= BATCH_CHARS:
                updates.extend(self._flush(batch))
        updates.extend(self._flush(batch))
        return updates

    def _propose_each(self, view: IndexedView) -> list[BlockUpdate]:
        """:meth:`propose` block by block, each block's texts scanned on their own."""
        updates: list[BlockUpdate] = []
        for message_idx, _, block_idx, block in iter_blocks(view):
            update = self._propose_block(message_idx, block_idx, block)
            if update is not None:
                updates.append(update)
        return updates

    def _flush(self, batch: HintBatch) -> list[BlockUpdate]:
        """The proposals for the blocks gathered in ``batch`` (which is emptied)."""
        updates: list[BlockUpdate] = []
        for message_idx, block_idx, block in batch.flagged():
            update = self._propose_block(message_idx, block_idx, block)
            if update is not None:
                updates.append(update)
        return updates

    def _propose_block(self, message_idx: int, block_idx: int, block: Any) -> BlockUpdate | None:
        kind = block.get("type")
        if kind == "tool_use" and "input" in block:
            if not self._may_hold_secret(block["input"]):
                return None
            found: list[Finding] = []
            masked_input = mask_value(
                block["input"], confidence=self.confidence, patterns=self.patterns, findings=found
            )
            if not found:
                return None
            return make_update(
                self.name,
                message_idx,
                block_idx,
                read=canonical_json(block["input"]),
                text=canonical_json(masked_input),
                mode=UpdateMode.TOOL_INPUT,
                metadata={"secrets": _counts(found)},
            )
        if kind == "tool_result" and isinstance(block.get("content"), list):
            whole = self._propose_result_list(message_idx, block_idx, block)
            if whole is not None:
                return whole
        if kind in SIDE_TEXT_TYPES and self._any_secret(side_texts(block)):
            return self._propose_shown(message_idx, block_idx, block)
        document = text_document_data(block)
        if document is not None:
            if not self._any_secret([document]):
                return None
            return self._propose_shown(message_idx, block_idx, block)
        text = block_text(block)
        if text is None or not self._may_match(text):
            return None
        masked, findings = self._mask(text)
        if not findings:
            return None
        return make_update(
            self.name,
            message_idx,
            block_idx,
            read=text,
            text=masked,
            metadata={"secrets": _counts(findings)},
        )

    def _any_secret(self, texts: Iterable[str]) -> bool:
        """True when some text of ``texts`` holds a secret."""
        return any(self._may_match(text) and self._mask(text)[1] for text in texts)

    def _propose_shown(self, message_idx: int, block_idx: int, block: Any) -> BlockUpdate:
        """Show a text, image or document block holding a secret beyond a text slot's reach
        as a text block of what it says, masked (see :func:`_shown`; BLOCK mode: no update
        rewrites a citation, a title or a source in place). The secrets of the fields that
        text leaves out count in the update's metadata too."""
        shown, dropped = _shown(block)
        masked, findings = self._mask(shown)
        for text in dropped:
            findings.extend(self._mask(text)[1])
        return self._whole_block(message_idx, block_idx, block, masked, findings)

    def _whole_block(
        self, message_idx: int, block_idx: int, block: Any, text: str, findings: list[Finding]
    ) -> BlockUpdate:
        """A BLOCK update showing ``text`` in place of ``block``."""
        metadata = {"secrets": _counts(findings)}
        return make_block_update(self.name, message_idx, block_idx, block, text, metadata)

    def _propose_result_list(
        self, message_idx: int, block_idx: int, block: Any
    ) -> BlockUpdate | None:
        """Mask a list-content tool result whose later text items, or any plain-text
        document, hold secrets (BLOCK mode; a first text item alone takes a TEXT update)."""
        items = block["content"]
        beyond_reach = (
            [
                item["text"]
                for item in items[1:]
                if isinstance(item, dict) and isinstance(item.get("text"), str)
            ]
            + [data for item in items if (data := text_document_data(item)) is not None]
            + [
                text
                for item in items
                if isinstance(item, dict) and item.get("type") == "search_result"
                for text in _search_result_texts(item)
            ]
            + [
                text
                for item in items
                if isinstance(item, dict) and item.get("type") in SIDE_TEXT_TYPES
                for text in side_texts(item)
            ]
        )
        if not any(self._mask(text)[1] for text in beyond_reach):
            return None
        parts: list[str] = []
        findings: list[Finding] = []
        for item in items:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "text" and not isinstance(item.get("text"), str):
                continue
            if kind in SIDE_TEXT_TYPES or kind == "search_result":
                text, dropped = _shown(item)
            elif isinstance(item.get("text"), str):
                text, dropped = item["text"], []
            else:
                continue
            masked, found = self._mask(text)
            parts.append(masked)
            findings.extend(found)
            for other in dropped:
                findings.extend(self._mask(other)[1])
        return self._whole_block(message_idx, block_idx, block, "\n\n".join(parts), findings)
