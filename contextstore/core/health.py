"""Reports of the store's health: a check, a backup, a recovery. Frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CheckProblem:
    """One broken invariant, or one damage report of the database engine."""

    check: str
    """Which check found it (``integrity``, ``message_count``, ``block_owner``, ...)."""
    detail: str
    """What is wrong, in words."""
    conversation_id: str | None = None
    """The conversation it concerns (None for file-level damage)."""


@dataclass(frozen=True)
class CheckReport:
    """What :meth:`ContextStore.check` examined and found."""

    backend: str
    """``sqlite`` or ``postgresql``."""
    integrity: str
    """The engine's own check that ran: ``quick_check``, ``integrity_check``, or
    ``skipped`` (PostgreSQL has no page-level check to run; in-memory databases neither)."""
    conversations_checked: int
    checks: tuple[str, ...]
    """The store invariants that ran (each names a ``CheckProblem.check``)."""
    problems: tuple[CheckProblem, ...] = ()
    conversation_id: str | None = None
    """The conversation checked, or None for all."""

    @property
    def ok(self) -> bool:
        """True when nothing was found."""
        return not self.problems

    @property
    def corrupt(self) -> bool:
        """True when the engine's check found damaged pages (the file itself is damaged)."""
        return any(p.check == "integrity" for p in self.problems)


@dataclass(frozen=True)
class BackupResult:
    """What :meth:`ContextStore.backup` wrote."""

    path: str
    """The backup file."""
    bytes: int
    pages: int
    conversations: int
    removed_leftovers: list[str] = field(default_factory=list)
    """Temporary files of earlier backups to the same destination that were interrupted
    (killed, a power cut) and that this one removed."""


@dataclass(frozen=True)
class TableRecovery:
    """Per table: rows read back from the damaged file, and what could not be read."""

    table: str
    recovered: int
    """Rows written to the new store."""
    unreadable: int = 0
    """Rows (or row ids skipped over) the damaged file could not give back; ``-1`` when the
    whole table could not be read (its count is unknown)."""
    dropped: int = 0
    """Rows read but left out because what they depend on was lost (a block of a lost
    message, rows after a gap in a conversation's messages)."""


@dataclass(frozen=True)
class RecoveryReport:
    """What :meth:`ContextStore.recover` salvaged into the new store, and what was lost."""

    source: str
    destination: str
    header_repaired: bool
    """True when the file's first 100 bytes were rewritten to read the rest."""
    tables: tuple[TableRecovery, ...]
    conversations: int
    """Conversations in the new store."""
    damaged_conversations: tuple[str, ...] = ()
    """Conversations that lost rows (their history in the new store ends before the loss)."""
    recreated_conversations: tuple[str, ...] = ()
    """Conversations whose own row was lost and was rebuilt from their other rows."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def lost_rows(self) -> int:
        """Rows that did not make it to the new store (unknown counts excluded)."""
        return sum(max(t.unreadable, 0) + t.dropped for t in self.tables)

    @property
    def complete(self) -> bool:
        """True when every row of the damaged file made it to the new store."""
        return all(t.unreadable == 0 and t.dropped == 0 for t in self.tables)
