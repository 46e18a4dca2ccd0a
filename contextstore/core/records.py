"""The values the store returns: frozen dataclasses, safe to keep and compare."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Conversation:
    """A conversation's row."""

    id: str
    created_ts: int
    last_ts: int
    title: str | None = None
    model_id: str | None = None
    context_window: int | None = None
    parent_id: str | None = None
    forked_at_ts: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AppendedMessage:
    """What :meth:`ContextStore.append` wrote: the message's index, ``ts`` and token count."""

    conversation_id: str
    index: int
    ts: int
    role: str
    token_count: int


@dataclass(frozen=True)
class RequestRecord:
    """One API request row: its usage and, for prepared requests, the payload's hash."""

    id: int
    conversation_id: str
    ts: int
    tokens_in: int | None = None
    tokens_out: int | None = None
    cache_writes: int | None = None
    cache_reads: int | None = None
    cost: float | None = None
    model_id: str | None = None
    format: str | None = None
    payload_sha256: str | None = None
    failure: str | None = None
    """Why the request failed or was cancelled (None when it succeeded or is unknown)."""
    details: dict[str, Any] | None = None
    """What the agent recorded about the request beyond its usage (an importer's extras:
    Cline's ``streamingFailedMessage`` and retries, Gemini CLI's thought and tool tokens)."""

    @property
    def total_tokens(self) -> int:
        """``tokens_in + tokens_out + cache_writes + cache_reads`` (missing values count 0)."""
        return sum(
            v or 0 for v in (self.tokens_in, self.tokens_out, self.cache_writes, self.cache_reads)
        )


@dataclass(frozen=True)
class Checkpoint:
    """A named moment of a conversation: exactly the rows with ``ts <= self.ts``."""

    id: int
    conversation_id: str
    ts: int
    label: str | None = None
    git_hash: str | None = None
    note: str | None = None


@dataclass(frozen=True, eq=False)
class RollbackReport(Mapping[str, int]):
    """What a rollback removed (or, for a dry run, would remove), per table.

    ``rollback_id`` names the ``rollbacks`` row (None for a dry run); ``archived`` says
    whether the removed rows were kept in the archive tables (``archived_<table>``, so
    that :meth:`restore` can put them back). The report reads as the counts of rows
    removed per table themselves, too: ``report["messages"]``, ``dict(report)``, and it
    equals a mapping of the same counts.
    """

    conversation_id: str
    cutoff_ts: int
    removed: dict[str, int]
    rollback_id: int | None
    archived: bool
    dry_run: bool = False

    @property
    def total_removed(self) -> int:
        """Rows removed across all tables (blocks included)."""
        return sum(self.removed.values())

    def __getitem__(self, table: str) -> int:
        return self.removed[table]

    def __iter__(self) -> Iterator[str]:
        return iter(self.removed)

    def __len__(self) -> int:
        return len(self.removed)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RollbackReport):
            return _fields(self) == _fields(other)
        if isinstance(other, Mapping):
            return self.removed == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # it holds a dict


def _fields(report: RollbackReport) -> tuple[Any, ...]:
    return tuple(getattr(report, f.name) for f in fields(report))


@dataclass(frozen=True)
class RestoreReport:
    """What :meth:`ContextStore.restore` put back, per table, and the restore's ``ts``."""

    conversation_id: str
    rollback_id: int
    restored: dict[str, int]
    ts: int

    @property
    def total_restored(self) -> int:
        """Rows put back across all tables (blocks included)."""
        return sum(self.restored.values())


@dataclass(frozen=True)
class TruncationDecision:
    """What a prepare or an explicit truncation decided, and why."""

    action: str
    """``"none"``, ``"dedupe"`` (file-read de-duplication was enough) or ``"truncate"``."""
    keep: str | None = None
    deleted_range: tuple[int, int] | None = None
    previous_range: tuple[int, int] | None = None
    tokens_total: int | None = None
    deduplicated: tuple[int, ...] = ()
    fraction_saved: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class PreparedRequest:
    """The request to send: the view, the whole payload, and what was decided for it."""

    conversation_id: str
    messages: list[dict[str, Any]]
    deleted_range: tuple[int, int] | None
    decision: TruncationDecision
    format: str = "anthropic"
    payload: dict[str, Any] = field(default_factory=dict)
    request_id: int = field(kw_only=True)
    """The ``api_requests`` row that remembers this request: every prepare writes one, so
    it is always an id, to pass to :meth:`record_request` and :meth:`request_payload`."""
    ts: int | None = None
    """The request row's ``ts`` (None only in a record built by hand)."""

    @property
    def truncated(self) -> bool:
        """True when this prepare hid more messages than before."""
        return self.decision.action == "truncate"


@dataclass(frozen=True)
class SourceRecord:
    """A record another agent wrote beside the model history (``source_records`` row).

    ``data`` is the record exactly as the agent wrote it; ``ts`` is its place on the
    conversation's timeline and ``source_ts`` the agent's own timestamp, when it had one.
    """

    id: int
    conversation_id: str
    ts: int
    origin: str
    kind: str
    data: dict[str, Any]
    source_ts: int | None = None


@dataclass(frozen=True)
class RemovedSourceRecords:
    """The source records one rollback removed and archived (and did not restore)."""

    rollback_id: int
    cutoff_ts: int
    ran_at: int
    records: tuple[SourceRecord, ...]
