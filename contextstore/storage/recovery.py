"""Salvaging a damaged SQLite store into a new one.

The damaged file is never written: a copy of it beside the destination is read, every
row that can be (:mod:`.damaged_file`; ``messages``, without rowids from revision 0012, one
conversation at a time past a damaged page, the conversations being known from the other
tables' rows). The rows are written to a new store at the damaged file's schema revision,
then made consistent:

- a conversation whose own row was lost is rebuilt from its other rows;
- a conversation's history ends before its first lost or unreadable message (a gap in
  its indices, a message without its blocks, undecodable JSON): every timeline row from
  there on is dropped, as a rollback to just before the loss would, so what remains is a
  history that existed;
- rows that depend on lost rows are dropped (blocks of lost messages, rewrites of lost
  blocks, archived rows of lost rollbacks); a request
  whose stored options were lost keeps its usage but can no longer be rebuilt;
- counters are recomputed (``message_count``, the clock).

Then the new store is upgraded to the current schema. Every statement here runs on
``sqlite3`` connections to files this module made.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from contextstore.core.errors import CorruptDatabaseError, InvalidInputError, NotFoundError
from contextstore.core.health import RecoveryReport, TableRecovery
from contextstore.core.os_errors import check_folder_exists, os_errors
from contextstore.core.store_files import check_not_named_as_side_file
from contextstore.storage.damaged_file import (
    Scan,
    column_names,
    has_rowids,
    readable_copy,
    scan_by_key,
    scan_table,
    stored_revision,
    table_names,
)
from contextstore.storage.engine import check_utf8_name, make_engine, sqlite_file_target
from contextstore.storage.migrate import head_revision, refuse_unknown_revision, upgrade
from contextstore.storage.tables import ARCHIVES, TIMELINE_TABLES

TIMELINE = tuple(table.name for table in TIMELINE_TABLES)
"""Tables whose rows sit on a conversation's timeline (``ts``)."""
ARCHIVE_TABLES = tuple(table.name for table in ARCHIVES.values())
"""The rollbacks' archive tables (revision 0011 on; ``archived_rows`` before it)."""
OWNED = (*TIMELINE, "blocks", "rollbacks", *ARCHIVE_TABLES, "archived_rows")
"""Tables whose rows belong to a conversation (``conversation_id``); a file of an older
revision lacks some, and only those it has are read."""


# -- making the new store consistent -------------------------------------------------------


def orphan_conversations(connection: sqlite3.Connection) -> list[tuple[str, int, int]]:
    """Conversations that own rows but whose own row is missing: (id, first ts, last ts)."""
    present = set(table_names(connection))
    parts = " UNION ALL ".join(
        f'SELECT conversation_id AS cid, {_ts_column(t)} AS ts FROM "{t}"'  # noqa: S608
        for t in OWNED
        if t in present
    )
    rows = connection.execute(
        f"SELECT cid, MIN(ts), MAX(ts) FROM ({parts}) WHERE cid NOT IN "  # noqa: S608
        "(SELECT id FROM conversations) GROUP BY cid"
    ).fetchall()
    return [(str(r[0]), int(r[1] or 0), int(r[2] or 0)) for r in rows if r[0] is not None]


def _ts_column(table: str) -> str:
    return {"blocks": "NULL", "archived_blocks": "NULL", "rollbacks": "cutoff_ts"}.get(table, "ts")


def insert_stub_conversation(
    connection: sqlite3.Connection, conversation_id: str, created_ts: int, last_ts: int
) -> None:
    """A conversation row rebuilt for rows whose conversation's own row was lost."""
    connection.execute(
        "INSERT INTO conversations (id, created_ts, last_ts, message_count, title, metadata) "
        "VALUES (?, ?, ?, 0, ?, '{}')",
        (conversation_id, created_ts, last_ts, "(recovered: the conversation's row was lost)"),
    )


