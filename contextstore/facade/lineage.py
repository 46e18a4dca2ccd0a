"""Lineage: which node each derived node was made from, walked both ways."""

from __future__ import annotations

from typing import Any

from contextstore.core.errors import IntegrityViolationError, InvalidInputError
from contextstore.core.lineage import Lineage, LineageEdge, NodeKind, NodeRef, Relation
from contextstore.core.nodes import node_address
from contextstore.core.validate import check_choice, check_id, check_int, check_ts, shown
from contextstore.facade.base import StoreBase
from contextstore.storage import lineage
from contextstore.storage.clock import last_ts
from contextstore.storage.database import Connection


def as_node(value: Any, name: str = "node") -> NodeRef:
    """A caller's node: a :class:`NodeRef`, ``(message_idx, block_idx)`` for a block, or
    the block's ``node_id`` as the views print it (``"m12.b0"``).

    Raises:
        InvalidInputError: the value names no node.
    """
    spelled = node_address(value) if isinstance(value, str) else None
    if isinstance(value, NodeRef):
        node = value
    elif isinstance(value, tuple | list) and len(value) == 2:
        node = NodeRef.block(value[0], value[1])
    elif spelled is not None:
        node = NodeRef.block(*spelled)
    else:
        raise InvalidInputError(
            f"{name} must be a NodeRef (NodeRef.block(m, b), NodeRef.update(ts, m, b), "
            f"NodeRef.range(ts)), a (message_idx, block_idx) pair or a block's node_id "
            f"such as 'm12.b0', got {shown(value, 60)}."
        )
    check_choice(f"{name} kind", node.kind, NodeKind.ALL)
    if node.kind == NodeKind.RANGE:
        if node.message_idx is not None or node.block_idx is not None:
            raise InvalidInputError(f"{name}: a range node has no message or block index.")
        check_ts(f"{name} ts", node.ts, optional=False)
        return node
    check_int(f"{name} message_idx", node.message_idx, minimum=0, optional=False)
    check_int(f"{name} block_idx", node.block_idx, minimum=0, optional=False)
    check_ts(f"{name} ts", node.ts, optional=node.kind == NodeKind.BLOCK)
    return node


class LineageMixin(StoreBase):
    """Lineage: which node each derived node was made from, walked both ways."""

    def _resolve(self, connection: Connection, conversation_id: str, node: NodeRef) -> NodeRef:
        found = lineage.resolve_node(connection, conversation_id, node)
        if found is None:
            raise InvalidInputError(
                f"conversation {conversation_id!r} has no {node.kind} node {node.key[1:]}; "
                "name a stored block by (message_idx, block_idx), an update by its ts and "
                "address, a range by its ts (see context_updates())."
            )
        return found

    def lineage(
        self,
        conversation_id: str,
        node: NodeRef | tuple[int, int] | str,
        *,
        as_of: int | None = None,
    ) -> Lineage:
        """What ``node`` was made from (``ancestors``) and what was made from it
        (``descendants``, as of ``as_of``), each edge with its depth from ``node``.

        ``node`` is a :class:`NodeRef`, or for a stored block ``(message_idx, block_idx)``
        or its ``node_id`` as the views print it (``"m12.b0"``).
        Runs the recursive queries the README documents.

        Raises:
            InvalidInputError: the conversation has no such node.
        """
        check_id(conversation_id)
        target = as_node(node)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            resolved = self._resolve(connection, conversation_id, target)
            up = lineage.ancestors(connection, conversation_id, resolved)
            down = lineage.descendants(connection, conversation_id, resolved, limit)
        return Lineage(resolved, up, down)

    def lineage_edges(self, conversation_id: str, *, as_of: int | None = None) -> list[LineageEdge]:
        """Every lineage edge of the conversation (``ts <= as_of``), oldest first."""
        check_id(conversation_id)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            return lineage.edges(connection, conversation_id, limit)

    def add_lineage(
        self,
        conversation_id: str,
        derived: NodeRef,
        source: NodeRef | tuple[int, int] | str,
        *,
        relation: str = Relation.ABSTRACTS,
    ) -> bool:
        """Record that ``derived`` (an update or a range) was made from ``source``.

        For derived nodes the store does not link itself, such as a caller's summary
        written with :meth:`set_deleted_range` that abstracts nodes outside the range. The
        edge goes with ``derived`` in a rollback. Returns False when it was already there.

        Raises:
            InvalidInputError: a node does not exist, or ``derived`` is a block.
            IntegrityViolationError: ``source`` is not older than ``derived``: the edge
                could close a cycle (lineage only points back in time). Nothing is written.
        """
        check_id(conversation_id)
        check_choice("relation", relation, Relation.ALL)
        wanted = as_node(derived, "derived")
        origin = as_node(source, "source")
        if wanted.kind not in NodeKind.DERIVED:
            raise InvalidInputError(
                "derived must be an update or a range node; a stored block is an original."
            )

        def work(connection: Connection) -> bool:
            last_ts(connection, conversation_id, lock=True)
            made = self._resolve(connection, conversation_id, wanted)
            used = self._resolve(connection, conversation_id, origin)
            assert made.ts is not None and used.ts is not None
            if used.ts >= made.ts:
                raise IntegrityViolationError(
                    f"lineage from {made.kind} at ts {made.ts} to {used.kind} at ts {used.ts} "
                    "would point forward in time and could close a cycle; a derived node can "
                    "only be made from older nodes."
                )
            return lineage.insert_edge(connection, conversation_id, made, relation, used)

        return self._db.write(work)
