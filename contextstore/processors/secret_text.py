"""Finding secrets in text and masking them: the patterns applied to a string, and to every
string of a JSON value.

Every match becomes a typed marker such as ``[REDACTED:github_token]``, so the model (and
anyone reading the processed view) learns that a credential was there and of what kind,
never its value. The patterns live in :mod:`contextstore.processors.secret_patterns`;
masking messages, tool definitions and the view is :mod:`contextstore.processors.secrets`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import shown
from contextstore.processors.secret_hints import KEPT_VALUE_KEYS, enabled_patterns
from contextstore.processors.secret_patterns import (
    CONFIDENCE_LEVELS,
    HIGH,
    KEY_IN_CONTEXT,
    MEDIUM,
    PASSWORD_FLAG,
    PASSWORD_KEY_NAME,
    PATTERNS,
    SECRET_KEY_NAME,
    SecretPattern,
    is_placeholder,
    looks_generic,
)


@dataclass(frozen=True)
class Finding:
    """A secret found in a text: its kind, confidence and span in the ORIGINAL text.

    Findings never carry the secret itself, so they are safe to log or store.
    """

    kind: str
    start: int
    end: int
    confidence: str


def marker(kind: str) -> str:
    """Return the text that replaces a secret of ``kind``."""
    return f"[REDACTED:{kind}]"


def confidence_levels(confidence: str) -> tuple[str, ...]:
    """The pattern confidences a masker at ``confidence`` applies (``high``: high only).

    Raises:
        InvalidInputError: ``confidence`` is neither ``high`` nor ``medium``.
    """
    try:
        return CONFIDENCE_LEVELS[confidence]
    except KeyError:
        raise InvalidInputError(
            f"unknown secret-masking confidence {confidence!r}; use 'high' or 'medium'"
        ) from None


MAX_REJECTED_SPAN = 4_096
"""A match its validator refuses that is longer than this (no credential is) is skipped
whole: retrying one character later would match the same long run again, and a text of
such runs took quadratic time (seconds for 100 KB)."""


def _next_match(
    pattern: SecretPattern, text: str, position: int
) -> tuple[int, int, SecretPattern] | None:
    """Return the first valid secret span of ``pattern`` starting at or after ``position``."""
    while position <= len(text):
        match = pattern.regex.search(text, position)
        if match is None:
            return None
        start, end = pattern.secret_span(match)
        secret = text[start:end]
        valid = bool(secret) and "[REDACTED:" not in secret and start >= position
        if valid and (pattern.validator is None or pattern.validator(match, secret)):
            return (start, end, pattern)
        long_run = match.end() - match.start() > MAX_REJECTED_SPAN
        position = match.end() if long_run else match.start() + 1
    return None


ENCODE_JSON = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per call."""


def find_secrets(
    text: str,
    *,
    confidence: str = HIGH,
    patterns: Sequence[SecretPattern] = PATTERNS,
) -> list[Finding]:
    """Return the non-overlapping secrets in ``text``, in order of position.

    The text is scanned left to right: at each point the secret starting first wins, then
    the longest, then the pattern listed first, and every pattern resumes its search
    after the chosen span. Resuming (rather than discarding matches that overlapped a
    chosen one) finds secrets that a longer, losing match had swallowed, which is what
    makes masking idempotent.
    """
    enabled = enabled_patterns(text, patterns, confidence_levels(confidence))
    if not enabled:
        return []
    pending = {order: _next_match(p, text, 0) for order, p in enumerate(enabled)}
    findings: list[Finding] = []
    position = 0
    while True:
        for order, candidate in pending.items():
            if candidate is not None and candidate[0] < position:
                pending[order] = _next_match(enabled[order], text, position)
        live = [(c[0], c[0] - c[1], order, c) for order, c in pending.items() if c is not None]
        if not live:
            return findings
        start, _, _, (_, end, pattern) = min(live, key=lambda item: item[:3])
        findings.append(Finding(pattern.kind, start, end, pattern.confidence))
        position = end


