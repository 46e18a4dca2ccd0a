"""Checkpoints, rollbacks (previewed, confirmed, undoable), restores and forks."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import (
    IntegerRange,
    at_most,
    command_line,
    confirm_or_refuse,
    json_option,
    open_store,
    yes_option,
)
from contextstore.cli.history import conversation_json
from contextstore.cli.output import ordered_counts
from contextstore.cli.times import MOMENT, Moment, checked_moment, format_ts
from contextstore.core.errors import ConcurrentChangeError
from contextstore.core.records import Checkpoint, RollbackReport
from contextstore.core.validate import (
    MAX_HASH_LENGTH,
    MAX_INT32,
    MAX_LABEL_LENGTH,
    MAX_TITLE_LENGTH,
)

if TYPE_CHECKING:
    from contextstore.store import ContextStore


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint's JSON fields (documented in the README)."""
    return {
        "id": cp.id,
        "conversation_id": cp.conversation_id,
        "ts": cp.ts,
        "label": cp.label,
        "git_hash": cp.git_hash,
        "note": cp.note,
    }


@click.command()
@click.argument("conversation_id", metavar="CID")
@click.option(
    "--label",
    default=None,
    callback=at_most(MAX_LABEL_LENGTH),
    help="A name to roll back or fork to later.",
)
@click.option("--note", default=None, help="Free text kept with the checkpoint.")
@click.option(
    "--git-hash",
    default=None,
    callback=at_most(MAX_HASH_LENGTH),
    help="The git commit the workspace was at.",
)
@json_option
@click.pass_context
def checkpoint(
    ctx: click.Context,
    conversation_id: str,
    label: str | None,
    note: str | None,
    git_hash: str | None,
    as_json: bool,
) -> None:
    """Mark the present moment of a conversation; print the checkpoint."""
    if label and not label.strip():
        # --to, --as-of and --at read a blank text as no moment at all: such a label could
        # never be named again.
        raise click.BadParameter(
            f"{label!r} is blank; pass a label with some text (--to, --as-of and --at "
            "name the checkpoint by it), or leave --label out.",
            param_hint="'--label'",
        )
    store = open_store(ctx, auto_migrate=False, writes=True)
    cp = store.checkpoint(conversation_id, label, note=note, git_hash=git_hash)
    if as_json:
        terminal.print_json(checkpoint_json(cp))
        return
    name = f" {cp.label!r}" if cp.label else ""
    terminal.out(f"checkpoint {cp.id}{name} at {format_ts(cp.ts)} (ts {cp.ts})")


@click.command()
@click.argument("conversation_id", metavar="CID")
@json_option
@click.pass_context
def checkpoints(ctx: click.Context, conversation_id: str, as_json: bool) -> None:
    """List a conversation's checkpoints, oldest first."""
    store = open_store(ctx, auto_migrate=False)
    found = store.checkpoints(conversation_id)
    if as_json:
        terminal.print_json([checkpoint_json(c) for c in found])
        return
    terminal.table(
        ("id", "time", "ts", "label", "git", "note"),
        [
            (c.id, format_ts(c.ts), c.ts, c.label or "", c.git_hash or "", c.note or "")
            for c in found
        ],
        wrap=("note",),
    )


def rollback_json(report: RollbackReport) -> dict[str, Any]:
    """A rollback report's JSON fields (documented in the README)."""
    return {
        "conversation_id": report.conversation_id,
        "cutoff_ts": report.cutoff_ts,
        "dry_run": report.dry_run,
        "rollback_id": report.rollback_id,
        "archived": report.archived,
        "removed": dict(ordered_counts(report.removed)),
        "total_removed": report.total_removed,
    }


def _target(moment: Moment) -> str | int:
    return moment.label if moment.label is not None else int(moment.ts or 0)


def _rollback_as_confirmed(
    store: ContextStore,
    conversation_id: str,
    target: str | int,
    preview: RollbackReport,
    purge: bool,
) -> RollbackReport:
    """The rollback the person at the terminal said yes to: the rows of ``preview``, no
    others. The agent may write while the question waits (for minutes, say); those rows
    were not in the question, and with ``--purge`` they would be gone for good.

    Raises:
        ConcurrentChangeError: the conversation changed since the preview (a row written
            after the cutoff, a newer checkpoint with the label); nothing was rolled back.
    """
    with store.transaction():
        report = store.rollback(conversation_id, target, purge=purge)
        if report.cutoff_ts != preview.cutoff_ts or report.removed != preview.removed:
            raise ConcurrentChangeError(
                f"conversation {conversation_id!r} changed while the question waited: the "
                f"rollback would remove {report.total_removed} rows, not the "
                f"{preview.total_removed} you confirmed; nothing was rolled back. Run the "
                "command again to see what it removes now."
            )
    return report


