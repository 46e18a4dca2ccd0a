"""Statements on lineage: the edges written with derived rows, the ones a caller adds, and
the recursive walks over them.

Edges are written inside the transaction of the row they describe, with ``INSERT ...
SELECT`` from the rows just written, so a rewrite and its edge land together. Every edge
points from a node to a strictly older one (``source_ts < ts``, a constraint), so a walk
always ends.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Connection, bindparam, insert, select, text

from contextstore.core.lineage import LineageEdge, NodeKind, NodeRef
from contextstore.storage.sql import Statement
from contextstore.storage.tables import (
    context_updates,
    deleted_ranges,
    lineage,
    messages,
)

_l, _u, _r, _m = lineage.c, context_updates.c, deleted_ranges.c, messages.c

NO_INDEX = -1
"""Stands for "no message/block index" (a range) where the walks compare addresses."""

_COLUMNS = (
    "conversation_id, ts, derived_kind, derived_message_idx, derived_block_idx, relation, "
    "source_kind, source_ts, source_message_idx, source_block_idx"
)

_UPDATE_REPLACES = Statement(
    lambda: text(
        f"INSERT INTO lineage ({_COLUMNS}) "  # noqa: S608 (constant column list)
        """
        SELECT u.conversation_id, u.ts, 'update', u.message_idx, u.block_idx, 'replaces',
               CASE WHEN p.ts IS NULL THEN 'block' ELSE 'update' END, COALESCE(p.ts, m.ts),
               u.message_idx, u.block_idx
        FROM context_updates u
        JOIN messages m ON m.conversation_id = u.conversation_id AND m.idx = u.message_idx
        LEFT JOIN context_updates p
          ON p.conversation_id = u.conversation_id AND p.message_idx = u.message_idx
         AND p.block_idx = u.block_idx
         AND p.ts = (SELECT max(q.ts) FROM context_updates q
                     WHERE q.conversation_id = u.conversation_id
                       AND q.message_idx = u.message_idx
                       AND q.block_idx = u.block_idx AND q.ts < u.ts)
        WHERE u.conversation_id = :cid AND u.ts = :ts
        ORDER BY u.message_idx, u.block_idx
        """
    )
)


def record_update_lineage(connection: Connection, conversation_id: str, ts: int) -> None:
    """Record that each context update written at ``ts`` replaces the block's previous
    visible node: its newest earlier update, or the stored block itself."""
    _UPDATE_REPLACES.run(connection, {"cid": conversation_id, "ts": ts}).close()


_RANGE_ABSTRACTS_SUMMARY = Statement(
    lambda: text(
        f"INSERT INTO lineage ({_COLUMNS}) "  # noqa: S608 (constant column list)
        """
        SELECT r.conversation_id, r.ts, 'range', NULL, NULL, 'abstracts', 'range', p.ts,
               NULL, NULL
        FROM deleted_ranges r
        JOIN deleted_ranges p
          ON p.conversation_id = r.conversation_id
         AND p.ts = (SELECT max(q.ts) FROM deleted_ranges q
                     WHERE q.conversation_id = r.conversation_id AND q.ts < r.ts
                       AND q.summary IS NOT NULL)
        WHERE r.conversation_id = :cid AND r.ts = :ts AND r.summary IS NOT NULL
        """
    )
)
_RANGE_ABSTRACTS_BLOCKS = Statement(
    lambda: text(
        f"INSERT INTO lineage ({_COLUMNS}) "  # noqa: S608 (constant column list)
        """
        SELECT r.conversation_id, r.ts, 'range', NULL, NULL, 'abstracts',
               CASE WHEN u.ts IS NULL THEN 'block' ELSE 'update' END, COALESCE(u.ts, m.ts),
               b.message_idx, b.block_idx
        FROM deleted_ranges r
        JOIN blocks b ON b.conversation_id = r.conversation_id AND b.message_idx <= r.end_idx
         AND b.message_idx > COALESCE(
             (SELECT max(q.end_idx) FROM deleted_ranges q
              WHERE q.conversation_id = r.conversation_id AND q.ts < r.ts), 1)
        JOIN messages m ON m.conversation_id = b.conversation_id AND m.idx = b.message_idx
        LEFT JOIN context_updates u
          ON u.conversation_id = b.conversation_id AND u.message_idx = b.message_idx
         AND u.block_idx = b.block_idx
         AND u.ts = (SELECT max(q.ts) FROM context_updates q
                     WHERE q.conversation_id = b.conversation_id
                       AND q.message_idx = b.message_idx
                       AND q.block_idx = b.block_idx AND q.ts < r.ts)
        WHERE r.conversation_id = :cid AND r.ts = :ts AND r.summary IS NOT NULL
        ORDER BY b.message_idx, b.block_idx
        """
    )
)


def record_range_lineage(connection: Connection, conversation_id: str, ts: int) -> None:
    """Record what the summary of the range written at ``ts`` abstracts: the newest
    earlier range with a summary (a summary of summaries), and every block the range newly
    hides, as it was visible then (its newest earlier update, or the block)."""
    params = {"cid": conversation_id, "ts": ts}
    _RANGE_ABSTRACTS_SUMMARY.run(connection, params).close()
    _RANGE_ABSTRACTS_BLOCKS.run(connection, params).close()


# Resolving nodes -------------------------------------------------------------------------

_MESSAGE_TS = Statement(
    lambda: (
        select(_m.ts)
        .where(_m.conversation_id == bindparam("cid"), _m.idx == bindparam("message_idx"))
        .where(
            text(
                "EXISTS (SELECT 1 FROM blocks b WHERE b.conversation_id = messages.conversation_id"
                " AND b.message_idx = messages.idx AND b.block_idx = :block_idx)"
            )
        )
    )
)
_UPDATE_ID = Statement(
    lambda: select(_u.id).where(
        _u.conversation_id == bindparam("cid"),
        _u.ts == bindparam("ts"),
        _u.message_idx == bindparam("message_idx"),
        _u.block_idx == bindparam("block_idx"),
    )
)
_RANGE_ID = Statement(
    lambda: select(_r.id).where(_r.conversation_id == bindparam("cid"), _r.ts == bindparam("ts"))
)


def resolve_node(connection: Connection, conversation_id: str, node: NodeRef) -> NodeRef | None:
    """``node`` with its ``ts`` (a block's: its message's) and row id filled in, or None
    when the conversation has no such node."""
    if node.kind == NodeKind.BLOCK:
        found = _MESSAGE_TS.scalar(
            connection,
            {"cid": conversation_id, "message_idx": node.message_idx, "block_idx": node.block_idx},
        )
        if found is None or (node.ts is not None and int(found) != node.ts):
            return None
        return NodeRef(NodeKind.BLOCK, int(found), node.message_idx, node.block_idx)
    if node.kind == NodeKind.UPDATE:
        found = _UPDATE_ID.scalar(
            connection,
            {
                "cid": conversation_id,
                "ts": node.ts,
                "message_idx": node.message_idx,
                "block_idx": node.block_idx,
            },
        )
    else:
        found = _RANGE_ID.scalar(connection, {"cid": conversation_id, "ts": node.ts})
    if found is None:
        return None
    return NodeRef(node.kind, node.ts, node.message_idx, node.block_idx, int(found))


_INSERT_EDGE = Statement(
    lambda: insert(lineage).values(
        {name: bindparam(name) for name in _COLUMNS.replace(" ", "").split(",")}
    )
)
_EDGE_EXISTS = Statement(
    lambda: text(
        """
        SELECT 1 FROM lineage
        WHERE conversation_id = :conversation_id AND ts = :ts AND derived_kind = :derived_kind
          AND COALESCE(derived_message_idx, -1) = :dm AND COALESCE(derived_block_idx, -1) = :db
          AND source_kind = :source_kind AND source_ts = :source_ts
          AND COALESCE(source_message_idx, -1) = :sm AND COALESCE(source_block_idx, -1) = :sb
        """
    )
)


def _index(value: int | None) -> int:
    return NO_INDEX if value is None else value


def insert_edge(
    connection: Connection, conversation_id: str, derived: NodeRef, relation: str, source: NodeRef
) -> bool:
    """Insert the edge ``derived -[relation]-> source`` (both resolved, ``source`` older),
    stamped with the derived node's ``ts``; False when the edge was already recorded."""
    values: dict[str, Any] = {
        "conversation_id": conversation_id,
        "ts": derived.ts,
        "derived_kind": derived.kind,
        "derived_message_idx": derived.message_idx,
        "derived_block_idx": derived.block_idx,
        "relation": relation,
        "source_kind": source.kind,
        "source_ts": source.ts,
        "source_message_idx": source.message_idx,
        "source_block_idx": source.block_idx,
    }
    probe = {
        "conversation_id": conversation_id,
        "ts": derived.ts,
        "derived_kind": derived.kind,
        "dm": _index(derived.message_idx),
        "db": _index(derived.block_idx),
        "source_kind": source.kind,
        "source_ts": source.ts,
        "sm": _index(source.message_idx),
        "sb": _index(source.block_idx),
    }
    if _EDGE_EXISTS.first(connection, probe) is not None:
        return False
    _INSERT_EDGE.run(connection, values).close()
    return True


