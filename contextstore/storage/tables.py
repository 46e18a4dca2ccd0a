"""The schema, as SQLAlchemy Core tables (the Alembic migrations are derived from it).

Every row of a conversation's timeline (messages, deleted ranges, context updates, API
requests, checkpoints) carries ``ts``: integer milliseconds, strictly increasing within the
conversation in the order written, so a checkpoint at ``T`` is exactly the rows with
``ts <= T`` and a rollback is ``DELETE ... WHERE ts > T`` on each of these tables.
Constraint names follow one convention so that SQLite batch migrations can address them.
"""

from __future__ import annotations

from sqlalchemy import JSON as _JSON
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from contextstore.core.validate import MAX_NAME_LENGTH

JSON = _JSON().with_variant(JSONB(), "postgresql")
"""JSON columns: ``jsonb`` on PostgreSQL (decoded by the server, indexable), text on SQLite."""

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

TOOL_CALLS_ONLY = "type = 'tool_use'"
"""The rows ``ix_blocks_tool_use_id`` covers; a query must say this condition in these words
(a literal, not a bound value) for SQLite and PostgreSQL to use the partial index."""

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("created_ts", BigInteger, nullable=False),
    Column("last_ts", BigInteger, nullable=False),
    Column("message_count", Integer, nullable=False, default=0, server_default="0"),
    Column("title", Text),
    Column("model_id", String(MAX_NAME_LENGTH)),
    Column("context_window", Integer),
    Column("parent_id", String(64), ForeignKey("conversations.id", ondelete="SET NULL")),
    Column("forked_at_ts", BigInteger),
    Column("metadata", JSON, nullable=False, default=dict),
    CheckConstraint("context_window IS NULL OR context_window > 0", name="window_positive"),
)