def _no_rollback_ran(report: RollbackReport, as_json: bool) -> None:
    """Say that nothing was written after the cutoff, so no rollback ran (none is recorded)."""
    terminal.note(f"nothing was written after {format_ts(report.cutoff_ts)}; no rollback ran.")
    if as_json:
        terminal.print_json(rollback_json(report))


@click.command()
@click.argument("conversation_id", metavar="CID")
@click.option(
    "--to",
    "to",
    type=MOMENT,
    required=True,
    help="Keep the rows up to this moment: a checkpoint label, an ISO date or ms.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be removed; change nothing.")
@click.option(
    "--purge", is_flag=True, help="Delete the removed rows instead of archiving them (no restore)."
)
@yes_option
@json_option
@click.pass_context
def rollback(
    ctx: click.Context,
    conversation_id: str,
    to: Moment,
    dry_run: bool,
    purge: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Remove every row written after a moment, in one transaction (archived for restore).

    Without --yes it shows what would go and asks; off a terminal it refuses instead.
    """
    store = open_store(ctx, auto_migrate=False, writes=not dry_run)
    store.get_conversation(conversation_id)
    to = checked_moment(store, conversation_id, to, "--to")
    preview = store.rollback(conversation_id, _target(to), purge=purge, dry_run=True)
    if dry_run:
        if as_json:
            terminal.print_json(rollback_json(preview))
            return
        terminal.table(
            ("table", "rows to remove"),
            ordered_counts(preview.removed),
            title=f"rollback of {conversation_id} to {format_ts(preview.cutoff_ts)} "
            f"(ts {preview.cutoff_ts}), dry run: nothing was changed",
        )
        return
    if preview.total_removed == 0:
        _no_rollback_ran(dataclasses.replace(preview, dry_run=False), as_json)
        return
    summary = ", ".join(f"{n} {name}" for name, n in ordered_counts(preview.removed) if n)
    how = "deleted for good (--purge)" if purge else "archived (undo with restore)"
    confirm_or_refuse(
        ctx,
        f"Remove {preview.total_removed} rows ({summary}) written after "
        f"{format_ts(preview.cutoff_ts)}? They will be {how}.",
        yes=yes,
        flag_hint=" (or --dry-run to preview)",
    )
    if yes:
        report = store.rollback(conversation_id, _target(to), purge=purge)
    else:
        report = _rollback_as_confirmed(store, conversation_id, _target(to), preview, purge)
    if report.rollback_id is None:  # what the preview counted was gone by then
        _no_rollback_ran(report, as_json)
        return
    if as_json:
        terminal.print_json(rollback_json(report))
        return
    terminal.table(
        ("table", "rows removed"),
        ordered_counts(report.removed),
        title=f"rollback {report.rollback_id} of {conversation_id} to "
        f"{format_ts(report.cutoff_ts)} (ts {report.cutoff_ts})",
    )
    if report.archived:
        terminal.note(
            f"undo with: {command_line(ctx, 'restore', conversation_id, str(report.rollback_id))}"
        )


@click.command()
@click.argument("conversation_id", metavar="CID")
@click.argument("rollback_id", metavar="ROLLBACK_ID", type=IntegerRange(1, MAX_INT32))
@json_option
@click.pass_context
def restore(ctx: click.Context, conversation_id: str, rollback_id: int, as_json: bool) -> None:
    """Put back the rows a rollback archived (refused once anything was written since)."""
    store = open_store(ctx, auto_migrate=False, writes=True)
    report = store.restore(conversation_id, rollback_id)
    if as_json:
        terminal.print_json(
            {
                "conversation_id": report.conversation_id,
                "rollback_id": report.rollback_id,
                "ts": report.ts,
                "restored": dict(ordered_counts(report.restored)),
                "total_restored": report.total_restored,
            }
        )
        return
    terminal.table(
        ("table", "rows restored"),
        ordered_counts(report.restored),
        title=f"rollback {rollback_id} of {conversation_id} undone at {format_ts(report.ts)}",
    )


@click.command()
@click.argument("conversation_id", metavar="CID")
@click.option(
    "--at",
    type=MOMENT,
    default=None,
    help="Copy the history up to this moment (default: now): a label, an ISO date or ms.",
)
@click.option(
    "--title",
    default=None,
    callback=at_most(MAX_TITLE_LENGTH),
    help="Title of the new conversation (default: the same).",
)
@json_option
@click.pass_context
def fork(
    ctx: click.Context, conversation_id: str, at: Moment | None, title: str | None, as_json: bool
) -> None:
    """Start a new conversation from another's history up to a moment; print its id."""
    store = open_store(ctx, auto_migrate=False, writes=True)
    store.get_conversation(conversation_id)
    if at is not None:
        at = checked_moment(store, conversation_id, at, "--at")
    new = store.fork(conversation_id, None if at is None else _target(at), title=title)
    if as_json:
        terminal.print_json(conversation_json(new))
        return
    terminal.out(new.id)
    terminal.note(f"forked {conversation_id} at {format_ts(new.forked_at_ts)} into {new.id}")
