"""Statements on a conversation's timeline: what a cutoff covers, rollbacks and their
archive, restores, and the copy a fork makes (checkpoints are in :mod:`.checkpoints`).

Rows move inside the database: a rollback archives what it removes with ``INSERT ...
SELECT`` (on PostgreSQL one statement, in one round trip, whose ``DELETE ... RETURNING``
per table feeds the archive), a
restore puts archived rows back the same way, and a fork copies with ``INSERT ... SELECT``.
No removed row travels through Python. Each table's rows go to its archive table
(``archived_<table>``, :data:`~contextstore.storage.tables.ARCHIVES`): the same columns,
original ``id`` included, so a restore gives each row back exactly as it was.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    Integer,
    Table,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    true,
    update,
)
from sqlalchemy.sql.expression import ColumnElement

from contextstore.storage.clock import last_ts, now_ms, tick, ticking
from contextstore.storage.codec import decode_object, encode_json
from contextstore.storage.sql import Statement
from contextstore.storage.tables import (
    ARCHIVED_TABLES,
    ARCHIVES,
    TIMELINE_TABLES,
    blocks,
    messages,
    rollbacks,
)

_m, _b = messages.c, blocks.c

RESTORE_ORDER: tuple[Table, ...] = ARCHIVED_TABLES
"""Tables in the order archived rows go back (blocks need their messages first)."""

NO_MESSAGE = 2**31 - 1
"""A message index past any message (a rollback that removes no message removes no block)."""


# What a cutoff covers --------------------------------------------------------------------


def _after(table: Table) -> ColumnElement[bool]:
    return (table.c.conversation_id == bindparam("cid")) & (table.c.ts > bindparam("cutoff"))


def _newest_index(where: ColumnElement[bool]) -> Any:
    """The index of the conversation's newest message meeting ``where``, read back from the
    end of its primary key (it stops at the first that qualifies)."""
    return (
        select(_m.idx)
        .where(_m.conversation_id == bindparam("cid"), where)
        .order_by(_m.idx.desc())
        .limit(1)
        .scalar_subquery()
    )


def _first_after_query() -> Any:
    # OFFSET 0 keeps PostgreSQL from pulling the two ends up into the CASE, where each
    # mention would read them again.
    ends = (
        select(
            _newest_index(true()).label("newest"),
            _newest_index(_m.ts <= bindparam("cutoff")).label("kept"),
        )
        .offset(0)
        .subquery("ends")
    )
    newest, kept = ends.c.newest, ends.c.kept
    return select(
        case(
            (newest.is_(None), None),
            (kept.is_(None), 0),
            (kept < newest, kept + 1),
            else_=None,
        ).label("idx")
    )


_FIRST_AFTER = Statement(_first_after_query)


def first_after(connection: Connection, conversation_id: str, cutoff: int) -> int | None:
    """The index of the conversation's first message with ``ts > cutoff``, or None when no
    message is that new.

    A conversation's ``ts`` strictly increase with ``idx``, so those messages are the tail
    of its primary key: the statement reads back from the newest message to the last one
    at or before the cutoff (the rows a rollback removes, plus one), whatever the length
    of the history. No index covers ``messages.ts`` (revision 0012).
    """
    value = _FIRST_AFTER.scalar(connection, {"cid": conversation_id, "cutoff": cutoff})
    return None if value is None else int(value)


def _count_after(table: Table) -> Any:
    """``SELECT count(*)`` of ``table``'s rows newer than the cutoff."""
    return select(func.count()).select_from(table).where(_after(table))


def _count_removed(table: Table) -> Any:
    """``SELECT count(*)`` of ``table``'s rows that a rollback to the cutoff removes."""
    return select(func.count()).select_from(table).where(_removed(table))


_COUNT_REMOVED = {
    table.name: Statement(functools.partial(_count_removed, table))
    for table in (*TIMELINE_TABLES, blocks)
}
_ANY_AFTER = Statement(
    lambda: select(
        *[
            exists().where(_after(table)).label(table.name)
            for table in TIMELINE_TABLES
            if table is not messages
        ],
        (_newest_ts() > bindparam("cutoff")).label("messages"),
    )
)