# Walks -----------------------------------------------------------------------------------

_End = Literal["derived", "source"]
"""An end of a lineage edge: the node made (``derived``) or what it was made from."""

_ENDS: dict[_End, tuple[str, str, str, str]] = {
    "derived": ("derived_kind", "ts", "derived_message_idx", "derived_block_idx"),
    "source": ("source_kind", "source_ts", "source_message_idx", "source_block_idx"),
}
"""The columns of ``lineage`` addressing each end of an edge (kind, ts, message, block)."""
_WALK_ENDS: dict[_End, tuple[str, str, str, str]] = {
    "derived": ("derived_kind", "derived_ts", "derived_message_idx", "derived_block_idx"),
    "source": _ENDS["source"],
}
"""The same, as the ``walk`` below names them."""


def _walk_sql(start: _End, reached: _End, *, bounded: bool, order_by: str) -> str:
    """The recursive walk over ``lineage`` from one node: first the edges whose ``start``
    end (``"derived"`` or ``"source"``) is that node, then, step by step, the edges whose
    ``start`` end is the ``reached`` end of an edge already walked. Ancestors start at
    ``derived`` and reach ``source``; descendants go the other way.

    Parameters: ``cid``, the node's ``kind``, ``ts``, ``message_idx`` and ``block_idx``
    (-1 for a range), and ``as_of`` when ``bounded`` (only edges with ``ts <= as_of``).
    The two walks' SQL differs only in these columns, the bound and ``order_by``.
    """
    kind, ts, message, block = _ENDS[start]
    w_kind, w_ts, w_message, w_block = _WALK_ENDS[reached]
    anchor_bound = " AND ts <= :as_of" if bounded else ""
    step_bound = "\n   AND l.ts <= :as_of" if bounded else ""
    return f"""
WITH RECURSIVE walk (depth, derived_kind, derived_ts, derived_message_idx,
                     derived_block_idx, relation, source_kind, source_ts,
                     source_message_idx, source_block_idx) AS (
  SELECT 1, derived_kind, ts, derived_message_idx, derived_block_idx, relation,
         source_kind, source_ts, source_message_idx, source_block_idx
  FROM lineage
  WHERE conversation_id = :cid AND {kind} = :kind AND {ts} = :ts
    AND COALESCE({message}, -1) = :message_idx
    AND COALESCE({block}, -1) = :block_idx{anchor_bound}
  UNION
  SELECT w.depth + 1, l.derived_kind, l.ts, l.derived_message_idx, l.derived_block_idx,
         l.relation, l.source_kind, l.source_ts, l.source_message_idx, l.source_block_idx
  FROM lineage l
  JOIN walk w
    ON l.conversation_id = :cid AND l.{kind} = w.{w_kind}
   AND l.{ts} = w.{w_ts}
   AND COALESCE(l.{message}, -1) = COALESCE(w.{w_message}, -1)
   AND COALESCE(l.{block}, -1) = COALESCE(w.{w_block}, -1){step_bound}
)
SELECT * FROM walk
ORDER BY {order_by}
""".strip()  # noqa: S608 (column names from _ENDS, no caller data)


