"""Audit queries, full-text search, and the read-only SQL runner.

The audit functions read the views of revision 0003 (documented in the README, "Audit
views"); each returns plain dicts keyed by the view's column names, so the facade's records
and the views cannot drift apart silently. The read-only runner makes the database engine
itself refuse writes (SQLite ``mode=ro`` and ``PRAGMA query_only``; PostgreSQL
``SET TRANSACTION READ ONLY``, run as the role ``pg_read_all_data`` so that a superuser's
rights to server files and programs are gone), rather than trusting a parse of the caller's
SQL.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from typing import Any

from sqlalchemy import Connection, Text, and_, cast, func, inspect, or_, select, text
from sqlalchemy.exc import DBAPIError, StatementError

from contextstore.core.errors import InvalidInputError, ReadOnlyError
from contextstore.core.validate import clipped_text
from contextstore.storage.database import Database
from contextstore.storage.driver_errors import first_line
from contextstore.storage.engine import DatabaseTarget, make_engine
from contextstore.storage.privileges import identity, refused
from contextstore.storage.tables import blocks, conversations, messages

Rows = list[dict[str, Any]]

_REQUESTS = text("SELECT * FROM audit_requests WHERE conversation_id = :c ORDER BY ts, request_id")
_TRUNCATIONS = text("SELECT * FROM truncation_events WHERE conversation_id = :c ORDER BY ts, id")
_FILE_READS = text(
    "SELECT path, tool_name, reads, first_message_idx, last_message_idx FROM audit_file_reads "
    "WHERE conversation_id = :c ORDER BY reads DESC, path, tool_name"
)
_DEDUP = text("SELECT * FROM audit_dedup_savings WHERE conversation_id = :c ORDER BY ts, update_id")
_SECRETS = text(
    "SELECT kind, masked_by, COUNT(*) AS count FROM masked_secrets WHERE conversation_id = :c "
    "GROUP BY kind, masked_by ORDER BY COUNT(*) DESC, kind, masked_by"
)
_FAILED = text(
    "SELECT * FROM audit_failed_tool_calls WHERE conversation_id = :c "
    "ORDER BY result_message_idx, tool_use_id"
)
_ROLLBACKS = text(
    "SELECT v.*, k.counts FROM audit_rollbacks v JOIN rollbacks k ON k.id = v.rollback_id "
    "WHERE v.conversation_id = :c ORDER BY v.ran_at, v.rollback_id"
)
_CHECKPOINTS = text(
    "SELECT id, conversation_id, ts, label, git_hash, note FROM checkpoints "
    "WHERE conversation_id = :c ORDER BY ts"
)
_TIMELINE = text(
    "SELECT ts, event, ref_id, message_idx, detail FROM audit_timeline "
    "WHERE conversation_id = :c ORDER BY ts, event, ref_id"
)


def _rows(connection: Connection, statement: Any, conversation_id: str) -> Rows:
    return [dict(row._mapping) for row in connection.execute(statement, {"c": conversation_id})]


def request_usage(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``audit_requests``: each request's tokens and cost, their running totals,
    and the window and maximum allowed size they are measured against, oldest first."""
    return _rows(connection, _REQUESTS, conversation_id)


