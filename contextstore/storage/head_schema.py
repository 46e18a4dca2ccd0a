"""The newest schema of a new SQLite database, made once a process by the migrations and
replayed into every later new database.

Running the migrations on an empty database takes about half a second (seventeen revisions,
some of which rebuild tables); a process that makes many databases (an agent host with an
in-memory store per task, a test suite) paid it for each. The first empty database a process
migrates is read back, inside the migration's transaction, as the statements that made its
tables, indexes, views and triggers; a later empty database gets those statements and the
revision row, in one transaction under the same write lock, so the result is the database the
migrations would have made (a test compares the two dumps). Only an empty migrated schema is
kept: a migration that leaves rows in a new database (or SQLite's statistics) keeps the
Alembic path for every database.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import Connection

_ORDER = {"table": 0, "index": 1, "view": 2, "trigger": 3}
"""The order statements are replayed in: whatever a statement names exists before it."""


@dataclass(frozen=True)
class HeadSchema:
    """The revision a new database reaches, the statements that make its schema, and the
    counters SQLite keeps for its ``AUTOINCREMENT`` tables (rebuilt tables leave them at 0)."""

    revision: str
    statements: tuple[str, ...]
    sequences: tuple[tuple[str, int], ...]


_SCHEMAS: dict[str, HeadSchema] = {}
"""Per migrations folder (a test may point the store at another), the schema its head makes."""
_LOCK = threading.Lock()


def remembered(location: str) -> HeadSchema | None:
    """The head schema read from a database this process migrated from ``location``'s
    scripts, if any."""
    with _LOCK:
        return _SCHEMAS.get(location)


def remember(location: str, schema: HeadSchema) -> None:
    """Keep ``schema`` as what ``location``'s migrations make of an empty database."""
    with _LOCK:
        _SCHEMAS[location] = schema


def forget_all() -> None:
    """Drop every remembered schema (the next new database is migrated by Alembic)."""
    with _LOCK:
        _SCHEMAS.clear()


def is_empty(connection: Connection) -> bool:
    """Whether the database has no schema at all: no table, index, view or trigger."""
    return connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar() == 0


def read_head_schema(connection: Connection) -> HeadSchema | None:
    """The schema the migrations just made of an empty database, or None when it cannot be
    replayed as statements alone: a table holds rows (the revision row and SQLite's own
    counters aside), SQLite's statistics exist, or the revision is not one row."""
    objects = connection.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master ORDER BY rowid"
    ).all()
    statements: list[tuple[int, int, str]] = []
    for position, (kind, name, sql) in enumerate(objects):
        if name == "sqlite_sequence" or str(name).startswith("sqlite_autoindex_"):
            continue
        if str(name).startswith("sqlite_") or sql is None or kind not in _ORDER:
            return None
        if kind == "table" and name != "alembic_version" and _has_rows(connection, name):
            return None
        statements.append((_ORDER[kind], position, str(sql)))
    revisions = connection.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    if len(revisions) != 1:
        return None
    sequences: tuple[tuple[str, int], ...] = ()
    if any(name == "sqlite_sequence" for _, name, _ in objects):
        sequences = tuple(
            (str(name), int(seq))
            for name, seq in connection.exec_driver_sql(
                "SELECT name, seq FROM sqlite_sequence ORDER BY rowid"
            )
        )
    return HeadSchema(
        str(revisions[0][0]), tuple(sql for _, _, sql in sorted(statements)), sequences
    )


def create_head_schema(connection: Connection, schema: HeadSchema) -> None:
    """Make ``schema`` in the empty database of ``connection``'s transaction."""
    for statement in schema.statements:
        connection.exec_driver_sql(statement)
    connection.exec_driver_sql(
        "INSERT INTO alembic_version (version_num) VALUES (?)", (schema.revision,)
    )
    for name, seq in schema.sequences:
        connection.exec_driver_sql(
            "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq)
        )


def _has_rows(connection: Connection, table: str) -> bool:
    """Whether ``table`` (a name read from ``sqlite_master``, quoted) holds a row."""
    quoted = connection.dialect.identifier_preparer.quote_identifier(table)
    sql = f"SELECT 1 FROM {quoted} LIMIT 1"  # noqa: S608
    return connection.exec_driver_sql(sql).first() is not None
