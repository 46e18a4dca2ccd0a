"""Checkpoints and rollbacks."""

from __future__ import annotations

import click

from contextstore.cli.common import handle_errors, open_store
from contextstore.cli.output import table


@click.command()
@click.argument("conversation_id")
@click.pass_context
@handle_errors
def checkpoints(ctx: click.Context, conversation_id: str) -> None:
    """List a conversation's checkpoints."""
    store = open_store(ctx, auto_migrate=False)
    rows = [
        (c.ts, c.label or "", c.git_hash or "", c.note or "")
        for c in store.checkpoints(conversation_id)
    ]
    click.echo(table(("ts", "label", "git", "note"), rows))


@click.command()
@click.argument("conversation_id")
@click.option("--to", "target", required=True, help="A checkpoint label, or a ts in milliseconds.")
@click.option("--purge", is_flag=True, help="Delete the removed rows instead of archiving them.")
@click.pass_context
@handle_errors
def rollback(ctx: click.Context, conversation_id: str, target: str, purge: bool) -> None:
    """Remove every row written after a checkpoint, in one transaction."""
    store = open_store(ctx, auto_migrate=False)
    to: str | int = int(target) if target.isdigit() else target
    report = store.rollback(conversation_id, to, purge=purge)
    click.echo(table(("table", "rows removed"), sorted(report.removed.items())))