def truncation_events(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``truncation_events``: each deleted range, its strategy, trigger and reason."""
    return _rows(connection, _TRUNCATIONS, conversation_id)


def file_reads(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``audit_file_reads``: each file read through a read tool and how often."""
    return _rows(connection, _FILE_READS, conversation_id)


def dedup_savings(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``audit_dedup_savings``: each file-read de-duplication rewrite and its saving."""
    return _rows(connection, _DEDUP, conversation_id)


def masked_secret_counts(connection: Connection, conversation_id: str) -> Rows:
    """Counts of ``[REDACTED:kind]`` markers in what the model is shown, by kind and origin."""
    return _rows(connection, _SECRETS, conversation_id)


def failed_tool_calls(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``audit_failed_tool_calls``: error results with the call that caused each."""
    return _rows(connection, _FAILED, conversation_id)


def rollback_events(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``audit_rollbacks``: each rollback and the rows it removed, per table (the
    view's columns for the history tables, ``counts`` for every table)."""
    return _rows(connection, _ROLLBACKS, conversation_id)


def checkpoint_rows(connection: Connection, conversation_id: str) -> Rows:
    """The conversation's checkpoints, oldest first."""
    return _rows(connection, _CHECKPOINTS, conversation_id)


def timeline_events(connection: Connection, conversation_id: str) -> Rows:
    """Rows of ``audit_timeline``: every message, range, rewrite, request, checkpoint and
    rollback of the conversation, in timeline order."""
    return _rows(connection, _TIMELINE, conversation_id)


def message_count(connection: Connection, conversation_id: str, as_of: int) -> int:
    """How many messages the conversation has with ``ts <= as_of``."""
    query = select(func.count()).where(
        messages.c.conversation_id == conversation_id, messages.c.ts <= as_of
    )
    return int(connection.execute(query).scalar_one())


def _like_pattern(needle: str) -> str:
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_blocks(
    connection: Connection, needle: str, *, limit: int, conversation_id: str | None = None
) -> Rows:
    """Blocks whose text, or whose tool call's input, contains ``needle`` (case-insensitive
    for ASCII), newest first; each row carries its text and its input as JSON text (as
    the database writes it; other parts of a call, such as a signature, are not searched)."""
    pattern = _like_pattern(needle)
    input_text = cast(blocks.c.data["input"], Text)
    query = (
        select(
            blocks.c.conversation_id,
            conversations.c.title,
            blocks.c.message_idx,
            blocks.c.block_idx,
            blocks.c.type,
            messages.c.role,
            messages.c.ts,
            blocks.c.text,
            input_text.label("input"),
        )
        .join(
            messages,
            and_(
                messages.c.conversation_id == blocks.c.conversation_id,
                messages.c.idx == blocks.c.message_idx,
            ),
        )
        .join(conversations, conversations.c.id == blocks.c.conversation_id)
        .where(
            or_(
                blocks.c.text.ilike(pattern, escape="\\"),
                and_(
                    blocks.c.type == "tool_use",
                    input_text.ilike(pattern, escape="\\"),
                ),
            )
        )
        .order_by(messages.c.ts.desc(), blocks.c.block_idx)
        .limit(limit)
    )
    if conversation_id is not None:
        query = query.where(blocks.c.conversation_id == conversation_id)
    return [dict(row._mapping) for row in connection.execute(query)]


# -- read-only SQL -------------------------------------------------------------------------


def _deny_attach(action: int, *_args: Any) -> int:
    """SQLite authorizer: no ATTACH or DETACH (an attached file would be writable)."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _allow_all(*_: object) -> int:
    """SQLite authorizer that allows everything, as having none does."""
    return sqlite3.SQLITE_OK


def _refusal(exc: BaseException) -> Exception:
    """The error to raise for a failed caller query: a refused write, or bad SQL."""
    orig = getattr(exc, "orig", exc)
    message = first_line(orig)
    reason = _write_refused(orig, message)
    if reason is not None:
        return ReadOnlyError(
            f"the database refused the statement because queries are read-only ({reason}); "
            "write through contextstore's commands instead."
        )
    if message.lower().startswith(_SEVERAL_STATEMENTS):
        return InvalidInputError("the query holds more than one statement; run them one at a time.")
    return InvalidInputError(f"the query failed: {_clipped(message.rstrip('.'))}.")


MAX_QUOTED_ERROR = 500
"""Characters of the database's own error quoted in a refusal."""


def _clipped(message: str) -> str:
    """``message`` cut to :data:`MAX_QUOTED_ERROR` characters: SQLite quotes the token near a
    syntax error whole, so a query of 100,000 characters was echoed in full."""
    return clipped_text(message, MAX_QUOTED_ERROR)


def _write_refused(orig: BaseException, message: str) -> str | None:
    """Why the database refused the query as a write, for the message (the driver's words
    where they say it); None when the query failed for another reason."""
    lowered = message.lower()
    state = getattr(orig, "sqlstate", None)
    if "vacuum" in lowered and ("cannot vacuum" in lowered or "cannot run inside" in lowered):
        # SQLite's "cannot VACUUM from within a transaction", PostgreSQL's "VACUUM cannot run
        # inside a transaction block": the query's own transaction stops it, as it should.
        return "VACUUM rewrites the database"
    if state == "42501":  # PostgreSQL's insufficient_privilege
        # The query runs as a role that only reads (see _postgres): a function that writes a
        # server file or a large object, COPY to a program, a sequence's nextval.
        return f"{message.rstrip('.')}: the query runs with privileges that only read"
    if (
        state == "25006"
        or "readonly" in lowered.replace(" ", "").replace("-", "")
        or "not authorized" in lowered
    ):
        return message
    return None


_QUERY_ERRORS = (DBAPIError, StatementError, sqlite3.Error, sqlite3.Warning)
"""What a refused query raises. ``sqlite3.Warning`` is no ``sqlite3.Error``: Python 3.10
refuses several statements with it (3.11 with ``ProgrammingError``), which reached the
caller as itself."""

_SEVERAL_STATEMENTS = (
    "you can only execute one statement at a time",  # sqlite3
    "cannot insert multiple commands into a prepared statement",  # PostgreSQL
)
"""How each driver refuses a string of several statements (its words name neither the
query nor what to do: PostgreSQL's speak of a prepared statement the caller never made)."""


def _refused_query(exc: BaseException, database: Database) -> Exception:
    """:func:`_refusal`, and for a table or view that is not there, the views there are; a
    table, view or schema the user may not read is said so, with the grants that let it."""
    orig = getattr(exc, "orig", exc)
    if _READ_DENIED.match(first_line(orig)) and getattr(orig, "sqlstate", None) == "42501":
        return refused(first_line(orig), identity(database.engine), writing=False)
    refusal = _refusal(exc)
    if _names_a_missing_table(exc):
        return InvalidInputError(f"{refusal} {_what_there_is(database)}")
    return refusal


_READ_DENIED = re.compile(r"permission denied for (table|view|materialized view|schema) ")
"""PostgreSQL's refusal of a read: a write in the query's ``READ ONLY`` transaction is refused
as one before its privileges are checked, and what the reading role may not do is a
function's (``lo_export``) or a sequence's (``nextval``) right."""


def _names_a_missing_table(exc: BaseException) -> bool:
    """True when the database refused a query for naming a table or view it does not have."""
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlstate", None) == "42P01":  # PostgreSQL's undefined_table
        return True
    return first_line(orig).lower().startswith("no such table")


def _what_there_is(database: Database) -> str:
    """The views a query can read, named for someone who guessed a name that is not there."""
    with database.read() as connection:
        views = sorted(inspect(connection).get_view_names())
    return (
        f"The views are {', '.join(views)} (README, 'Audit views'); the tables are those of "
        "the data model (conversations, messages, blocks, deleted_ranges, context_updates, "
        "api_requests, checkpoints, ...)."
    )


def _fetch(connection: Connection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    result = connection.exec_driver_sql(sql)
    if not result.returns_rows:
        return [], []
    return list(result.keys()), [tuple(row) for row in result.fetchall()]


def run_read_only(
    database: Database, target: DatabaseTarget, sql: str
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one caller-supplied SQL statement in a session the engine keeps read-only.

    SQLite files are opened again with ``mode=ro`` and ``PRAGMA query_only`` (and ATTACH
    denied); an in-memory database runs the statement under ``PRAGMA query_only``;
    PostgreSQL runs it in a ``READ ONLY`` transaction through the extended protocol (so a
    string holding several statements is refused), as :data:`READING_ROLE` where the user
    may assume it (a user who may write server files and cannot is refused), on a connection
    discarded afterwards so no session setting outlives it. Returns the column names and the
    rows.

    Raises:
        ReadOnlyError: the statement tried to write (the database refused it), or the
            PostgreSQL user could write server files and cannot take the reading role.
        InvalidInputError: the SQL is empty, holds several statements, or failed.
    """
    database.check_open()
    if not isinstance(sql, str) or not sql.replace(";", " ").strip():
        raise InvalidInputError("the query is empty; pass one SQL statement such as SELECT 1.")
    try:
        if target.is_sqlite and not target.in_memory:
            return _sqlite_file(target, sql)
        if target.is_sqlite:
            return _sqlite_memory(database, sql)
        return _postgres(database, sql)
    except _QUERY_ERRORS as exc:
        raise _refused_query(exc, database) from exc


def _sqlite_file(target: DatabaseTarget, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    engine = make_engine(target, read_only=True)
    try:
        with engine.connect() as connection:
            raw = connection.connection.driver_connection
            assert isinstance(raw, sqlite3.Connection)
            raw.set_authorizer(_deny_attach)
            try:
                return _fetch(connection, sql)
            finally:
                connection.rollback()
    finally:
        engine.dispose()


def _sqlite_memory(database: Database, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with database.read() as connection:
        raw = connection.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.execute("PRAGMA query_only = ON")
        raw.set_authorizer(_deny_attach)
        try:
            return _fetch(connection, sql)
        except _QUERY_ERRORS as exc:
            # Refused here, inside the read: leaving it, SQLite's "attempt to write a
            # readonly database" became ReadOnlyLocationError, which tells the caller to
            # check the file's permissions (an in-memory store has no file).
            raise _refused_query(exc, database) from exc
        finally:
            # None clears it from Python 3.11 on; 3.10 took None as the authorizer and
            # refused every later statement of the store ("not authorized").
            raw.set_authorizer(None if sys.version_info >= (3, 11) else _allow_all)
            raw.execute("PRAGMA query_only = OFF")


_LEADING_KEYWORD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*([A-Za-z]+)", re.DOTALL)
"""The first word of a statement, past whitespace, comments and opening parentheses."""


READING_ROLE = "pg_read_all_data"
"""The role a PostgreSQL query runs as (PostgreSQL 14 and later): it may read every table,
view and schema, and holds none of a superuser's rights to server files, programs and
large objects."""

_SESSION_RIGHTS = text(
    "SELECT CASE WHEN to_regrole(:reading) IS NULL THEN false "
    "ELSE pg_has_role(session_user, :reading, 'MEMBER') END, "
    "r.rolsuper OR pg_has_role(session_user, 'pg_write_server_files', 'USAGE') "
    "OR pg_has_role(session_user, 'pg_execute_server_program', 'USAGE') "
    "FROM pg_roles r WHERE r.rolname = session_user"
)


def session_rights(connection: Connection) -> tuple[bool, bool]:
    """Whether the session's user may assume :data:`READING_ROLE`, and whether it holds
    rights that write outside the database (a superuser's, or those of the predefined roles
    that write server files or run programs there)."""
    row = connection.execute(_SESSION_RIGHTS, {"reading": READING_ROLE}).one()
    return bool(row[0]), bool(row[1])


def assume_reading_role(connection: Connection) -> None:
    """Run the rest of the transaction as :data:`READING_ROLE` (``SET LOCAL ROLE``)."""
    connection.exec_driver_sql(f"SET LOCAL ROLE {READING_ROLE}")


def _postgres(database: Database, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    leading = _LEADING_KEYWORD.match(sql)
    if leading is not None and leading.group(1).lower() == "copy":
        # A READ ONLY transaction still lets COPY ... TO 'file' write on the server.
        raise ReadOnlyError(
            "COPY is refused: it reads and writes files on the database server, and this "
            "runs read-only queries only. Use SELECT (psql's \\copy writes on your side)."
        )
    with database.engine.connect() as connection:
        try:
            connection.exec_driver_sql("SET TRANSACTION READ ONLY")
            # A READ ONLY transaction still lets a superuser's query write server files
            # (lo_export, COPY TO PROGRAM inside DO) and large objects (lo_import).
            may_assume, writes_outside = session_rights(connection)
            if may_assume:
                assume_reading_role(connection)
            elif writes_outside:
                raise ReadOnlyError(_NO_READING_ROLE)
            raw: Any = connection.connection.driver_connection
            with raw.cursor() as cursor:
                cursor.execute(sql, prepare=True)
                if cursor.description is None:
                    return [], []
                columns = [column.name for column in cursor.description]
                return columns, [tuple(row) for row in cursor.fetchall()]
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                raise _refused_query(exc, database) from exc
            raise
        finally:
            connection.rollback()
            connection.invalidate()


_NO_READING_ROLE = (
    f"queries are refused for this user: it may write files on the database server "
    f"(a superuser, or a member of pg_write_server_files or pg_execute_server_program), and "
    f"the server has no {READING_ROLE} role it could run them as (PostgreSQL 14 or later); "
    f"connect as a user without those rights, or upgrade the server."
)