ANCESTORS_SQL = _walk_sql(
    "derived",
    "source",
    bounded=False,
    order_by="depth, derived_ts DESC, source_ts DESC, source_message_idx, source_block_idx",
)
"""Every edge from a node back to what it was made from, nearest first. Parameters:
``cid``, the node's ``kind``, ``ts``, ``message_idx`` and ``block_idx`` (-1 for a range).
The README quotes this text."""

DESCENDANTS_SQL = _walk_sql(
    "source",
    "derived",
    bounded=True,
    order_by="depth, derived_ts, derived_message_idx, derived_block_idx",
)
"""Every edge from a node forward to what was made from it, as of ``as_of``."""

_ANCESTORS = Statement(lambda: text(ANCESTORS_SQL))
_DESCENDANTS = Statement(lambda: text(DESCENDANTS_SQL))


def _edges(rows: list[tuple[Any, ...]]) -> tuple[LineageEdge, ...]:
    edges: dict[tuple[Any, ...], LineageEdge] = {}
    for depth, dk, dts, dm, db, relation, sk, sts, sm, sb in rows:
        derived = NodeRef(dk, int(dts), dm, db)
        source = NodeRef(sk, int(sts), sm, sb)
        key = (derived.key, source.key)
        if key not in edges:  # a node reached by two paths is listed at its nearest
            edges[key] = LineageEdge(derived, relation, source, int(depth))
    return tuple(edges.values())


