"""Statements on a conversation's context updates: the rows that rewrite a block in the view
(a file-read dedupe, a truncation notice, a processor's output) while the block itself stays
as it was appended.

The effective text of a block at ``T`` is its newest update with ``ts <= T``, else the
original. This module reads the effective updates (at a time, or among those written since
one; optionally only those of the blocks a deleted range leaves visible), writes new ones,
and lists every row, effective or not, for audits. It is apart from :mod:`.history` (the
messages and their blocks, and the state a view is computed from, which reads these
updates), so that each timeline table's statements have one home; it imports nothing from
:mod:`.history`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Text, bindparam, cast, insert, or_, select

from contextstore.core.overlays import BlockAddress, BlockUpdate
from contextstore.storage import lineage
from contextstore.storage.clock import NO_LIMIT
from contextstore.storage.codec import (
    EXACT_KEY,
    NUL,
    column_text,
    decode_object,
    encode_json,
    exact_pieces,
    exact_text,
)
from contextstore.storage.ranges import Visible
from contextstore.storage.sql import Statement
from contextstore.storage.tables import context_updates

_u = context_updates.c

_UPDATE_COLUMNS = (
    _u.id,
    _u.message_idx,
    _u.block_idx,
    _u.kind,
    _u.mode,
    _u.text,
    cast(_u.metadata, Text),  # as text: most hold {}, which needs no JSON decoding
    _u.source,
    _u.base_hash,
)


def _overlay_query(visible_only: bool) -> Any:
    # In the order of the (conversation, ts, block) key: a block has one update per ts, so
    # the newest of each is last, and the rows need no sort of their own.
    query = (
        select(*_UPDATE_COLUMNS)
        .where(_u.conversation_id == bindparam("cid"), _u.ts <= bindparam("as_of"))
        .order_by(_u.ts, _u.message_idx, _u.block_idx)
    )
    if visible_only:
        query = query.where(or_(_u.message_idx < 2, _u.message_idx > bindparam("hidden_through")))
    return query


_OVERLAYS = Visible(_overlay_query)


def load_overlays(
    connection: Connection,
    conversation_id: str,
    as_of: int = NO_LIMIT,
    *,
    hidden_through: int | None = None,
) -> dict[BlockAddress, BlockUpdate]:
    """The effective update per block at ``as_of`` (the newest with ``ts <= as_of``);
    with ``hidden_through``, only those of blocks outside ``2..hidden_through``."""
    rows = _OVERLAYS.rows(connection, {"cid": conversation_id, "as_of": as_of}, hidden_through)
    return _effective(rows)


_OVERLAYS_AFTER = Visible(
    lambda visible_only: _overlay_query(visible_only).where(_u.ts > bindparam("after"))
)


def load_overlays_after(
    connection: Connection, conversation_id: str, after: int, *, hidden_through: int | None
) -> dict[BlockAddress, BlockUpdate]:
    """The newest update per block among those written since ``after`` (``ts > after``);
    with ``hidden_through``, only those of blocks outside ``2..hidden_through``. Applied
    over the effective updates at ``after``, they give the effective updates now."""
    params = {"cid": conversation_id, "as_of": NO_LIMIT, "after": after}
    return _effective(_OVERLAYS_AFTER.rows(connection, params, hidden_through))


def _effective(rows: Sequence[tuple[Any, ...]]) -> dict[BlockAddress, BlockUpdate]:
    """The newest update per block, from update rows oldest first."""
    effective: dict[BlockAddress, BlockUpdate] = {}
    for update_id, message_idx, block_idx, kind, mode, text, raw, source, base_hash in rows:
        if raw.__class__ is dict or raw == "{}":
            metadata = {} if raw == "{}" else raw  # the label below is formatted only if needed
        else:
            metadata = decode_object(raw, f"context update {update_id} metadata")
        if EXACT_KEY in metadata or "_exact_text" in metadata:
            metadata = dict(metadata)
            text = exact_text(metadata, text)
        effective[(message_idx, block_idx)] = BlockUpdate(
            message_idx, block_idx, kind, text, source, metadata, base_hash, mode
        )
    return effective


_INSERT_UPDATE = Statement(
    lambda: insert(context_updates).values(
        {
            name: bindparam(name)
            for name in (
                "conversation_id",
                "ts",
                "message_idx",
                "block_idx",
                "kind",
                "mode",
                "text",
                "metadata",
                "source",
                "base_hash",
            )
        }
    )
)


def insert_updates(
    connection: Connection, conversation_id: str, ts: int, updates: Sequence[BlockUpdate]
) -> None:
    """Insert context update rows, all stamped ``ts``."""
    _INSERT_UPDATE.run_many(
        connection,
        [
            {
                "conversation_id": conversation_id,
                "ts": ts,
                "message_idx": u.message_idx,
                "block_idx": u.block_idx,
                "kind": u.kind,
                "mode": u.mode,
                "text": column_text(u.text),
                "metadata": encode_json(_update_metadata(u)),
                "source": u.source,
                "base_hash": u.base_hash,
            }
            for u in updates
        ],
    )
    if updates:
        lineage.record_update_lineage(connection, conversation_id, ts)


def _update_metadata(update: BlockUpdate) -> dict[str, Any]:
    metadata = dict(update.metadata)
    if NUL in update.text:
        metadata[EXACT_KEY] = exact_pieces(update.text)
    return metadata


_UPDATE_ROWS = Statement(
    lambda: (
        select(context_updates)
        .where(_u.conversation_id == bindparam("cid"), _u.ts <= bindparam("as_of"))
        .order_by(_u.ts, _u.id)
    )
)


def update_rows(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> list[dict[str, Any]]:
    """Every context update row with ``ts <= as_of`` (not only the effective ones), as
    dicts keyed by column, oldest first; ``metadata`` decoded."""
    names = [column.name for column in context_updates.c]
    found = []
    for row in _UPDATE_ROWS.rows(connection, {"cid": conversation_id, "as_of": as_of}):
        values = dict(zip(names, row, strict=True))
        metadata = decode_object(values["metadata"], f"context update {values['id']} metadata")
        if EXACT_KEY in metadata or "_exact_text" in metadata:
            metadata = dict(metadata)
            values["text"] = exact_text(metadata, values["text"])
        values["metadata"] = metadata
        found.append(values)
    return found
