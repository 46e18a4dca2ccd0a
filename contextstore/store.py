"""The ``ContextStore`` facade: every public operation, each in one transaction.

The store owns an engine (SQLite by default, PostgreSQL by URL), keeps the schema at the
current migration, and turns caller calls into rows. Reads compute the view from rows;
writes stamp every row with the conversation's clock.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from sqlalchemy import Connection, delete, func, insert, select, update

from contextstore.context_manager import (
    Summarizer,
    decide_and_write,
    explicit_truncate,
    policy_from_conversation,
)
from contextstore.core.content import NormalizedMessage, normalize_message, normalize_message_dict
from contextstore.core.errors import (
    CheckpointNotFoundError,
    ContentTooLargeError,
    ConversationNotFoundError,
    IntegrityViolationError,
    InvalidInputError,
    PayloadMismatchError,
    RequestNotFoundError,
)
from contextstore.core.overlays import BlockUpdate, UpdateKind, UpdateMode, block_text, text_hash
from contextstore.core.tokens import TiktokenCounter, TokenCounter, message_tokens
from contextstore.core.truncation import normalize_keep
from contextstore.core.view import build_view
from contextstore.pipeline_runner import RenderCache, processed_view, propose
from contextstore.processors.pipeline import Pipeline, default_pipeline
from contextstore.records import (
    AppendedMessage,
    Checkpoint,
    Conversation,
    PreparedRequest,
    RequestRecord,
    RollbackReport,
    TruncationDecision,
)
from contextstore.renderers import registry
from contextstore.storage import queries
from contextstore.storage.clock import last_ts, now_ms, tick
from contextstore.storage.copy import copy_history
from contextstore.storage.engine import Database, Durability, make_engine, resolve_target
from contextstore.storage.migrate import ensure_schema
from contextstore.storage.paths import default_database_path, default_location
from contextstore.storage.tables import (
    TIMELINE_TABLES,
    api_requests,
    archived_rows,
    blocks,
    checkpoints,
    context_updates,
    conversations,
    deleted_ranges,
    messages,
    request_options,
    rollbacks,
)

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""Largest accepted message, measured as its JSON encoding (images included)."""
MAX_ID_LENGTH = 64
MAX_LABEL_LENGTH = 200


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_sha256(payload: Mapping[str, Any]) -> str:
    """SHA-256 of a payload's canonical JSON (sorted keys, compact, UTF-8)."""
    import hashlib

    return hashlib.sha256(_canonical_json(payload).encode("utf-8")).hexdigest()


