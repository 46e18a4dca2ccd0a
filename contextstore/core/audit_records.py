"""The values the audit, search and read-only query operations return (frozen dataclasses).

Each audit record mirrors one row of an audit view (``migrations/versions/0003``), so what
``ContextStore.audit`` returns and what an auditor reads in the ``sqlite3`` shell or
Datasette are the same facts under the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contextstore.core.records import Checkpoint, Conversation


@dataclass(frozen=True)
class RequestUsage:
    """One API request against the window (a row of ``audit_requests``)."""

    request_id: int
    ts: int
    model_id: str | None
    format: str | None
    tokens_in: int | None
    tokens_out: int | None
    cache_writes: int | None
    cache_reads: int | None
    total_tokens: int
    """``tokens_in + tokens_out + cache_writes + cache_reads``: what drives truncation."""
    cost: float | None
    cumulative_tokens: int
    cumulative_cost: float
    context_window: int
    max_allowed_size: float
    percent_of_window: float
    over_max_allowed: bool
    message_count: int | None
    failure: str | None
    prepared: bool
    """True when the request was prepared here, so its payload can be rebuilt."""


@dataclass(frozen=True)
class TruncationEvent:
    """One deleted-range decision (a row of ``truncation_events``)."""

    id: int
    ts: int
    start_idx: int
    end_idx: int
    keep: str
    reason: str
    tokens_total: int | None
    """The request total that triggered it (None for a manual or imported range)."""
    summary: str | None
    messages_hidden: int


@dataclass(frozen=True)
class FileRead:
    """How often one file was read through a read tool (a row of ``audit_file_reads``)."""

    path: str
    tool_name: str
    reads: int
    first_message_idx: int
    last_message_idx: int


@dataclass(frozen=True)
class DedupSaving:
    """One file-read de-duplication rewrite and what it saved (``audit_dedup_savings``)."""

    update_id: int
    ts: int
    message_idx: int
    block_idx: int
    kind: str
    source: str
    original_chars: int
    rewritten_chars: int
    chars_saved: int


@dataclass(frozen=True)
class MaskedSecretCount:
    """How many secrets of one kind are masked in what the model is shown.

    ``masked_by`` is ``"rewrite"`` for the markers a processor's rewrite added at prepare
    time (more of the kind than the stored block held) and ``"stored"`` for those the stored
    block already carried (masked on write), wherever it keeps them: its text, a tool
    call's input, a result's items, a document's fields. Never the secret itself: only
    ``[REDACTED:kind]`` markers are counted.
    """

    kind: str
    masked_by: str
    count: int


@dataclass(frozen=True)
class FailedToolCall:
    """A tool result marked as an error, with the call that caused it."""

    result_message_idx: int
    call_message_idx: int | None
    tool_use_id: str | None
    tool_name: str | None
    input: str | None
    """The call's input as JSON text."""
    error: str
    """The first 300 characters of the result."""


REMOVED_NOTHING = "removed nothing"
"""What the audit, the report and the timeline say of a rollback that removed no row: one
recorded before a rollback with nothing after its cutoff stopped running (it writes nothing
now)."""


@dataclass(frozen=True)
class RollbackEvent:
    """One rollback and what it removed, per table (a row of ``audit_rollbacks``)."""

    rollback_id: int
    cutoff_ts: int
    ran_at: int
    target: str | None
    """The label or ts asked for; None for the rows an import replaced because the agent
    rewrote them (:meth:`~contextstore.ContextStore.discard_imported_rows`)."""
    purged: bool
    restored_ts: int | None
    """When ``restore`` put the rows back (None while it has not)."""
    removed: dict[str, int]
    rows_archived: int

    @property
    def total_removed(self) -> int:
        """Rows removed across every table (blocks included)."""
        return sum(self.removed.values())


@dataclass(frozen=True)
class TimelineEvent:
    """One row of a conversation's timeline (``audit_timeline``)."""

    ts: int
    event: str
    """``message``, ``truncation``, ``rewrite``, ``request``, ``checkpoint`` or ``rollback``."""
    ref_id: int
    message_idx: int | None
    detail: str


@dataclass(frozen=True)
class AuditReport:
    """Everything ``ContextStore.audit`` finds about one conversation."""

    conversation: Conversation
    context_window: int
    max_allowed_size: float
    requests: list[RequestUsage]
    truncations: list[TruncationEvent]
    file_reads: list[FileRead]
    dedup_savings: list[DedupSaving]
    masked_secrets: list[MaskedSecretCount]
    failed_tool_calls: list[FailedToolCall]
    checkpoints: list[Checkpoint]
    rollbacks: list[RollbackEvent]

    @property
    def total_cost(self) -> float:
        """The cost of every recorded request."""
        return sum((r.cost or 0.0 for r in self.requests), 0.0)

    @property
    def chars_saved(self) -> int:
        """Characters removed from the view by file-read de-duplication."""
        return sum(d.chars_saved for d in self.dedup_savings)

    @property
    def peak_tokens(self) -> int:
        """The largest ``total_tokens`` of a request (0 without requests)."""
        return max((r.total_tokens for r in self.requests), default=0)

    @property
    def peak_percent_of_window(self) -> float:
        """The largest share of its own window a request filled, in percent (0 without
        requests). Each request is judged against the window it was sent with, so after a
        switch to a smaller model this can belong to another request than
        :attr:`peak_tokens`."""
        return max((r.percent_of_window for r in self.requests), default=0.0)


@dataclass(frozen=True)
class SearchHit:
    """A content block whose text (or tool input) contains the searched text."""

    conversation_id: str
    title: str | None
    message_idx: int
    block_idx: int
    role: str
    ts: int
    type: str
    snippet: str
    """The match with up to 40 characters either side, whitespace collapsed."""


@dataclass(frozen=True)
class QueryResult:
    """The result of a read-only SQL query: column names and rows, in order."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True)
class ViewedBlock:
    """A block as stored and as the model was shown it (its effective rewrite, if any)."""

    block_idx: int
    type: str
    block: dict[str, Any]
    original_text: str | None
    effective_text: str | None
    rewrite_kind: str | None = None
    rewrite_source: str | None = None
    dropped: bool = False
    """True when the view left this block out of what the model was sent: a tool result
    whose call is not visible (the first message after a cut), answering no call, or a
    second result for one call. Hidden messages' blocks are not marked: the message is."""

    @property
    def rewritten(self) -> bool:
        """True when a rewrite changed what the model saw of this block."""
        return self.rewrite_kind is not None


@dataclass(frozen=True)
class ViewedMessage:
    """A stored message, whether the deleted range hid it, and its blocks; for a visible
    message, what the view sent beside them."""

    index: int
    role: str
    hidden: bool
    blocks: list[ViewedBlock] = field(default_factory=list)
    added: list[dict[str, Any]] = field(default_factory=list)
    """Blocks the model was sent in this message that no stored block holds, in the order
    sent: a ``result missing`` placeholder for a call whose result is lost, the note left in
    a message whose blocks were all dropped."""
    followed_by: list[dict[str, Any]] = field(default_factory=list)
    """The blocks of a user message the view sent right after this one that is not stored
    (``result missing`` placeholders for calls that no user message answers); empty when
    none."""
