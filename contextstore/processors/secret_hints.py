"""The secret masker's prefilter: which texts may hold a secret at all.

Every pattern names hints, substrings each of its matches contains. The hints of a pattern
set are compiled once into Aho-Corasick automata, so that a text, or many texts joined, is
scanned once for all of them; only the patterns whose hints turn up run their regexes, and
only the blocks where some hint turns up go through the masking steps.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ahocorasick_rs import AhoCorasick, BytesAhoCorasick, MatchKind

from contextstore.core.overlays import block_text, text_document_data
from contextstore.core.server_tools import OPAQUE_FIELDS
from contextstore.processors.secret_patterns import (
    KEY_IN_CONTEXT,
    PASSWORD_KEY_NAME,
    SECRET_KEY_NAME,
    SecretPattern,
)


@dataclass(frozen=True)
class Prefilter:
    """Every hint of a pattern set in one Aho-Corasick automaton: a text is scanned once
    for all of them, and only the patterns whose hints it contains run their regexes."""

    source: tuple[SecretPattern, ...]
    """The whole set it was built from (held so that its identity stays unique)."""
    patterns: tuple[SecretPattern, ...]
    automaton: AhoCorasick | None
    always: tuple[SecretPattern, ...]
    """Patterns without hints: every text is searched with them."""
    anywhere: BytesAhoCorasick | None
    """The same hints over UTF-8, matched leftmost-first: the quickest way to learn where
    some hint occurs in many texts at once (about four times as fast as the automaton
    above, which reports every hint present, overlapping ones included)."""


_PREFILTERS: dict[tuple[int, tuple[str, ...]], Prefilter] = {}


def hint_filter(patterns: Sequence[SecretPattern], levels: tuple[str, ...]) -> Prefilter:
    """The prefilter of a pattern set, built once per set (keyed by the set's identity;
    the entry keeps the set alive, so the identity is never reused)."""
    key = (id(patterns), levels)
    found = _PREFILTERS.get(key)
    if found is None:
        if len(_PREFILTERS) > 256:
            _PREFILTERS.clear()
        source = tuple(patterns)
        chosen = tuple(p for p in source if p.confidence in levels)
        hints = sorted({h for p in chosen for h in p.hints})
        automaton = AhoCorasick(hints) if hints else None
        anywhere = (
            BytesAhoCorasick([h.encode() for h in hints], matchkind=MatchKind.LeftmostFirst)
            if hints
            else None
        )
        always = tuple(p for p in chosen if not p.hints)
        found = Prefilter(source, chosen, automaton, always, anywhere)
        _PREFILTERS[key] = found
    return found


def enabled_patterns(
    text: str, patterns: Sequence[SecretPattern], levels: tuple[str, ...]
) -> list[SecretPattern]:
    """The patterns that may match ``text`` (those :meth:`SecretPattern.may_match` admits),
    found with one scan of the lower-cased text."""
    prefilter = hint_filter(patterns, levels)
    if prefilter.automaton is None:
        return list(prefilter.always)
    present = set(prefilter.automaton.find_matches_as_strings(text.lower(), overlapping=True))
    if not present:
        return list(prefilter.always)
    return [p for p in prefilter.patterns if not p.hints or not present.isdisjoint(p.hints)]


UNMASKED_BLOCK_FIELDS: frozenset[str] = frozenset(
    {"type", "id", "name", "tool_use_id", "call_id", "is_error", "signature", "cache_control"}
)
"""Block fields never masked: what pairs, names and verifies a block, not what it says."""

SIDE_TEXT_TYPES = frozenset({"text", "image", "document"})
"""Block types whose other fields (citations, a document's title, a source's URL) reach the
payload beside their main text."""

OPAQUE_SOURCE_FIELDS = frozenset({"type", "media_type", "file_id"})
"""Source fields that name a format or a provider's file, never free text."""


def side_texts(block: dict[str, Any]) -> list[str]:
    """The strings of a text, image or document ``block`` besides its main text (a text
    block's text, a plain-text document's data): every string of its other fields (a text's
    ``citations``, a document's ``title``, ``context`` and ``citations``) but
    :data:`UNMASKED_BLOCK_FIELDS`, and of its source the URL and the texts of a content
    source, never base64 data, media types or file ids."""
    found: list[str] = []
    kind = block.get("type")
    for key, value in block.items():
        if key in UNMASKED_BLOCK_FIELDS or (kind == "text" and key == "text"):
            continue
        if key == "source" and kind in ("image", "document") and isinstance(value, dict):
            _source_strings(value, kind, found)
        else:
            json_strings(value, found)
    return found


def _source_strings(source: dict[str, Any], kind: str, found: list[str]) -> None:
    source_type = source.get("type")
    for key, value in source.items():
        if key in OPAQUE_SOURCE_FIELDS:
            continue
        if key == "data" and (
            source_type == "base64" or (kind == "document" and source_type == "text")
        ):
            continue  # binary, or the document's main text
        if key == "content" and source_type == "content" and isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and item.get("type") in SIDE_TEXT_TYPES:
                    if item.get("type") == "text" and isinstance(item.get("text"), str):
                        found.append(item["text"])
                    found.extend(side_texts(item))
                else:
                    json_strings(item, found)
        else:
            json_strings(value, found)