def _newest_ts() -> Any:
    """The ``ts`` of the conversation's newest message (the greatest, see :func:`first_after`)."""
    return (
        select(_m.ts)
        .where(_m.conversation_id == bindparam("cid"))
        .order_by(_m.idx.desc())
        .limit(1)
        .scalar_subquery()
    )


def count_after(connection: Connection, conversation_id: str, cutoff: int) -> dict[str, int]:
    """Rows per table that a rollback to ``cutoff`` would remove (blocks included)."""
    first = first_after(connection, conversation_id, cutoff)
    params = {
        "cid": conversation_id,
        "cutoff": cutoff,
        "first": NO_MESSAGE if first is None else first,
    }
    return {name: int(s.scalar(connection, params)) for name, s in _COUNT_REMOVED.items()}


def any_row_after(connection: Connection, conversation_id: str, cutoff: int) -> bool:
    """True when some timeline row of the conversation has ``ts > cutoff``."""
    row = _ANY_AFTER.first(connection, {"cid": conversation_id, "cutoff": cutoff})
    return row is not None and any(bool(value) for value in row)


# Rollbacks -------------------------------------------------------------------------------


class RollbackRow(NamedTuple):
    """A ``rollbacks`` row."""

    id: int
    conversation_id: str
    cutoff_ts: int
    ran_at: int
    target: str | None
    purged: bool
    counts: dict[str, int]
    restored_ts: int | None


_r = rollbacks.c
_INSERT_ROLLBACK = Statement(
    lambda: (
        insert(rollbacks)
        .values(
            {
                name: bindparam(name)
                for name in ("conversation_id", "cutoff_ts", "ran_at", "target", "purged", "counts")
            }
        )
        .returning(_r.id)
    )
)
_SET_COUNTS = Statement(
    lambda: update(rollbacks).where(_r.id == bindparam("id")).values(counts=bindparam("counts"))
)
_ROLLBACK = Statement(
    lambda: select(
        _r.id,
        _r.conversation_id,
        _r.cutoff_ts,
        _r.ran_at,
        _r.target,
        _r.purged,
        _r.counts,
        _r.restored_ts,
    ).where(_r.id == bindparam("id"), _r.conversation_id == bindparam("cid"))
)
_LATER_BELOW = Statement(
    lambda: (
        select(_r.id, _r.purged, _r.counts)
        .where(
            _r.conversation_id == bindparam("cid"),
            _r.ran_at > bindparam("ran_at"),
            _r.cutoff_ts < bindparam("cutoff"),
            _r.restored_ts.is_(None),
        )
        .order_by(_r.ran_at.desc())
    )
)
_MARK_RESTORED = Statement(
    lambda: update(rollbacks).where(_r.id == bindparam("id")).values(restored_ts=bindparam("ts"))
)


def insert_rollback(
    connection: Connection,
    conversation_id: str,
    cutoff: int,
    ran_at: int,
    target: str | None,
    purged: bool,
) -> int:
    """Insert a rollback's row (its counts follow with :func:`set_rollback_counts`)."""
    return int(
        _INSERT_ROLLBACK.scalar(
            connection,
            {
                "conversation_id": conversation_id,
                "cutoff_ts": cutoff,
                "ran_at": ran_at,
                "target": target,
                "purged": purged,
                "counts": "{}",
            },
        )
    )


def _ticked_rollback() -> Any:
    """PostgreSQL: :func:`~contextstore.storage.clock.tick` as a CTE whose ``last_ts``
    becomes the new ``rollbacks`` row's ``ran_at``; returns the row's id."""
    ticked = ticking().cte("ticked")
    row = select(
        bindparam("cid", type_=_r.conversation_id.type),
        bindparam("cutoff_ts", type_=_r.cutoff_ts.type),
        ticked.c.last_ts,
        bindparam("target", type_=_r.target.type),
        bindparam("purged", type_=_r.purged.type),
        bindparam("counts", type_=_r.counts.type),
    )
    names = ["conversation_id", "cutoff_ts", "ran_at", "target", "purged", "counts"]
    return insert(rollbacks).from_select(names, row).returning(_r.id)