def _params(conversation_id: str, node: NodeRef) -> dict[str, Any]:
    return {
        "cid": conversation_id,
        "kind": node.kind,
        "ts": node.ts,
        "message_idx": _index(node.message_idx),
        "block_idx": _index(node.block_idx),
    }


def ancestors(
    connection: Connection, conversation_id: str, node: NodeRef
) -> tuple[LineageEdge, ...]:
    """Edges from ``node`` (resolved) back to every node it was made from, nearest first."""
    return _edges(_ANCESTORS.rows(connection, _params(conversation_id, node)))


def descendants(
    connection: Connection, conversation_id: str, node: NodeRef, as_of: int
) -> tuple[LineageEdge, ...]:
    """Edges from ``node`` (resolved) to every node made from it with ``ts <= as_of``."""
    params = {**_params(conversation_id, node), "as_of": as_of}
    return _edges(_DESCENDANTS.rows(connection, params))


_EDGES = Statement(
    lambda: (
        select(
            _l.ts,
            _l.derived_kind,
            _l.derived_message_idx,
            _l.derived_block_idx,
            _l.relation,
            _l.source_kind,
            _l.source_ts,
            _l.source_message_idx,
            _l.source_block_idx,
        )
        .where(_l.conversation_id == bindparam("cid"), _l.ts <= bindparam("as_of"))
        .order_by(_l.ts, _l.id)
    )
)


def edges(connection: Connection, conversation_id: str, as_of: int) -> list[LineageEdge]:
    """Every lineage edge of the conversation with ``ts <= as_of``, oldest first."""
    return [
        LineageEdge(NodeRef(dk, int(ts), dm, db), relation, NodeRef(sk, int(sts), sm, sb))
        for ts, dk, dm, db, relation, sk, sts, sm, sb in _EDGES.rows(
            connection, {"cid": conversation_id, "as_of": as_of}
        )
    ]


__all__ = [
    "ANCESTORS_SQL",
    "DESCENDANTS_SQL",
    "ancestors",
    "descendants",
    "edges",
    "insert_edge",
    "record_range_lineage",
    "record_update_lineage",
    "resolve_node",
]
