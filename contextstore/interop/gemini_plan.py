"""Placing a Gemini CLI chat on one timeline, checked before anything is written.

Every record a session kept after replay (``user``, ``gemini``, ``info``, ``error``,
``warning``) becomes a ``source_records`` row at its ``timestamp``, kept exactly as written
(thoughts, tool-call ``status``, ``resultDisplay`` included) and never sent to a model. A
``gemini`` record with ``tokens`` is followed by a request row (``tokens_in`` = ``input`` -
``cached``, ``cache_reads`` = ``cached``, ``tokens_out`` = ``output``; the whole ``tokens``
object in ``details``), then by the messages its turns start. A checkpoint's Contents are
records of their own (``content:user``, ``content:model``), so an export gives the file
back; having no timestamps, they are dated by the file's modification time.

A message the store cannot hold (over ``max_message_bytes``, or made from parts it refuses)
keeps its place as a stand-in (:mod:`~contextstore.interop.stand_in`) while its record stays
whole among the source records; a record too large for its row is kept as a placeholder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from contextstore.core.content import normalize_message_dict
from contextstore.core.rows import MessageRow, RequestRow, SourceRecordRow, TimelineRow
from contextstore.core.validate import MAX_ID_LENGTH, MAX_INT32, MAX_MESSAGE_BYTES, is_model_id
from contextstore.interop.cline import is_int
from contextstore.interop.errors import GeminiChatError
from contextstore.interop.files import Note, nul_note, path_text, without_nul
from contextstore.interop.gemini import (
    CONTENTS,
    GeminiChat,
    answered_next,
    content_turn,
    record_turns,
)
from contextstore.interop.gemini_convert import (
    CONTEXT_OPENINGS,
    SYNTHETIC_FIELD,
    Converted,
    Turn,
    check_turn,
    turns_to_messages,
)
from contextstore.interop.plan import (
    ImportPlan,
    MetadataPart,
    Slot,
    clock_start,
    fit_metadata,
    fitting_details,
    parse_timestamp,
    stamp,
)
from contextstore.interop.stand_in import REFUSED_KEY, fitted_stand_in, left_out_text

ORIGIN: Final = "gemini"
"""``source_records.origin`` of Gemini CLI records."""
_TITLE_CHARS: Final = 120
GEMINI_TOKEN_LIMIT: Final = 1_048_576
"""The window Gemini CLI sizes a chat against (its ``tokenLimit``) for every model but
Gemma 4's, the unknown and the absent included."""
GEMMA_4_TOKEN_LIMIT: Final = 256_000
"""Gemini CLI's ``tokenLimit`` for the Gemma 4 models it names (:data:`GEMMA_4_MODELS`)."""
GEMMA_4_MODELS: Final = frozenset({"gemma-4-31b-it", "gemma-4-26b-a4b-it"})
RECORD_LIMIT: Final = MAX_MESSAGE_BYTES
"""The most a ``source_records`` row holds of one record (its JSON, in UTF-8 bytes)."""


def record_kind(record: Mapping[str, Any]) -> str:
    """``source_records.kind`` of a record: its ``type``, or ``content:<role>``."""
    if "type" in record and isinstance(record["type"], str):
        return record["type"][:64]
    return f"content:{record.get('role')}"[:64]