_TICKED_ROLLBACK = Statement(_ticked_rollback)


def start_rollback(
    connection: Connection, conversation_id: str, cutoff: int, target: str | None, purged: bool
) -> int:
    """Consume a tick of the conversation's clock for a rollback (its ``ran_at``) and insert
    the rollback's row; returns its id (its counts follow with :func:`set_rollback_counts`).

    On PostgreSQL the tick and the insert are one statement, one round trip; elsewhere,
    :func:`~contextstore.storage.clock.tick` then :func:`insert_rollback`.

    Raises:
        ConversationNotFoundError: no conversation has this id.
    """
    if connection.dialect.name != "postgresql":
        (ran_at,) = tick(connection, conversation_id)
        return insert_rollback(connection, conversation_id, cutoff, ran_at, target, purged)
    found = _TICKED_ROLLBACK.scalar(
        connection,
        {
            "cid": conversation_id,
            "at": None,
            "now": now_ms(),
            "extra": 0,
            "cutoff_ts": cutoff,
            "target": target,
            "purged": purged,
            "counts": "{}",
        },
    )
    if found is None:
        last_ts(connection, conversation_id)  # raises: the tick found no conversation
        raise AssertionError("a tick without ``at`` always moves the clock")  # pragma: no cover
    return int(found)


def set_rollback_counts(connection: Connection, rollback_id: int, counts: dict[str, int]) -> None:
    """Record the rows a rollback removed, per table."""
    _SET_COUNTS.run(connection, {"id": rollback_id, "counts": encode_json(counts)}).close()


def load_rollback(
    connection: Connection, conversation_id: str, rollback_id: int
) -> RollbackRow | None:
    """The ``rollbacks`` row ``rollback_id`` of the conversation, or None."""
    row = _ROLLBACK.first(connection, {"id": rollback_id, "cid": conversation_id})
    if row is None:
        return None
    values = list(row)
    values[5] = bool(values[5])
    values[6] = decode_object(values[6], f"rollback {rollback_id} counts")
    return RollbackRow(*values)


def later_rollbacks_below(connection: Connection, rollback: RollbackRow) -> list[tuple[int, bool]]:
    """The rollbacks of ``rollback``'s conversation run after it to an earlier cutoff that
    removed rows and are not restored (newest first), each as ``(id, purged)``: they took
    rows of the history ``rollback``'s archived rows continue."""
    found = _LATER_BELOW.rows(
        connection,
        {"cid": rollback.conversation_id, "ran_at": rollback.ran_at, "cutoff": rollback.cutoff_ts},
    )
    return [
        (int(rid), bool(purged))
        for rid, purged, counts in found
        if any(decode_object(counts, f"rollback {rid} counts").values())
    ]


def mark_restored(connection: Connection, rollback_id: int, ts: int) -> None:
    """Record on the rollback's row that its rows were put back at ``ts``."""
    _MARK_RESTORED.run(connection, {"id": rollback_id, "ts": ts}).close()


def _removed(table: Table) -> ColumnElement[bool]:
    """The rows of ``table`` a rollback removes: messages from index ``first`` on (the
    first after the cutoff) and their blocks, rows newer than ``cutoff`` elsewhere."""
    if table is blocks:
        return (_b.conversation_id == bindparam("cid")) & _b.message_idx.between(
            bindparam("first"), NO_MESSAGE
        )
    if table is messages:
        return (_m.conversation_id == bindparam("cid")) & _m.idx.between(
            bindparam("first"), NO_MESSAGE
        )
    return _after(table)


def _archive_statement(table: Table) -> Any:
    """SQLite: copy the rows a rollback removes from ``table`` into its archive table
    (PostgreSQL does it in :func:`_removal_on_postgres`)."""
    names = [column.name for column in table.c]
    rows = select(bindparam("rid", type_=Integer), *table.c).where(_removed(table))
    return insert(ARCHIVES[table.name]).from_select(["rollback_id", *names], rows)


