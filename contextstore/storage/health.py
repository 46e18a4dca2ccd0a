"""Statements that look for damage: the engine's own page check, and the store's invariants
(each a named query returning the rows that break it, for one conversation or all).

Every invariant here holds for any store the library wrote; a row it returns means the
file was damaged, edited by hand, or written by a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from contextstore.core.errors import CorruptDatabaseError
from contextstore.core.health import CheckProblem
from contextstore.storage.driver_errors import classify_database_error
from contextstore.storage.tables import ARCHIVES, JSON

MAX_ENGINE_MESSAGES = 100
"""At most this many lines of ``PRAGMA integrity_check`` are reported."""


def sqlite_page_check(connection: Connection, *, full: bool) -> list[str]:
    """SQLite's own check of every page: ``PRAGMA quick_check`` (b-tree structure, record
    formats; linear in the file's size) or, with ``full``, ``PRAGMA integrity_check`` (also
    that every index matches its table). Returns the damage it reports (empty when ``ok``)."""
    pragma = "integrity_check" if full else "quick_check"
    rows = connection.exec_driver_sql(f"PRAGMA {pragma}({MAX_ENGINE_MESSAGES})").fetchall()
    lines = [
        line.strip()
        for row in rows
        for line in str(row[0]).splitlines()
        if line.strip() and not line.startswith("*** in database")
    ]
    return [] if lines == ["ok"] else lines


def sqlite_foreign_key_violations(connection: Connection) -> list[tuple[str, int | None, str]]:
    """``PRAGMA foreign_key_check``: (table, rowid, referred table) of every row whose
    reference points nowhere."""
    rows = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    return [(str(r[0]), None if r[1] is None else int(r[1]), str(r[2])) for r in rows]


def _unreadable(check: str, exc: DBAPIError) -> list[CheckProblem]:
    """A check that hit damaged pages, as a problem; any other error goes on."""
    if not isinstance(classify_database_error(exc), CorruptDatabaseError):
        raise exc
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    return [CheckProblem("integrity", f"the {check} check stopped at damaged pages ({reason})")]


def page_problems(connection: Connection, *, full: bool) -> list[CheckProblem]:
    """:func:`sqlite_page_check` as problems (a check that cannot even run is one too)."""
    try:
        lines = sqlite_page_check(connection, full=full)
    except DBAPIError as exc:
        return _unreadable("integrity" if full else "quick", exc)
    return [CheckProblem("integrity", line) for line in lines]


def foreign_key_problems(connection: Connection) -> list[CheckProblem]:
    """:func:`sqlite_foreign_key_violations` as problems, one per table and referred table."""
    counts: dict[tuple[str, str], int] = {}
    try:
        violations = sqlite_foreign_key_violations(connection)
    except DBAPIError as exc:
        return _unreadable("foreign_keys", exc)
    for table, _rowid, parent in violations:
        counts[(table, parent)] = counts.get((table, parent), 0) + 1
    return [
        CheckProblem("foreign_keys", f"{n} {table} row(s) refer to missing {parent} rows")
        for (table, parent), n in sorted(counts.items())
    ]


@dataclass(frozen=True)
class Invariant:
    """One named store invariant: a query returning (conversation id, detail) per breach."""

    name: str
    description: str
    sql: str
    """The query, with ``{where}`` where the one-conversation filter goes (on the alias
    ``x``; nothing else is ever substituted)."""
    detail: Callable[[tuple[object, ...]], str]
    sqlite_only: bool = False
    owner: str = "x.conversation_id"
    """The column naming the conversation a row of ``x`` belongs to."""


def _invariant(
    name: str,
    description: str,
    sql: str,
    detail: Callable[[tuple[object, ...]], str],
    *,
    sqlite_only: bool = False,
    owner: str = "x.conversation_id",
) -> Invariant:
    return Invariant(name, description, sql, detail, sqlite_only, owner)


def _clock_detail(table: str) -> Callable[[tuple[object, ...]], str]:
    return lambda r: f"a {table} row has ts {r[1]}, after last_ts {r[2]}"


_TIMELINE = (
    "messages",
    "deleted_ranges",
    "context_updates",
    "api_requests",
    "checkpoints",
    "source_records",
)
_ARCHIVES = tuple(table.name for table in ARCHIVES.values())
_ARCHIVED_JSON = tuple(
    (table.name, column.name, "conversation_id")
    for table in ARCHIVES.values()
    for column in table.c
    if column.type is JSON
)

INVARIANTS: tuple[Invariant, ...] = (
    _invariant(
        "message_count",
        "a conversation's message_count equals its message rows",
        """SELECT x.id, x.message_count, (SELECT COUNT(*) FROM messages m
               WHERE m.conversation_id = x.id) AS n
           FROM conversations x WHERE 1 = 1 {where}
           AND x.message_count <> (SELECT COUNT(*) FROM messages m
               WHERE m.conversation_id = x.id)""",
        lambda r: f"message_count is {r[1]} but {r[2]} message rows exist",
        owner="x.id",
    ),
    _invariant(
        "message_idx",
        "message indices are 0..n-1 with no gap",
        """SELECT x.conversation_id, COUNT(*), MAX(x.idx) FROM messages x WHERE 1 = 1 {where}
           GROUP BY x.conversation_id HAVING MAX(x.idx) <> COUNT(*) - 1""",
        lambda r: f"{r[1]} messages but the highest index is {r[2]} (a gap)",
    ),
    _invariant(
        "message_ts",
        "message timestamps strictly increase with their index",
        """SELECT x.conversation_id, x.idx, x.ts, n.ts FROM messages x
           JOIN messages n ON n.conversation_id = x.conversation_id AND n.idx = x.idx + 1
           WHERE n.ts <= x.ts {where}""",
        lambda r: f"message {r[1]} has ts {r[2]} but the next message has ts {r[3]}",
    ),
    *(
        _invariant(
            "clock",
            "no row is later than its conversation's clock (last_ts)",
            f"""SELECT x.conversation_id, MAX(x.ts), c.last_ts FROM {table} x
                JOIN conversations c ON c.id = x.conversation_id WHERE 1 = 1 {{where}}
                GROUP BY x.conversation_id, c.last_ts HAVING MAX(x.ts) > c.last_ts""",  # noqa: S608 (schema names only)
            _clock_detail(table),
        )
        for table in _TIMELINE
    ),
    _invariant(
        "block_owner",
        "every block belongs to a message",
        """SELECT x.conversation_id, x.message_idx, COUNT(*) FROM blocks x
           WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id =
               x.conversation_id AND m.idx = x.message_idx) {where}
           GROUP BY x.conversation_id, x.message_idx""",
        lambda r: f"{r[2]} block(s) of message {r[1]}, which does not exist",
    ),
    _invariant(
        "message_blocks",
        "every message has a block",
        """SELECT x.conversation_id, x.idx FROM messages x
           WHERE NOT EXISTS (SELECT 1 FROM blocks b WHERE b.conversation_id =
               x.conversation_id AND b.message_idx = x.idx) {where}""",
        lambda r: (
            f"message {r[1]} has no block: renders leave it out, and the message after it "
            "cannot be read"
        ),
    ),
    _invariant(
        "block_idx",
        "a message's block indices are 0..k-1 with no gap",
        """SELECT x.conversation_id, x.message_idx, COUNT(*), MAX(x.block_idx) FROM blocks x
           WHERE 1 = 1 {where} GROUP BY x.conversation_id, x.message_idx
           HAVING MAX(x.block_idx) <> COUNT(*) - 1 OR MIN(x.block_idx) <> 0""",
        lambda r: f"message {r[1]} has {r[2]} blocks but the highest block index is {r[3]}",
    ),
    _invariant(
        "update_target",
        "every context update addresses an existing block",
        """SELECT x.conversation_id, x.id, x.message_idx, x.block_idx FROM context_updates x
           WHERE NOT EXISTS (SELECT 1 FROM blocks b WHERE b.conversation_id =
               x.conversation_id AND b.message_idx = x.message_idx
               AND b.block_idx = x.block_idx) {where}""",
        lambda r: f"context update {r[1]} rewrites block {r[2]}.{r[3]}, which does not exist",
    ),
    _invariant(
        "range_bounds",
        "a deleted range never shrinks (no range ends before an earlier one)",
        """SELECT x.conversation_id, x.id, x.end_idx, MAX(y.end_idx) FROM deleted_ranges x
           JOIN deleted_ranges y ON y.conversation_id = x.conversation_id AND y.ts < x.ts
           WHERE y.end_idx > x.end_idx {where}
           GROUP BY x.conversation_id, x.id, x.end_idx""",
        lambda r: (
            f"deleted range {r[1]} ends at message {r[2]}, before an earlier range's end {r[3]}"
        ),
    ),
    _invariant(
        "request_options",
        "every prepared request's options row exists",
        """SELECT x.conversation_id, x.id, x.options_sha256 FROM api_requests x
           WHERE x.options_sha256 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM request_options o
               WHERE o.sha256 = x.options_sha256) {where}""",
        lambda r: f"request {r[1]} names options {str(r[2])[:12]}..., which do not exist",
    ),
    _invariant(
        "archive_rollback",
        "every archived row belongs to a rollback of its conversation",
        " UNION ALL ".join(
            f"""SELECT x.conversation_id, '{table}', x.rollback_id, COUNT(*) FROM {table} x
                WHERE NOT EXISTS (SELECT 1 FROM rollbacks r WHERE r.id = x.rollback_id
                    AND r.conversation_id = x.conversation_id) {{where}}
                GROUP BY x.conversation_id, x.rollback_id"""  # noqa: S608 (schema names only)
            for table in _ARCHIVES
        ),
        lambda r: f"{r[3]} row(s) of {r[1]} name rollback {r[2]}, not one of its conversation",
    ),
    _invariant(
        "owner",
        "every row belongs to an existing conversation",
        " UNION ALL ".join(
            f"""SELECT x.conversation_id, '{table}', COUNT(*) FROM {table} x
                WHERE NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = x.conversation_id)
                {{where}} GROUP BY x.conversation_id"""  # noqa: S608 (schema names only)
            for table in (*_TIMELINE, "blocks", "rollbacks", *_ARCHIVES)
        ),
        lambda r: f"{r[2]} {r[1]} row(s) of a conversation that does not exist",
    ),
    _invariant(
        "parent",
        "a fork's parent exists",
        """SELECT x.id, x.parent_id FROM conversations x WHERE x.parent_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM conversations p WHERE p.id = x.parent_id) {where}""",
        lambda r: f"its parent {r[1]} does not exist",
        owner="x.id",
    ),
    _invariant(
        "token_counts",
        "token counts and costs are not negative",
        """SELECT x.conversation_id, 'message', x.idx FROM messages x
               WHERE x.token_count < 0 {where}
           UNION ALL
           SELECT x.conversation_id, 'request', x.id FROM api_requests x
               WHERE (x.tokens_in < 0 OR x.tokens_out < 0 OR x.cache_writes < 0
                   OR x.cache_reads < 0 OR x.cost < 0) {where}""",
        lambda r: f"{r[1]} {r[2]} has a negative token count or cost",
    ),
    *(
        _invariant(
            "json",
            "every JSON column holds valid JSON",
            f"""SELECT x.{owner}, '{table}.{column}', COUNT(*) FROM {table} x
                WHERE x.{column} IS NOT NULL AND json_valid(x.{column}) = 0
                {{where}} GROUP BY x.{owner}""",  # noqa: S608 (schema names only)
            lambda r: f"{r[2]} row(s) of {r[1]} hold invalid JSON",
            sqlite_only=True,
            owner=f"x.{owner}",
        )
        for table, column, owner in (
            ("conversations", "metadata", "id"),
            ("messages", "meta", "conversation_id"),
            ("blocks", "data", "conversation_id"),
            ("context_updates", "metadata", "conversation_id"),
            ("api_requests", "details", "conversation_id"),
            ("source_records", "data", "conversation_id"),
            ("rollbacks", "counts", "conversation_id"),
            *_ARCHIVED_JSON,
        )
    ),
)
"""The store's invariants, in the order :func:`invariant_problems` runs them."""