def message_rows(connection: sqlite3.Connection) -> dict[str, list[tuple[int, int, bool]]]:
    """Per conversation, its messages as (idx, ts, sound) in index order; a message is
    sound when its meta is JSON, its token count is not negative and its blocks are
    numbered 0..k-1 (k >= 1) and hold JSON."""
    rows = connection.execute(
        """SELECT m.conversation_id, m.idx, m.ts,
                  json_valid(m.meta) = 1 AND m.token_count >= 0
                  AND (SELECT COUNT(*) FROM blocks b WHERE b.conversation_id = m.conversation_id
                       AND b.message_idx = m.idx) > 0
                  AND (SELECT MAX(b.block_idx) - COUNT(*) + 1 FROM blocks b
                       WHERE b.conversation_id = m.conversation_id
                       AND b.message_idx = m.idx) = 0
                  AND (SELECT MIN(b.block_idx) FROM blocks b WHERE b.conversation_id =
                       m.conversation_id AND b.message_idx = m.idx) = 0
                  AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.conversation_id =
                       m.conversation_id AND b.message_idx = m.idx AND json_valid(b.data) = 0)
           FROM messages m ORDER BY m.conversation_id, m.idx"""
    ).fetchall()
    found: dict[str, list[tuple[int, int, bool]]] = {}
    for cid, idx, ts, sound in rows:
        found.setdefault(str(cid), []).append((int(idx), int(ts), bool(sound)))
    return found


def first_loss(messages: list[tuple[int, int, bool]]) -> tuple[int, int] | None:
    """Where a conversation's history stops being trustworthy, as (``ts``, message index):
    the first message after a gap in the indices, or the first unsound or out-of-order
    message; None when every message is sound."""
    previous_ts: int | None = None
    for position, (idx, ts, sound) in enumerate(messages):
        out_of_order = previous_ts is not None and ts <= previous_ts
        if idx != position or not sound or out_of_order:
            cut = previous_ts + 1 if out_of_order and previous_ts is not None else ts
            return cut, position
        previous_ts = ts
    return None


def delete_from(
    connection: sqlite3.Connection, conversation_id: str, ts: int, idx: int
) -> dict[str, int]:
    """Remove a conversation's timeline rows from ``ts`` on, and its messages from index
    ``idx`` on (their blocks go with the blocks repair); returns rows removed per table."""
    removed: dict[str, int] = {}
    for table in TIMELINE:
        extra = " OR idx >= ?" if table == "messages" else ""
        params = (conversation_id, ts, idx) if extra else (conversation_id, ts)
        cursor = connection.execute(
            f'DELETE FROM "{table}" WHERE conversation_id = ? AND (ts >= ?{extra})',  # noqa: S608
            params,
        )
        removed[table] = cursor.rowcount
    return removed


REPAIRS: tuple[tuple[str, str], ...] = (
    (
        "blocks",
        "DELETE FROM blocks WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE "
        "m.conversation_id = blocks.conversation_id AND m.idx = blocks.message_idx)",
    ),
    (
        "context_updates",
        "DELETE FROM context_updates WHERE json_valid(metadata) = 0 OR NOT EXISTS (SELECT 1 "
        "FROM blocks b WHERE b.conversation_id = context_updates.conversation_id AND "
        "b.message_idx = context_updates.message_idx AND b.block_idx = context_updates.block_idx)",
    ),
    (
        "api_requests",
        "DELETE FROM api_requests WHERE (details IS NOT NULL AND json_valid(details) = 0) "
        "OR tokens_in < 0 OR tokens_out < 0 OR cache_writes < 0 OR cache_reads < 0 OR cost < 0",
    ),
    ("request_options", "DELETE FROM request_options WHERE json_valid(data) = 0"),
    ("source_records", "DELETE FROM source_records WHERE json_valid(data) = 0"),
    ("rollbacks", "DELETE FROM rollbacks WHERE json_valid(counts) = 0"),
    *(
        (
            name,
            f"DELETE FROM {name} WHERE NOT EXISTS (SELECT 1 FROM rollbacks r WHERE "  # noqa: S608
            f"r.id = {name}.rollback_id AND r.conversation_id = {name}.conversation_id)",
        )
        for name in ARCHIVE_TABLES
    ),
    (
        "archived_rows",
        "DELETE FROM archived_rows WHERE json_valid(data) = 0 OR NOT EXISTS (SELECT 1 FROM "
        "rollbacks r WHERE r.id = archived_rows.rollback_id AND "
        "r.conversation_id = archived_rows.conversation_id)",
    ),
)
"""Rows removed because what they depend on was lost or they cannot be decoded, as
(table, statement), run in order (each only where the file's revision has its table)."""

