"""An import as one list of timeline rows on the other agent's clock, before anything is written.

Both importers turn a file into an :class:`ImportPlan`: a conversation (its id, clock start,
title, metadata) and its rows in timeline order. :func:`stamp` gives every row its ``ts``:
the agent's own timestamp when it has one and it is later than the row before, otherwise
one millisecond after the row before, so that ``ts`` strictly increase whatever ties or
out-of-order stamps the files hold (the agent's own stamp stays in the record).
:func:`fingerprint` identifies rows, which makes a repeated import idempotent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from contextstore.core.errors import InvalidInputError
from contextstore.core.rows import TimelineRow
from contextstore.core.validate import MAX_JSON_BYTES
from contextstore.interop.files import Note


@dataclass(frozen=True)
class Slot:
    """A row waiting for its ``ts``.

    Attributes:
        natural: the agent's own timestamp for the row, if it has one.
        make: builds the row once its ``ts`` is known.
        before: the row may only use ``natural`` when it is earlier than this (the next
            row with a timestamp of its own), so one late stamp cannot push later rows.
    """

    natural: int | None
    make: Callable[[int], TimelineRow]
    before: int | None = None


LAST_DATE_MS: Final = 8_640_000_000_000_000
"""The latest moment a JavaScript ``Date`` can hold (year 275760), in milliseconds: a larger
stamp was not written by an agent's clock. Below the store's :data:`MAX_TS`, so the rows
stamped one millisecond apart after the latest usable stamp still fit."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


def usable_ts(value: Any) -> int | None:
    """``value`` if it is a timestamp in milliseconds (up to :data:`LAST_DATE_MS`), else
    None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= LAST_DATE_MS:
        return value
    return None


_CYCLE_MS: Final = 146_097 * 86_400_000
"""Four hundred Gregorian years, in milliseconds: the calendar repeats after them, which
lets a date past Python's year 9999 be written and read as one 400 years earlier."""
_LATEST_NATIVE_MS: Final = 253_402_300_800_000
"""The first millisecond of the year 10000, which Python's ``datetime`` cannot hold."""
_EXTENDED_YEAR = re.compile(r"\+(\d{6})(-.*)")


