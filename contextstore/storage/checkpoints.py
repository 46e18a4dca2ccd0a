"""Statements on a conversation's checkpoints: named moments of its timeline that a
rollback, a fork or an ``as_of`` read can go back to by label.
"""

from __future__ import annotations

from sqlalchemy import (
    Connection,
    bindparam,
    insert,
    select,
)

from contextstore.core.records import Checkpoint
from contextstore.storage.sql import Statement
from contextstore.storage.tables import (
    checkpoints,
    conversations,
)

_k, _c = checkpoints.c, conversations.c


_INSERT_CHECKPOINT = Statement(
    lambda: (
        insert(checkpoints)
        .values(
            {
                name: bindparam(name)
                for name in ("conversation_id", "ts", "label", "git_hash", "note")
            }
        )
        .returning(_k.id)
    )
)


def insert_checkpoint(
    connection: Connection,
    conversation_id: str,
    ts: int,
    label: str | None,
    git_hash: str | None,
    note: str | None,
) -> Checkpoint:
    """Insert a checkpoint row."""
    new_id = _INSERT_CHECKPOINT.scalar(
        connection,
        {
            "conversation_id": conversation_id,
            "ts": ts,
            "label": label,
            "git_hash": git_hash,
            "note": note,
        },
    )
    return Checkpoint(int(new_id), conversation_id, ts, label, git_hash, note)


_CHECKPOINTS = Statement(
    lambda: (
        select(_k.id, _k.conversation_id, _k.ts, _k.label, _k.git_hash, _k.note)
        .where(_k.conversation_id == bindparam("cid"))
        .order_by(_k.ts)
    )
)


def list_checkpoints(connection: Connection, conversation_id: str) -> list[Checkpoint]:
    """The conversation's checkpoints, oldest first."""
    return [Checkpoint(*row) for row in _CHECKPOINTS.rows(connection, {"cid": conversation_id})]


_LABELLED = Statement(
    lambda: (
        select(_k.ts)
        .where(_k.conversation_id == bindparam("cid"), _k.label == bindparam("label"))
        .order_by(_k.ts.desc())
        .limit(1)
    )
)
_LABELS = Statement(
    lambda: (
        select(_k.label)
        .where(_k.conversation_id == bindparam("cid"), _k.label.is_not(None))
        .distinct()
    )
)


def checkpoint_ts(connection: Connection, conversation_id: str, label: str) -> int | None:
    """The ``ts`` of the newest checkpoint labelled ``label``, or None."""
    value = _LABELLED.scalar(connection, {"cid": conversation_id, "label": label})
    return None if value is None else int(value)


_TARGET = Statement(
    lambda: select(
        _c.id,
        select(_k.ts)
        .where(_k.conversation_id == bindparam("cid"), _k.label == bindparam("label"))
        .order_by(_k.ts.desc())
        .limit(1)
        .scalar_subquery(),
    ).where(_c.id == bindparam("cid"))
)


def find_target(
    connection: Connection, conversation_id: str, label: str | None
) -> tuple[bool, int | None]:
    """In one statement: whether the conversation exists, and the ``ts`` of its newest
    checkpoint labelled ``label`` (None when it has none, or ``label`` is None)."""
    row = _TARGET.first(connection, {"cid": conversation_id, "label": label})
    if row is None:
        return False, None
    return True, None if row[1] is None else int(row[1])


def checkpoint_labels(connection: Connection, conversation_id: str) -> list[str]:
    """Every distinct checkpoint label of the conversation."""
    return [row[0] for row in _LABELS.rows(connection, {"cid": conversation_id})]
