"""contextstore: durable, auditable conversation history for LLM agents.

Rows are the truth and the conversation sent to a model is a query: see
:class:`ContextStore` for the store, and the pure functions exported here for the view
rules and context-window policy on plain message lists.
"""

from typing import TYPE_CHECKING, Any

from contextstore.core.errors import (
    AnswerTooLargeError,
    CheckpointNotFoundError,
    ConcurrentChangeError,
    ContentTooLargeError,
    ContextStoreError,
    ConversationNotFoundError,
    CorruptDatabaseError,
    CorruptRowError,
    DatabaseBusyError,
    DatabaseUnavailableError,
    IntegrityViolationError,
    InvalidInputError,
    InvalidMessageError,
    MigrationError,
    NodeInvariantError,
    NotFoundError,
    PayloadMismatchError,
    ReadOnlyError,
    ReadOnlyLocationError,
    RequestNotFoundError,
    RollbackNotFoundError,
    SchemaError,
    SchemaOutdatedError,
    StorageFullError,
    TimelineError,
)
from contextstore.core.file_reads import FileReadOptimization, optimize_file_reads
from contextstore.core.hardening import harden_history
from contextstore.core.health import (
    BackupResult,
    CheckProblem,
    CheckReport,
    RecoveryReport,
    TableRecovery,
)
from contextstore.core.overlays import BlockUpdate, UpdateKind, UpdateMode, text_hash
from contextstore.core.records import (
    AppendedMessage,
    Checkpoint,
    Conversation,
    PreparedRequest,
    RequestRecord,
    RestoreReport,
    RollbackReport,
    TruncationDecision,
)
from contextstore.core.tokens import TokenCounter
from contextstore.core.truncation import next_truncation_range
from contextstore.core.view import ensure_tool_results_follow_tool_use, truncated_messages
from contextstore.core.window import ContextWindowInfo, context_window_info, should_compact

if TYPE_CHECKING:
    from contextstore.store import ContextStore


def __getattr__(name: str) -> Any:
    # The store (and with it SQLAlchemy and Alembic) loads on first use, so the pure
    # functions above stay importable without the storage layer.
    if name == "ContextStore":
        from contextstore.store import ContextStore

        return ContextStore
    raise AttributeError(f"module 'contextstore' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "AnswerTooLargeError",
    "AppendedMessage",
    "BackupResult",
    "BlockUpdate",
    "CheckProblem",
    "CheckReport",
    "Checkpoint",
    "CheckpointNotFoundError",
    "ConcurrentChangeError",
    "ContentTooLargeError",
    "ContextStore",
    "ContextStoreError",
    "ContextWindowInfo",
    "Conversation",
    "ConversationNotFoundError",
    "CorruptDatabaseError",
    "CorruptRowError",
    "DatabaseBusyError",
    "DatabaseUnavailableError",
    "FileReadOptimization",
    "IntegrityViolationError",
    "InvalidInputError",
    "InvalidMessageError",
    "MigrationError",
    "NodeInvariantError",
    "NotFoundError",
    "PayloadMismatchError",
    "PreparedRequest",
    "ReadOnlyError",
    "ReadOnlyLocationError",
    "RecoveryReport",
    "RequestNotFoundError",
    "RequestRecord",
    "RestoreReport",
    "RollbackNotFoundError",
    "RollbackReport",
    "SchemaError",
    "SchemaOutdatedError",
    "StorageFullError",
    "TableRecovery",
    "TimelineError",
    "TokenCounter",
    "TruncationDecision",
    "UpdateKind",
    "UpdateMode",
    "__version__",
    "context_window_info",
    "ensure_tool_results_follow_tool_use",
    "harden_history",
    "next_truncation_range",
    "optimize_file_reads",
    "should_compact",
    "text_hash",
    "truncated_messages",
]