def parse_timestamp(value: Any) -> int | None:
    """An ISO 8601 timestamp with its offset (``2025-11-19T20:45:42.123Z``, as Gemini CLI
    and Cline's SDK write them, ``+010000-01-01T00:00:00.000Z`` past the year 9999, as
    JavaScript's ``toISOString`` writes it) in milliseconds, or None."""
    if not isinstance(value, str) or not value:
        return None
    cycles = 0
    extended = _EXTENDED_YEAR.fullmatch(value)
    if extended is not None:
        year = int(extended[1])
        cycles = max(0, (year - 9000) // 400 + 1)
        value = f"{year - 400 * cycles:04d}{extended[2]}"
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return usable_ts(round(moment.timestamp() * 1000) + cycles * _CYCLE_MS)


def format_timestamp(ts: int) -> str:
    """Milliseconds as Gemini CLI writes timestamps: JavaScript's ``toISOString``
    (``2025-11-19T20:45:42.123Z``; a year past 9999 as ``+010000-01-01T00:00:00.000Z``).

    Raises:
        InvalidInputError: ``ts`` is later than any JavaScript date (:data:`LAST_DATE_MS`).
    """
    if ts > LAST_DATE_MS:
        raise InvalidInputError(
            f"ts {ts:,} is later than any date JavaScript, and so Gemini CLI, can hold "
            f"({LAST_DATE_MS:,} ms, in the year 275760); a conversation with such a ts cannot "
            "be written for Gemini CLI. Nothing was written."
        )
    cycles = 0 if ts < _LATEST_NATIVE_MS else (ts - _LATEST_NATIVE_MS) // _CYCLE_MS + 1
    moment = _EPOCH + timedelta(milliseconds=ts - cycles * _CYCLE_MS)
    year = moment.year + 400 * cycles
    shown_year = f"{year:04d}" if year <= 9999 else f"+{year:06d}"
    return f"{shown_year}{moment.strftime('-%m-%dT%H:%M:%S.')}{ts % 1000:03d}Z"


def stamp(start: int, slots: Sequence[Slot]) -> list[TimelineRow]:
    """The rows of ``slots``, with strictly increasing ``ts`` after ``start``.

    A row takes its natural stamp when that is later than the previous row (and earlier
    than its ``before`` bound); otherwise it gets the previous row's ``ts`` + 1.
    """
    rows: list[TimelineRow] = []
    previous = start
    for slot in slots:
        ts = previous + 1
        natural = slot.natural
        if (
            natural is not None
            and natural > previous
            and (slot.before is None or natural < slot.before)
        ):
            ts = natural
        rows.append(slot.make(ts))
        previous = ts
    return rows


def clock_start(candidates: Sequence[int | None], slots: Sequence[Slot]) -> int:
    """The conversation's ``created_ts``: the earliest candidate (the agent's own start,
    such as a Cline task id) that precedes the first row's natural stamp, else one
    millisecond before that stamp."""
    leading = next((i for i, s in enumerate(slots) if s.natural is not None), None)
    usable = [c for c in candidates if c is not None]
    if leading is None:
        return min(usable) if usable else 0
    first = slots[leading].natural
    assert first is not None
    room = first - 1 - leading
    earlier = [c for c in usable if c <= room]
    return min(earlier) if earlier else max(room, 0)


def _row_value(row: TimelineRow) -> dict[str, Any]:
    value = {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name != "ts"}
    value["row"] = type(row).__name__
    return value


def fingerprint(row: TimelineRow) -> str:
    """A short SHA-256 of what a row holds (its ``ts`` excluded: stamps may be re-derived)."""
    text = json.dumps(_row_value(row), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


METADATA_ROOM: Final = MAX_JSON_BYTES - 64 * 1024
"""The most JSON a file may add to its conversation's metadata: the store's limit
(:data:`MAX_JSON_BYTES`) less room for the import's own bookkeeping (under 16 KiB)."""


@dataclass(frozen=True)
class MetadataPart:
    """A part of a conversation's metadata an import may leave out when it is too large.

    Attributes:
        holder: the dict holding it.
        key: its key there.
        file: the file it came from.
        position: where in that file, or None for the whole file.
    """

    holder: dict[str, Any]
    key: str
    file: str
    position: str | None = None


def json_bytes(value: Any) -> int:
    """The size of ``value`` as the store measures JSON: UTF-8 bytes of its JSON text."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def fit_metadata(
    metadata: dict[str, Any], parts: Sequence[MetadataPart], notes: list[Note]
) -> None:
    """Leave the largest of ``parts`` out of ``metadata`` until it fits
    :data:`METADATA_ROOM`, each with a note (the rows of the file are imported all the same;
    a long task's ``task_metadata.json`` can outgrow the limit)."""
    size = json_bytes(metadata)
    if size <= METADATA_ROOM:
        return
    by_size = sorted(
        (p for p in parts if p.key in p.holder),
        key=lambda p: json_bytes(p.holder[p.key]),
        reverse=True,
    )
    for part in by_size:
        if size <= METADATA_ROOM:
            return
        removed = json_bytes(part.holder.pop(part.key))
        size = json_bytes(metadata)
        notes.append(
            Note(
                part.file,
                part.position,
                f"is {removed:,} bytes as JSON, more than a conversation's metadata can hold "
                f"({MAX_JSON_BYTES:,} bytes, MAX_JSON_BYTES, with the rest of it); it was "
                "left out of the conversation's metadata, so an export cannot write it back.",
            )
        )


def fitting_details(
    details: dict[str, Any] | None, file: str, position: str, notes: list[Note]
) -> dict[str, Any] | None:
    """A request row's ``details``, or None with a note when they are over the store's
    :data:`MAX_JSON_BYTES` (the agent's own records, kept whole, still hold them)."""
    if details is None:
        return None
    size = json_bytes(details)
    if size <= MAX_JSON_BYTES:
        return details
    notes.append(
        Note(
            file,
            position,
            f"the request's details ({', '.join(details)}) are {size:,} bytes as JSON, over "
            f"the {MAX_JSON_BYTES:,} (MAX_JSON_BYTES) a request row holds; the row was kept "
            "without them (its record keeps them as written).",
        )
    )
    return None


def chain(fingerprints: Sequence[str]) -> str:
    """One digest for a sequence of row fingerprints (order matters)."""
    return hashlib.sha256("\n".join(fingerprints).encode("ascii")).hexdigest()


@dataclass
class ImportPlan:
    """What one file (or task folder) becomes: a conversation and its rows, not yet written.

    Attributes:
        source: the tool (``"cline"`` or ``"gemini"``).
        path: the task folder or chat file read.
        conversation_id: the id the conversation gets (the task or session id).
        created_ts: the clock start, before the first row.
        rows: the rows in timeline order, stamped.
        title: the conversation's title.
        model_id: the model last used.
        context_window: the model's window as the agent sized it, when its files state it
            (Cline's environment details) or its own rule gives it (Gemini CLI's
            ``tokenLimit``); None otherwise.
        metadata: the conversation's metadata (what the files hold that is no timeline).
        notes: what was left out or repaired.
    """

    source: str
    path: str
    conversation_id: str
    created_ts: int
    rows: list[TimelineRow]
    title: str | None = None
    model_id: str | None = None
    context_window: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
