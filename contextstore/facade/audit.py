"""Answers for auditors: what a conversation cost and why it looks as it does, search
across conversations, what the model was shown at a moment, and read-only SQL."""

from __future__ import annotations

import re
from typing import Any

from contextstore.core.audit_records import (
    REMOVED_NOTHING,
    AuditReport,
    DedupSaving,
    FailedToolCall,
    FileRead,
    MaskedSecretCount,
    QueryResult,
    RequestUsage,
    RollbackEvent,
    SearchHit,
    TimelineEvent,
    TruncationEvent,
    ViewedBlock,
    ViewedMessage,
)
from contextstore.core.errors import InvalidInputError, RequestNotFoundError
from contextstore.core.overlays import block_text
from contextstore.core.records import Checkpoint
from contextstore.core.shown import ShownMessage, shown_by_view
from contextstore.core.validate import (
    MAX_LABEL_LENGTH,
    MAX_SEARCH_LENGTH,
    check_free_text,
    check_id,
    check_int,
    check_text,
)
from contextstore.core.view import VIEW_RULES
from contextstore.core.window import context_window_info
from contextstore.facade.base import stored_view_rules
from contextstore.facade.history import HistoryMixin
from contextstore.facade.timeline import TimelineMixin
from contextstore.storage import audit as audit_sql
from contextstore.storage import history, ranges, requests, updates
from contextstore.storage.codec import decode_object
from contextstore.storage.engine import resolve_target
from contextstore.storage.paths import default_database_path

UNCHANGED = ShownMessage()
"""What the view changes of a message it sends as stored (or hides)."""

SNIPPET_CONTEXT = 40
"""Characters kept either side of a search match."""

_REMOVED_COLUMNS = {
    "messages": "messages_removed",
    "blocks": "blocks_removed",
    "deleted_ranges": "ranges_removed",
    "context_updates": "updates_removed",
    "api_requests": "requests_removed",
    "checkpoints": "checkpoints_removed",
}


def _removed(row: dict[str, Any]) -> dict[str, int]:
    """What a rollback removed per table: its ``counts`` (every table, as its report said),
    the view's columns for any table they lack."""
    counts = decode_object(row["counts"], f"rollback {row['rollback_id']} counts")
    removed = {name: int(row[column]) for name, column in _REMOVED_COLUMNS.items()}
    removed.update({name: int(n) for name, n in counts.items()})
    return removed


def _fields(cls: type, row: dict[str, Any], **overrides: Any) -> Any:
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    values = {name: row[name] for name in names if name in row}
    values.update(overrides)
    return cls(**values)


def snippet(haystack: str, needle: str, context: int = SNIPPET_CONTEXT) -> str:
    """The first case-insensitive match of ``needle`` in ``haystack`` with ``context``
    characters either side, whitespace collapsed, ``...`` marking a cut."""
    # Matched on the text itself: a position found in a lowercased copy can be off where
    # lowercasing changes a character's length ("\u0130" becomes two).
    found = re.search(re.escape(needle), haystack, re.IGNORECASE)
    at, after = (found.start(), found.end()) if found else (0, len(needle))
    start = max(0, at - context)
    end = min(len(haystack), after + context)
    middle = re.sub(r"\s+", " ", haystack[start:end]).strip()
    return ("..." if start > 0 else "") + middle + ("..." if end < len(haystack) else "")


