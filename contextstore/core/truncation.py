"""Deleted-range arithmetic: which messages a truncation hides.

A deleted range ``(2, end)`` hides messages ``2..end``; messages 0 and 1 (the task and the
first reply) always stay visible, followed by everything after ``end``. Every consumer
ignores the start, as in Cline, and ``end < start`` (``(2, 1)``) means "nothing hidden".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, cast

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import Message
from contextstore.core.validate import plain_lists_only, shown

KeepStrategy = Literal["none", "last_two", "half", "quarter"]
"""How much of the not-yet-hidden history a truncation keeps."""

KEEP_STRATEGIES: Final[frozenset[str]] = frozenset({"none", "last_two", "half", "quarter"})
"""Every accepted :data:`KeepStrategy` (Cline's spelling ``"lastTwo"`` is also accepted)."""

NOTHING_HIDDEN: Final[tuple[int, int]] = (2, 1)
"""The range returned when nothing can be removed: its end precedes its start."""

FIRST_HIDABLE = 2
"""Index of the first message a range may hide; 0 and 1 are always kept."""

_ALIASES: Final[dict[str, KeepStrategy]] = {"lastTwo": "last_two"}

DeletedRange = tuple[int, int]
"""An inclusive ``(start, end)`` range of hidden message indices; start is always 2."""


def past_last_but_one(end: int, count: int, where: str = "") -> str:
    """Why a deleted range cannot end at ``end`` in a conversation of ``count`` messages
    (``where`` says at which point, for a range of an imported timeline): the newest
    message always stays visible, so a range ends before the last message but one."""
    if count < 2:
        held = "no messages" if count == 0 else "one message"
        return (
            f"end {end} is beyond the last message but one: the conversation has {held}"
            f"{where}, and the newest message always stays visible; append messages first."
        )
    return (
        f"end {end} is beyond the last message but one (index {count - 2}){where}; the "
        "newest message always stays visible."
    )


def normalize_keep(keep: str) -> KeepStrategy:
    """Return the canonical spelling of a keep strategy.

    Raises:
        InvalidInputError: If ``keep`` is not a known strategy.
    """
    if isinstance(keep, str) and keep in _ALIASES:
        return _ALIASES[keep]
    if isinstance(keep, str) and keep in KEEP_STRATEGIES:
        return cast(KeepStrategy, keep)
    known = ", ".join(sorted(KEEP_STRATEGIES))
    raise InvalidInputError(f"unknown keep strategy {shown(keep)}; use one of: {known}")


def _range_end(current_range: Sequence[int] | None) -> int | None:
    """Validate ``current_range`` and return its end, or None when it hides nothing."""
    if current_range is None:
        return None
    if isinstance(current_range, (str, bytes)) or len(current_range) != 2:
        raise InvalidInputError(
            f"a deleted range is a (start, end) pair of ints, got {shown(current_range)}"
        )
    for value in current_range:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInputError(
                f"a deleted range is a (start, end) pair of ints, got {shown(current_range)}"
            )
    end = current_range[1]
    return end if end >= FIRST_HIDABLE else None


def is_empty_range(r: Sequence[int] | None) -> bool:
    """Tell whether ``r`` hides no message (None, or an end before index 2).

    The start is ignored, as every consumer of a range does.
    """
    return _range_end(r) is None


def visible_start(deleted_range: Sequence[int] | None) -> int:
    """Return the index of the first message shown after messages 0 and 1.

    That is ``end + 1`` for a range that hides something, else 2. It is never below 2,
    so a malformed small end can never show message 1 twice (Cline's view could).
    """
    end = _range_end(deleted_range)
    return FIRST_HIDABLE if end is None else end + 1


def unread_through(deleted_range: Sequence[int] | None) -> int | None:
    """The last index of the messages a view need not read (``2..unread_through``), or None.

    The range hides ``2..end``; the last of them is read all the same, since the results
    in the first message after the cut answer its calls
    (:func:`contextstore.core.view.calls_hidden_before`).
    """
    return None if deleted_range is None else visible_start(deleted_range) - 2


def _to_remove(rest: int, keep: KeepStrategy) -> int:
    """Number of messages to hide out of ``rest`` (Cline's arithmetic, floor division)."""
    if keep == "none":
        return max(rest, 0)
    if keep == "last_two":
        return max(rest - 2, 0)
    if keep == "half":
        return (rest // 4) * 2
    return ((rest * 3) // 8) * 2


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


@plain_lists_only
def next_truncation_range(
    messages: Sequence[Mapping[str, Any]],
    current_range: Sequence[int] | None,
    keep: str,
) -> DeletedRange:
    """Return the deleted range after one more truncation with strategy ``keep``.

    Cline's arithmetic: with ``rest`` the messages after the current range (from index 2
    when there is none), ``"none"`` hides all of them, ``"last_two"`` all but two,
    ``"half"`` ``floor(rest / 4) * 2`` and ``"quarter"`` ``floor(rest * 3 / 8) * 2``. If the
    last hidden message exists and is not an assistant message, the end moves back once,
    so that the first visible message after the kept pair is a user message. The index is
    bounds-checked, because Python's ``messages[-1]`` would wrap where JavaScript reads
    ``undefined``.

    Outputs that differ from Cline, deliberately:

    * The end never shrinks below the current range's end. Cline returned a smaller end
      for a stale range (``end >= len(messages)``) with ``"half"`` or ``"quarter"``, or when
      the assistant adjustment stepped back over the current end; that re-showed hidden
      messages.
    * An end below 2 is never returned: it means "nothing hidden", so the result is
      :data:`NOTHING_HIDDEN` ``(2, 1)`` (or the current range, which then hides something).
      Cline could return ``(2, 0)`` or ``(2, -1)`` on tiny lists, and its view then showed
      message 1 (and 0) twice.
    * A current range whose end is below 2 counts as no range, and ``"lastTwo"`` is
      accepted as an alias of ``"last_two"``.

    Args:
        messages: The full, untruncated history.
        current_range: The effective deleted range, or None.
        keep: One of :data:`KEEP_STRATEGIES` (or ``"lastTwo"``).

    Returns:
        ``(2, end)``; ``end < 2`` (only ever ``(2, 1)``) signals that nothing is hidden.

    Raises:
        InvalidInputError: For an unknown strategy or a malformed range.
    """
    strategy = normalize_keep(keep)
    current_end = _range_end(current_range)
    start_of_rest = FIRST_HIDABLE if current_end is None else current_end + 1
    count = len(messages)
    end = start_of_rest + _to_remove(count - start_of_rest, strategy) - 1
    if 0 <= end < count and _role(messages[end]) != "assistant":
        end -= 1
    if current_end is not None:
        end = max(end, current_end)
    if end < FIRST_HIDABLE:
        return NOTHING_HIDDEN
    return (FIRST_HIDABLE, end)


def subagent_next_range(
    messages: Sequence[Message], current_range: Sequence[int] | None
) -> DeletedRange | None:
    """Decide a subagent's compaction range, or None when truncation cannot help.

    Cline's subagent truncates with ``"quarter"`` and gives up (re-raising the provider's
    error) when nothing is removable or when the new range equals the current one (its
    "no-progress" early return).

    Args:
        messages: The subagent's full history.
        current_range: Its current deleted range, or None.

    Returns:
        The new range, strictly larger than the current one, or None.
    """
    new_range = next_truncation_range(messages, current_range, "quarter")
    if is_empty_range(new_range):
        return None
    if new_range[1] == _range_end(current_range):
        return None
    return new_range
