"""Checkpoints, rollbacks with their archive, and forks."""

from __future__ import annotations

import shlex
import uuid

from contextstore.core.errors import (
    CheckpointNotFoundError,
    InvalidInputError,
    RollbackNotFoundError,
)
from contextstore.core.records import (
    Checkpoint,
    Conversation,
    RestoreReport,
    RollbackReport,
)
from contextstore.core.validate import (
    MAX_HASH_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_TITLE_LENGTH,
    check_free_text,
    check_id,
    check_int,
    check_text,
    check_ts,
    shown,
)
from contextstore.facade.base import StoreBase
from contextstore.storage import checkpoints, conversations, timeline
from contextstore.storage.clock import not_found, now_ms, set_message_count, tick
from contextstore.storage.database import Connection

ROLLBACK_TARGET = "the rollback target (to)"
"""How errors name :meth:`~TimelineMixin.rollback`'s ``to``, its parameter in every
interface (the Python API, JSON-RPC and MCP)."""


IDS_BELOW = 946_684_800_000
"""2000-01-01 in milliseconds: no checkpoint id comes near it and no agent's conversation
began before it, so a ``to`` at or after it is a moment, never taken for an id."""


class _NothingAfter(Exception):
    """Raised inside a rollback's transaction that found nothing written after its cutoff,
    so that the transaction is undone (its tick and its ``rollbacks`` row): no rollback
    ran. Carries the report the caller gets."""

    def __init__(self, report: RollbackReport) -> None:
        super().__init__("nothing was written after the cutoff")
        self.report = report


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
        check_text("git_hash", git_hash, MAX_HASH_LENGTH)
        check_free_text("note", note)

        stored_note = self._masked(note)

        def work(connection: Connection) -> Checkpoint:
            (stamp,) = tick(connection, conversation_id, at=ts)
            return checkpoints.insert_checkpoint(
                connection, conversation_id, stamp, label, git_hash, stored_note
            )

        return self._db.write(work)

    def checkpoints(self, conversation_id: str) -> list[Checkpoint]:
        """The conversation's checkpoints, oldest first."""
        check_id(conversation_id)
        with self._db.read() as connection:
            self._conversation(connection, conversation_id)
            return checkpoints.list_checkpoints(connection, conversation_id)

    def _resolve_cutoff(
        self,
        connection: Connection,
        conversation_id: str,
        to: str | int,
        *,
        labelled: tuple[int | None] | None = None,
        name: str | None = None,
    ) -> int:
        """The ``ts`` that ``to`` names; ``labelled`` holds the newest checkpoint's ``ts`` for
        the label ``to`` when the caller looked it up already. ``name`` is the caller's
        parameter, named in errors (a rollback's target by default)."""
        if isinstance(to, bool) or not isinstance(to, str | int):
            raise InvalidInputError(
                f"{name or ROLLBACK_TARGET} must be a checkpoint label or a ts in "
                f"milliseconds, got {shown(to)}."
            )
        if isinstance(to, int):
            check_ts(name or ROLLBACK_TARGET, to, optional=False)
            self._refuse_checkpoint_id(connection, conversation_id, to, name or "to")
            return to
        check_text("checkpoint label", to, MAX_LABEL_LENGTH, optional=False)
        if labelled is None:
            found = checkpoints.checkpoint_ts(connection, conversation_id, to)
        else:
            (found,) = labelled
        if found is None:
            labels = checkpoints.checkpoint_labels(connection, conversation_id)
            known = ", ".join(sorted(repr(x) for x in labels)) or "none"
            raise CheckpointNotFoundError(
                f"conversation {conversation_id!r} has no checkpoint labelled {to!r} "
                f"(labels: {known}); pass an existing label or a ts."
            )
        return found

    def _refuse_checkpoint_id(
        self, connection: Connection, conversation_id: str, ts: int, name: str
    ) -> None:
        """Refuse a ``ts`` from before the conversation began that is the id of one of its
        checkpoints: ``rollback(cid, to=cp.id)`` read 3 as 3 ms after 1970 and took the
        whole conversation, where the caller meant checkpoint 3.

        Raises:
            InvalidInputError: naming the checkpoint's label or ``ts`` to pass instead.
        """
        if ts >= IDS_BELOW:  # a moment, not an id: no lookup on a rollback's path
            return
        if ts >= self._conversation(connection, conversation_id).created_ts:
            return
        listed = checkpoints.list_checkpoints(connection, conversation_id)
        named = next((c for c in listed if c.id == ts), None)
        if named is None:
            return
        instead = repr(named.label) if named.label is not None else str(named.ts)
        raise InvalidInputError(
            f"{name}={ts} reads as {ts} ms after 1970, before conversation {conversation_id!r} "
            f"began, not as checkpoint {ts}; pass {name}={instead} for that checkpoint (its "
            f"{'label' if named.label is not None else 'ts'}), or {name}=0 for the moment "
            "before everything."
        )

    def rollback(
        self,
        conversation_id: str,
        to: str | int,
        *,
        purge: bool = False,
        dry_run: bool = False,
    ) -> RollbackReport:
        """Remove every row written after a checkpoint (a label) or a ``ts``, in one transaction.

        Removed rows are kept in the archive tables (``archived_<table>``) under the
        rollback's id, unless ``purge`` is True, so :meth:`restore` can put them back. Overlays and
        ranges written before the cutoff stay. Returns the number of rows removed per
        table; with ``dry_run`` nothing is written and the report says what would go.

        When nothing was written after the cutoff (a checkpoint with nothing after it, or
        ``to`` the conversation's last ``ts``), no rollback runs: nothing is written, no
        ``rollbacks`` row lists it in the audit, and the report's counts are zero, its
        ``rollback_id`` None and ``archived`` False, as ``contextstore rollback`` says "no
        rollback ran".
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

        if isinstance(to, str):  # checked before the label reaches a query
            check_text("checkpoint label", to, MAX_LABEL_LENGTH, optional=False)

        def work(connection: Connection) -> RollbackReport:
            # The conversation and the label's checkpoint in one round trip.
            label = to if isinstance(to, str) else None
            exists, newest = checkpoints.find_target(connection, conversation_id, label)
            if not exists:
                raise not_found(conversation_id)
            cutoff = self._resolve_cutoff(connection, conversation_id, to, labelled=(newest,))
            # The rollback consumes a tick, recorded as its ``ran_at``: rows written later
            # sort after everything removed, any cached view of the removed rows is
            # invalidated, and restore can tell whether anything was written since.
            rollback_id = timeline.start_rollback(
                connection, conversation_id, cutoff, str(to), purge
            )
            counts, first_removed = timeline.remove_after(
                connection, conversation_id, cutoff, archive_into=None if purge else rollback_id
            )
            if not any(counts.values()):
                raise _NothingAfter(RollbackReport(conversation_id, cutoff, counts, None, False))
            if first_removed is not None:
                set_message_count(connection, conversation_id, first_removed)
            timeline.set_rollback_counts(connection, rollback_id, counts)
            return RollbackReport(conversation_id, cutoff, counts, rollback_id, not purge)

        # Pipelined on PostgreSQL: BEGIN goes out with the first statement, and the two
        # updates after the removal go with the COMMIT. Whether anything is after the
        # cutoff is known from the removal itself, so a rollback that removes rows costs
        # no statement more.
        try:
            report = self._db.write(work, pipeline=True)
        except _NothingAfter as nothing:
            return nothing.report
        self._forget_calls(conversation_id)
        return report

    def restore(self, conversation_id: str, rollback_id: int) -> RestoreReport:
        """Put back the rows a rollback archived, with their original ids and ``ts``.

        Allowed while nothing has been written over them: no row of the conversation may
        be newer than the rollback's cutoff (roll back what was written since first). The
        rollback's row stays, marked with the restore's ``ts``.

        Its archived rows continue the history up to its cutoff, so a later rollback to an
        earlier moment must be restored first.

        Raises:
            RollbackNotFoundError: the conversation has no rollback with this id.
            InvalidInputError: the rollback purged its rows, was already restored, rows
                were written after its cutoff since, or a later rollback to an earlier
                moment still holds rows before its cutoff.
        """
        check_id(conversation_id)
        check_int("rollback_id", rollback_id, minimum=1, optional=False)

        def work(connection: Connection) -> RestoreReport:
            self._conversation(connection, conversation_id)
            # The clock's tick first: on PostgreSQL it locks the conversation, so the
            # checks below see every rollback committed before (one to an earlier moment,
            # committed between them and the tick, left a gap in the indices).
            (stamp,) = tick(connection, conversation_id)
            row = timeline.load_rollback(connection, conversation_id, rollback_id)
            if row is None:
                raise RollbackNotFoundError(
                    f"conversation {conversation_id!r} has no rollback {rollback_id}; the "
                    "audit_rollbacks view lists them, as does 'contextstore audit "
                    f"{shlex.quote(conversation_id)}'."
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
            taken = timeline.later_rollbacks_below(connection, row)
            if taken:
                raise InvalidInputError(_restore_first(rollback_id, taken))
            if timeline.any_row_after(connection, conversation_id, int(row.cutoff_ts)):
                raise InvalidInputError(
                    f"rows were written after rollback {rollback_id}'s cutoff (ts "
                    f"{row.cutoff_ts}) in conversation '{conversation_id}' since it ran; "
                    "restoring would mix them with the archived ones. Roll back to that ts "
                    "first, then restore."
                )
            counts, total = timeline.restore_archived(connection, conversation_id, rollback_id)
            set_message_count(connection, conversation_id, total)
            timeline.mark_restored(connection, rollback_id, stamp)
            return RestoreReport(conversation_id, rollback_id, counts, stamp)

        return self._db.write(work)

    def fork(
        self, conversation_id: str, at: int | str | None = None, *, title: str | None = None
    ) -> Conversation:
        """A new conversation with the history of ``conversation_id`` up to ``at``.

        ``at`` is a ts, a checkpoint label, or None for now. The rows with ``ts <= at``
        (messages, blocks, ranges, updates, requests, checkpoints) are copied with their
        timestamps, so the fork renders exactly as its parent did at ``at``. A past ``at``
        after the last row forks at the last row (``forked_at_ts``); a future one is refused,
        since the parent may yet write rows before it.

        Raises:
            InvalidInputError: ``at`` is in the future or not a moment.
            CheckpointNotFoundError: ``at`` names no checkpoint of the conversation.
        """
        check_id(conversation_id)
        check_text("title", title, MAX_TITLE_LENGTH)
        title = self._masked(title)
        new_id = uuid.uuid4().hex

        def work(connection: Connection) -> Conversation:
            # Locked: the table-by-table copy below sees no rollback of the parent half-way
            # (one between the copies of the messages and of their blocks left messages
            # without blocks in the fork).
            parent = self._locked(connection, conversation_id)
            cutoff = (
                parent.last_ts
                if at is None
                else self._resolve_cutoff(connection, conversation_id, at, name="at")
            )
            if cutoff > parent.last_ts:
                if cutoff > now_ms():
                    raise InvalidInputError(
                        f"the moment to fork at (ts {cutoff}) is in the future: a fork "
                        "starts from a moment the conversation has reached (its last row is "
                        f"at ts {parent.last_ts}). Fork as of now, or at an earlier moment."
                    )
                # Nothing can be written at or before a past moment any more: the history
                # up to it is the history up to the last row.
                cutoff = parent.last_ts
            created = now_ms()
            forked = Conversation(
                id=new_id,
                created_ts=created,
                # The clock is where the fork was made, not where it copies up to (a moment
                # long past, maybe before the parent began): a conversation's last_ts is
                # never before its created_ts, and its next row comes after both.
                last_ts=max(cutoff, created),
                title=title if title is not None else parent.title,
                model_id=parent.model_id,
                context_window=parent.context_window,
                parent_id=conversation_id,
                forked_at_ts=cutoff,
                metadata={k: v for k, v in parent.metadata.items() if k != "subagent"},
            )
            conversations.insert_conversation(connection, forked)
            copied = timeline.copy_history(connection, conversation_id, new_id, cutoff)
            set_message_count(connection, new_id, copied)
            return forked

        return self._db.write(work)


def _restore_first(rollback_id: int, taken: list[tuple[int, bool]]) -> str:
    """Why rollback ``rollback_id`` cannot be restored while the later rollbacks ``taken``
    (newest first, each ``(id, purged)``) hold rows of the history it continues."""
    purged = [rid for rid, was_purged in taken if was_purged]
    if purged:
        return (
            f"rollback {purged[0]} ran after rollback {rollback_id} to an earlier moment and "
            f"purged rows that rollback {rollback_id}'s rows continue; they are gone, so "
            "restoring would leave a gap in the conversation. Nothing was changed."
        )
    order = ", then ".join(str(rid) for rid, _ in taken)
    return (
        f"rollback {taken[0][0]} ran after rollback {rollback_id} to an earlier moment and "
        f"holds rows that rollback {rollback_id}'s rows continue; restore rollback {order} "
        f"first, then {rollback_id}. Nothing was changed."
    )
