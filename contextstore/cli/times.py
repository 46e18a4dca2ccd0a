"""Moments on the command line: what ``--as-of``, ``--to`` and ``--at`` accept, and how
timestamps print.

A moment is milliseconds since the epoch (``1796118104075``, or ``1796118104075 ms``), an
ISO 8601 date or date and time (``2026-12-01``, ``2026-12-01T10:15``,
``2026-12-01 10:15:04.075+01:00``; without an offset it is local time), or else a checkpoint
label (its newest checkpoint); a conversation's own checkpoint label wins over the date or
milliseconds the same text would read as. Timestamps print as local ISO dates with
milliseconds and the UTC offset, which parse back to the same millisecond.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import click

from contextstore.core.errors import CheckpointNotFoundError, InvalidInputError
from contextstore.core.validate import MAX_LABEL_LENGTH, MAX_TS, is_utf8, readable_text

if TYPE_CHECKING:
    from contextstore.store import ContextStore

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ISO = re.compile(
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?(Z|[+-]\d{2}:?\d{2})?$", re.ASCII
)


@dataclass(frozen=True)
class Moment:
    """A parsed moment: a timestamp in milliseconds, or a checkpoint label to look up."""

    text: str
    ts: int | None = None
    label: str | None = None


def parse_moment(text: str) -> Moment:
    """Parse milliseconds, an ISO date (local time unless it has an offset) or a label.

    Raises:
        ValueError: negative milliseconds, a date before 1970 or beyond 2**53 ms, an
            ISO-looking text that is not a valid date, text that is not UTF-8, or a label
            longer than a checkpoint's.
    """
    value = text.strip()
    if not value:
        raise ValueError("the moment is empty")
    if not is_utf8(value):
        raise ValueError(f"'{readable_text(value)}' is not UTF-8 text (bytes in another encoding)")
    if re.fullmatch(r"-?[0-9]+( ?ms)?", value):  # ASCII: int() reads full-width digits too
        ts = int(value.removesuffix("ms").strip())
        if not 0 <= ts <= MAX_TS:
            raise ValueError(f"{value} is outside 0..2**53 milliseconds")
        return Moment(text, ts=ts)
    if _ISO.match(value):
        try:
            parsed = _from_iso(value.replace(" ", "T", 1))
        except ValueError as exc:
            reason = "its UTC offset is not within a day" if "offset" in str(exc) else exc
            raise ValueError(f"{value!r} is not a valid date ({reason})") from exc
        try:
            ts = to_ms(parsed)
        # A date the local time zone cannot place; on Windows, OSError for one before 1970
        # (its localtime() takes no negative time).
        except (OverflowError, OSError, ValueError):
            ts = -1
        if not 0 <= ts <= MAX_TS:
            raise ValueError(f"{value!r} is before 1970 or too far in the future")
        if parsed.tzinfo is None and _skipped(parsed):
            raise ValueError(
                f"{value!r} never happened in this machine's time zone (its clocks skipped "
                "over it); give the moment with its UTC offset"
            )
        return Moment(text, ts=ts)
    if len(text) > MAX_LABEL_LENGTH:
        # The store's refusal named its parameter: "label must be a non-empty string...".
        raise ValueError(
            f"a checkpoint label has at most {MAX_LABEL_LENGTH} characters ({len(text):,} "
            "given), and this reads as no date or milliseconds"
        )
    return Moment(text, label=text)


def _from_iso(text: str) -> datetime:
    """``datetime.fromisoformat`` as Python 3.11 reads the forms :data:`_ISO` lets through.

    Python 3.10 reads only what ``isoformat()`` writes: ``Z``, an offset without its colon
    (``+0530``) and a fraction of other than 3 or 6 digits were refused there as invalid
    dates. They are rewritten to its forms first (digits past the sixth dropped, as 3.11
    does)."""
    if sys.version_info < (3, 11):
        if "T" in text and text.endswith("Z"):
            text = text[:-1] + "+00:00"
        text = re.sub(r"(T\d{2}(?::\d{2}){0,2}(?:\.\d+)?[+-]\d{2})(\d{2})$", r"\1:\2", text)
        text = re.sub(r"\.(\d+)", lambda m: "." + (m.group(1) + "000000")[:6], text)
    return datetime.fromisoformat(text)


def _skipped(local: datetime) -> bool:
    """True when the naive local time ``local`` does not exist (clocks moved forward over
    it): the instant it is read as shows another wall-clock time (an hour earlier or
    later, as the platform chooses)."""
    return local.astimezone().astimezone().replace(tzinfo=None) != local


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch; a naive datetime is local time."""
    aware = moment if moment.tzinfo is not None else moment.astimezone()
    return (aware - _EPOCH) // timedelta(milliseconds=1)