def _check_int(name: str, value: Any, *, minimum: int = 0, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def _check_text(name: str, value: Any, limit: int, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidInputError(
            f"{name} must be a non-empty string of at most {limit} characters, got {value!r}."
        )


class ContextStore:
    """A durable conversation store. Open it with :meth:`open`; close it or use ``with``.

    A store is safe to share between threads; several processes may open the same SQLite
    file (writers serialise on the database lock with bounded retries).
    """

    def __init__(
        self,
        database: Database,
        *,
        location: str,
        token_counter: TokenCounter | None = None,
        mask_secrets_on_write: bool = False,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        pipeline: Pipeline | None = None,
    ) -> None:
        self._db = database
        self.pipeline: Pipeline | None = default_pipeline() if pipeline is None else pipeline
        self.render_cache = RenderCache()
        self.location = location
        self.token_counter: TokenCounter = token_counter or TiktokenCounter()
        self.mask_secrets_on_write = mask_secrets_on_write
        self.max_message_bytes = max_message_bytes
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str] | None = None,
        *,
        auto_migrate: bool = True,
        durability: Durability = "full",
        read_only: bool = False,
        token_counter: TokenCounter | None = None,
        mask_secrets_on_write: bool = False,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        engine_kwargs: dict[str, Any] | None = None,
        pipeline: Pipeline | None = None,
    ) -> ContextStore:
        """Open (creating if needed) a store.

        Args:
            location: a file path, a SQLAlchemy URL (``sqlite:///...``,
                ``postgresql+psycopg://...``), ``":memory:"``, or None for
                ``$CONTEXTSTORE_DB`` or the per-user default location.
            auto_migrate: upgrade an empty or older database to the current schema; when
                False, a stale database raises :class:`SchemaOutdatedError`.
            durability: SQLite ``synchronous`` level: ``"full"`` (default; a committed
                write survives power loss) or ``"normal"`` (faster; in WAL mode the last
                transactions may be lost on power loss, never on a process crash).
            read_only: open without the ability to write (SQLite files open in read-only
                mode; every write raises :class:`ReadOnlyError`).
            token_counter: counts tokens at append; tiktoken ``cl100k_base`` by default.
            mask_secrets_on_write: mask secrets in message content before it is stored.
            max_message_bytes: largest accepted message (JSON size).
            pipeline: processors applied to every render and prepare (default: masking of
                high-confidence secrets; pass ``Pipeline([])`` for none).
            engine_kwargs: extra arguments for SQLAlchemy's ``create_engine``.
        """
        text_location = default_location() if location is None else os.fspath(location)
        target = resolve_target(text_location, default_database_path())
        engine = make_engine(
            target, durability=durability, read_only=read_only, engine_kwargs=engine_kwargs
        )
        database = Database(
            engine,
            is_sqlite=target.is_sqlite,
            read_only=read_only,
            serialize_reads=target.in_memory,
        )
        try:
            ensure_schema(
                engine, auto_migrate=auto_migrate and not read_only, is_sqlite=target.is_sqlite
            )
        except BaseException:
            engine.dispose()
            raise
        return cls(
            database,
            location=text_location,
            token_counter=token_counter,
            mask_secrets_on_write=mask_secrets_on_write,
            max_message_bytes=max_message_bytes,
            pipeline=pipeline,
        )

    @property
    def database(self) -> Database:
        """The underlying database (engine and transaction helpers)."""
        return self._db

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for in-memory and server databases."""
        return resolve_target(self.location, default_database_path()).sqlite_path

    def close(self) -> None:
        """Release the database connections. The store cannot be used afterwards."""
        if not self._closed:
            self._db.engine.dispose()
            self._closed = True

    def __enter__(self) -> ContextStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- conversations ---------------------------------------------------------------

    def create_conversation(
        self,
        *,
        model_id: str | None = None,
        context_window: int | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        parent_id: str | None = None,
    ) -> Conversation:
        """Create a conversation and return it.

        ``context_window`` configured here is authoritative (no model-name clamps); when
        None, context management assumes 128,000 tokens.
        """
        _check_text("id", id, MAX_ID_LENGTH)
        _check_text("model_id", model_id, 200)
        _check_int("context_window", context_window, minimum=1)
        if title is not None and not isinstance(title, str):
            raise InvalidInputError(f"title must be a string, got {type(title).__name__}.")
        meta = dict(metadata or {})
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"metadata must be JSON-serialisable: {exc}.") from exc
        conversation_id = id or uuid.uuid4().hex
        created = now_ms()

        def work(connection: Connection) -> Conversation:
            if parent_id is not None:
                last_ts(connection, parent_id)
            exists = connection.execute(
                select(conversations.c.id).where(conversations.c.id == conversation_id)
            ).first()
            if exists is not None:
                raise InvalidInputError(
                    f"a conversation with id {conversation_id!r} already exists; choose "
                    "another id or omit it."
                )
            row: dict[str, Any] = {
                "id": conversation_id,
                "created_ts": created,
                "last_ts": created,
                "title": title,
                "model_id": model_id,
                "context_window": context_window,
                "parent_id": parent_id,
                "metadata": meta,
            }
            connection.execute(insert(conversations).values(**row))
            return Conversation(**row)

        return self._db.write(work)

    def get_conversation(self, conversation_id: str) -> Conversation:
        """Return one conversation.

        Raises:
            ConversationNotFoundError: no conversation has this id.
        """
        with self._db.read() as connection:
            return self._conversation(connection, conversation_id)

    def list_conversations(self) -> list[Conversation]:
        """All conversations, oldest first."""
        with self._db.read() as connection:
            rows = connection.execute(
                select(conversations).order_by(conversations.c.created_ts, conversations.c.id)
            ).all()
        return [self._conversation_from_row(row) for row in rows]

    @staticmethod
    def _conversation_from_row(row: Any) -> Conversation:
        meta = queries._json(row.metadata, f"conversation {row.id} metadata")
        return Conversation(
            id=row.id,
            created_ts=row.created_ts,
            last_ts=row.last_ts,
            title=row.title,
            model_id=row.model_id,
            context_window=row.context_window,
            parent_id=row.parent_id,
            forked_at_ts=row.forked_at_ts,
            metadata=meta if isinstance(meta, dict) else {},
        )

    def _conversation(self, connection: Connection, conversation_id: str) -> Conversation:
        row = connection.execute(
            select(conversations).where(conversations.c.id == conversation_id)
        ).first()
        if row is None:
            raise ConversationNotFoundError(
                f"no conversation has id {conversation_id!r}; list them with "
                "ContextStore.list_conversations() or 'contextstore conversations'."
            )
        return self._conversation_from_row(row)

    # -- appending -------------------------------------------------------------------

    @overload
    def append(
        self,
        conversation_id: str,
        role: str,
        content: str | Sequence[Mapping[str, Any]],
        *,
        meta: Mapping[str, Any] | None = None,
        ts: int | None = None,
    ) -> AppendedMessage: ...

    @overload
    def append(
        self,
        conversation_id: str,
        role: Sequence[Mapping[str, Any]],
        content: None = None,
        *,
        meta: None = None,
        ts: int | None = None,
    ) -> list[AppendedMessage]: ...

    def append(
        self,
        conversation_id: str,
        role: Any,
        content: Any = None,
        *,
        meta: Mapping[str, Any] | None = None,
        ts: int | None = None,
    ) -> AppendedMessage | list[AppendedMessage]:
        """Append one message, or a list of message dicts in one transaction.

        ``append(cid, "user", [{"type": "text", "text": "..."}])`` appends one message;
        ``append(cid, [{"role": "user", "content": "..."}, ...])`` appends several, all or
        none. Fields beside ``role`` and ``content`` (Cline's ``id``, ``modelInfo``,
        ``metrics``...) are kept and come back unchanged from :meth:`messages`.
        ``ts`` forces the (first) message's timestamp; it must be later than the
        conversation's last one.

        Raises:
            InvalidMessageError: a message or block is malformed (nothing is written).
            ContentTooLargeError: a message exceeds ``max_message_bytes``.
            TimelineError: ``ts`` is not later than the conversation's last ``ts``.
            ConversationNotFoundError: no conversation has this id.
        """
        if isinstance(role, list | tuple) and content is None:
            return self.append_many(conversation_id, role, ts=ts)
        normalized = normalize_message(role, content, dict(meta) if meta else None)
        return self._append_normalized(conversation_id, [normalized], ts)[0]

    def append_many(
        self,
        conversation_id: str,
        new_messages: Sequence[Mapping[str, Any]],
        *,
        ts: int | None = None,
    ) -> list[AppendedMessage]:
        """Append several messages (dicts with ``role`` and ``content``) in one transaction."""
        if isinstance(new_messages, str | bytes) or not isinstance(new_messages, Sequence):
            raise InvalidInputError("append_many takes a list of message dicts.")
        if not new_messages:
            raise InvalidInputError("append_many needs at least one message.")
        normalized = []
        for position, message in enumerate(new_messages):
            try:
                normalized.append(normalize_message_dict(message))
            except InvalidInputError as exc:
                raise type(exc)(f"message {position}: {exc}") from exc
        return self._append_normalized(conversation_id, normalized, ts)

    def _prepare_for_write(self, normalized: NormalizedMessage) -> tuple[NormalizedMessage, int]:
        if self.mask_secrets_on_write:
            from contextstore.processors.secrets import mask_message

            normalized = normalize_message_dict(mask_message(normalized.to_message()))
        size = len(_canonical_json(normalized.blocks)) + len(_canonical_json(normalized.meta))
        if size > self.max_message_bytes:
            raise ContentTooLargeError(
                f"the message is {size:,} bytes as JSON, over the limit of "
                f"{self.max_message_bytes:,}; split it, store large files outside the "
                "conversation, or open the store with a larger max_message_bytes."
            )
        return normalized, message_tokens(normalized.blocks, self.token_counter)

    def _append_normalized(
        self, conversation_id: str, normalized: list[NormalizedMessage], ts: int | None
    ) -> list[AppendedMessage]:
        prepared = [self._prepare_for_write(n) for n in normalized]

        def work(connection: Connection) -> list[AppendedMessage]:
            stamps = tick(connection, conversation_id, len(prepared), at=ts)
            first_idx = queries.next_message_idx(connection, conversation_id)
            written = []
            for offset, ((message, tokens), stamp) in enumerate(zip(prepared, stamps, strict=True)):
                idx = first_idx + offset
                queries.insert_message(connection, conversation_id, idx, stamp, message, tokens)
                written.append(AppendedMessage(conversation_id, idx, stamp, message.role, tokens))
            return written

        return self._db.write(work)

    # -- requests --------------------------------------------------------------------

    def record_request(
        self,
        conversation_id: str,
        *,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cache_writes: int | None = None,
        cache_reads: int | None = None,
        cost: float | None = None,
        model_id: str | None = None,
        request_id: int | None = None,
    ) -> RequestRecord:
        """Record a model request's token usage and cost.

        With ``request_id`` (from :meth:`prepare_request`), the usage is stored on that
        prepared request's row; otherwise a new request row is written. The next
        :meth:`prepare_request` decides on truncation from the newest recorded usage.
        """
        for name, value in (
            ("tokens_in", tokens_in),
            ("tokens_out", tokens_out),
            ("cache_writes", cache_writes),
            ("cache_reads", cache_reads),
        ):
            _check_int(name, value)
        if cost is not None and (
            isinstance(cost, bool) or not isinstance(cost, int | float) or cost < 0
        ):
            raise InvalidInputError(f"cost must be a number >= 0, got {cost!r}.")
        _check_text("model_id", model_id, 200)
        _check_int("request_id", request_id, minimum=1)
        usage = {
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cache_writes": cache_writes,
            "cache_reads": cache_reads,
            "cost": cost,
        }

        def work(connection: Connection) -> RequestRecord:
            if request_id is None:
                (stamp,) = tick(connection, conversation_id)
                new_id = connection.execute(
                    insert(api_requests)
                    .values(conversation_id=conversation_id, ts=stamp, model_id=model_id, **usage)
                    .returning(api_requests.c.id)
                ).scalar_one()
                return self._request(connection, conversation_id, int(new_id))
            last_ts(connection, conversation_id, lock=True)
            self._request(connection, conversation_id, request_id)
            values: dict[str, Any] = {k: v for k, v in usage.items() if v is not None}
            if model_id is not None:
                values["model_id"] = model_id
            if values:
                connection.execute(
                    update(api_requests).where(api_requests.c.id == request_id).values(**values)
                )
            return self._request(connection, conversation_id, request_id)

        return self._db.write(work)

    def _request(
        self, connection: Connection, conversation_id: str, request_id: int
    ) -> RequestRecord:
        row = connection.execute(
            select(api_requests).where(
                api_requests.c.id == request_id, api_requests.c.conversation_id == conversation_id
            )
        ).first()
        if row is None:
            raise RequestNotFoundError(
                f"conversation {conversation_id!r} has no request {request_id}; use the "
                "request_id returned by prepare_request."
            )
        return RequestRecord(
            id=row.id,
            conversation_id=row.conversation_id,
            ts=row.ts,
            tokens_in=row.tokens_in,
            tokens_out=row.tokens_out,
            cache_writes=row.cache_writes,
            cache_reads=row.cache_reads,
            cost=row.cost,
            model_id=row.model_id,
            format=row.format,
            payload_sha256=row.payload_sha256,
        )

    def requests(self, conversation_id: str, *, as_of: int | None = None) -> list[RequestRecord]:
        """The conversation's API requests, oldest first."""
        limit = queries.NO_LIMIT if as_of is None else as_of
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            ids = connection.execute(
                select(api_requests.c.id)
                .where(
                    api_requests.c.conversation_id == conversation_id, api_requests.c.ts <= limit
                )
                .order_by(api_requests.c.ts)
            ).scalars()
            return [self._request(connection, conversation_id, int(i)) for i in ids]

    # -- checkpoints and rollback ----------------------------------------------------

    def checkpoint(
        self,
        conversation_id: str,
        label: str | None = None,
        *,
        git_hash: str | None = None,
        note: str | None = None,
    ) -> Checkpoint:
        """Mark the present moment; :meth:`rollback` to it restores exactly these rows.

        Labels need not be unique; rolling back to a label uses its newest checkpoint.
        """
        _check_text("label", label, MAX_LABEL_LENGTH)
        _check_text("git_hash", git_hash, 64)
        if note is not None and not isinstance(note, str):
            raise InvalidInputError("note must be a string.")

        def work(connection: Connection) -> Checkpoint:
            (stamp,) = tick(connection, conversation_id)
            new_id = connection.execute(
                insert(checkpoints)
                .values(
                    conversation_id=conversation_id,
                    ts=stamp,
                    label=label,
                    git_hash=git_hash,
                    note=note,
                )
                .returning(checkpoints.c.id)
            ).scalar_one()
            return Checkpoint(int(new_id), conversation_id, stamp, label, git_hash, note)

        return self._db.write(work)

    def checkpoints(self, conversation_id: str) -> list[Checkpoint]:
        """The conversation's checkpoints, oldest first."""
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            rows = connection.execute(
                select(checkpoints)
                .where(checkpoints.c.conversation_id == conversation_id)
                .order_by(checkpoints.c.ts)
            ).all()
        return [
            Checkpoint(r.id, r.conversation_id, r.ts, r.label, r.git_hash, r.note) for r in rows
        ]

    def _resolve_cutoff(self, connection: Connection, conversation_id: str, to: str | int) -> int:
        if isinstance(to, bool) or not isinstance(to, str | int):
            raise InvalidInputError(
                f"rollback target must be a checkpoint label or a ts in milliseconds, got {to!r}."
            )
        if isinstance(to, int):
            if to < 0:
                raise InvalidInputError(f"rollback ts must be >= 0, got {to}.")
            return to
        row = connection.execute(
            select(checkpoints.c.ts)
            .where(checkpoints.c.conversation_id == conversation_id, checkpoints.c.label == to)
            .order_by(checkpoints.c.ts.desc())
            .limit(1)
        ).first()
        if row is None:
            labels = (
                connection.execute(
                    select(checkpoints.c.label)
                    .where(
                        checkpoints.c.conversation_id == conversation_id,
                        checkpoints.c.label.is_not(None),
                    )
                    .distinct()
                )
                .scalars()
                .all()
            )
            known = ", ".join(sorted(repr(x) for x in labels)) or "none"
            raise CheckpointNotFoundError(
                f"conversation {conversation_id!r} has no checkpoint labelled {to!r} "
                f"(labels: {known}); pass an existing label or a ts."
            )
        return int(row.ts)

    def rollback(
        self, conversation_id: str, to: str | int, *, purge: bool = False
    ) -> RollbackReport:
        """Remove every row written after a checkpoint (a label) or a ``ts``, in one transaction.

        Removed rows are kept in ``archived_rows`` with the rollback's cutoff and time,
        unless ``purge`` is True. Overlays and ranges written before the cutoff stay.
        Returns the number of rows removed per table.
        """
        if not isinstance(purge, bool):
            raise InvalidInputError("purge must be True or False.")

        def work(connection: Connection) -> RollbackReport:
            self._conversation(connection, conversation_id)
            last_ts(connection, conversation_id, lock=True)
            cutoff = self._resolve_cutoff(connection, conversation_id, to)
            ran_at = now_ms()
            rollback_id = int(
                connection.execute(
                    insert(rollbacks)
                    .values(
                        conversation_id=conversation_id,
                        cutoff_ts=cutoff,
                        ran_at=ran_at,
                        target=str(to),
                        purged=purge,
                        counts={},
                    )
                    .returning(rollbacks.c.id)
                ).scalar_one()
            )
            counts = self._remove_after(connection, conversation_id, cutoff, rollback_id, purge)
            connection.execute(
                update(rollbacks).where(rollbacks.c.id == rollback_id).values(counts=counts)
            )
            # The rollback consumes a tick: rows written later sort after everything removed,
            # and any cached view of the removed rows is invalidated.
            tick(connection, conversation_id)
            return RollbackReport(conversation_id, cutoff, counts, rollback_id, not purge)

        return self._db.write(work)

    def _remove_after(
        self,
        connection: Connection,
        conversation_id: str,
        cutoff: int,
        rollback_id: int,
        purge: bool,
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        for table in TIMELINE_TABLES:
            where = (table.c.conversation_id == conversation_id, table.c.ts > cutoff)
            if table is messages:
                first_removed = connection.execute(
                    select(func.min(messages.c.idx)).where(*where)
                ).scalar_one_or_none()
                block_where = (
                    blocks.c.conversation_id == conversation_id,
                    blocks.c.message_idx
                    >= (first_removed if first_removed is not None else 2**31 - 1),
                )
                if not purge:
                    self._archive(
                        connection,
                        rollback_id,
                        conversation_id,
                        "blocks",
                        blocks,
                        block_where,
                        cutoff,
                    )
                counts["blocks"] = connection.execute(delete(blocks).where(*block_where)).rowcount
            if not purge:
                self._archive(
                    connection, rollback_id, conversation_id, table.name, table, where, None
                )
            counts[table.name] = connection.execute(delete(table).where(*where)).rowcount
        return counts

    @staticmethod
    def _archive(
        connection: Connection,
        rollback_id: int,
        conversation_id: str,
        name: str,
        table: Any,
        where: tuple[Any, ...],
        ts_default: int | None,
    ) -> None:
        rows = queries.rows_as_dicts(connection.execute(select(table).where(*where)))
        if not rows:
            return
        connection.execute(
            insert(archived_rows),
            [
                {
                    "rollback_id": rollback_id,
                    "conversation_id": conversation_id,
                    "table_name": name,
                    "ts": row.get("ts", ts_default if ts_default is not None else 0),
                    "data": json.loads(json.dumps(row, default=str)),
                }
                for row in rows
            ],
        )

    # -- the view ----------------------------------------------------------------------

    def messages(self, conversation_id: str, *, as_of: int | None = None) -> list[dict[str, Any]]:
        """The stored messages (originals: no cut, no rewrites), as appended."""
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            loaded, _ = queries.load_messages(connection, conversation_id, limit)
        return loaded

    def deleted_range(
        self, conversation_id: str, as_of: int | None = None
    ) -> tuple[int, int] | None:
        """The effective deleted range ``(2, end)`` at ``as_of`` (now by default), or None."""
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return queries.load_deleted_range(connection, conversation_id, limit)

    @staticmethod
    def _as_of(as_of: Any) -> int:
        if isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0:
            raise InvalidInputError(
                f"as_of must be a ts in milliseconds (an int >= 0), got {as_of!r}."
            )
        return as_of

    def render(
        self,
        conversation_id: str,
        *,
        as_of: int | None = None,
        format: str | None = None,
        pipeline: Pipeline | None = None,
    ) -> list[dict[str, Any]]:
        """The conversation as the model sees it, now or as of a past ``ts``.

        The view rules apply in order: the cut, the effective block rewrites, the
        processors (the store's pipeline, or ``pipeline``; applied in memory, nothing is
        written), the orphan filter, the pairing repair. With ``format=None`` the view keeps
        every stored field; ``"anthropic"``, ``"openai"`` and ``"gemini"`` give the
        provider's message list, checked against that provider's pairing and role rules.
        A repeat render of an unchanged conversation is served from a cache.
        """
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        active = self.pipeline if pipeline is None else pipeline
        if format is not None:
            registry.check_format(format)
        with self._db.read() as connection:
            newest = last_ts(connection, conversation_id)
            key = (
                conversation_id,
                newest,
                min(limit, newest),
                format,
                active.config_key() if active else None,
            )
            cached = self.render_cache.get(key)
            if cached is not None:
                return copy.deepcopy(cached)
            state = queries.load_state(connection, conversation_id, limit)
        view = self._format(processed_view(active, state), format)
        self.render_cache.put(key, copy.deepcopy(view))
        return view

    @staticmethod
    def _format(view: list[dict[str, Any]], format: str | None) -> list[dict[str, Any]]:
        if format is None:
            return view
        rendered = registry.render(format, view)
        problems = registry.validate_provider_payload(format, rendered)
        if problems:
            raise IntegrityViolationError(
                f"the {format} rendering breaks the provider's rules ({'; '.join(problems[:3])}); "
                "run 'contextstore check' on the conversation."
            )
        return rendered

    # -- explicit writes used by context management ----------------------------------

    def set_deleted_range(
        self,
        conversation_id: str,
        end: int,
        *,
        keep: str = "manual",
        reason: str = "set by the caller",
        tokens_total: int | None = None,
        summary: str | None = None,
    ) -> int:
        """Hide messages ``2..end`` from the view from now on; returns the row's ``ts``.

        Raises:
            InvalidInputError: ``end`` is below 1, beyond the last message, or smaller than
                the current range's end (a range never shrinks; roll back instead).
        """
        _check_int("end", end, minimum=1, optional=False)
        _check_int("tokens_total", tokens_total)
        if not isinstance(reason, str) or not isinstance(keep, str):
            raise InvalidInputError("keep and reason must be strings.")

        def work(connection: Connection) -> int:
            (stamp,) = tick(connection, conversation_id)
            count = queries.next_message_idx(connection, conversation_id)
            current = queries.load_deleted_range(connection, conversation_id)
            if end >= count - 1:
                raise InvalidInputError(
                    f"end {end} is beyond the last message but one (index {count - 2}); the "
                    "newest message always stays visible."
                )
            if current is not None and end < current[1]:
                raise InvalidInputError(
                    f"end {end} would shrink the current range (2, {current[1]}); ranges only "
                    "grow (roll back to a checkpoint to show hidden messages again)."
                )
            self._insert_range(
                connection, conversation_id, stamp, end, keep, reason, tokens_total, summary
            )
            return stamp

        return self._db.write(work)

    @staticmethod
    def _insert_range(
        connection: Connection,
        conversation_id: str,
        ts: int,
        end: int,
        keep: str,
        reason: str,
        tokens_total: int | None,
        summary: str | None,
    ) -> None:
        connection.execute(
            insert(deleted_ranges).values(
                conversation_id=conversation_id,
                ts=ts,
                start_idx=2,
                end_idx=end,
                keep=keep,
                reason=reason,
                tokens_total=tokens_total,
                summary=summary,
            )
        )

    def add_context_update(
        self,
        conversation_id: str,
        message_idx: int,
        block_idx: int,
        text: str,
        *,
        kind: str = UpdateKind.MANUAL,
        source: str = "caller",
        metadata: Mapping[str, Any] | None = None,
        mode: str = UpdateMode.TEXT,
        base_hash: str | None = None,
    ) -> int:
        """Rewrite one block's visible text from now on (the original stays); returns ``ts``.

        With ``base_hash`` (see :func:`contextstore.text_hash`), the update is refused when
        the block's current visible text no longer has that hash.

        Raises:
            InvalidInputError: the block does not exist or has no text to rewrite, the kind or
                mode is unknown, or ``base_hash`` does not match.
        """
        _check_int("message_idx", message_idx, optional=False)
        _check_int("block_idx", block_idx, optional=False)
        if not isinstance(text, str):
            raise InvalidInputError("text must be a string.")
        if kind not in UpdateKind.ALL:
            raise InvalidInputError(
                f"kind {kind!r} is unknown; use one of {sorted(UpdateKind.ALL)}."
            )
        if mode not in UpdateMode.ALL:
            raise InvalidInputError(
                f"mode {mode!r} is unknown; use one of {sorted(UpdateMode.ALL)}."
            )
        _check_text("source", source, 200, optional=False)
        meta = dict(metadata or {})
        update_value = BlockUpdate(
            message_idx, block_idx, kind, text, source, meta, base_hash, mode
        )

        def work(connection: Connection) -> int:
            (stamp,) = tick(connection, conversation_id)
            self._check_update_target(connection, conversation_id, update_value)
            queries.insert_updates(connection, conversation_id, stamp, [update_value])
            return stamp

        return self._db.write(work)

    def _check_update_target(
        self, connection: Connection, conversation_id: str, update_value: BlockUpdate
    ) -> None:
        row = connection.execute(
            select(blocks.c.type, blocks.c.text, blocks.c.data).where(
                blocks.c.conversation_id == conversation_id,
                blocks.c.message_idx == update_value.message_idx,
                blocks.c.block_idx == update_value.block_idx,
            )
        ).first()
        if row is None:
            raise InvalidInputError(
                f"message {update_value.message_idx} has no block {update_value.block_idx}; "
                "address an existing block."
            )
        block = queries._block_from_row(row.type, row.text, row.data, "block")
        if update_value.mode == UpdateMode.TEXT and block_text(block) is None:
            raise InvalidInputError(
                f"block {update_value.message_idx}.{update_value.block_idx} is a {row.type} "
                "block with no text to rewrite; use mode='block' to replace it with text."
            )
        if update_value.mode == UpdateMode.TOOL_INPUT and row.type != "tool_use":
            raise InvalidInputError("mode='tool_input' applies to tool_use blocks only.")
        if update_value.base_hash is not None:
            overlays = queries.load_overlays(connection, conversation_id)
            current = overlays.get(update_value.address)
            visible = current.text if current is not None else block_text(block)
            if visible is None or text_hash(visible) != update_value.base_hash:
                raise InvalidInputError(
                    "the block's visible text changed since base_hash was computed; re-read "
                    "the block and propose the update again."
                )

    def context_updates(
        self, conversation_id: str, *, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """Every context update row (not only the effective ones), oldest first."""
        limit = queries.NO_LIMIT if as_of is None else self._as_of(as_of)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return queries.rows_as_dicts(
                connection.execute(
                    select(context_updates)
                    .where(
                        context_updates.c.conversation_id == conversation_id,
                        context_updates.c.ts <= limit,
                    )
                    .order_by(context_updates.c.ts, context_updates.c.id)
                )
            )

    # -- statistics ------------------------------------------------------------------

    def row_counts(self, conversation_id: str | None = None) -> dict[str, int]:
        """Rows per table (for one conversation, or the whole database)."""
        tables = (
            conversations,
            messages,
            blocks,
            deleted_ranges,
            context_updates,
            api_requests,
            checkpoints,
            rollbacks,
            archived_rows,
        )
        counts: dict[str, int] = {}
        with self._db.read() as connection:
            for table in tables:
                query = select(func.count()).select_from(table)
                if conversation_id is not None:
                    column = table.c.id if table is conversations else table.c.conversation_id
                    query = query.where(column == conversation_id)
                counts[table.name] = int(connection.execute(query).scalar_one())
        return counts

    def check(self, conversation_id: str) -> None:
        """Verify a conversation's stored invariants; raise if one is broken.

        Checks that message indices are 0..n-1 with strictly increasing ``ts``, that every
        stored value decodes, and that the rendered view pairs every tool call.

        Raises:
            IntegrityViolationError: naming the first broken invariant.
        """
        view = self.render(conversation_id)
        from contextstore.core.view import ensure_tool_results_follow_tool_use

        if ensure_tool_results_follow_tool_use(view) != view:
            raise IntegrityViolationError(
                f"conversation {conversation_id!r} renders with an unpaired tool call."
            )

    def _store_options(self, connection: Connection, options: Mapping[str, Any]) -> str:
        digest = payload_sha256(options)
        exists = connection.execute(
            select(request_options.c.sha256).where(request_options.c.sha256 == digest)
        ).first()
        if exists is None:
            connection.execute(insert(request_options).values(sha256=digest, data=dict(options)))
        return digest

    # -- context management and requests ---------------------------------------------

    def create_subagent(
        self,
        parent_id: str,
        *,
        model_id: str | None = None,
        context_window: int | None = None,
        title: str | None = None,
    ) -> Conversation:
        """Create a subagent's conversation as a child of ``parent_id``.

        Its prepares follow Cline's SubagentRunner: compaction at 75 % of the window with
        the ``quarter`` strategy, no notices, and no truncation when it cannot progress.
        """
        parent = self.get_conversation(parent_id)
        return self.create_conversation(
            model_id=model_id or parent.model_id,
            context_window=context_window or parent.context_window,
            title=title,
            metadata={"subagent": True},
            parent_id=parent_id,
        )

    def set_auto_condense(self, conversation_id: str, threshold: float | None) -> None:
        """Turn auto-condense on at ``threshold`` (a fraction of the window) or off (None).

        With auto-condense on, a prepare compacts once the previous request reaches
        ``min(floor(window * threshold), max allowed size)`` tokens, unless the last
        truncation left at most two messages (so a summary is never summarised).
        """
        policy_from_conversation(None, {}, threshold)

        def work(connection: Connection) -> None:
            conv = self._conversation(connection, conversation_id)
            meta = dict(conv.metadata)
            if threshold is None:
                meta.pop("auto_condense", None)
            else:
                meta["auto_condense"] = threshold
            connection.execute(
                update(conversations)
                .where(conversations.c.id == conversation_id)
                .values(metadata=meta)
            )

        self._db.write(work)

    def prepare_request(
        self,
        conversation_id: str,
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: str = "anthropic",
        model: str | None = None,
        max_tokens: int | None = None,
        auto_condense: float | None = None,
        summarizer: Summarizer | None = None,
        pipeline: Pipeline | None = None,
    ) -> PreparedRequest:
        """Decide on context management, persist the decision, and build the request.

        Call it before every model request. From the newest recorded request's token total
        and the conversation's window it decides: nothing; file-read de-duplication alone
        (when that saves at least 30 %); or de-duplication, the truncation notice and a
        larger deleted range (``half``, or ``quarter`` after a jump to a smaller window).
        The decision, then a request row holding the payload's SHA-256, are written in one
        transaction. Record the provider's usage afterwards with
        ``record_request(conversation_id, request_id=ctx.request_id, ...)``. The processor
        pipeline (the store's, or ``pipeline``) runs on the resulting view and its rewrites
        are written as ``context_updates`` rows (kind ``processor``) in the same transaction.
        """
        registry.check_format(format)
        active = self.pipeline if pipeline is None else pipeline
        _check_int("max_tokens", max_tokens, minimum=1)
        _check_text("model", model, 200)
        options = self._request_options(format, system, tools, model, max_tokens)

        def work(connection: Connection) -> PreparedRequest:
            conv = self._conversation(connection, conversation_id)
            last_ts(connection, conversation_id, lock=True)
            policy = policy_from_conversation(conv.context_window, conv.metadata, auto_condense)
            decision = decide_and_write(connection, conversation_id, policy, summarizer=summarizer)
            state = queries.load_state(connection, conversation_id)
            processed = propose(active, state)
            if processed:
                (stamp,) = tick(connection, conversation_id)
                queries.insert_updates(connection, conversation_id, stamp, processed)
                state = queries.load_state(connection, conversation_id)
            view = build_view(state.messages, state.deleted_range, state.overlays)
            payload = self._payload(view, options)
            digest = self._store_options(connection, options)
            (stamp,) = tick(connection, conversation_id)
            request_id = connection.execute(
                insert(api_requests)
                .values(
                    conversation_id=conversation_id,
                    ts=stamp,
                    model_id=model or conv.model_id,
                    format=format,
                    options_sha256=digest,
                    payload_sha256=payload_sha256(payload),
                    message_count=len(view),
                )
                .returning(api_requests.c.id)
            ).scalar_one()
            return PreparedRequest(
                conversation_id=conversation_id,
                messages=registry.render("anthropic", view),
                deleted_range=state.deleted_range,
                decision=decision,
                format=format,
                payload=payload,
                request_id=int(request_id),
                ts=stamp,
            )

        return self._db.write(work)

    @staticmethod
    def _request_options(
        format: str,
        system: str | None,
        tools: Sequence[Mapping[str, Any]] | None,
        model: str | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        if system is not None and not isinstance(system, str):
            raise InvalidInputError("system must be a string.")
        if tools is not None and (
            isinstance(tools, str | bytes | Mapping)
            or not all(isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in tools)
        ):
            raise InvalidInputError(
                "tools must be a list of tool definitions like {'name': ..., 'description': ..., "
                "'input_schema': {...}}."
            )
        options = {
            "format": format,
            "system": system,
            "tools": [dict(t) for t in tools] if tools is not None else None,
            "model": model,
            "max_tokens": max_tokens,
        }
        try:
            return dict(json.loads(_canonical_json(options)))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"system and tools must be JSON-serialisable: {exc}.") from exc

    @staticmethod
    def _payload(view: list[dict[str, Any]], options: Mapping[str, Any]) -> dict[str, Any]:
        return registry.build_request(
            options["format"],
            view,
            system=options.get("system"),
            tools=options.get("tools"),
            model=options.get("model"),
            max_tokens=options.get("max_tokens"),
        )

    def request_payload(self, conversation_id: str, request_id: int) -> dict[str, Any]:
        """Rebuild a prepared request's exact payload from rows, verified against its hash.

        Raises:
            RequestNotFoundError: the request does not exist or was not prepared here.
            PayloadMismatchError: the rebuilt payload's hash differs from the stored one.
        """
        _check_int("request_id", request_id, minimum=1, optional=False)
        with self._db.read() as connection:
            record = self._request(connection, conversation_id, request_id)
            row = connection.execute(
                select(request_options.c.data)
                .select_from(api_requests.join(request_options))
                .where(api_requests.c.id == request_id)
            ).first()
            if row is None or record.payload_sha256 is None:
                raise RequestNotFoundError(
                    f"request {request_id} was recorded without a prepared payload; only "
                    "requests from prepare_request can be rebuilt."
                )
            options = queries._json(row.data, f"options of request {request_id}")
            state = queries.load_state(connection, conversation_id, record.ts)
        view = build_view(state.messages, state.deleted_range, state.overlays)
        payload = self._payload(view, options)
        if payload_sha256(payload) != record.payload_sha256:
            raise PayloadMismatchError(
                f"request {request_id} rebuilt from rows does not match the payload hash stored "
                "when it was sent; rows it depends on were changed outside contextstore."
            )
        return payload

    def truncate(
        self,
        conversation_id: str,
        keep: str = "half",
        *,
        summary: str | None = None,
        summarizer: Summarizer | None = None,
        reason: str | None = None,
        first_user_replacement: bool = True,
    ) -> TruncationDecision:
        """Truncate now, for the explicit flows: ``none`` after a summary, ``last_two`` for a
        condense, ``quarter`` to retry after a provider's context-window error.

        Writes the new range, the truncation notice (carrying ``summary``, or what
        ``summarizer`` returns for the messages being hidden) and the first-user-message
        replacement, in one transaction. The original rows stay.
        """
        if summary is not None and not isinstance(summary, str):
            raise InvalidInputError("summary must be a string.")
        why = reason or f"explicit truncation (keep={keep})"
        if not isinstance(why, str):
            raise InvalidInputError("reason must be a string.")
        normalize_keep(keep)

        def work(connection: Connection) -> TruncationDecision:
            last_ts(connection, conversation_id, lock=True)
            return explicit_truncate(
                connection,
                conversation_id,
                keep,
                reason=why,
                summary=summary,
                summarizer=summarizer,
                first_user_replacement=first_user_replacement,
            )

        return self._db.write(work)

    def fork(
        self, conversation_id: str, at: int | str | None = None, *, title: str | None = None
    ) -> Conversation:
        """A new conversation with the history of ``conversation_id`` up to ``at``.

        ``at`` is a ts, a checkpoint label, or None for now. The rows with ``ts <= at``
        (messages, blocks, ranges, updates, requests, checkpoints) are copied with their
        timestamps, so the fork renders exactly as its parent did at ``at``.
        """
        new_id = uuid.uuid4().hex

        def work(connection: Connection) -> Conversation:
            parent = self._conversation(connection, conversation_id)
            cutoff = (
                parent.last_ts
                if at is None
                else self._resolve_cutoff(connection, conversation_id, at)
            )
            row: dict[str, Any] = {
                "id": new_id,
                "created_ts": now_ms(),
                "last_ts": cutoff,
                "title": title if title is not None else parent.title,
                "model_id": parent.model_id,
                "context_window": parent.context_window,
                "parent_id": conversation_id,
                "forked_at_ts": cutoff,
                "metadata": {k: v for k, v in parent.metadata.items() if k != "subagent"},
            }
            connection.execute(insert(conversations).values(**row))
            copy_history(connection, conversation_id, new_id, cutoff)
            return Conversation(**row)

        return self._db.write(work)
