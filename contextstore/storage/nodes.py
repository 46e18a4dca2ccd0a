"""Statements on nodes: the calls a result's typing needs, a conversation's typed blocks,
and the system prompts and tool definitions stored once per content (``context_nodes``).

The node columns of a block are written with the block itself
(:func:`contextstore.storage.appends.insert_message_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, insert, select, text

from contextstore.core.nodes import CallInfo, Node, PromptNode, node_id
from contextstore.storage.clock import NO_LIMIT
from contextstore.storage.codec import column_text
from contextstore.storage.sql import Statement
from contextstore.storage.tables import TOOL_CALLS_ONLY, blocks, context_nodes, messages

_b, _m, _n = blocks.c, messages.c, context_nodes.c


_CALLS_CHUNK = 16


def _calls_query(size: int) -> Any:
    """The tool calls of one conversation among ``size`` ids: name, path and lines."""
    return select(_b.tool_use_id, _b.tool_name, _b.path, _b.line_start, _b.line_end).where(
        _b.conversation_id == bindparam("cid"),
        _b.tool_use_id.in_([bindparam(f"id{n}") for n in range(size)]),
        text(TOOL_CALLS_ONLY),
    )


_CALLS = {
    size: Statement(lambda size=size: _calls_query(size))  # type: ignore[misc]
    for size in range(1, _CALLS_CHUNK + 1)
}


def find_calls(
    connection: Connection, conversation_id: str, tool_use_ids: Sequence[str]
) -> dict[str, CallInfo]:
    """The stored tool calls with these ids (name, file and lines), by id: one indexed
    SELECT (``ix_blocks_tool_use_id``) per 16 ids."""
    found: dict[str, CallInfo] = {}
    for first in range(0, len(tool_use_ids), _CALLS_CHUNK):
        chunk = tool_use_ids[first : first + _CALLS_CHUNK]
        params: dict[str, Any] = {f"id{n}": use_id for n, use_id in enumerate(chunk)}
        params["cid"] = conversation_id
        for row in _CALLS[len(chunk)].rows(connection, params):
            found[row[0]] = CallInfo(row[1], row[2], row[3], row[4])
    return found


_NODES = Statement(
    lambda: (
        select(
            _b.message_idx,
            _b.block_idx,
            _m.ts,
            _m.role,
            _b.type,
            _b.node_type,
            _b.path,
            _b.line_start,
            _b.line_end,
            _b.token_count,
            _b.tool_use_id,
            _b.tool_name,
            _b.text,
        )
        .join(messages, and_(_m.conversation_id == _b.conversation_id, _m.idx == _b.message_idx))
        .where(_b.conversation_id == bindparam("cid"), _m.ts <= bindparam("as_of"))
        .order_by(_b.message_idx, _b.block_idx)
    )
)
"""A conversation's blocks with their message's ``ts`` and role, in the order of
:class:`~contextstore.core.nodes.Node`'s fields after its id."""


def load_nodes(connection: Connection, conversation_id: str, as_of: int = NO_LIMIT) -> list[Node]:
    """Every block of the messages with ``ts <= as_of`` as a node of the pristine view
    (as stored), in order."""
    return [
        Node(node_id(row[0], row[1]), *row)
        for row in _NODES.rows(connection, {"cid": conversation_id, "as_of": as_of})
    ]


_KNOWN = Statement(lambda: select(_n.sha256).where(_n.sha256.in_([bindparam("a"), bindparam("b")])))
_INSERT = Statement(
    lambda: insert(context_nodes).values(
        {name: bindparam(name) for name in ("sha256", "node_type", "content", "token_count")}
    )
)


def known_prompt_nodes(connection: Connection, digests: Sequence[str]) -> set[str]:
    """Which of (at most two) ``context_nodes`` hashes are stored already."""
    if not digests:
        return set()
    first = digests[0]
    second = digests[1] if len(digests) > 1 else first
    return {row[0] for row in _KNOWN.rows(connection, {"a": first, "b": second})}


def insert_prompt_nodes(connection: Connection, nodes: Sequence[tuple[PromptNode, int]]) -> None:
    """Insert new ``context_nodes`` rows: ``(node, token count)``."""
    if nodes:
        _INSERT.run_many(
            connection,
            [
                {
                    "sha256": node.sha256,
                    "node_type": node.node_type,
                    "content": column_text(node.content),
                    "token_count": tokens,
                }
                for node, tokens in nodes
            ],
        )


_PROMPT = Statement(
    lambda: select(_n.sha256, _n.node_type, _n.content, _n.token_count).where(
        _n.sha256 == bindparam("sha256")
    )
)


def load_prompt_node(connection: Connection, sha256: str) -> tuple[Any, ...] | None:
    """A ``context_nodes`` row ``(sha256, node_type, content, token_count)``, or None."""
    return _PROMPT.first(connection, {"sha256": sha256})
