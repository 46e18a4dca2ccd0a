"""Timeline rows given to :meth:`ContextStore.import_timeline`, each stamped by its caller.

An importer replays another agent's history on that agent's own clock: it builds one list
of these rows in timeline order (their ``ts`` strictly increasing) and hands it to the store
in one call, which validates every row as the single-row methods would and writes them all
in one transaction. Pure values: nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contextstore.core.overlays import UpdateKind, UpdateMode


@dataclass(frozen=True)
class MessageRow:
    """A message (``role``, ``content`` and any extra fields), as :meth:`append` takes it."""

    ts: int
    message: Mapping[str, Any]


@dataclass(frozen=True)
class SourceRecordRow:
    """A record another agent wrote beside the model history, kept verbatim.

    ``origin`` names the file kind (``"cline"`` for ``ui_messages.json`` entries,
    ``"gemini"`` for session records), ``kind`` the record's type within it (``"say:tool"``,
    ``"info"``...), ``source_ts`` the agent's own timestamp when it has one.
    """

    ts: int
    origin: str
    kind: str
    data: Mapping[str, Any]
    source_ts: int | None = None


@dataclass(frozen=True)
class RequestRow:
    """A model request's usage, as :meth:`record_request` takes it, plus ``details``."""

    ts: int
    tokens_in: int | None = None
    tokens_out: int | None = None
    cache_writes: int | None = None
    cache_reads: int | None = None
    cost: float | None = None
    model_id: str | None = None
    failure: str | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CheckpointRow:
    """A checkpoint, as :meth:`checkpoint` takes it."""

    ts: int
    label: str | None = None
    git_hash: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class RangeRow:
    """A deleted range ``(2, end)``, as :meth:`set_deleted_range` takes it.

    Unlike :meth:`set_deleted_range`, a range may be recorded in a conversation that holds no
    messages at all: an agent's UI log kept without its model history (a Cline task folder
    without ``api_conversation_history.json``) still says when each range was set.
    """

    ts: int
    end: int
    keep: str = "imported"
    reason: str = "imported"
    tokens_total: int | None = None
    summary: str | None = None


@dataclass(frozen=True)
class UpdateRow:
    """A block rewrite, as :meth:`add_context_update` takes it."""

    ts: int
    message_idx: int
    block_idx: int
    text: str
    kind: str = UpdateKind.MANUAL
    source: str = "import"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    mode: str = UpdateMode.TEXT


TimelineRow = MessageRow | SourceRecordRow | RequestRow | CheckpointRow | RangeRow | UpdateRow
"""One row of an import, in timeline order."""

ROW_TABLES: dict[type, str] = {
    MessageRow: "messages",
    SourceRecordRow: "source_records",
    RequestRow: "api_requests",
    CheckpointRow: "checkpoints",
    RangeRow: "deleted_ranges",
    UpdateRow: "context_updates",
}
"""The table each row kind is written to."""