KEPT_VALUE_KEYS: frozenset[str] = OPAQUE_FIELDS | {"file_id"}
"""Keys whose values are never scanned or masked, wherever they are: encrypted data the API
decrypts when it is sent back (a web search result's page, a citation's
``encrypted_index``, a code execution's output; changing one breaks the request), and the
ids of uploaded files."""


def json_strings(value: Any, found: list[str]) -> None:
    """Append every string held in the JSON value ``value`` to ``found``, but those under
    :data:`KEPT_VALUE_KEYS`."""
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in KEPT_VALUE_KEYS:
                json_strings(item, found)
    elif isinstance(value, list):
        for item in value:
            json_strings(item, found)


TEXT_SLOTS = frozenset({"text", "tool_result"})
"""Block types whose text (``text``; a tool result's string ``content``) is all the masker
reads of them."""

BATCH_CHARS = 1 << 20
"""Characters of block texts the masker scans for hints in one pass (bounds the memory the
joined texts take)."""


class HintBatch:
    """Blocks gathered for one hint scan, in view order: each with the texts that decide
    whether it may hold a secret, or forced (it goes through the masking steps whatever it
    holds)."""

    def __init__(self, automaton: BytesAhoCorasick) -> None:
        self.automaton = automaton
        self.texts: list[str] = []
        self.owners: list[tuple[int, int, dict[str, Any]]] = []
        """The block of each text (a block with several texts is there for each)."""
        self.forced: list[tuple[int, tuple[int, int, dict[str, Any]]]] = []
        """Forced blocks, each after the texts gathered before it."""
        self.chars = 0

    def flagged(self) -> list[tuple[int, int, dict[str, Any]]]:
        """The blocks, in view order, that may hold a secret; empties the batch."""
        hinted = sorted(self._hinted_texts())
        found: list[tuple[int, tuple[int, int, dict[str, Any]]]] = []
        for position in hinted:
            owner = self.owners[position]
            if not found or found[-1][1] is not owner:
                found.append((position, owner))
        if self.forced:
            # A forced block goes before the texts gathered after it (sort is stable).
            found = sorted([*self.forced, *found], key=lambda item: item[0])
        self.texts.clear()
        self.owners.clear()
        self.forced.clear()
        self.chars = 0
        return [owner for _, owner in found]

    def _hinted_texts(self) -> set[int]:
        """The positions of the texts holding a hint, from one scan of them lower-cased and
        joined by line breaks. No hint holds a line break, so every match lies inside one
        text and each text holding a hint has a match of its own."""
        if not self.texts:
            return set()
        joined = "\n".join(self.texts)
        data = joined.lower().encode()
        matches = self.automaton.find_matches_as_indexes(data)
        if not matches:
            return set()
        if len(data) == len(joined):
            # One byte per character before and after lower-casing: offsets are the texts'.
            sizes = [len(text) for text in self.texts]
        else:
            sizes = [len(text.lower().encode()) for text in self.texts]
        starts = []
        offset = 0
        for size in sizes:
            starts.append(offset)
            offset += size + 1
        return {bisect.bisect_right(starts, start) - 1 for _, start, _ in matches}


def scanned_texts(block: dict[str, Any], medium: bool) -> tuple[str, ...] | None:
    """The texts of ``block`` that hold every secret the masker could find in it (a block
    none of whose texts holds a hint gets no proposal), or None when it must go through
    the masking steps whatever its texts hold (``medium``: the masker's confidence enables
    medium patterns)."""
    kind = block.get("type")
    if kind == "tool_use" and "input" in block:
        value = block["input"]
        if isinstance(value, str):
            return (value,)
        if value.__class__ is not dict:
            return None
        texts = []
        for key, item in value.items():
            if item.__class__ is str:
                # mask_value's rules for a value held under a password- or secret-like key.
                if key.__class__ is not str or PASSWORD_KEY_NAME.search(key):
                    return None
                if medium and SECRET_KEY_NAME.search(key):
                    return None
                texts.append(f"{key}={item}" if KEY_IN_CONTEXT.search(key) else item)
            elif not (item is None or item.__class__ in (bool, int, float)):
                return None
        return tuple(texts)
    content = block.get("content")
    if kind == "tool_result" and isinstance(content, list):
        if any(isinstance(item, dict) and item.get("type") == "search_result" for item in content):
            return None
        texts = []
        for item in content:
            if not isinstance(item, dict):
                continue
            text = item["text"] if isinstance(item.get("text"), str) else text_document_data(item)
            if text is not None:
                texts.append(text)
            if item.get("type") in SIDE_TEXT_TYPES:
                texts.extend(side_texts(item))
        return tuple(texts)
    text = block_text(block) if kind != "document" else text_document_data(block)
    main = () if text is None else (text,)
    return (*main, *side_texts(block)) if kind in SIDE_TEXT_TYPES else main