class AuditMixin(HistoryMixin, TimelineMixin):
    """Answers for auditors: audits, timelines, search, the view as the model saw it,
    and read-only SQL."""

    def audit(self, conversation_id: str) -> AuditReport:
        """Everything an auditor asks about one conversation, read in one snapshot (one
        read transaction).

        Truncation events (strategy, range, triggering tokens, reason); requests with their
        tokens, cost and running totals against the window and the maximum allowed size;
        files read and how often; file-read de-duplication savings; masked secrets by kind
        (counts of ``[REDACTED:kind]`` markers, never the secret); failed tool calls;
        checkpoints; rollbacks and what each removed. The same facts are SQL views
        (``audit_requests``, ``truncation_events``, ...) documented in the README.

        Raises:
            ConversationNotFoundError: no conversation has this id.
        """
        check_id(conversation_id)
        with self._db.read() as connection:
            conv = self._conversation(connection, conversation_id)
            requests = audit_sql.request_usage(connection, conversation_id)
            truncations = audit_sql.truncation_events(connection, conversation_id)
            reads = audit_sql.file_reads(connection, conversation_id)
            dedup = audit_sql.dedup_savings(connection, conversation_id)
            secrets = audit_sql.masked_secret_counts(connection, conversation_id)
            failed = audit_sql.failed_tool_calls(connection, conversation_id)
            rollbacks = audit_sql.rollback_events(connection, conversation_id)
            checkpoints = audit_sql.checkpoint_rows(connection, conversation_id)
        window = context_window_info(conv.context_window)
        return AuditReport(
            conversation=conv,
            context_window=window.context_window,
            max_allowed_size=window.max_allowed_size,
            requests=[
                _fields(
                    RequestUsage,
                    r,
                    cost=None if r["cost"] is None else float(r["cost"]),
                    cumulative_tokens=int(r["cumulative_tokens"]),
                    cumulative_cost=float(r["cumulative_cost"]),
                    max_allowed_size=float(r["max_allowed_size"]),
                    percent_of_window=float(r["percent_of_window"]),
                    over_max_allowed=bool(r["over_max_allowed"]),
                    prepared=bool(r["prepared"]),
                )
                for r in requests
            ],
            truncations=[_fields(TruncationEvent, r) for r in truncations],
            file_reads=[_fields(FileRead, r) for r in reads],
            dedup_savings=[_fields(DedupSaving, r) for r in dedup],
            masked_secrets=[_fields(MaskedSecretCount, r) for r in secrets],
            failed_tool_calls=[_fields(FailedToolCall, r) for r in failed],
            checkpoints=[Checkpoint(**row) for row in checkpoints],
            rollbacks=[
                _fields(
                    RollbackEvent,
                    r,
                    purged=bool(r["purged"]),
                    removed=_removed(r),
                )
                for r in rollbacks
            ],
        )

    def timeline(self, conversation_id: str) -> list[TimelineEvent]:
        """Every event of the conversation in timeline order: messages, truncations,
        rewrites, requests, checkpoints and rollbacks (a rollback at the time it ran).

        A rollback that removed no row (recorded by versions before a rollback with nothing
        after its cutoff stopped running) says so in its ``detail``."""
        check_id(conversation_id)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            rows = audit_sql.timeline_events(connection, conversation_id)
            empty = (
                {
                    int(r["rollback_id"])
                    for r in audit_sql.rollback_events(connection, conversation_id)
                    if not any(_removed(r).values())
                }
                if any(r["event"] == "rollback" for r in rows)
                else set()
            )
        return [
            _fields(TimelineEvent, r, detail=f"{r['detail']}, {REMOVED_NOTHING}")
            if r["event"] == "rollback" and int(r["ref_id"]) in empty
            else _fields(TimelineEvent, r)
            for r in rows
        ]

    def search(
        self, text: str, *, limit: int = 50, conversation_id: str | None = None
    ) -> list[SearchHit]:
        """Blocks of every conversation (or one) whose text or tool input contains ``text``,
        case-insensitively for ASCII letters, newest first, at most ``limit`` of them.

        Searches the stored originals (what was said), not rewrites.

        Raises:
            InvalidInputError: ``text`` is empty or longer than ``MAX_SEARCH_LENGTH``, or
                ``limit`` is not positive.
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("the search text is empty; pass the words to look for.")
        if len(text) > MAX_SEARCH_LENGTH:
            raise InvalidInputError(
                f"the search text is {len(text):,} characters, over the "
                f"{MAX_SEARCH_LENGTH:,} a search takes; search for a shorter part of it."
            )
        check_free_text("the search text", text)
        check_int("limit", limit, minimum=1, optional=False)
        if conversation_id is not None:
            check_id(conversation_id)
        with self._db.read() as connection:
            if conversation_id is not None:
                self._conversation(connection, conversation_id)
            rows = audit_sql.search_blocks(
                connection, text, limit=limit, conversation_id=conversation_id
            )
        hits = []
        for row in rows:
            found_in_text = text.lower() in (row["text"] or "").lower()
            body = row["text"] if found_in_text or row["input"] is None else row["input"]
            hits.append(
                _fields(SearchHit, row, snippet=snippet(body, text), title=row["title"] or None)
            )
        return hits

    def viewed_messages(
        self, conversation_id: str, *, as_of: int | None = None, request_id: int | None = None
    ) -> list[ViewedMessage]:
        """Every stored message at ``as_of`` (now by default), marked hidden when the deleted
        range covers it, each block with its original text and what the model was shown.

        This is the audit's view of a moment, read in one snapshot: the originals and the
        effective rewrites side by side, and what the view's repair did to the visible
        messages: a block it left out is ``dropped`` (an orphan tool result after a cut), the
        blocks it sent that no row holds are the message's ``added`` (``result missing``
        placeholders), a message it inserted is the previous message's ``followed_by``.
        Stored rewrites only: the pipeline's are counted once ``prepare_request`` stored
        them. (The model's exact message list is :meth:`render`.)

        ``as_of`` applies this version's view rules. ``request_id`` (instead of ``as_of``)
        gives what a request prepared here sent: the rows at its moment, by the view rules it
        was prepared with, as :meth:`request_payload` rebuilds it (a request prepared before
        a rule changed was sent without it).

        Raises:
            InvalidInputError: both ``as_of`` and ``request_id`` were given.
            RequestNotFoundError: the conversation has no such request, or it was recorded
                without being prepared here (pass its ``ts`` as ``as_of`` instead).
            CorruptRowError: the request's options name view rules this version lacks.
        """
        check_id(conversation_id)
        limit = self._as_of(as_of)
        if request_id is not None:
            check_int("request_id", request_id, minimum=1, optional=False)
            if as_of is not None:
                raise InvalidInputError(
                    "pass as_of or request_id, not both: a request's view is at its own moment."
                )
        rules = VIEW_RULES
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            if request_id is not None:
                record = self._request(connection, conversation_id, request_id)
                options = requests.load_options(connection, request_id)
                if options is None:
                    raise RequestNotFoundError(
                        f"request {request_id} was recorded without being prepared here, so "
                        "no view rules are stored for it; pass its ts as as_of for the view "
                        "by this version's rules."
                    )
                rules = stored_view_rules(options, request_id)
                limit = record.ts
            stored, _, _ = history.load_messages(connection, conversation_id, limit)
            hidden = ranges.load_deleted_range(connection, conversation_id, limit)
            rewrites = updates.load_overlays(connection, conversation_id, limit)
        changes = shown_by_view(stored, hidden, rewrites, rules=rules)
        viewed = []
        for index, message in enumerate(stored):
            change = changes.get(index, UNCHANGED)
            content = message.get("content")
            parts = (
                [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            )
            blocks = []
            for block_idx, block in enumerate(parts):
                rewrite = rewrites.get((index, block_idx))
                original = block_text(block)
                blocks.append(
                    ViewedBlock(
                        block_idx=block_idx,
                        type=str(block.get("type")),
                        block=block,
                        original_text=original,
                        effective_text=rewrite.text if rewrite else original,
                        rewrite_kind=rewrite.kind if rewrite else None,
                        rewrite_source=rewrite.source if rewrite else None,
                        dropped=block_idx in change.dropped,
                    )
                )
            viewed.append(
                ViewedMessage(
                    index=index,
                    role=str(message.get("role")),
                    hidden=hidden is not None and hidden[0] <= index <= hidden[1],
                    blocks=blocks,
                    added=list(change.added),
                    followed_by=list(change.followed_by),
                )
            )
        return viewed

    def message_count(self, conversation_id: str, *, as_of: int | None = None) -> int:
        """How many messages are stored (with ``ts <= as_of``), hidden ones included."""
        check_id(conversation_id)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return audit_sql.message_count(connection, conversation_id, limit)

    def query(self, sql: str) -> QueryResult:
        """Run one SQL statement read-only and return its columns and rows.

        The database engine refuses writes (SQLite opens the file again in read-only mode
        with ``PRAGMA query_only``; PostgreSQL runs a ``READ ONLY`` transaction as the role
        ``pg_read_all_data``, which holds no right to the server's files and programs), so a
        write fails whatever the SQL looks like. Nothing is cached or written.

        Raises:
            ReadOnlyError: the statement tried to write, or a PostgreSQL user who may write
                the server's files cannot take the reading role (a server before 14).
            InvalidInputError: the SQL is empty, holds several statements, or failed.
        """
        if isinstance(sql, str):
            check_free_text("the query", sql)
        target = resolve_target(self.location, default_database_path())
        columns, rows = audit_sql.run_read_only(self._db, target, sql)
        return QueryResult(columns, rows)

    def checkpoint_at(self, conversation_id: str, label: str) -> Checkpoint | None:
        """The newest checkpoint of the conversation with this label, or None."""
        check_text("label", label, MAX_LABEL_LENGTH, optional=False)
        found = [c for c in self.checkpoints(conversation_id) if c.label == label]
        return found[-1] if found else None