def format_ts(ts: int | None) -> str:
    """A timestamp as a local ISO date with milliseconds and offset ('' for None; beyond
    the calendar, the milliseconds themselves)."""
    if ts is None:
        return ""
    try:
        local = datetime.fromtimestamp(ts // 1000, tz=timezone.utc).astimezone()
    except (OverflowError, OSError, ValueError):
        return f"{ts} ms"
    return local.replace(microsecond=(ts % 1000) * 1000).isoformat(timespec="milliseconds")


class MomentType(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A click parameter type for moments: ``LABEL|DATE|MS``."""

    name = "LABEL|DATE|MS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, Moment):
            return value
        try:
            return parse_moment(str(value))
        except ValueError as exc:
            self.fail(f"{exc}; pass a checkpoint label, an ISO date or milliseconds", param, ctx)


MOMENT = MomentType()


def resolve(store: ContextStore, conversation_id: str, moment: Moment, flag: str) -> int:
    """The timestamp a moment names in one conversation (a label: its newest checkpoint).

    Raises:
        CheckpointNotFoundError: no checkpoint of the conversation has the label.
        InvalidInputError: milliseconds from before the conversation began that are the id
            of one of its checkpoints (:func:`_refuse_checkpoint_id`).
    """
    moment = as_read_by(store, conversation_id, moment)
    if moment.ts is not None:
        _refuse_checkpoint_id(store, conversation_id, moment.ts, flag)
        return moment.ts
    assert moment.label is not None
    found = store.checkpoint_at(conversation_id, moment.label)
    if found is None:
        raise CheckpointNotFoundError(missing_label(store, conversation_id, moment.label, flag))
    return found.ts


def as_read_by(store: ContextStore, conversation_id: str, moment: Moment) -> Moment:
    """``moment`` as one conversation reads it: a text that is the label of one of its
    checkpoints names that checkpoint, even where it also reads as a date or milliseconds
    (the date can be written another way; the label cannot)."""
    if moment.ts is None or store.checkpoint_at(conversation_id, moment.text) is None:
        return moment
    return Moment(moment.text, label=moment.text)


def checked_moment(store: ContextStore, conversation_id: str, moment: Moment, flag: str) -> Moment:
    """``moment`` as the conversation reads it (:func:`as_read_by`).

    Raises:
        CheckpointNotFoundError: (naming ``flag``) the label is none of its checkpoints'.
    """
    moment = as_read_by(store, conversation_id, moment)
    if moment.label is not None:
        resolve(store, conversation_id, moment, flag)
    elif moment.ts is not None:
        _refuse_checkpoint_id(store, conversation_id, moment.ts, flag)
    return moment


def _refuse_checkpoint_id(store: ContextStore, conversation_id: str, ts: int, flag: str) -> None:
    """Refuse milliseconds from before the conversation began that are the id of one of its
    checkpoints: ``contextstore checkpoints`` lists ids first, and ``--to 80`` read as 80 ms
    after 1970 would take the whole conversation.

    Raises:
        InvalidInputError: naming the checkpoint's label or ``ts`` to pass instead.
    """
    if ts >= store.get_conversation(conversation_id).created_ts:
        return
    named = next((c for c in store.checkpoints(conversation_id) if c.id == ts), None)
    if named is None:
        return
    instead = named.label if named.label is not None else str(named.ts)
    raise InvalidInputError(
        f"{flag} {ts} reads as {ts} ms after 1970, before conversation {conversation_id!r} "
        f"began, not as checkpoint {ts}; pass {flag} {shlex.quote(instead)} for that "
        f"checkpoint (its {'label' if named.label is not None else 'ts'}), or {flag} 0 for "
        "the moment before everything."
    )


def missing_label(store: ContextStore, conversation_id: str, label: str, flag: str) -> str:
    """The message for a label the conversation has no checkpoint for."""
    labels = sorted({c.label for c in store.checkpoints(conversation_id) if c.label})
    known = ", ".join(repr(x) for x in labels) or "none"
    return (
        f"conversation {conversation_id!r} has no checkpoint labelled {label!r} (labels: "
        f"{known}); pass {flag} an existing label, an ISO date or milliseconds "
        f"('contextstore checkpoints {shlex.quote(conversation_id)}' lists them)."
    )
