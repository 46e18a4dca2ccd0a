"""The state every part of the store shares: the database, settings, and the lookups every
operation starts with. The facade validates, runs the caller's hooks, and calls storage
inside one read or write; it holds no SQL."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from contextstore.core.errors import (
    ConcurrentChangeError,
    ConversationNotFoundError,
    CorruptRowError,
    InvalidInputError,
    RequestNotFoundError,
)
from contextstore.core.nodes import CallInfo
from contextstore.core.overlays import BlockUpdate
from contextstore.core.planning import Plan
from contextstore.core.records import Conversation, RequestRecord
from contextstore.core.state import ConversationState
from contextstore.core.system_prompt import rewrite_system_texts
from contextstore.core.tokens import CheckedCounter, TiktokenCounter, TokenCounter
from contextstore.core.validate import MAX_MESSAGE_BYTES, check_ts, shown
from contextstore.core.view import VIEW_RULES
from contextstore.facade.render_cache import PREPARE_CACHE_BYTES, RenderCache
from contextstore.processors.pipeline import Pipeline, default_pipeline
from contextstore.processors.runner import RunContext
from contextstore.processors.secret_text import mask_value
from contextstore.processors.secrets import SecretMasker
from contextstore.storage import conversations, history, processor_runs, ranges, requests, updates
from contextstore.storage.clock import NO_LIMIT, last_ts, tick_if_unchanged
from contextstore.storage.database import Connection, Database
from contextstore.storage.migrate import HEAD_REVISION

P = TypeVar("P")
_WRITE_MASKER = SecretMasker()
"""Masks the tool definitions a store opened with ``mask_secrets_on_write`` is given."""

V = TypeVar("V")
T = TypeVar("T")

CALLS_LOCK = threading.Lock()
"""Guards every store's memory of the tool calls it appended (``_recent_calls``)."""

PLAN_ATTEMPTS = 3
"""How many times a decision is planned again when its conversation changed meanwhile."""


def stored_view_rules(options: dict[str, Any], request_id: int) -> int:
    """The version of the view rules a prepared request was built with, read from its
    stored options: a request prepared before the options recorded one was built by the
    first. Its payload and its view are rebuilt by these rules, not the current ones.

    Raises:
        CorruptRowError: the options name a version this code does not have.
    """
    rules = options.get("view_rules", 1)
    if isinstance(rules, bool) or not isinstance(rules, int) or not 1 <= rules <= VIEW_RULES:
        raise CorruptRowError(
            f"the options of request {request_id} name view rules {rules!r:.40}, which "
            "this version of contextstore does not have; upgrade contextstore, or run "
            "'contextstore check'."
        )
    return rules


@dataclass(frozen=True)
class Snapshot:
    """A conversation read in one snapshot, for planning a write outside any transaction
    (inside the write's, on the last attempt of a decision without hooks)."""

    conversation: Conversation
    state: ConversationState
    total: int | None
    """The newest request's token total (None: no usage recorded)."""