def plan_chat(
    chat: GeminiChat,
    *,
    max_message_bytes: int,
    file_ms: int | None = None,
    empty_session: bool = False,
) -> ImportPlan:
    """Lay a chat out as one stamped timeline (see the module docstring).

    Args:
        chat: the chat read.
        max_message_bytes: the store's limit for one message.
        file_ms: the file's modification time, which dates a checkpoint's rows.
        empty_session: plan a session recording that holds its metadata (a ``sessionId``)
            and no record, with nothing left out, as a conversation without rows (what
            ``export_gemini`` writes for a conversation without messages) instead of
            refusing it.

    A converted message the store refuses, or one over ``max_message_bytes``, is kept in
    its place as a stand-in (noted); a record too large for its ``source_records`` row is
    kept as a placeholder (noted).

    Raises:
        GeminiChatError: the store cannot hold even a stand-in for a message over
            ``max_message_bytes``, or the chat holds nothing at all.
    """
    notes = list(chat.notes)
    turns, turn_records = _turns(chat)
    converted = turns_to_messages(turns, chat.path)
    notes.extend(Note(str(chat.path), None, n) for n in converted.notes)
    if not chat.records and not (empty_session and _bare_session(chat)):
        # What the reader skipped says why (a line that is not JSON), where "no records"
        # alone read as an empty file.
        skipped = "; ".join(
            f"{n.position}: {n.reason.rstrip('.')}" if n.position else n.reason.rstrip(".")
            for n in chat.notes[:3]
        )
        why = f" that could be read ({skipped})" if skipped else ""
        refusal = f"holds no records{why}; there is nothing to import."
        raise GeminiChatError(chat.path, None, refusal)
    owners = [turn_records[first] if first >= 0 else -1 for first in converted.first_turns]
    too_large = {index for index, found in enumerate(chat.records) if _over(found)}
    positions = [turns[first].position if first >= 0 else None for first in converted.first_turns]
    messages = _fitted(chat, converted, owners, positions, too_large, max_message_bytes, notes)
    anchored: dict[int, list[dict[str, Any]]] = {}
    for message, owner in zip(messages, owners, strict=True):
        anchored.setdefault(owner, []).append(message)
    slots: list[Slot] = [_message_slot(m) for m in anchored.get(-1, [])]
    replaced, nul_at = 0, None
    for index, found in enumerate(chat.records):
        # the model history keeps a NUL exactly; the record's copy cannot hold one
        record, count = without_nul(found)
        if count and nul_at is None:
            nul_at = _where(chat, index)
        replaced += count
        if index in too_large:
            record = _placeholder(chat, index, record, notes)
        own = parse_timestamp(record.get("timestamp")) if chat.is_session else None
        slots.append(Slot(own, _record_maker(record, own)))
        tokens = record.get("tokens")
        if chat.is_session and record.get("type") == "gemini" and isinstance(tokens, dict):
            slots.append(Slot(None, _request_maker(record, tokens, notes, index, chat)))
        slots.extend(_message_slot(m) for m in anchored.get(index, []))
    if replaced:
        notes.append(nul_note(chat.path, nul_at, replaced))
    start = parse_timestamp(chat.metadata.get("startTime")) if chat.is_session else None
    if not chat.is_session and file_ms is not None:
        start = max(file_ms - len(slots) - 1, 0)
    created = clock_start([start], slots)
    model = _model_id(chat)
    return ImportPlan(
        source=ORIGIN,
        path=path_text(chat.path),
        conversation_id=conversation_id_for(chat),
        created_ts=created,
        rows=stamp(created, slots),
        title=_title(chat, messages),
        model_id=model,
        context_window=token_limit(model),
        metadata=_metadata(chat, notes),
        notes=notes,
    )


def _bare_session(chat: GeminiChat) -> bool:
    """True for a session recording whose metadata names its session and from which
    nothing was left out: one that holds no records because it has none."""
    session_id = chat.metadata.get("sessionId")
    return chat.is_session and not chat.notes and isinstance(session_id, str) and session_id != ""


def _where(chat: GeminiChat, index: int) -> str:
    """Where record ``index`` of a chat is, for a note."""
    if chat.kind == CONTENTS:  # a bare array, as the reader's notes name its items
        return f"[{index}]"
    return f"messages[{index}]" if chat.is_session else f"history[{index}]"


def conversation_id_for(chat: GeminiChat) -> str:
    """A session's ``sessionId``; for other files (and unusable ids) ``gemini-`` and a hash
    of the file's path, so importing the same file again finds its conversation."""
    session_id = chat.metadata.get("sessionId") if chat.is_session else None
    if (
        isinstance(session_id, str)
        and 0 < len(session_id) <= MAX_ID_LENGTH
        and "\x00" not in session_id
    ):
        return session_id
    digest = hashlib.sha256(os.fsencode(chat.path.resolve())).hexdigest()
    return f"gemini-{digest[:24]}"


def _turns(chat: GeminiChat) -> tuple[list[Turn], list[int]]:
    """Every record's turns; those of a record with a part the conversion or the store
    refuses are marked :attr:`~contextstore.interop.gemini_convert.Turn.refused`."""
    turns: list[Turn] = []
    owners: list[int] = []
    for index, record in enumerate(chat.records):
        where = _where(chat, index)
        found = (
            record_turns(record, where, answered_next(chat.records, index))
            if chat.is_session
            else [content_turn(record, where)]
        )
        try:
            for turn in found:
                check_turn(turn, chat.path)
        except GeminiChatError as exc:
            # each of its turns becomes a stand-in (see _fitted), so the record keeps its place
            reason = str(exc).split(": ", 1)[-1]
            where = exc.position or where
            found = [
                dataclasses.replace(t, parts=[], position=where, refused=reason) for t in found
            ]
        turns.extend(found)
        owners.extend([index] * len(found))
    return turns, owners


