"""Every error contextstore raises derives from :class:`ContextStoreError`.

Messages follow one rule: say what happened, then what to do about it. The CLI is the
only place an error turns into an exit code; library callers catch ``ContextStoreError``.
"""

from __future__ import annotations


class ContextStoreError(Exception):
    """Base class of every error raised by contextstore."""

    exit_code: int = 1


class InvalidInputError(ContextStoreError, ValueError):
    """The caller passed something contextstore cannot accept; nothing was written."""

    exit_code = 2


class InvalidMessageError(InvalidInputError):
    """A message or one of its content blocks is malformed."""


class ContentTooLargeError(InvalidInputError):
    """A message exceeds the documented size limit."""


class AnswerTooLargeError(InvalidInputError):
    """A read's answer is larger than the way in that asked for it may carry (an MCP tool's
    answer, which lands in a model's context); ask for less, a page at a time."""


class TimelineError(InvalidInputError):
    """A timestamp would break the conversation's strictly increasing timeline."""


class NotFoundError(ContextStoreError, LookupError):
    """A conversation, checkpoint or request that the caller named does not exist."""

    exit_code = 3


class ConversationNotFoundError(NotFoundError):
    """No conversation has the given id."""


class CheckpointNotFoundError(NotFoundError):
    """No checkpoint of the conversation has the given label or timestamp."""


class RequestNotFoundError(NotFoundError):
    """No API request of the conversation has the given id."""


class RollbackNotFoundError(NotFoundError):
    """No rollback of the conversation has the given id."""


class SchemaError(ContextStoreError):
    """The database schema is not the one this version of contextstore expects."""

    exit_code = 4


class SchemaOutdatedError(SchemaError):
    """The database is at an older migration revision and automatic migration is off."""


class MigrationError(SchemaError):
    """A migration failed; the database was left as it was before the attempt."""


class IntegrityViolationError(ContextStoreError):
    """Stored rows break an invariant (pairing, unique indices, the timeline, a payload hash)."""

    exit_code = 5


class NodeInvariantError(IntegrityViolationError):
    """Nodes about to be written break an invariant (unique ids, non-empty content, token
    counts equal to their recount, valid line ranges); nothing was written."""


class CorruptRowError(IntegrityViolationError):
    """A stored value cannot be decoded; it is reported, never silently reset."""


class PayloadMismatchError(IntegrityViolationError):
    """A request payload rebuilt from rows does not match the hash stored when it was sent."""


class CorruptDatabaseError(IntegrityViolationError):
    """The database file itself is damaged: not a SQLite database (a text file, an
    overwritten header), truncated, an existing zero-length file, or pages SQLite reports as
    malformed (PostgreSQL: ``XX001``/``XX002``).

    Raised when a store is opened (the file's header and size are checked, not every page),
    when a read or write reaches a damaged page, and by :meth:`ContextStore.check`. What to
    do: run ``contextstore check`` to see the damage, then ``contextstore recover SRC DEST``
    to salvage what is readable into a new store, or restore a backup.
    """


class ReadOnlyError(ContextStoreError):
    """A write was attempted through a store opened read-only (``read_only=True``, the
    CLI's read commands, or a read-only SQL statement that tried to write).

    What to do: open the store without ``read_only=True`` to write.
    """

    exit_code = 6


class ReadOnlyLocationError(ReadOnlyError):
    """The store lives where nothing can be written (a read-only directory, file, medium or
    PostgreSQL standby) and was opened for writing, or a write reached such a file, or a
    PostgreSQL role lacking a privilege the write needs (the message lists the grants).

    What to do: open it with ``read_only=True`` (the CLI's read commands already do), or
    move the file somewhere writable. Nothing was written.

    ``situation`` is the message's first part, what cannot be written, without the advice
    (which assumes the caller may only want to read): a command line that knows its command
    writes says what to do in its own words.
    """

    exit_code = 9

    def __init__(self, message: str, *, situation: str | None = None) -> None:
        super().__init__(message)
        self.situation = message if situation is None else situation


class StorageFullError(ContextStoreError):
    """The disk or quota is full (SQLite ``SQLITE_FULL``, PostgreSQL ``53100 disk_full``).

    The write was rolled back whole: the store stays consistent and readable, and writes
    succeed again once space is freed. What to do: free disk space (or raise the quota)
    and retry the call.
    """

    exit_code = 8


class DatabaseUnavailableError(ContextStoreError):
    """The database cannot be reached: the server is unreachable, refused the connection,
    or dropped it (PostgreSQL: a server that is down, a wrong host, port, database name or
    user, a server shut down under an open connection; a role refused a privilege a read
    needs, or a ``search_path`` naming no schema that exists), or a SQLite file this user
    may not read.

    What to do: check the URL and that the server is running, then retry (a connection the
    server dropped is replaced on the next call); for a file, run as a user who may read
    it or give this one read permission.
    """


class DatabaseBusyError(ContextStoreError):
    """The database stayed locked by other writers beyond the bounded retry."""

    exit_code = 7


class ConcurrentChangeError(DatabaseBusyError):
    """Another writer kept changing a conversation while a decision about it was being
    planned (its summarizer or processors running), through every attempt."""