FIXES: tuple[str, ...] = (
    "UPDATE api_requests SET options_sha256 = NULL WHERE options_sha256 IS NOT NULL AND "
    "options_sha256 NOT IN (SELECT sha256 FROM request_options)",
    "UPDATE conversations SET metadata = '{}' WHERE json_valid(metadata) = 0",
    "UPDATE conversations SET parent_id = NULL WHERE parent_id IS NOT NULL AND "
    "parent_id NOT IN (SELECT id FROM conversations)",
    "UPDATE conversations SET message_count = (SELECT COUNT(*) FROM messages m WHERE "
    "m.conversation_id = conversations.id)",
    "UPDATE conversations SET last_ts = MAX(last_ts, created_ts, "  # noqa: S608
    + ", ".join(
        f'COALESCE((SELECT MAX(ts) FROM "{t}" x WHERE x.conversation_id = conversations.id), 0)'  # noqa: S608
        for t in TIMELINE
    )
    + ")",
)
"""Counters and references set right once the rows are final."""


# -- the whole recovery --------------------------------------------------------------------


@contextlib.contextmanager
def _closing(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    try:
        yield connection
    finally:
        connection.close()


def salvage(source: Path, destination: Path) -> RecoveryReport:
    """Read what ``source`` still holds into a new store at ``destination``.

    Raises:
        NotFoundError: there is nothing at ``source``.
        InvalidInputError: ``source`` is not a file, or ``destination`` exists or is named as
            the file beside a database would be (``x.db-wal``), or is not UTF-8 text.
        ReadOnlyLocationError: ``destination``'s directory cannot be written.
        CorruptDatabaseError: nothing can be read (the file's table list is destroyed).
        MigrationError: ``source`` is at a schema revision a newer version wrote.
    """
    if not source.exists():
        raise NotFoundError(f"there is no file at {source}; name the damaged database file.")
    if not source.is_file():
        raise InvalidInputError(f"{source} is not a file; name the damaged database file.")
    if destination.exists():
        raise InvalidInputError(
            f"{destination} already exists; recover into a new file (the damaged file is "
            "never changed)."
        )
    check_folder_exists(destination, "the recovered store")
    check_not_named_as_side_file(destination)
    check_utf8_name(str(destination), "the recovered store's file")  # before any copy
    token = secrets.token_hex(4)
    copy = destination.with_name(f".{destination.name}.{token}.damaged")
    building = destination.with_name(f".{destination.name}.{token}.recovering")
    try:
        with os_errors("write the recovered store", destination):
            repaired = readable_copy(source, copy)
            report = _salvage_copy(copy, building, source, destination, header_repaired=repaired)
            engine = make_engine(sqlite_file_target(building))
            try:
                upgrade(engine, is_sqlite=True)
            finally:
                engine.dispose()
            os.link(building, destination)
        return report
    finally:
        for base in (copy, building):
            for leftover in (
                base,
                *(base.with_name(base.name + s) for s in ("-wal", "-shm", "-journal")),
            ):
                # Not there, or a read-only folder (which refused the copy in the first
                # place): the error that matters is the one already on its way.
                with contextlib.suppress(OSError):
                    leftover.unlink()


def _salvage_copy(
    copy: Path, building: Path, source: Path, destination: Path, *, header_repaired: bool
) -> RecoveryReport:
    notes: list[str] = []
    with _closing(sqlite3.connect(copy)) as damaged:
        try:
            tables = table_names(damaged)
        except sqlite3.DatabaseError as exc:
            raise CorruptDatabaseError(
                f"nothing can be recovered from {source}: SQLite cannot read its list of tables "
                f"({exc}); restore a backup."
            ) from exc
        revision = stored_revision(damaged)
        if revision is None:
            notes.append("the schema revision could not be read; assumed the current one")
            revision = head_revision()
        refuse_unknown_revision(revision, str(source))
        engine = make_engine(sqlite_file_target(building))
        try:
            upgrade(engine, is_sqlite=True, revision=revision)
        finally:
            engine.dispose()
        scans: dict[str, tuple[Scan, list[str]]] = {}
        with _closing(sqlite3.connect(building, isolation_level=None)) as new:
            wanted = [t for t in table_names(new) if t != "alembic_version"]
            keyed: list[tuple[str, list[str]]] = []
            for table in wanted:
                if table not in tables:
                    notes.append(f"table {table} is missing from the damaged file")
                    continue
                try:
                    theirs = set(column_names(damaged, table))
                except sqlite3.DatabaseError:
                    theirs = set()
                columns = [c for c in column_names(new, table) if c in theirs]
                if has_rowids(damaged, table):
                    scans[table] = (scan_table(damaged, table, columns), columns)
                else:
                    keyed.append((table, columns))
            known = _conversation_ids(scans)
            for table, columns in keyed:
                scans[table] = (scan_by_key(damaged, table, columns, known), columns)
            return _rebuild(new, scans, source, destination, header_repaired, notes)


def _conversation_ids(scans: dict[str, tuple[Scan, list[str]]]) -> set[str]:
    """Every conversation id the scanned rows hold (their own rows and every owned row)."""
    found: set[str] = set()
    for table, (scan, columns) in scans.items():
        name = "id" if table == "conversations" else "conversation_id"
        if name in columns:
            position = columns.index(name) + 1
            found.update(str(row[position]) for row in scan.rows if row[position] is not None)
    return found


def _rebuild(
    new: sqlite3.Connection,
    scans: dict[str, tuple[Scan, list[str]]],
    source: Path,
    destination: Path,
    header_repaired: bool,
    notes: list[str],
) -> RecoveryReport:
    new.execute("PRAGMA foreign_keys = OFF")
    new.execute("BEGIN IMMEDIATE")
    written: dict[str, int] = {}
    for table, (scan, columns) in scans.items():
        quoted = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("?" for _ in columns)
        before = new.total_changes
        new.executemany(
            f'INSERT OR IGNORE INTO "{table}" ({quoted}) VALUES ({marks})',  # noqa: S608
            (row[1:] for row in scan.rows),
        )
        written[table] = new.total_changes - before
    recreated = []
    for cid, first, last in orphan_conversations(new):
        insert_stub_conversation(new, cid, first, last)
        recreated.append(cid)
    dropped: dict[str, int] = {t: 0 for t in scans}
    damaged = set(recreated)
    expected = dict(new.execute("SELECT id, message_count FROM conversations").fetchall())
    cursor = new.execute(REPAIRS[0][1])
    dropped["blocks"] = dropped.get("blocks", 0) + cursor.rowcount
    histories = message_rows(new)
    for cid in expected:
        history = histories.get(cid, [])
        loss = first_loss(history)
        if loss is not None:
            damaged.add(cid)
            for table, n in delete_from(new, cid, *loss).items():
                dropped[table] = dropped.get(table, 0) + n
        elif expected.get(cid) not in (None, len(history)):
            damaged.add(cid)
            if expected[cid] > len(history):
                # The newest messages were on a damaged page: what came after the last one
                # kept goes too (requests whose payloads held the lost messages, their
                # checkpoints), so the history is a prefix in time, as after a gap.
                after = history[-1][1] + 1 if history else 0
                for table, n in delete_from(new, cid, after, len(history)).items():
                    dropped[table] = dropped.get(table, 0) + n
    present = set(table_names(new))
    for table, statement in REPAIRS:
        if table in present:
            dropped[table] = dropped.get(table, 0) + new.execute(statement).rowcount
    for statement in FIXES:
        new.execute(statement)
    problems = new.execute("PRAGMA foreign_key_check").fetchall()
    if problems:
        new.execute("ROLLBACK")
        raise CorruptDatabaseError(
            f"the recovered rows still break {len(problems)} references; nothing was written "
            f"to {destination}. Please report this."
        )
    new.execute("COMMIT")
    conversations = int(new.execute("SELECT COUNT(*) FROM conversations").fetchone()[0])
    tables = []
    for table, (scan, _columns) in scans.items():
        if scan.tail_lost:
            notes.append(
                f"{table}: the rows after rowid {scan.rows[-1][0] if scan.rows else 0} "
                "could not be reached"
            )
        if scan.keyed_loss:
            notes.append(f"{table}: rows on damaged pages could not be read (how many is unknown)")
        read = len(scan.rows)
        tables.append(
            TableRecovery(
                table=table,
                recovered=written.get(table, 0) - dropped.get(table, 0),
                unreadable=-1 if scan.tail_lost or scan.keyed_loss else scan.skipped,
                dropped=dropped.get(table, 0) + read - written.get(table, 0),
            )
        )
    return RecoveryReport(
        source=str(source),
        destination=str(destination),
        header_repaired=header_repaired,
        tables=tuple(tables),
        conversations=conversations,
        damaged_conversations=tuple(sorted(damaged)),
        recreated_conversations=tuple(sorted(recreated)),
        notes=tuple(notes),
    )
