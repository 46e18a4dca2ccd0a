"""Checkpoints, rollbacks with their archive, and forks."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from contextstore.core.errors import (
    CheckpointNotFoundError,
    InvalidInputError,
    RollbackNotFoundError,
)
from contextstore.core.validate import (
    MAX_LABEL_LENGTH,
    MAX_TITLE_LENGTH,
    check_id,
    check_int,
    check_text,
    check_ts,
)
from contextstore.facade.base import StoreBase
from contextstore.records import (
    Checkpoint,
    Conversation,
    RestoreReport,
    RollbackReport,
)
from contextstore.storage import queries, timeline
from contextstore.storage.clock import now_ms, tick
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
        ts: int | None = None,
    ) -> Checkpoint:
        """Mark the present moment; :meth:`rollback` to it restores exactly these rows.

        Labels need not be unique; rolling back to a label uses its newest checkpoint.
        ``ts`` stamps the row with a timestamp of the caller's (an importer replaying
        another tool's clock); it must be later than the conversation's last ``ts``.
        """
        check_id(conversation_id)
        check_text("label", label, MAX_LABEL_LENGTH)
        check_text("git_hash", git_hash, 64)
        if note is not None and (not isinstance(note, str) or "\x00" in note):
            raise InvalidInputError("note must be a string without NUL characters.")

        def work(connection: Connection) -> Checkpoint:
            (stamp,) = tick(connection, conversation_id, at=ts)
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
        self,
        conversation_id: str,
        to: str | int,
        *,
        purge: bool = False,
        dry_run: bool = False,
    ) -> RollbackReport:
        """Remove every row written after a checkpoint (a label) or a ``ts``, in one transaction.

        Removed rows are kept in ``archived_rows`` with the rollback's cutoff and time,
        unless ``purge`` is True, so :meth:`restore` can put them back. Overlays and
        ranges written before the cutoff stay. Returns the number of rows removed per
        table; with ``dry_run`` nothing is written and the report says what would go.
        """
        check_id(conversation_id)
        if not isinstance(purge, bool) or not isinstance(dry_run, bool):
            raise InvalidInputError("purge and dry_run must be True or False.")
        if dry_run:
            with self._db.read() as connection:
                self._conversation(connection, conversation_id)
                cutoff = self._resolve_cutoff(connection, conversation_id, to)
                counts = timeline.count_after(connection, conversation_id, cutoff)
            return RollbackReport(conversation_id, cutoff, counts, None, False, dry_run=True)

        def work(connection: Connection) -> RollbackReport:
            self._conversation(connection, conversation_id)
            cutoff = self._resolve_cutoff(connection, conversation_id, to)
            # The rollback consumes a tick, recorded as its ``ran_at``: rows written later
            # sort after everything removed, any cached view of the removed rows is
            # invalidated, and restore can tell whether anything was written since.
            (ran_at,) = tick(connection, conversation_id)
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
            return RollbackReport(conversation_id, cutoff, counts, rollback_id, not purge)

        return self._db.write(work)

    def restore(self, conversation_id: str, rollback_id: int) -> RestoreReport:
        """Put back the rows a rollback archived, with their original ids and ``ts``.

        Allowed while nothing has been written over them: no row of the conversation may
        be newer than the rollback's cutoff (roll back what was written since first). The
        rollback's row stays, marked with the restore's ``ts``.

        Raises:
            RollbackNotFoundError: the conversation has no rollback with this id.
            InvalidInputError: the rollback purged its rows, was already restored, or rows
                were written after its cutoff since.
        """
        check_id(conversation_id)
        check_int("rollback_id", rollback_id, minimum=1, optional=False)

        def work(connection: Connection) -> RestoreReport:
            self._conversation(connection, conversation_id)
            row = timeline.load_rollback(connection, conversation_id, rollback_id)
            if row is None:
                raise RollbackNotFoundError(
                    f"conversation {conversation_id!r} has no rollback {rollback_id}; list "
                    "them with 'contextstore audit'."
                )
            if row.purged:
                raise InvalidInputError(
                    f"rollback {rollback_id} purged the rows it removed; there is nothing to "
                    "restore."
                )
            if row.restored_ts is not None:
                raise InvalidInputError(
                    f"rollback {rollback_id} was already restored (at ts {row.restored_ts})."
                )
            (stamp,) = tick(connection, conversation_id)
            if timeline.any_row_after(connection, conversation_id, int(row.cutoff_ts)):
                raise InvalidInputError(
                    f"rows were written after rollback {rollback_id}'s cutoff "
                    f"(ts {row.cutoff_ts}) since it ran; restoring would mix them with the "
                    "archived ones. Roll back to that ts first, then restore."
                )
            counts = timeline.restore_archived(connection, rollback_id)
            timeline.mark_restored(connection, rollback_id, stamp)
            return RestoreReport(conversation_id, rollback_id, counts, stamp)

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