def _delete_removed(table: Table) -> Any:
    return delete(table).where(_removed(table))


_ARCHIVE = {
    t.name: Statement(functools.partial(_archive_statement, t)) for t in (*TIMELINE_TABLES, blocks)
}
_DELETE = {
    t.name: Statement(functools.partial(_delete_removed, t)) for t in (*TIMELINE_TABLES, blocks)
}


def remove_after(
    connection: Connection,
    conversation_id: str,
    cutoff: int,
    *,
    archive_into: int | None,
) -> tuple[dict[str, int], int | None]:
    """Delete every row of the conversation with ``ts > cutoff`` (blocks with their
    messages), archiving them under rollback ``archive_into`` unless it is None.

    Returns the rows removed per table and the index of the first removed message (the
    conversation's new message count), or None when no message was removed.
    """
    params = {"cid": conversation_id, "cutoff": cutoff, "rid": archive_into}
    if connection.dialect.name == "postgresql":
        # One statement, one round trip: every table's DELETE ... RETURNING feeds the
        # archive inside the server.
        statement = _REMOVE_PG_ARCHIVED if archive_into is not None else _REMOVE_PG
        row = statement.first(connection, params)
        assert row is not None
        first, *removed = row
        counts = {table.name: int(n) for table, n in zip(REMOVAL_ORDER, removed, strict=True)}
        return counts, None if first is None else int(first)
    first = first_after(connection, conversation_id, cutoff)
    params["first"] = NO_MESSAGE if first is None else first
    counts = {}
    for table in REMOVAL_ORDER:
        if archive_into is not None:
            _ARCHIVE[table.name].count(connection, params)
        counts[table.name] = _DELETE[table.name].count(connection, params)
    return counts, None if first is None else int(first)


REMOVAL_ORDER: tuple[Table, ...] = (*TIMELINE_TABLES[:-1], blocks, messages)
"""The tables a rollback removes rows from, in order (blocks before their messages)."""


def _removal_on_postgres(archive: bool) -> Any:
    """A rollback's whole removal on PostgreSQL as one statement over
    :data:`REMOVAL_ORDER`: a ``DELETE ... RETURNING`` per table (blocks from the first
    removed message on), each feeding an ``INSERT INTO archived_<table>`` when ``archive``;
    it returns the first removed message index, then the rows removed per table.

    Without ``archive`` each ``DELETE`` returns a constant, only to be counted: returning
    the whole rows would have the server build and keep every removed row for nothing (a
    third of a purge's time at 1,000 messages)."""
    after = "conversation_id = :cid AND ts > :cutoff"
    # first_after()'s rule: read back from the newest message to the last one kept.
    newest = "SELECT idx FROM messages WHERE conversation_id = :cid ORDER BY idx DESC LIMIT 1"
    last_kept = (
        "SELECT idx FROM messages WHERE conversation_id = :cid AND ts <= :cutoff "
        "ORDER BY idx DESC LIMIT 1"
    )
    ends = f"SELECT ({newest}) AS newest, ({last_kept}) AS kept OFFSET 0"
    pick = "CASE WHEN newest IS NULL THEN NULL WHEN kept IS NULL THEN 0 WHEN kept < newest"
    first_removed = f"SELECT {pick} THEN kept + 1 END AS idx FROM ({ends}) AS ends"  # noqa: S608
    parts = [f"first_removed AS ({first_removed})"]
    for table in REMOVAL_ORDER:
        first = f"(SELECT coalesce(idx, {NO_MESSAGE}) FROM first_removed)"  # noqa: S608
        # The range's upper bound is there for the planner: given only ``>=`` a value it
        # cannot know, it expects a third of the table and scans all of ``blocks``; a range
        # between two bounds it expects to be narrow, and reads the primary key.
        if table is blocks:
            where = f"conversation_id = :cid AND message_idx BETWEEN {first} AND {NO_MESSAGE}"
        elif table is messages:
            where = f"conversation_id = :cid AND idx BETWEEN {first} AND {NO_MESSAGE}"
        else:
            where = after
        returned = "*" if archive else "1"
        gone = f"gone_{table.name} AS (DELETE FROM {table.name} WHERE {where} RETURNING {returned})"  # noqa: S608
        parts.append(gone)
        if archive:
            names = ", ".join(column.name for column in table.c)
            kept = (
                f"kept_{table.name} AS (INSERT INTO archived_{table.name} "  # noqa: S608
                f"(rollback_id, {names}) "
                f"SELECT CAST(:rid AS INTEGER), {names} FROM gone_{table.name})"
            )
            parts.append(kept)
    counts = ", ".join(f"(SELECT count(*) FROM gone_{t.name})" for t in REMOVAL_ORDER)  # noqa: S608
    return text(
        f"WITH {', '.join(parts)} SELECT (SELECT idx FROM first_removed), {counts}"  # noqa: S608
    )