def mask_text(
    text: str,
    *,
    confidence: str = HIGH,
    patterns: Sequence[SecretPattern] = PATTERNS,
) -> tuple[str, list[Finding]]:
    """Replace every secret in ``text`` by its typed marker.

    Args:
        text: Any text.
        confidence: ``"high"`` (default) uses only distinctive patterns; ``"medium"``
            adds publishable keys and high-entropy values assigned to secret-like names.
        patterns: The pattern set; defaults to :data:`PATTERNS`.

    Returns:
        The masked text and the findings, with spans in the original ``text``. Masking is
        idempotent: markers never match a pattern.

    Raises:
        InvalidInputError: ``text`` is not a string (``mask_value`` masks other values).
    """
    if not isinstance(text, str):
        raise InvalidInputError(
            f"mask_text takes a string, got {shown(text)}; mask a message with mask_message "
            "and other values with mask_value."
        )
    findings = find_secrets(text, confidence=confidence, patterns=patterns)
    if not findings:
        return text, []
    parts: list[str] = []
    position = 0
    for finding in findings:
        parts.append(text[position : finding.start])
        parts.append(marker(finding.kind))
        position = finding.end
    parts.append(text[position:])
    return "".join(parts), findings


def _keyed_kind(key: str, value: str, levels: tuple[str, ...]) -> str | None:
    """Classify a string value by the dict key that holds it (tool inputs, JSON)."""
    if "[REDACTED:" in value:
        return None
    if PASSWORD_KEY_NAME.search(key) and len(value) >= 3 and not is_placeholder(value):
        return "password"
    if MEDIUM in levels and SECRET_KEY_NAME.search(key) and looks_generic(value):
        return "generic_secret"
    return None


def mask_value(
    value: Any,
    *,
    confidence: str = HIGH,
    patterns: Sequence[SecretPattern] = PATTERNS,
    findings: list[Finding] | None = None,
) -> Any:
    """Return a masked copy of a JSON-like value (tool inputs): strings are masked.

    A string held under a password-like key (or, at medium confidence, a secret-like key)
    is replaced whole, since such a value has no surrounding text to recognise it by. Values
    under :data:`~contextstore.processors.secret_hints.KEPT_VALUE_KEYS` (encrypted data the
    provider reads back, file ids) are kept as they are.
    ``findings``, when given, collects findings (spans relative to each string).
    """
    levels = confidence_levels(confidence)
    sink = findings if findings is not None else []

    def walk(item: Any, key: str | None) -> Any:
        if isinstance(item, str):
            kind = _keyed_kind(key, item, levels) if key is not None else None
            if kind is not None:
                sink.append(Finding(kind, 0, len(item), HIGH if kind == "password" else MEDIUM))
                return marker(kind)
            if key is not None and KEY_IN_CONTEXT.search(key):
                return _masked_as_assigned(key, item, confidence, patterns, sink)
            masked, found = mask_text(item, confidence=confidence, patterns=patterns)
            sink.extend(found)
            return masked
        if isinstance(item, dict):
            return {
                k: v if k in KEPT_VALUE_KEYS else walk(v, k if isinstance(k, str) else None)
                for k, v in item.items()
            }
        if isinstance(item, list):
            walked = []
            for position, member in enumerate(item):
                flag = item[position - 1] if position else None
                if (
                    isinstance(member, str)
                    and isinstance(flag, str)
                    and PASSWORD_FLAG.fullmatch(flag)
                    and len(member) >= 3
                    and not is_placeholder(member)
                    and "[REDACTED:" not in member
                ):
                    sink.append(Finding("password", 0, len(member), HIGH))
                    walked.append(marker("password"))
                else:
                    walked.append(walk(member, None))
            return walked
        return item

    return walk(value, None)


def _masked_as_assigned(
    key: str,
    value: str,
    confidence: str,
    patterns: Sequence[SecretPattern],
    sink: list[Finding],
) -> str:
    """``value`` masked as the text ``key=value`` would be, so that a pattern that knows a
    secret by its name sees the name; the spans found are made relative to ``value``."""
    prefix = f"{key}="
    masked, found = mask_text(prefix + value, confidence=confidence, patterns=patterns)
    if not masked.startswith(prefix) or any(f.start < len(prefix) for f in found):
        masked, found = mask_text(value, confidence=confidence, patterns=patterns)
        sink.extend(found)
        return masked
    shift = len(prefix)
    sink.extend(Finding(f.kind, f.start - shift, f.end - shift, f.confidence) for f in found)
    return masked[shift:]