class StoreBase:
    """The database handle, settings and conversation lookups every operation needs."""

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
        self.prepare_cache = RenderCache(PREPARE_CACHE_BYTES)
        """What each conversation's last prepare read and rendered (see
        :mod:`contextstore.facade.prepare_memo`), bounded in bytes."""
        self.location = location
        self.token_counter: TokenCounter = (
            TiktokenCounter() if token_counter is None else CheckedCounter(token_counter)
        )
        self.mask_secrets_on_write = mask_secrets_on_write
        self.max_message_bytes = max_message_bytes
        self.revision_found: str | None = HEAD_REVISION
        """The schema revision the database was at when :meth:`open` opened it: None for a
        database that had no schema yet, :data:`HEAD_REVISION` when nothing was upgraded
        (``contextstore migrate`` reports it).
        """
        self._closed = False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Make every call inside one transaction: all of their rows land, or none do.

        ``with store.transaction(): store.append(...); store.record_request(...)``. Calls
        inside see each other's rows; a call refused inside (an error raised and caught)
        leaves nothing of itself, the others stay; an exception leaving the block undoes
        them all. Other threads' writes wait until the block ends, so keep it short (no
        model calls inside).

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        try:
            with self._db.transaction():
                yield
        except BaseException:
            # The calls appended inside were rolled back with everything else.
            self._forget_calls()
            raise

    def _forget_calls(self, conversation_id: str | None = None) -> None:
        """Forget the tool calls this store remembers having appended to the conversation
        (to every conversation when None), after a write that may have removed them (a
        rollback, a deletion, a transaction undone): a result answering a removed call
        must be typed as the stored rows say, with no call, not by the call that is gone."""
        memory: dict[tuple[str, str], CallInfo] | None = getattr(self, "_recent_calls", None)
        if not memory:
            return
        with CALLS_LOCK:
            if conversation_id is None:
                memory.clear()
                return
            for key in [key for key in memory if key[0] == conversation_id]:
                del memory[key]

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Make every read inside see the store as of one moment.

        ``with store.snapshot(): messages = store.messages(cid); stamps =
        store.message_timestamps(cid)``: the calls on this thread inside share one read
        transaction, so rows another process or thread writes meanwhile appear in none of
        them rather than in some (a list of messages and their timestamps of different
        lengths). Writers are not held up on SQLite (WAL) or PostgreSQL (a repeatable-read
        snapshot); inside :meth:`transaction` it is that transaction.
        """
        with self._db.read():
            yield

    def _active(self, pipeline: Any) -> Pipeline | None:
        """The pipeline a call runs: the caller's, else the store's.

        Raises:
            InvalidInputError: ``pipeline`` is not a :class:`Pipeline`.
        """
        if pipeline is None:
            return self.pipeline
        if not isinstance(pipeline, Pipeline):
            raise InvalidInputError(
                f"pipeline must be a Pipeline (or None for the store's), got {shown(pipeline)}."
            )
        return pipeline

    @staticmethod
    def _check_summarizer(summarizer: Any) -> None:
        if summarizer is not None and not callable(summarizer):
            raise InvalidInputError(
                "summarizer must be a function taking the hidden messages and returning the "
                f"summary text, got {shown(summarizer)}."
            )

    def _masked(self, value: V) -> V:
        """``value`` (a text or a JSON value) with its secrets masked when the store was opened
        with ``mask_secrets_on_write``, else ``value`` itself. Validate it first: masking
        walks the value."""
        if not self.mask_secrets_on_write or value is None:
            return value
        masked: V = mask_value(value)
        return masked

    def _masked_system(
        self, system: str | list[dict[str, Any]] | None, pipeline: Pipeline | None
    ) -> str | list[dict[str, Any]] | None:
        """A validated system prompt (:func:`~contextstore.core.system_prompt.check_system`)
        masked: its secrets when the store was opened with ``mask_secrets_on_write``, then
        by the pipeline's ``rewrite_system`` hooks (the secret masker's). A prompt given as
        text blocks has the text of each masked, its other fields kept."""
        if system is None:
            return None
        if self.mask_secrets_on_write:
            system = rewrite_system_texts(system, mask_value)
        return system if pipeline is None else pipeline.rewrite_system(system)

    def _masked_tools(
        self, tools: list[dict[str, Any]] | None, pipeline: Pipeline | None
    ) -> list[dict[str, Any]] | None:
        """Validated tool definitions masked as the system prompt is: when the store was
        opened with ``mask_secrets_on_write``, then by the pipeline's ``rewrite_tools``
        hooks (the secret masker's). The same list when nothing changed them."""
        if tools is None:
            return None
        if self.mask_secrets_on_write:
            tools = _WRITE_MASKER.rewrite_tools(tools)
        return tools if pipeline is None else pipeline.rewrite_tools(tools)

    def _masked_fields(self, values: dict[str, Any], *names: str) -> dict[str, Any]:
        """``values`` with the named fields :meth:`_masked`."""
        if self.mask_secrets_on_write:
            for name in names:
                values[name] = self._masked(values[name])
        return values

    @property
    def database(self) -> Database:
        """The underlying database (engine and transaction helpers)."""
        return self._db

    @staticmethod
    def _conversation(connection: Connection, conversation_id: str) -> Conversation:
        return conversations.get_conversation(connection, conversation_id)

    @staticmethod
    def _locked(connection: Connection, conversation_id: str) -> Conversation:
        """The conversation, read once its row is locked (PostgreSQL; a SQLite write holds
        the file already), for a write that reads what it changes: a writer that read it
        before the lock could write back what another one changed meanwhile.

        Raises:
            ConversationNotFoundError: no conversation has this id.
        """
        last_ts(connection, conversation_id, lock=True)
        return conversations.get_conversation(connection, conversation_id)

    @staticmethod
    def _request(connection: Connection, conversation_id: str, request_id: int) -> RequestRecord:
        found = requests.find_request(connection, conversation_id, request_id)
        if found is None:
            try:
                conversations.get_conversation(connection, conversation_id)
            except ConversationNotFoundError as exc:
                # Still a missing request to callers who catch that; the message says why.
                raise RequestNotFoundError(str(exc)) from exc
            raise RequestNotFoundError(
                f"conversation {conversation_id!r} has no request {request_id}; use the "
                "request_id returned by prepare_request."
            )
        return found

    @staticmethod
    def _as_of(as_of: Any) -> int:
        """A caller's ``as_of`` (None: now) as the bound a query takes."""
        if as_of is None:
            return NO_LIMIT
        check_ts("as_of", as_of, optional=False)
        return int(as_of)

    def _planned_write(
        self,
        conversation_id: str,
        decide: Callable[[Snapshot], P],
        ticks: Callable[[P], int],
        write: Callable[[Connection, P, list[int]], T],
        load: Callable[[Connection, Conversation], ConversationState] | None = None,
        *,
        local: bool = False,
    ) -> tuple[P, T | None]:
        """Read, decide outside any transaction, then write if nothing changed meanwhile.

        ``decide`` runs the caller's hooks (summarizer, processors): an LLM may take
        seconds, and no write lock is held while it does. The write then reserves
        ``ticks(decided)`` timestamps only if the conversation's clock still reads what the
        snapshot read; otherwise the decision is made again from a new snapshot, up to
        :data:`PLAN_ATTEMPTS` times. A busy database retries the write alone, never the
        hooks. With no tick to reserve, nothing is written (``write`` is not called).
        ``load`` reads the state in the snapshot (default: the whole state, read anew).

        With ``local`` (``decide`` runs the store's own code only: no summarizer, no
        processor with a hook), the last attempt reads, decides and writes in one write
        transaction holding the conversation's clock, so that writers appending to the
        conversation all the while cannot make it fail: they wait for that one decision.

        Raises:
            ConcurrentChangeError: the conversation changed during every attempt.
        """
        self._db.check_writable()
        for attempt in range(PLAN_ATTEMPTS):
            if local and attempt == PLAN_ATTEMPTS - 1:
                return self._planned_under_lock(conversation_id, decide, ticks, write, load)
            with self._db.read() as connection:
                conversation, state, total = self._snapshot(connection, conversation_id, load)
            decided = decide(Snapshot(conversation, state, total))
            count = ticks(decided)
            if count == 0:
                return decided, None

            def work(
                connection: Connection,
                decided: P = decided,
                count: int = count,
                seen: int = conversation.last_ts,
            ) -> T:
                stamps = tick_if_unchanged(connection, conversation_id, seen, count)
                return write(connection, decided, stamps)

            try:
                return decided, self._db.write(work)
            except ConcurrentChangeError:
                if attempt == PLAN_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _snapshot(
        self,
        connection: Connection,
        conversation_id: str,
        load: Callable[[Connection, Conversation], ConversationState] | None,
    ) -> tuple[Conversation, ConversationState, int | None]:
        """What a decision is planned from: the conversation, its state (``load``'s, or
        the whole state read anew) and its newest request's token total."""
        conversation = self._conversation(connection, conversation_id)
        if load is None:
            state = history.load_state(connection, conversation_id, last_ts=conversation.last_ts)
        else:
            state = load(connection, conversation)
        return conversation, state, requests.last_request_total(connection, conversation_id)

    def _planned_under_lock(
        self,
        conversation_id: str,
        decide: Callable[[Snapshot], P],
        ticks: Callable[[P], int],
        write: Callable[[Connection, P, list[int]], T],
        load: Callable[[Connection, Conversation], ConversationState] | None,
    ) -> tuple[P, T | None]:
        """:meth:`_planned_write`'s last attempt for a decision without hooks: the read, the
        decision and the write in one transaction, the conversation's clock held from the
        start (PostgreSQL locks its row; a SQLite write transaction holds the file)."""

        def work(connection: Connection) -> tuple[P, T | None]:
            seen = last_ts(connection, conversation_id, lock=True)
            conversation, state, total = self._snapshot(connection, conversation_id, load)
            decided = decide(Snapshot(conversation, state, total))
            count = ticks(decided)
            if count == 0:
                return decided, None
            stamps = tick_if_unchanged(connection, conversation_id, seen, count)
            return decided, write(connection, decided, stamps)

        return self._db.write(work)

    def _run_context(
        self,
        connection: Connection,
        conversation_id: str,
        pipeline: Pipeline | None,
        as_of: int,
        demand: Collection[str] = (),
    ) -> RunContext | None:
        """What the processors of ``pipeline`` handled before ``as_of``, read in the
        caller's snapshot (None when the pipeline is empty)."""
        if pipeline is None or not pipeline.processors:
            return None
        seen = processor_runs.seen_state(connection, conversation_id, as_of)
        tokens = (
            history.token_counts(connection, conversation_id, as_of)
            if pipeline.needs_tokens
            else None
        )
        return RunContext(seen, tokens, frozenset(demand))

    def _masked_updates(self, proposed: Sequence[BlockUpdate]) -> list[BlockUpdate] | None:
        """``proposed`` with their texts and metadata masked when the store masks on write
        (a summary or a processor's output may repeat a secret); None when that changes
        none of them. Masked before a view or payload is built from them, so the request
        sent is the one its stored rows rebuild."""
        if not self.mask_secrets_on_write:
            return None
        masked = [
            dataclasses.replace(u, text=self._masked(u.text), metadata=self._masked(u.metadata))
            for u in proposed
        ]
        return None if masked == list(proposed) else masked

    def _masked_plan(self, plan: Plan) -> Plan:
        """``plan`` with its rewrites masked (:meth:`_masked_updates`)."""
        masked = self._masked_updates(plan.updates)
        return plan if masked is None else dataclasses.replace(plan, updates=tuple(masked))

    def _write_plan(
        self, connection: Connection, conversation_id: str, plan: Plan, ts: int
    ) -> None:
        """A plan's rows, all stamped ``ts``: its updates, then its range (their texts masked
        when the store masks on write: a summary may repeat a secret)."""
        updates.insert_updates(connection, conversation_id, ts, self._masked_plan(plan).updates)
        if plan.new_range is not None:
            ranges.insert_range(
                connection,
                conversation_id,
                ts,
                plan.new_range[1],
                keep=plan.keep,
                reason=self._masked(plan.reason),
                tokens_total=plan.tokens_total,
                summary=self._masked(plan.summary),
            )