_REMOVE_PG = Statement(lambda: _removal_on_postgres(archive=False))
_REMOVE_PG_ARCHIVED = Statement(lambda: _removal_on_postgres(archive=True))


def _restore_statement(table: Table) -> Any:
    archive = ARCHIVES[table.name]
    names = [column.name for column in table.c]
    rows = select(*[archive.c[name] for name in names]).where(
        archive.c.rollback_id == bindparam("rid")
    )
    return insert(table).from_select(names, rows)


def _drop_archive(table: Table) -> Any:
    archive = ARCHIVES[table.name]
    return delete(archive).where(archive.c.rollback_id == bindparam("rid"))


_RESTORE = {t.name: Statement(functools.partial(_restore_statement, t)) for t in RESTORE_ORDER}
_DROP_ARCHIVE = {t.name: Statement(functools.partial(_drop_archive, t)) for t in RESTORE_ORDER}
_MESSAGE_TOTAL = Statement(
    lambda: select(func.count()).select_from(messages).where(_m.conversation_id == bindparam("cid"))
)


def restore_archived(
    connection: Connection, conversation_id: str, rollback_id: int
) -> tuple[dict[str, int], int]:
    """Put the rows rollback ``rollback_id`` archived back into their tables with their
    original values (ids and ``ts`` included), then drop them from the archive.

    Returns the rows restored per table and the conversation's message count after it.
    """
    params = {"rid": rollback_id, "cid": conversation_id}
    counts = {}
    for table in RESTORE_ORDER:
        counts[table.name] = _RESTORE[table.name].count(connection, params)
        _DROP_ARCHIVE[table.name].run(connection, params).close()
    return counts, int(_MESSAGE_TOTAL.scalar(connection, params))


# Forks -----------------------------------------------------------------------------------


def _copy_statement(table: Table) -> Any:
    columns = [
        c
        for c in table.c
        if c.name != "conversation_id"
        and not (c.primary_key and c.autoincrement is True and c.name == "id")
    ]
    if table is blocks:
        where: Any = (_b.conversation_id == bindparam("source")) & _b.message_idx.in_(
            select(_m.idx).where(
                _m.conversation_id == bindparam("source"), _m.ts <= bindparam("cutoff")
            )
        )
    else:
        where = (table.c.conversation_id == bindparam("source")) & (
            table.c.ts <= bindparam("cutoff")
        )
    # In key order, so that rows given new ids (several may share a ts) keep their order.
    query = (
        select(bindparam("target", type_=table.c.conversation_id.type), *columns)
        .where(where)
        .order_by(*table.primary_key.columns)
    )
    return insert(table).from_select(["conversation_id", *[c.name for c in columns]], query)


_COPY = {t.name: Statement(functools.partial(_copy_statement, t)) for t in RESTORE_ORDER}


def copy_history(connection: Connection, source: str, target: str, cutoff: int) -> int:
    """Copy every timeline row of ``source`` with ``ts <= cutoff`` into ``target``;
    returns how many messages were copied."""
    params = {"source": source, "target": target, "cutoff": cutoff}
    copied = {table.name: _COPY[table.name].count(connection, params) for table in RESTORE_ORDER}
    return copied["messages"]
