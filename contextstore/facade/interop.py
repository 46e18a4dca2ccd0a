"""Replaying another agent's history: many timeline rows in one call, and the records the agent
kept beside the model history (``source_records``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from contextstore.core.content import NormalizedMessage, normalize_message_dict
from contextstore.core.errors import ContentTooLargeError, InvalidInputError, TimelineError
from contextstore.core.nodes import CallInfo, CountedMessage, NodeRow, batch_calls
from contextstore.core.overlays import UpdateKind, UpdateMode, block_text
from contextstore.core.planning import check_settings, with_settings_kept
from contextstore.core.records import RemovedSourceRecords, RollbackReport, SourceRecord
from contextstore.core.rows import (
    ROW_TABLES,
    CheckpointRow,
    MessageRow,
    RangeRow,
    RequestRow,
    SourceRecordRow,
    TimelineRow,
    UpdateRow,
)
from contextstore.core.truncation import past_last_but_one
from contextstore.core.validate import (
    MAX_HASH_LENGTH,
    MAX_INT32,
    MAX_JSON_BYTES,
    MAX_KEEP_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_MESSAGE_BYTES,
    MAX_NAME_LENGTH,
    NUL,
    TOKEN_COUNTS,
    check_free_text,
    check_id,
    check_int,
    check_json_object,
    check_json_value,
    check_model_id,
    check_number,
    check_text,
    check_token_total,
    check_tool_input_json,
    check_ts,
    shown,
    text_bytes,
)
from contextstore.facade.base import StoreBase
from contextstore.storage import conversations, ranges, timeline
from contextstore.storage import interop as storage
from contextstore.storage.clock import last_ts, set_message_count
from contextstore.storage.codec import EXACT_KEY, exact_pieces
from contextstore.storage.database import Connection
from contextstore.storage.interop import IMPORT_TARGET, MessageInsert

MAX_ORIGIN_LENGTH = 32
MAX_KIND_LENGTH = 64


class _Batch:
    """An import's rows sorted by table, checked in timeline order."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, CountedMessage]] = []
        self.records: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.ranges: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []

    def counts(self) -> dict[str, int]:
        return {
            "messages": len(self.messages),
            "source_records": len(self.records),
            "api_requests": len(self.requests),
            "checkpoints": len(self.checkpoints),
            "deleted_ranges": len(self.ranges),
            "context_updates": len(self.updates),
        }