def _record_name(chat: GeminiChat, index: int) -> str:
    """A record as a note names it: its id in a session, its place in a checkpoint."""
    record_id = chat.records[index].get("id") if chat.is_session else None
    if isinstance(record_id, str):
        return f"record {record_id[:80]!r}"  # repr escapes a NUL
    return "this Content"


def _fitted(
    chat: GeminiChat,
    converted: Converted,
    owners: Sequence[int],
    positions: Sequence[str | None],
    too_large: Collection[int],
    limit: int,
    notes: list[Note],
) -> list[dict[str, Any]]:
    """The converted messages, each one the store refuses or over ``limit`` replaced by a
    stand-in in its place (see :mod:`~contextstore.interop.stand_in`), noted; the record
    it came from stays whole among the source records (unless it is in ``too_large``),
    and that is what ``export gemini`` writes back.

    Raises:
        GeminiChatError: a message is over ``limit`` and the store cannot hold even a
            stand-in for it.
    """
    messages = list(converted.messages)
    noted: set[tuple[int, str]] = set()
    for index, message in enumerate(messages):
        owner = owners[index]
        refused = converted.refused.get(index)
        size = None if refused else normalize_message_dict(message).json_size()
        if refused is None and (size is None or size <= limit):
            continue
        where = _where(chat, owner) if owner >= 0 else None
        if refused:  # the part refused, where the conversion names it
            where = positions[index] or where
        named = _record_name(chat, owner) if owner >= 0 else "the continuation"
        reason = (
            f"The store takes no message made from {named}: {refused}"
            if refused
            else f"The message converted from {named} is {size:,} bytes as JSON, over the "
            f"store's limit of {limit:,} (max_message_bytes)."
        )
        previous = messages[index - 1]["role"] if index else None
        stand_in = fitted_stand_in(message, reason, previous, limit)
        if stand_in is None:
            raise GeminiChatError(
                chat.path,
                where,
                f"{reason} The store cannot hold even a stand-in for it; open the store "
                "with a larger max_message_bytes. Nothing was imported.",
            )
        messages[index] = stand_in
        if (owner, reason) in noted:  # the record's other turn, said once
            continue
        noted.add((owner, reason))
        back = (
            "export gemini writes a placeholder record saying it was left out in its place"
            if owner in too_large
            else "the record stays whole among the source records and export gemini writes it back"
        )
        notes.append(
            Note(
                str(chat.path),
                where,
                f"{reason} It was kept in its place as a stand-in with an empty text, which "
                f"renders leave out, so that the messages after it keep their places; {back}"
                + (
                    ""
                    if refused
                    else " (open the store with a larger max_message_bytes to "
                    "keep the message itself)"
                )
                + ".",
            )
        )
    return messages


