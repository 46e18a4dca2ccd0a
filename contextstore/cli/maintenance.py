"""Keeping a database healthy: schema upgrades and invariant checks."""

from __future__ import annotations

import click

from contextstore.cli.common import handle_errors, open_store


@click.command()
@click.pass_context
@handle_errors
def migrate(ctx: click.Context) -> None:
    """Upgrade the database schema to the current version."""
    store = open_store(ctx)
    click.echo(f"{store.location}: schema is up to date")


@click.command()
@click.argument("conversation_id")
@click.pass_context
@handle_errors
def check(ctx: click.Context, conversation_id: str) -> None:
    """Verify a conversation's invariants (indices, timeline, decodable rows, pairing)."""
    store = open_store(ctx, auto_migrate=False)
    store.check(conversation_id)
    click.echo(f"{conversation_id}: ok")