class InteropMixin(StoreBase):
    """Replaying another agent's history on its own clock, and reading what it kept."""

    if TYPE_CHECKING:  # provided by HistoryMixin in ContextStore

        def _prepare_for_write(self, normalized: NormalizedMessage) -> CountedMessage: ...

        def _typed_at(
            self,
            connection: Connection,
            conversation_id: str,
            written: Sequence[tuple[int, CountedMessage]],
            calls: Mapping[str, CallInfo],
            missing: Sequence[str],
        ) -> list[list[NodeRow]]: ...

    def import_timeline(self, conversation_id: str, rows: Sequence[TimelineRow]) -> dict[str, int]:
        """Write many timeline rows, each at its own ``ts``, in one transaction.

        ``rows`` (see :mod:`contextstore.core.rows`) are in timeline order: their ``ts``
        strictly increase and the first is later than the conversation's last ``ts``. Each
        row is checked as its single-row method would check it (a message as by
        :meth:`append`, a range as by :meth:`set_deleted_range`, an update as by
        :meth:`add_context_update`, against the messages before it), then all are written
        with one statement per table. Returns the rows written per table.

        Raises:
            InvalidInputError: a row is malformed, naming its position (nothing written).
            TimelineError: the ``ts`` do not strictly increase after the conversation's last.
            ConversationNotFoundError: no conversation has this id.
        """
        check_id(conversation_id)
        if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
            raise InvalidInputError("import_timeline takes a list of timeline rows.")
        previous: int | None = None
        for position, row in enumerate(rows):
            if type(row) not in ROW_TABLES:
                raise InvalidInputError(
                    f"row {position} is a {type(row).__name__}; pass rows from "
                    "contextstore.core.rows."
                )
            check_ts(f"row {position} ts", row.ts, optional=False)
            if previous is not None and row.ts <= previous:
                raise TimelineError(
                    f"row {position} has ts {row.ts}, not later than the row before it "
                    f"({previous}); rows must be in timeline order with increasing ts."
                )
            previous = row.ts
        prepared = self._prepare_rows(rows)
        if not rows:
            with self._db.read() as connection:
                self._conversation(connection, conversation_id)
            return _Batch().counts()

        def work(connection: Connection) -> dict[str, int]:
            last = last_ts(connection, conversation_id, lock=True)
            if rows[0].ts <= last:
                raise TimelineError(
                    f"the first row's ts {rows[0].ts} is not later than the conversation's "
                    f"last ts {last}; an import continues the timeline."
                )
            batch = self._checked_batch(connection, conversation_id, rows, prepared)
            first_idx = conversations.message_count(connection, conversation_id)
            at = [
                (first_idx + offset, counted) for offset, (_, counted) in enumerate(batch.messages)
            ]
            calls, missing = batch_calls(counted.message for _, counted in at)
            typed = self._typed_at(connection, conversation_id, at, calls, missing)
            storage.insert_messages(
                connection,
                conversation_id,
                [
                    MessageInsert(idx, ts, counted.message, counted.tokens, node_rows)
                    for (idx, counted), (ts, _), node_rows in zip(
                        at, batch.messages, typed, strict=True
                    )
                ],
            )
            storage.insert_source_records(connection, conversation_id, batch.records)
            storage.insert_requests(connection, conversation_id, batch.requests)
            storage.insert_checkpoints(connection, conversation_id, batch.checkpoints)
            storage.insert_ranges(connection, conversation_id, batch.ranges)
            storage.insert_updates_at(connection, conversation_id, batch.updates)
            storage.record_imported_lineage(
                connection, conversation_id, batch.ranges, batch.updates
            )
            storage.advance_clock(connection, conversation_id, rows[-1].ts)
            return batch.counts()

        return self._db.write(work)

    def _prepare_rows(self, rows: Sequence[TimelineRow]) -> list[CountedMessage]:
        """Validate every message (masking, size, token count) before the transaction."""
        prepared = []
        for position, row in enumerate(rows):
            if isinstance(row, MessageRow):
                try:
                    prepared.append(self._prepare_for_write(normalize_message_dict(row.message)))
                except InvalidInputError as exc:
                    raise type(exc)(f"row {position} (message): {exc}") from exc
        return prepared

    def _checked_batch(
        self,
        connection: Connection,
        conversation_id: str,
        rows: Sequence[TimelineRow],
        prepared: Sequence[CountedMessage],
    ) -> _Batch:
        batch = _Batch()
        count = conversations.message_count(connection, conversation_id)
        current = ranges.load_deleted_range(connection, conversation_id)
        end = current[1] if current else None
        stored_blocks = _StoredBlocks(connection, conversation_id, count)
        messages = iter(prepared)
        new_blocks: dict[int, list[dict[str, Any]]] = {}
        for position, row in enumerate(rows):
            where = f"row {position} ({ROW_TABLES[type(row)]}, ts {row.ts})"
            try:
                if isinstance(row, MessageRow):
                    counted = next(messages)
                    batch.messages.append((row.ts, counted))
                    new_blocks[count] = counted.message.blocks
                    count += 1
                elif isinstance(row, SourceRecordRow):
                    batch.records.append(self._masked_fields(_record_values(row), "data"))
                elif isinstance(row, RequestRow):
                    batch.requests.append(_request_values(row))
                elif isinstance(row, CheckpointRow):
                    batch.checkpoints.append(self._masked_fields(_checkpoint_values(row), "note"))
                elif isinstance(row, RangeRow):
                    values = _range_values(row, count, end)
                    batch.ranges.append(self._masked_fields(values, "reason", "summary"))
                    end = row.end
                else:
                    target = new_blocks.get(row.message_idx) or stored_blocks.get(row.message_idx)
                    batch.updates.append(
                        _update_values(row, count, target, self.max_message_bytes, self._masked)
                    )
            except InvalidInputError as exc:
                raise type(exc)(f"{where}: {exc}") from exc
        return batch

    def source_records(
        self, conversation_id: str, *, as_of: int | None = None, origin: str | None = None
    ) -> list[SourceRecord]:
        """The records another agent kept beside the model history (oldest first).

        ``origin`` selects one kind of file (``"cline"`` for Cline's UI messages,
        ``"gemini"`` for Gemini CLI session records); ``as_of`` a moment of the timeline.
        """
        check_id(conversation_id)
        check_text("origin", origin, MAX_ORIGIN_LENGTH)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            rows = storage.load_source_records(connection, conversation_id, limit, origin)
        return [SourceRecord(**row) for row in rows]

    def message_timestamps(self, conversation_id: str) -> list[int]:
        """Every message's ``ts``, in index order (an exporter dates what it writes)."""
        check_id(conversation_id)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return storage.load_message_ts(connection, conversation_id)

    def removed_source_records(self, conversation_id: str) -> list[RemovedSourceRecords]:
        """The source records each rollback removed and archived, for rollbacks not restored.

        An exporter uses them to say what a rollback took away, as the other agent's own
        restore does (Cline adds a ``deleted_api_reqs`` message with their token totals).
        """
        check_id(conversation_id)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            found = storage.load_removed_source_records(connection, conversation_id)
        return [
            RemovedSourceRecords(
                r.rollback_id,
                r.cutoff_ts,
                r.ran_at,
                tuple(SourceRecord(**record) for record in r.records),
            )
            for r in found
        ]

    def discard_imported_rows(self, conversation_id: str, *, after: int) -> RollbackReport:
        """Remove the rows newer than ``after`` and set the clock back to it, for an importer
        replacing rows it wrote that the other agent has since rewritten in place (Cline
        completing a message or restoring a checkpoint, Gemini CLI re-appending a record).

        The rows are archived, as :meth:`rollback` archives what it removes, under a
        ``rollbacks`` row of their own whose ``target`` is None (no label or ts was asked
        for), so the audit lists them and :meth:`restore` can put them back once the rows
        written over them are rolled back. An exporter does not count that rollback as one
        the other agent should hear of (Cline's ``deleted_api_reqs``): the agent made the
        change. Refused once a rollback or restore asked for by a caller ran after
        ``after`` (its rows and archive would no longer match the timeline). Returns what
        was removed per table and the rollback's id.

        Raises:
            InvalidInputError: ``after`` is later than the clock, or a rollback ran since.
        """
        check_id(conversation_id)
        check_ts("after", after, optional=False)

        def work(connection: Connection) -> RollbackReport:
            last = last_ts(connection, conversation_id, lock=True)
            if after > last:
                raise InvalidInputError(
                    f"after {after} is later than the conversation's last ts {last}."
                )
            if storage.rollback_after(connection, conversation_id, after):
                raise InvalidInputError(
                    f"a rollback or restore ran after ts {after}; imported rows can no longer "
                    "be replaced in place."
                )
            # The rollback's tick (its ``ran_at``) moves the clock on; it is set back to
            # ``after`` below, where the importer's rows continue on the agent's clock.
            rollback_id = timeline.start_rollback(
                connection, conversation_id, after, IMPORT_TARGET, False
            )
            counts, first_removed = timeline.remove_after(
                connection, conversation_id, after, archive_into=rollback_id
            )
            if first_removed is not None:
                set_message_count(connection, conversation_id, first_removed)
            timeline.set_rollback_counts(connection, rollback_id, counts)
            storage.advance_clock(connection, conversation_id, after)
            return RollbackReport(conversation_id, after, counts, rollback_id, True)

        report = self._db.write(work)
        # Rows written next may take the removed rows' timestamps: nothing read is reused.
        self.prepare_cache.discard(conversation_id)
        self._forget_calls(conversation_id)
        return report

    def set_conversation_metadata(self, conversation_id: str, metadata: Mapping[str, Any]) -> None:
        """Replace a conversation's metadata object (an importer's bookkeeping lives there),
        keeping the store's own settings in it (``auto_condense``, ``subagent``) unless
        ``metadata`` names them."""
        check_id(conversation_id)
        values = self._masked(check_json_object("metadata", metadata))
        check_settings(values)

        def work(connection: Connection) -> None:
            current = self._locked(connection, conversation_id).metadata
            conversations.set_metadata(
                connection, conversation_id, with_settings_kept(values, current)
            )

        self._db.write(work)