def _over(record: Mapping[str, Any]) -> bool:
    """True for a record too large for its ``source_records`` row."""
    size = len(json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return size > RECORD_LIMIT


PLACEHOLDER_DROPS: Final = ("content", "parts", "displayContent", "toolCalls", "thoughts")
"""What a record too large to keep loses in its placeholder (where the bulk lies)."""


def _placeholder(
    chat: GeminiChat, index: int, record: Mapping[str, Any], notes: list[Note]
) -> dict[str, Any]:
    """The placeholder kept among the source records for a record over
    :data:`RECORD_LIMIT`: its other fields (``id``, ``timestamp``, ``type``, ``model``,
    ``tokens``...), a text saying it was left out as its content, and the
    :data:`~contextstore.interop.stand_in.REFUSED_KEY` marker (which export drops)."""
    size = len(json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    reason = (
        f"it is {size:,} bytes as JSON, over the {RECORD_LIMIT:,} (MAX_MESSAGE_BYTES) a "
        "source record holds"
    )
    text = left_out_text("session" if chat.is_session else "chat", reason)
    kept = {k: v for k, v in record.items() if k not in PLACEHOLDER_DROPS}
    if "role" in record:
        kept = {**kept, "parts": [{"text": text}]}
    else:
        kept = {**kept, "content": [{"text": text}]}
    kept[REFUSED_KEY] = {"reason": reason}
    if _over(kept):
        kept = {k: v for k, v in kept.items() if k in ("id", "timestamp", "type", "role", "parts")}
        kept["content" if "type" in kept else "parts"] = [{"text": text}]
        kept[REFUSED_KEY] = {"reason": reason}
    notes.append(
        Note(
            str(chat.path),
            _where(chat, index),
            f"{_record_name(chat, index)} is {size:,} bytes as JSON, over the "
            f"{RECORD_LIMIT:,} (MAX_MESSAGE_BYTES) a source record holds: a placeholder "
            "with its other fields and a text saying it was left out is kept in its place, "
            "and export gemini writes that.",
        )
    )
    return kept


def _message_slot(message: Mapping[str, Any]) -> Slot:
    return Slot(None, lambda ts: MessageRow(ts, message))


def _record_maker(record: Mapping[str, Any], own: int | None) -> Any:
    kind = record_kind(record)
    return lambda ts: SourceRecordRow(ts, ORIGIN, kind, record, own)


def _request_maker(
    record: Mapping[str, Any],
    tokens: Mapping[str, Any],
    notes: list[Note],
    index: int,
    chat: GeminiChat,
) -> Any:
    counts: dict[str, int | None] = {}
    for key in ("input", "output", "cached"):
        value = tokens.get(key)
        if value is not None and not is_int(value, MAX_INT32):
            notes.append(
                Note(
                    str(chat.path),
                    f"messages[{index}] tokens.{key}",
                    f"{value!r:.40} is not a token count; left out of the request row.",
                )
            )
            value = None
        counts[key] = value
    cached, given = counts["cached"], counts["input"]
    tokens_in = (
        given - cached if given is not None and cached is not None and cached <= given else given
    )
    model = record.get("model")
    model_id = model if is_model_id(model) else None
    details = fitting_details({"tokens": dict(tokens)}, str(chat.path), f"messages[{index}]", notes)

    def make(ts: int) -> TimelineRow:
        return RequestRow(
            ts,
            tokens_in=tokens_in,
            tokens_out=counts["output"],
            cache_reads=cached,
            model_id=model_id,
            details=details,
        )

    return make


def _title(chat: GeminiChat, messages: Sequence[Mapping[str, Any]]) -> str | None:
    summary = chat.metadata.get("summary") if chat.is_session else None
    if isinstance(summary, str) and summary.strip():
        return str(without_nul(summary.strip().splitlines()[0][:_TITLE_CHARS])[0])
    for message in messages:
        if message["role"] != "user" or message.get(SYNTHETIC_FIELD):
            continue
        content = message["content"]
        texts = (
            [content]
            if isinstance(content, str)
            else [b["text"] for b in content if b["type"] == "text"]
        )
        for text in texts:
            if text.lstrip().startswith(CONTEXT_OPENINGS):
                continue
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return str(without_nul(lines[0][:_TITLE_CHARS])[0])
    return None


def token_limit(model_id: str | None) -> int:
    """The context window Gemini CLI gave a chat with ``model_id`` (its ``tokenLimit``, by
    exact name as it matches): what its compression and overflow checks measured against,
    so that an imported chat's audit and truncation do too."""
    return GEMMA_4_TOKEN_LIMIT if model_id in GEMMA_4_MODELS else GEMINI_TOKEN_LIMIT


def _model_id(chat: GeminiChat) -> str | None:
    models = [without_nul(r.get("model"))[0] for r in chat.records if r.get("type") == "gemini"]
    return next((m for m in reversed(models) if is_model_id(m)), None)


def _metadata(chat: GeminiChat, notes: list[Note]) -> dict[str, Any]:
    gemini: dict[str, Any] = {"file": path_text(chat.path), "kind": chat.kind}
    metadata, replaced = without_nul(dict(chat.metadata))
    where = "session metadata" if chat.is_session else "beside history"
    if replaced:
        notes.append(nul_note(chat.path, where, replaced))
    gemini["session" if chat.is_session else "checkpoint"] = metadata
    found = {"source": ORIGIN, "gemini": gemini}
    parts = [MetadataPart(metadata, key, str(chat.path), f"{where} {key}") for key in metadata]
    fit_metadata(found, parts, notes)
    return found