messages = Table(
    "messages",
    metadata,
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("idx", Integer, primary_key=True),
    Column("ts", BigInteger, nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_count", Integer, nullable=False),
    Column("was_string", Boolean, nullable=False, default=False),
    Column("meta", JSON, nullable=False, default=dict),
    CheckConstraint("role IN ('user', 'assistant')", name="role"),
    CheckConstraint("idx >= 0", name="idx_nonnegative"),
    sqlite_with_rowid=False,
)
"""One row per message, keyed by ``(conversation_id, idx)`` and nothing else (revision
0012). On SQLite the table is ``WITHOUT ROWID``: its rows live in the primary key's b-tree,
so an append writes one b-tree of ``messages`` where it wrote three (the rows, the key and a
unique ``(conversation_id, ts)`` index). No index covers ``ts``: a conversation's ``ts``
strictly increase with ``idx`` (the clock's rule, checked by the ``message_ts`` invariant and
by every read of the history), so the messages after a cutoff are a tail of the key, found by
reading back from the newest message (:func:`contextstore.storage.timeline.first_after`)."""

BLOCK_TYPE_LENGTH = 64
"""The longest block type ``blocks.type`` holds (revision 0016; Anthropic's
``text_editor_code_execution_tool_result`` has 38 characters, 32 were allowed before)."""

blocks = Table(
    "blocks",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("message_idx", Integer, primary_key=True),
    Column("block_idx", Integer, primary_key=True),
    Column("type", String(BLOCK_TYPE_LENGTH), nullable=False),
    Column("text", Text),
    Column("tool_use_id", String(MAX_NAME_LENGTH)),
    Column("tool_name", String(MAX_NAME_LENGTH)),
    Column("data", JSON, nullable=False),
    Column("node_type", String(32), nullable=False),
    Column("path", Text),
    Column("line_start", Integer),
    Column("line_end", Integer),
    Column("token_count", Integer, nullable=False),
    Index(
        "ix_blocks_tool_use_id",
        "conversation_id",
        "tool_use_id",
        sqlite_where=text(TOOL_CALLS_ONLY),
        postgresql_where=text(TOOL_CALLS_ONLY),
    ),
)
"""One row per content block; every block is a typed node (``node_type``, see
:mod:`contextstore.core.nodes`) with its token count and, for file contents, the file.

Besides the primary key, one index: tool calls by id (:func:`contextstore.storage.nodes.find_calls`
types a tool result by the call it answers). Results and texts take no entry, and no index
covers ``path`` (no statement looks blocks up by file); revision 0010 measured both.

No foreign key to ``messages`` (revision 0011): its cascade ran one trigger call per deleted
message even when the statement had already deleted the blocks, most of a purge's time on
PostgreSQL. Every statement that deletes messages deletes their blocks itself (a rollback,
a conversation's deletion, an import's replacement), blocks are written with their message
in one transaction, and ``contextstore check`` verifies that every block has its message
(the ``block_owner`` invariant)."""

deleted_ranges = Table(
    "deleted_ranges",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("start_idx", Integer, nullable=False),
    Column("end_idx", Integer, nullable=False),
    Column("keep", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("tokens_total", Integer),
    Column("summary", Text),
    CheckConstraint("start_idx = 2", name="start_is_two"),
    CheckConstraint("end_idx >= 1", name="end_at_least_one"),
    UniqueConstraint("conversation_id", "ts"),
    sqlite_autoincrement=True,
)

context_updates = Table(
    "context_updates",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("message_idx", Integer, nullable=False),
    Column("block_idx", Integer, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("mode", String(16), nullable=False, default="text"),
    Column("text", Text, nullable=False),
    Column("metadata", JSON, nullable=False, default=dict),
    Column("source", String(MAX_NAME_LENGTH), nullable=False),
    Column("base_hash", String(64)),
    Index("ix_context_updates_block", "conversation_id", "message_idx", "block_idx", "ts"),
    UniqueConstraint("conversation_id", "ts", "message_idx", "block_idx"),
    sqlite_autoincrement=True,
)

api_requests = Table(
    "api_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("tokens_in", Integer),
    Column("tokens_out", Integer),
    Column("cache_writes", Integer),
    Column("cache_reads", Integer),
    Column("cost", Float),
    Column("model_id", String(MAX_NAME_LENGTH)),
    Column("format", String(16)),
    Column("options_sha256", String(64), ForeignKey("request_options.sha256")),
    Column("system_sha256", String(64), ForeignKey("context_nodes.sha256")),
    Column("tools_sha256", String(64), ForeignKey("context_nodes.sha256")),
    Column("payload_sha256", String(64)),
    Column("message_count", Integer),
    Column("failure", String(MAX_NAME_LENGTH)),
    Column("details", JSON),
    UniqueConstraint("conversation_id", "ts"),
    sqlite_autoincrement=True,
)

request_options = Table(
    "request_options",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("data", JSON, nullable=False),
)
"""System prompt, tools and render settings of prepared requests, stored once per content."""

context_nodes = Table(
    "context_nodes",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("node_type", String(32), nullable=False),
    Column("content", Text, nullable=False),
    Column("token_count", Integer, nullable=False),
    CheckConstraint("node_type IN ('system_prompt', 'tool_definitions')", name="node_type"),
)
"""System prompts and tool definitions of prepared requests as nodes, stored once per
content (``sha256`` of ``content``: the prompt's text, or the tools' canonical JSON) and
referenced by ``api_requests.system_sha256`` / ``tools_sha256``."""

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("label", String(MAX_NAME_LENGTH)),
    Column("git_hash", String(64)),
    Column("note", Text),
    UniqueConstraint("conversation_id", "ts"),
    Index("ix_checkpoints_label", "conversation_id", "label"),
    sqlite_autoincrement=True,
)

rollbacks = Table(
    "rollbacks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("cutoff_ts", BigInteger, nullable=False),
    Column("ran_at", BigInteger, nullable=False),
    Column("target", String(MAX_NAME_LENGTH)),
    Column("purged", Boolean, nullable=False, default=False),
    Column("counts", JSON, nullable=False),
    Column("restored_ts", BigInteger),
    sqlite_autoincrement=True,
)

source_records = Table(
    "source_records",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("origin", String(32), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("source_ts", BigInteger),
    Column("data", JSON, nullable=False),
    UniqueConstraint("conversation_id", "ts"),
    sqlite_autoincrement=True,
)
"""Records another agent wrote beside the model history, kept verbatim on the timeline:
Cline's UI messages (``ui_messages.json``) and Gemini CLI's session records. They are never
sent to a model; exports write them back, and a rollback removes and archives them."""

lineage = Table(
    "lineage",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("derived_kind", String(16), nullable=False),
    Column("derived_message_idx", Integer),
    Column("derived_block_idx", Integer),
    Column("relation", String(16), nullable=False),
    Column("source_kind", String(16), nullable=False),
    Column("source_ts", BigInteger, nullable=False),
    Column("source_message_idx", Integer),
    Column("source_block_idx", Integer),
    CheckConstraint("derived_kind IN ('update', 'range')", name="derived_kind"),
    CheckConstraint("source_kind IN ('block', 'update', 'range')", name="source_kind"),
    CheckConstraint("relation IN ('replaces', 'abstracts')", name="relation"),
    CheckConstraint("source_ts < ts", name="source_older"),
    Index("ix_lineage_derived", "conversation_id", "ts"),
    Index("ix_lineage_source", "conversation_id", "source_ts"),
    sqlite_autoincrement=True,
)
"""Edges from a derived node to a node it was made from, on the timeline.

A node is named by its kind and the ``ts`` of its row: a stored block by
``(message ts, message_idx, block_idx)``, a context update by ``(ts, message_idx,
block_idx)`` (unique per conversation), a deleted range by its ``ts``. The edge's ``ts``
is the derived node's, so it goes with that row in a rollback, and ``source_ts < ts``
(a constraint) makes every path strictly older: lineage is acyclic by construction.
Names by ``ts`` rather than row ids survive a fork, which copies rows under new ids."""

processor_runs = Table(
    "processor_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("ts", BigInteger, nullable=False),
    Column("processor", String(MAX_NAME_LENGTH), nullable=False),
    Column("config_sha256", String(64), nullable=False),
    Column("trigger", String(32), nullable=False),
    Column("nodes_given", Integer, nullable=False),
    Column("first_message_idx", Integer),
    Column("last_message_idx", Integer),
    Column("seen_through", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text),
    Column("proposed", Integer, nullable=False),
    Column("applied", Integer, nullable=False),
    Column("dropped", Integer, nullable=False),
    Column("result", JSON, nullable=False),
    CheckConstraint(
        "outcome IN ('applied', 'dropped_stale', 'no_change', 'failed')", name="outcome"
    ),
    Index("ix_processor_runs_processor", "conversation_id", "processor", "ts"),
    sqlite_autoincrement=True,
)
"""One row per processor whose trigger fired in a recorded run (``prepare_request``,
``run_processors``): what it was given, what it returned, and whether its proposals were
applied or dropped as stale (with why). ``seen_through`` is the newest message index the
processor has handled: its next run is given only what its trigger fired for since."""

TIMELINE_TABLES: tuple[Table, ...] = (
    lineage,
    processor_runs,
    context_updates,
    deleted_ranges,
    api_requests,
    checkpoints,
    source_records,
    messages,
)
"""Tables whose rows a rollback removes (blocks go with their messages)."""

ID_TABLES: tuple[Table, ...] = (
    deleted_ranges,
    context_updates,
    api_requests,
    checkpoints,
    rollbacks,
    source_records,
    lineage,
    processor_runs,
)
"""Tables whose rows have an ``id`` of their own. Ids are never reused (``AUTOINCREMENT``
on SQLite, sequences on PostgreSQL): a rollback's archived rows keep theirs."""

ARCHIVED_TABLES: tuple[Table, ...] = (
    messages,
    blocks,
    deleted_ranges,
    context_updates,
    api_requests,
    checkpoints,
    source_records,
    lineage,
    processor_runs,
)
"""Tables a rollback archives rows of, in the order archived rows go back (blocks after
their messages)."""


def _archive_of(table: Table) -> Table:
    """The archive of ``table``: its columns (same names and types, no keys, defaults or
    constraints) after the ``rollback_id`` that archived the row, and one index by rollback."""
    return Table(
        f"archived_{table.name}",
        metadata,
        Column("rollback_id", Integer, nullable=False),
        *[Column(column.name, column.type, nullable=column.nullable) for column in table.c],
        Index(f"ix_archived_{table.name}_rollback", "rollback_id"),
    )


ARCHIVES: dict[str, Table] = {table.name: _archive_of(table) for table in ARCHIVED_TABLES}
"""``archived_<table>`` per archived table: the rows a rollback removed, exactly as they
were (ids and ``ts`` included), under the rollback's id, so that :meth:`ContextStore.restore`
can put them back with one ``INSERT ... SELECT`` per table and a rollback moves them with
one per table (no row is converted: revision 0011 measured the JSON archive it replaces).
No foreign key: a rollback's archived rows are deleted with it, explicitly, in the statements
that delete rollbacks (:func:`contextstore.storage.conversations.delete_conversation`)."""