class _StoredBlocks:
    """Blocks of messages already in the store, read once when an update addresses them."""

    def __init__(self, connection: Connection, conversation_id: str, count: int) -> None:
        self._connection = connection
        self._conversation_id = conversation_id
        self._count = count
        self._cache: dict[int, list[dict[str, Any]]] = {}

    def get(self, message_idx: int) -> list[dict[str, Any]] | None:
        if message_idx >= self._count:
            return None
        if message_idx not in self._cache:
            found = storage.load_blocks(self._connection, self._conversation_id, [message_idx])
            self._cache[message_idx] = [block for _, block in sorted(found.items())]
        return self._cache[message_idx]


def _record_values(row: SourceRecordRow) -> dict[str, Any]:
    check_text("origin", row.origin, MAX_ORIGIN_LENGTH, optional=False)
    check_text("kind", row.kind, MAX_KIND_LENGTH, optional=False)
    check_ts("source_ts", row.source_ts)
    return {
        "ts": row.ts,
        "origin": row.origin,
        "kind": row.kind,
        "source_ts": row.source_ts,
        "data": _json_object("data", row.data, MAX_MESSAGE_BYTES),
    }


def _json_object(name: str, value: Any, max_bytes: int) -> dict[str, Any]:
    """``value`` as a dict, once it is checked to be a JSON object of at most ``max_bytes``
    (the database encodes it; unlike :func:`check_json_object`, no decoded copy is made:
    many records are checked)."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{name} must be a mapping with string keys, got {shown(value)}.")
    plain = dict(value)
    check_json_value(name, plain)
    size = text_bytes(name, json.dumps(plain, ensure_ascii=False))
    if size > max_bytes:
        raise ContentTooLargeError(
            f"{name} is {size:,} bytes as JSON, over the limit of {max_bytes:,}; nothing was "
            "imported."
        )
    return plain


def _request_values(row: RequestRow) -> dict[str, Any]:
    for name in TOKEN_COUNTS:
        check_int(name, getattr(row, name))
    check_token_total({name: getattr(row, name) for name in TOKEN_COUNTS})
    check_number("cost", row.cost)
    check_model_id("model_id", row.model_id)
    check_text("failure", row.failure, MAX_NAME_LENGTH)
    return {
        "ts": row.ts,
        "tokens_in": row.tokens_in,
        "tokens_out": row.tokens_out,
        "cache_writes": row.cache_writes,
        "cache_reads": row.cache_reads,
        "cost": row.cost,
        "model_id": row.model_id,
        "failure": row.failure,
        "details": None
        if row.details is None
        else _json_object("details", row.details, MAX_JSON_BYTES),
    }


def _checkpoint_values(row: CheckpointRow) -> dict[str, Any]:
    check_text("label", row.label, MAX_LABEL_LENGTH)
    check_text("git_hash", row.git_hash, MAX_HASH_LENGTH)
    check_free_text("note", row.note)
    return {"ts": row.ts, "label": row.label, "git_hash": row.git_hash, "note": row.note}


def _range_values(row: RangeRow, count: int, current_end: int | None) -> dict[str, Any]:
    check_int("end", row.end, minimum=1, maximum=MAX_INT32, optional=False)
    check_int("tokens_total", row.tokens_total)
    check_text("keep", row.keep, MAX_KEEP_LENGTH, optional=False)
    check_free_text("reason", row.reason, optional=False)
    check_free_text("summary", row.summary)
    if count and row.end >= count - 1:
        raise InvalidInputError(past_last_but_one(row.end, count, " at this point of the timeline"))
    if current_end is not None and row.end < current_end:
        raise InvalidInputError(
            f"end {row.end} would shrink the range (2, {current_end}) set before it; ranges "
            "only grow."
        )
    return {
        "ts": row.ts,
        "end_idx": row.end,
        "keep": row.keep,
        "reason": row.reason,
        "tokens_total": row.tokens_total,
        "summary": row.summary,
    }


def _update_values(
    row: UpdateRow,
    count: int,
    target: list[dict[str, Any]] | None,
    max_text_bytes: int,
    masked: Callable[[Any], Any],
) -> dict[str, Any]:
    check_int("message_idx", row.message_idx, optional=False)
    check_int("block_idx", row.block_idx, optional=False)
    check_free_text("text", row.text, max_text_bytes, optional=False, allow_nul=True)
    if row.kind not in UpdateKind.ALL:
        raise InvalidInputError(
            f"kind {shown(row.kind)} is unknown; use one of {sorted(UpdateKind.ALL)}."
        )
    if row.mode not in UpdateMode.ALL:
        raise InvalidInputError(
            f"mode {shown(row.mode)} is unknown; use one of {sorted(UpdateMode.ALL)}."
        )
    check_text("source", row.source, MAX_NAME_LENGTH, optional=False)
    metadata = masked(check_json_object("metadata", row.metadata))
    text = masked(row.text)
    if row.message_idx >= count or target is None or row.block_idx >= len(target):
        raise InvalidInputError(
            f"message {row.message_idx} has no block {row.block_idx} at this point of the "
            "timeline; an update comes after the message it rewrites."
        )
    block = target[row.block_idx]
    if row.mode == UpdateMode.TEXT and block_text(block) is None:
        raise InvalidInputError(
            f"block {row.message_idx}.{row.block_idx} is a {block.get('type')} block with no "
            "text to rewrite."
        )
    if row.mode == UpdateMode.TOOL_INPUT and block.get("type") != "tool_use":
        raise InvalidInputError("mode='tool_input' applies to tool_use blocks only.")
    if row.mode == UpdateMode.TOOL_INPUT:
        check_tool_input_json(text)
    values = {
        "ts": row.ts,
        "message_idx": row.message_idx,
        "block_idx": row.block_idx,
        "kind": row.kind,
        "mode": row.mode,
        "text": text,
        "metadata": metadata,
        "source": row.source,
        "base_hash": None,
    }
    if NUL in text:
        values["metadata"] = {**metadata, EXACT_KEY: exact_pieces(text)}
    return values
