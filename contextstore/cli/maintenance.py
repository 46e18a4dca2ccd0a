"""Keeping a database healthy: schema upgrades, invariant checks, deleting a conversation."""

from __future__ import annotations

import click

from contextstore.cli import terminal
from contextstore.cli.common import confirm_or_refuse, json_option, open_store, yes_option
from contextstore.cli.output import ordered_counts


@click.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Upgrade the database schema to the current version."""
    store = open_store(ctx)
    terminal.out(f"{store.location}: schema is up to date")


@click.command()
@click.argument("conversation_id", metavar="CID")
@json_option
@click.pass_context
def check(ctx: click.Context, conversation_id: str, as_json: bool) -> None:
    """Verify a conversation's invariants (indices, timeline, decodable rows, pairing)."""
    store = open_store(ctx, auto_migrate=False)
    store.check(conversation_id)
    if as_json:
        terminal.print_json({"conversation_id": conversation_id, "ok": True})
        return
    terminal.out(f"{conversation_id}: ok")


@click.command()
@click.argument("conversation_id", metavar="CID")
@yes_option
@json_option
@click.pass_context
def delete(ctx: click.Context, conversation_id: str, yes: bool, as_json: bool) -> None:
    """Delete a conversation and every row it owns (cannot be undone).

    Without --yes it asks; off a terminal it refuses instead. Forks of it stay.
    """
    store = open_store(ctx, auto_migrate=False)
    conv = store.get_conversation(conversation_id)
    counts = store.row_counts(conversation_id)
    rows = sum(n for name, n in counts.items() if name != "conversations")
    title = f" ({conv.title!r})" if conv.title else ""
    confirm_or_refuse(
        ctx,
        f"Delete conversation {conversation_id}{title} and its {rows} rows? This cannot be undone.",
        yes=yes,
        flag_hint="",
    )
    removed = store.delete_conversation(conversation_id)
    if as_json:
        terminal.print_json(
            {"conversation_id": conversation_id, "removed": dict(ordered_counts(removed))}
        )
        return
    terminal.table(
        ("table", "rows removed"),
        ordered_counts(removed),
        title=f"deleted conversation {conversation_id}{title}",
    )
