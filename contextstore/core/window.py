"""Context-window sizing and the token triggers that decide when history must shrink.

These are Cline's rules (``getContextWindowInfo``, ``shouldCompactContextWindow`` and the
legacy overflow trigger) as pure functions. One deliberate difference: there are no
model-name clamps, because a window the user configured is authoritative (Cline forced
DeepSeek models to 128K whatever the user set).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import shown

DEFAULT_CONTEXT_WINDOW = 128_000
"""The window assumed when none is known (``None`` or ``0``), as Cline does."""

_FIXED_MAX_ALLOWED: dict[int, int] = {64_000: 37_000, 128_000: 98_000, 200_000: 160_000}
_BUFFER_TOKENS = 40_000
_MIN_FRACTION = 0.8


class ContextWindowInfo(NamedTuple):
    """A model's context window and the largest request total allowed before shrinking.

    Attributes:
        context_window: The window in tokens (the default when the model's is unknown).
        max_allowed_size: The token total at which history must be truncated or condensed.
    """

    context_window: int
    max_allowed_size: float


MAX_COUNT = 2**53
"""The largest token count these functions take (a float holds every integer up to it)."""


def _require_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(
            f"{name} must be an int, got {type(value).__name__}; pass a whole number of tokens"
        )
    if value < 0:
        raise InvalidInputError(f"{name} must not be negative, got {shown(value)}")
    if value > MAX_COUNT:
        raise InvalidInputError(f"{name} must be at most 2**53 tokens, got a larger number")
    return value


def context_window_info(window: int | None) -> ContextWindowInfo:
    """Return the effective window and its maximum allowed request size.

    The exact windows 64,000, 128,000 and 200,000 use Cline's fixed table (37,000, 98,000
    and 160,000); any other window keeps the larger of ``window - 40,000`` and 80 % of the
    window, so small windows are not starved (8,192 -> 6,553.6). Matching is by exact
    equality, as in Cline: 131,072 is not treated as 128,000.

    Args:
        window: The configured window in tokens; ``None`` or ``0`` means unknown.

    Returns:
        The window actually used and its maximum allowed size (always a float).

    Raises:
        InvalidInputError: If ``window`` is negative or not an int.
    """
    if window is None:
        window = 0
    window = _require_count("context window", window)
    effective = window or DEFAULT_CONTEXT_WINDOW
    fixed = _FIXED_MAX_ALLOWED.get(effective)
    if fixed is not None:
        return ContextWindowInfo(effective, float(fixed))
    return ContextWindowInfo(
        effective, float(max(effective - _BUFFER_TOKENS, effective * _MIN_FRACTION))
    )


def request_total(
    tokens_in: int | None,
    tokens_out: int | None,
    cache_writes: int | None,
    cache_reads: int | None,
) -> int:
    """Return the token total of one API request, the figure every trigger compares.

    It is the prompt plus the completion, cache traffic included; a missing count is 0.

    Raises:
        InvalidInputError: If a count is negative or not an int.
    """
    counts = {
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cache_writes": cache_writes,
        "cache_reads": cache_reads,
    }
    return sum(_require_count(name, value or 0) for name, value in counts.items())


def compaction_threshold(context_window: int | None, threshold: float | None) -> float:
    """The token total at which :func:`should_compact` compacts: ``threshold`` of the window
    (floored to whole tokens) capped at the maximum allowed size, or that maximum itself when
    ``threshold`` is None.

    Raises:
        InvalidInputError: If the window is invalid or ``threshold`` lies outside ``(0, 1]``.
    """
    info = context_window_info(context_window)
    if threshold is None:
        return info.max_allowed_size
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not 0 < threshold <= 1
    ):
        raise InvalidInputError(
            f"threshold must be a fraction of the window in (0, 1], got {shown(threshold)}; "
            "pass None to compact at the maximum allowed size"
        )
    return min(math.floor(info.context_window * threshold), info.max_allowed_size)


def should_compact(
    total_tokens: int, context_window: int | None, threshold: float | None = None
) -> bool:
    """Tell whether the last request's total calls for compaction before the next one.

    The trigger is inclusive. An auto-condense ``threshold`` is a fraction of the window
    (floored to whole tokens) and is capped at the maximum allowed size, so it can make
    compaction earlier but never later.

    Args:
        total_tokens: The previous request's total (see :func:`request_total`).
        context_window: The configured window; ``None`` or ``0`` means unknown.
        threshold: Optional fraction of the window in ``(0, 1]``.

    Raises:
        InvalidInputError: If a count is invalid or ``threshold`` lies outside ``(0, 1]``
            (Cline silently treated ``0`` as "unset"; a zero here is refused instead).
    """
    total = _require_count("total_tokens", total_tokens)
    return total >= compaction_threshold(context_window, threshold)


def keep_for_overflow(
    total_tokens: int, context_window: int | None
) -> Literal["half", "quarter"] | None:
    """Choose the keep strategy of Cline's automatic truncation, or None if not needed.

    ``"quarter"`` is chosen when even half the total exceeds the maximum allowed size
    (typically after switching to a much smaller model), otherwise ``"half"``.

    Raises:
        InvalidInputError: If a count is invalid.
    """
    total = _require_count("total_tokens", total_tokens)
    max_allowed = context_window_info(context_window).max_allowed_size
    if total < max_allowed:
        return None
    return "quarter" if total / 2 > max_allowed else "half"
