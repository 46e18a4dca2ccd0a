"""Reading conversations: the list, and one conversation's view."""

from __future__ import annotations

import json

import click

from contextstore.cli.common import handle_errors, open_store
from contextstore.cli.output import conversation_table, table


@click.command("conversations")
@click.pass_context
@handle_errors
def list_conversations(ctx: click.Context) -> None:
    """List the conversations in the database."""
    store = open_store(ctx, auto_migrate=False)
    rows = [
        (c.id, c.model_id or "", c.context_window or "", c.title or "", c.last_ts)
        for c in store.list_conversations()
    ]
    click.echo(table(("id", "model", "window", "title", "last ts"), rows))


@click.command()
@click.argument("conversation_id")
@click.option("--as-of", type=int, default=None, help="Render as of this ts (milliseconds).")
@click.option(
    "--format",
    "format_",
    type=click.Choice(["stored", "anthropic", "openai", "gemini"]),
    default="stored",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Print the messages as JSON.")
@click.pass_context
@handle_errors
def render(
    ctx: click.Context, conversation_id: str, as_of: int | None, format_: str, as_json: bool
) -> None:
    """Show the conversation as the model sees it (now, or as of a past ts)."""
    store = open_store(ctx, auto_migrate=False)
    view = store.render(
        conversation_id, as_of=as_of, format=None if format_ == "stored" else format_
    )
    if as_json or format_ in ("openai", "gemini"):
        click.echo(json.dumps(view, indent=2, ensure_ascii=False))
    else:
        click.echo(conversation_table(view))
