"""Statements on a conversation's deleted ranges, and the two-form statement that reads
rows outside one.

Truncation never deletes a message: it writes a ``deleted_ranges`` row ``(2, end)`` with
the decision behind it, and the effective range at ``T`` is the newest row with
``ts <= T``. The messages and the context updates are both read without the rows a range
hides, through :class:`Visible`, which therefore lives here, below the modules that hold
them: this one imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select

from contextstore.core.truncation import DeletedRange
from contextstore.storage import lineage
from contextstore.storage.clock import NO_LIMIT
from contextstore.storage.codec import column_text
from contextstore.storage.sql import Statement
from contextstore.storage.tables import deleted_ranges

_r = deleted_ranges.c


class Visible:
    """A statement in two forms: over every row, and over the rows outside a deleted range
    (``2..hidden_through``), which a render reads without the rows it hides."""

    def __init__(self, build: Callable[[bool], Any]) -> None:
        self._every = Statement(lambda: build(False))
        self._visible = Statement(lambda: build(True))

    def rows(
        self, connection: Connection, params: dict[str, Any], hidden_through: int | None
    ) -> list[tuple[Any, ...]]:
        """The rows, skipping ``2..hidden_through`` when it hides something."""
        if hidden_through is not None and hidden_through >= 2:
            return self._visible.rows(connection, {**params, "hidden_through": hidden_through})
        return self._every.rows(connection, params)


_RANGE = Statement(
    lambda: (
        select(_r.start_idx, _r.end_idx)
        .where(_r.conversation_id == bindparam("cid"), _r.ts <= bindparam("as_of"))
        .order_by(_r.ts.desc())
        .limit(1)
    )
)


def load_deleted_range(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> DeletedRange | None:
    """The effective deleted range at ``as_of``: the newest range row with ``ts <= as_of``."""
    row = _RANGE.first(connection, {"cid": conversation_id, "as_of": as_of})
    return None if row is None else (int(row[0]), int(row[1]))


_INSERT_RANGE = Statement(
    lambda: insert(deleted_ranges).values(
        {
            name: bindparam(name)
            for name in (
                "conversation_id",
                "ts",
                "start_idx",
                "end_idx",
                "keep",
                "reason",
                "tokens_total",
                "summary",
            )
        }
    )
)


def insert_range(
    connection: Connection,
    conversation_id: str,
    ts: int,
    end: int,
    *,
    keep: str,
    reason: str,
    tokens_total: int | None,
    summary: str | None,
) -> None:
    """Insert a deleted range ``(2, end)`` with the decision that produced it."""
    _INSERT_RANGE.run(
        connection,
        {
            "conversation_id": conversation_id,
            "ts": ts,
            "start_idx": 2,
            "end_idx": end,
            "keep": keep,
            "reason": column_text(reason),
            "tokens_total": tokens_total,
            "summary": column_text(summary),
        },
    ).close()
    if summary is not None:
        lineage.record_range_lineage(connection, conversation_id, ts)
