"""Checkpoints, rollbacks with their archive, and forks."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from contextstore.core.errors import (
    CheckpointNotFoundError,
    InvalidInputError,
)
from contextstore.core.validate import (
    MAX_LABEL_LENGTH,
    MAX_TITLE_LENGTH,
    check_id,
    check_text,
    check_ts,
)
from contextstore.facade.base import StoreBase
from contextstore.records import (
    Checkpoint,
    Conversation,
    RollbackReport,
)
from contextstore.storage import queries
from contextstore.storage.clock import last_ts, now_ms, tick
from contextstore.storage.copy import copy_history
from contextstore.storage.tables import (
    TIMELINE_TABLES,
    archived_rows,
    blocks,
    checkpoints,
    conversations,
    messages,
    rollbacks,
)


class TimelineMixin(StoreBase):
    """Checkpoints, rollbacks with their archive, and forks."""

    def checkpoint(
        self,
        conversation_id: str,
        label: str | None = None,
        *,
        git_hash: str | None = None,
        note: str | None = None,
    ) -> Checkpoint:
        """Mark the present moment; :meth:`rollback` to it restores exactly these rows.

        Labels need not be unique; rolling back to a label uses its newest checkpoint.
        """
        check_id(conversation_id)
        check_text("label", label, MAX_LABEL_LENGTH)
        check_text("git_hash", git_hash, 64)
        if note is not None and (not isinstance(note, str) or "\x00" in note):
            raise InvalidInputError("note must be a string without NUL characters.")

        def work(connection: Connection) -> Checkpoint:
            (stamp,) = tick(connection, conversation_id)
            new_id = connection.execute(
                insert(checkpoints)
                .values(
                    conversation_id=conversation_id,
                    ts=stamp,
                    label=label,
                    git_hash=git_hash,
                    note=note,
                )
                .returning(checkpoints.c.id)
            ).scalar_one()
            return Checkpoint(int(new_id), conversation_id, stamp, label, git_hash, note)

        return self._db.write(work)

    def checkpoints(self, conversation_id: str) -> list[Checkpoint]:
        """The conversation's checkpoints, oldest first."""
        check_id(conversation_id)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            rows = connection.execute(
                select(checkpoints)
                .where(checkpoints.c.conversation_id == conversation_id)
                .order_by(checkpoints.c.ts)
            ).all()
        return [
            Checkpoint(r.id, r.conversation_id, r.ts, r.label, r.git_hash, r.note) for r in rows
        ]

    def _resolve_cutoff(self, connection: Connection, conversation_id: str, to: str | int) -> int:
        if isinstance(to, bool) or not isinstance(to, str | int):
            raise InvalidInputError(
                f"rollback target must be a checkpoint label or a ts in milliseconds, got {to!r}."
            )
        if isinstance(to, int):
            check_ts("rollback ts", to, optional=False)
            return to
        check_text("checkpoint label", to, MAX_LABEL_LENGTH, optional=False)
        row = connection.execute(
            select(checkpoints.c.ts)
            .where(checkpoints.c.conversation_id == conversation_id, checkpoints.c.label == to)
            .order_by(checkpoints.c.ts.desc())
            .limit(1)
        ).first()
        if row is None:
            labels = (
                connection.execute(
                    select(checkpoints.c.label)
                    .where(
                        checkpoints.c.conversation_id == conversation_id,
                        checkpoints.c.label.is_not(None),
                    )
                    .distinct()
                )
                .scalars()
                .all()
            )
            known = ", ".join(sorted(repr(x) for x in labels)) or "none"
            raise CheckpointNotFoundError(
                f"conversation {conversation_id!r} has no checkpoint labelled {to!r} "
                f"(labels: {known}); pass an existing label or a ts."
            )
        return int(row.ts)

    def rollback(
        self, conversation_id: str, to: str | int, *, purge: bool = False
    ) -> RollbackReport:
        """Remove every row written after a checkpoint (a label) or a ``ts``, in one transaction.

        Removed rows are kept in ``archived_rows`` with the rollback's cutoff and time,
        unless ``purge`` is True. Overlays and ranges written before the cutoff stay.
        Returns the number of rows removed per table.
        """
        check_id(conversation_id)
        if not isinstance(purge, bool):
            raise InvalidInputError("purge must be True or False.")

        def work(connection: Connection) -> RollbackReport:
            self._conversation(connection, conversation_id)
            last_ts(connection, conversation_id, lock=True)
            cutoff = self._resolve_cutoff(connection, conversation_id, to)
            ran_at = now_ms()
            rollback_id = int(
                connection.execute(
                    insert(rollbacks)
                    .values(
                        conversation_id=conversation_id,
                        cutoff_ts=cutoff,
                        ran_at=ran_at,
                        target=str(to),
                        purged=purge,
                        counts={},
                    )
                    .returning(rollbacks.c.id)
                ).scalar_one()
            )
            counts = self._remove_after(connection, conversation_id, cutoff, rollback_id, purge)
            connection.execute(
                update(rollbacks).where(rollbacks.c.id == rollback_id).values(counts=counts)
            )
            # The rollback consumes a tick: rows written later sort after everything removed,
            # and any cached view of the removed rows is invalidated.
            tick(connection, conversation_id)
            return RollbackReport(conversation_id, cutoff, counts, rollback_id, not purge)

        return self._db.write(work)

    def _remove_after(
        self,
        connection: Connection,
        conversation_id: str,
        cutoff: int,
        rollback_id: int,
        purge: bool,
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        for table in TIMELINE_TABLES:
            where = (table.c.conversation_id == conversation_id, table.c.ts > cutoff)
            if table is messages:
                first_removed = connection.execute(
                    select(func.min(messages.c.idx)).where(*where)
                ).scalar_one_or_none()
                block_where = (
                    blocks.c.conversation_id == conversation_id,
                    blocks.c.message_idx
                    >= (first_removed if first_removed is not None else 2**31 - 1),
                )
                if not purge:
                    self._archive(
                        connection,
                        rollback_id,
                        conversation_id,
                        "blocks",
                        blocks,
                        block_where,
                        cutoff,
                    )
                counts["blocks"] = connection.execute(delete(blocks).where(*block_where)).rowcount
            if not purge:
                self._archive(
                    connection, rollback_id, conversation_id, table.name, table, where, None
                )
            counts[table.name] = connection.execute(delete(table).where(*where)).rowcount
        return counts

    @staticmethod
    def _archive(
        connection: Connection,
        rollback_id: int,
        conversation_id: str,
        name: str,
        table: Any,
        where: tuple[Any, ...],
        ts_default: int | None,
    ) -> None:
        rows = queries.rows_as_dicts(connection.execute(select(table).where(*where)))
        if not rows:
            return
        connection.execute(
            insert(archived_rows),
            [
                {
                    "rollback_id": rollback_id,
                    "conversation_id": conversation_id,
                    "table_name": name,
                    "ts": row.get("ts", ts_default if ts_default is not None else 0),
                    "data": json.loads(json.dumps(row, default=str)),
                }
                for row in rows
            ],
        )

    def fork(
        self, conversation_id: str, at: int | str | None = None, *, title: str | None = None
    ) -> Conversation:
        """A new conversation with the history of ``conversation_id`` up to ``at``.

        ``at`` is a ts, a checkpoint label, or None for now. The rows with ``ts <= at``
        (messages, blocks, ranges, updates, requests, checkpoints) are copied with their
        timestamps, so the fork renders exactly as its parent did at ``at``.
        """
        check_id(conversation_id)
        check_text("title", title, MAX_TITLE_LENGTH)
        new_id = uuid.uuid4().hex

        def work(connection: Connection) -> Conversation:
            parent = self._conversation(connection, conversation_id)
            cutoff = (
                parent.last_ts
                if at is None
                else self._resolve_cutoff(connection, conversation_id, at)
            )
            row: dict[str, Any] = {
                "id": new_id,
                "created_ts": now_ms(),
                "last_ts": cutoff,
                "title": title if title is not None else parent.title,
                "model_id": parent.model_id,
                "context_window": parent.context_window,
                "parent_id": conversation_id,
                "forked_at_ts": cutoff,
                "metadata": {k: v for k, v in parent.metadata.items() if k != "subagent"},
            }
            connection.execute(insert(conversations).values(**row))
            copy_history(connection, conversation_id, new_id, cutoff)
            return Conversation(**row)

        return self._db.write(work)
