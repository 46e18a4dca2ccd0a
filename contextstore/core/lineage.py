"""Nodes and lineage edges as plain values.

A node is a stored block, a context update (a rewrite of a block) or a deleted range (whose
summary abstracts what it hides). Each is named by its kind and the ``ts`` of its row,
which is unique per conversation together with the block address, survives a fork (which
copies rows under new ids) and orders every edge: a derived node only points to older
nodes, so lineage is acyclic by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class NodeKind:
    """The kinds of node lineage connects."""

    BLOCK = "block"
    UPDATE = "update"
    RANGE = "range"

    ALL = frozenset({BLOCK, UPDATE, RANGE})
    DERIVED = frozenset({UPDATE, RANGE})


class Relation:
    """How a derived node relates to a source node."""

    REPLACES = "replaces"
    """A rewrite of a block (de-duplicated read, distilled file, trimmed output, masked
    block, truncation notice) replaces the block's previous visible node."""
    ABSTRACTS = "abstracts"
    """A summary (a deleted range's ``summary``) abstracts every node it hides, and the
    earlier summary it builds on."""

    ALL = frozenset({REPLACES, ABSTRACTS})


@dataclass(frozen=True)
class NodeRef:
    """A node of a conversation.

    Attributes:
        kind: ``"block"``, ``"update"`` or ``"range"``.
        ts: The ``ts`` of its row (a block's is its message's); None when naming a block by
            its address alone (the store fills it in).
        message_idx, block_idx: The block's address (None for a range).
        id: The row id of an update or range (informational; not part of the identity).
    """

    kind: str
    ts: int | None = None
    message_idx: int | None = None
    block_idx: int | None = None
    id: int | None = field(default=None, compare=False)

    @classmethod
    def block(cls, message_idx: int, block_idx: int) -> NodeRef:
        """The stored block ``block_idx`` of message ``message_idx``."""
        return cls(NodeKind.BLOCK, None, message_idx, block_idx)

    @classmethod
    def update(cls, ts: int, message_idx: int, block_idx: int) -> NodeRef:
        """The context update written at ``ts`` on block ``(message_idx, block_idx)``."""
        return cls(NodeKind.UPDATE, ts, message_idx, block_idx)

    @classmethod
    def range(cls, ts: int) -> NodeRef:
        """The deleted range written at ``ts``."""
        return cls(NodeKind.RANGE, ts)

    @property
    def key(self) -> tuple[str, int | None, int | None, int | None]:
        """``(kind, ts, message_idx, block_idx)``: the node's identity."""
        return (self.kind, self.ts, self.message_idx, self.block_idx)


@dataclass(frozen=True)
class LineageEdge:
    """One ``lineage`` row: ``derived`` was made from ``source``.

    ``depth`` is the edge's distance from the node a walk started at (1: a direct edge).
    """

    derived: NodeRef
    relation: str
    source: NodeRef
    depth: int = 1


@dataclass(frozen=True)
class Lineage:
    """What :meth:`ContextStore.lineage` returns for one node.

    Attributes:
        node: The node asked about (with its ``ts`` filled in).
        ancestors: Edges walked from the node towards what it was made from.
        descendants: Edges walked from the node towards what was made from it.
    """

    node: NodeRef
    ancestors: tuple[LineageEdge, ...]
    descendants: tuple[LineageEdge, ...]