def invariant_names(*, is_sqlite: bool) -> tuple[str, ...]:
    """The invariants that run on a backend, each name once, in order."""
    names = [i.name for i in INVARIANTS if is_sqlite or not i.sqlite_only]
    return tuple(dict.fromkeys(names))


def invariant_problems(
    connection: Connection, conversation_id: str | None, *, is_sqlite: bool
) -> list[CheckProblem]:
    """Run every invariant query (on one conversation, or all) and return what breaks them."""
    problems: list[CheckProblem] = []
    for invariant in INVARIANTS:
        if invariant.sqlite_only and not is_sqlite:
            continue
        where = "" if conversation_id is None else f"AND {invariant.owner} = :cid"
        sql = invariant.sql.replace("{where}", where)
        params = {} if conversation_id is None else {"cid": conversation_id}
        try:
            rows = connection.execute(text(sql), params).fetchall()
        except DBAPIError as exc:
            if not is_sqlite:
                raise
            problems += _unreadable(invariant.name, exc)
            continue
        for row in rows:
            problems.append(
                CheckProblem(
                    check=invariant.name,
                    detail=invariant.detail(tuple(row)),
                    conversation_id=None if row[0] is None else str(row[0]),
                )
            )
    return problems


def conversation_ids(connection: Connection) -> tuple[list[str], list[CheckProblem]]:
    """Every conversation's id that can be read, in id order, and the damage that hid any."""
    try:
        rows = connection.execute(text("SELECT id FROM conversations ORDER BY id")).fetchall()
    except DBAPIError as exc:
        return [], _unreadable("conversations", exc)
    return [str(r[0]) for r in rows], []
